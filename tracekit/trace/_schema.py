"""The msgspec types the loader decodes Kineto events into, and the category -> ``Kind`` map.

Only the fields tracekit needs are declared; msgspec skips every other key in C, which is what
makes decoding a 500 MB trace take about a second instead of a minute. ``ts`` is kept as the raw
JSON number text (``msgspec.Raw``) so that it converts to integer nanoseconds exactly
(``tracekit.trace._numbers``): a float64 cannot hold a microsecond epoch time to the nanosecond.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from tracekit.trace.model import Kind


class Args(msgspec.Struct, gc=False, frozen=True, omit_defaults=True, rename={
    "external_id": "External id",
    "external_id_legacy": "external id",
    "nbytes": "bytes",
    "mem_bytes": "Bytes",
    "total_allocated": "Total Allocated",
    "total_reserved": "Total Reserved",
    "addr": "Addr",
    "device_type": "Device Type",
    "device_id": "Device Id",
    "wait_stream": "wait_on_stream",
    "wait_correlation": "wait_on_cuda_event_record_corr_id",
    "wait_event": "wait_on_cuda_event_id",
    "collective": "Collective name",
    "group": "Process Group Name",
    "group_id": "Process Group ID",
    "group_desc": "Process Group Description",
    "group_ranks": "Process Group Ranks",
    "group_size": "Group size",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "in_split": "In split size",
    "out_split": "Out split size",
    "dtype": "dtype",
    "seq": "Seq",
    "comm_rank": "Rank",
    "src_rank": "Src Rank",
    "dst_rank": "Dst Rank",
    "label": "name",
    "input_dims": "Input Dims",
    "input_types": "Input type",
    "concrete_inputs": "Concrete Inputs",
    **{f: k for f, k in (("grid", "grid"), ("block", "block"), ("registers", "registers per thread"),
                         ("shared_memory", "shared memory"), ("occupancy", "est. achieved occupancy %"))},
}):
    """The ``args`` keys tracekit reads; absent ones are -1 (the tables' sentinel) or "".

    The fields after ``device_id`` go into ``Trace.args`` (see ``model.ARG_COLUMNS``): Kineto's
    ``cuda_sync`` fields and the collective metadata torch writes on ``record_param_comms`` and
    on the NCCL kernels it launched, and the inputs ``record_shapes`` writes on ops
    (``RAW_ARGS``: kept as JSON text, never decoded for the events that do not need them)."""

    external_id: int = -1
    external_id_legacy: int = -1
    correlation: int = -1
    stream: int = -1
    device: int = -1
    nbytes: int = -1
    mem_bytes: int = -1
    total_allocated: int = -1
    total_reserved: int = -1
    addr: int = -1
    device_type: int = -1
    device_id: int = -1
    wait_stream: int = -1
    wait_correlation: int = -1
    wait_event: int = -1
    collective: str = ""
    group: str = ""
    group_id: int = -1
    group_desc: str = ""
    group_ranks: str = ""
    group_size: int = -1
    in_nelems: int = -1
    out_nelems: int = -1
    in_split: str = ""
    out_split: str = ""
    dtype: str = ""
    seq: int = -1
    comm_rank: int = -1
    src_rank: int = -1
    dst_rank: int = -1
    label: str = ""  # a metadata event's name (``thread_name``: the thread's name)
    # record_shapes: an op's inputs (lists, kept as their JSON text; read for the events whose
    # names ``model.SHAPE_NAME`` matches, see ``model.ARG_COLUMNS``)
    input_dims: msgspec.Raw = msgspec.Raw(b"")
    input_types: msgspec.Raw = msgspec.Raw(b"")
    concrete_inputs: msgspec.Raw = msgspec.Raw(b"")
    # a kernel's launch configuration (``Launch``; read on the msgspec path)
    grid: msgspec.Raw = msgspec.Raw(b"")
    block: msgspec.Raw = msgspec.Raw(b"")
    registers: msgspec.Raw = msgspec.Raw(b"")
    shared_memory: msgspec.Raw = msgspec.Raw(b"")
    occupancy: msgspec.Raw = msgspec.Raw(b"")


NO_ARGS = Args()

LAUNCH_KEYS = {"grid": "grid", "block": "block", "registers": "registers per thread",
               "shared_memory": "shared memory", "occupancy": "est. achieved occupancy %"}
"""A kernel's launch configuration as Kineto writes it in its args -> tracekit's names."""


class Launch(msgspec.Struct, gc=False, omit_defaults=True, rename=LAUNCH_KEYS):
    """A kernel's launch configuration, its values as the JSON text they were written as. The
    compiled scanner hashes these keys' value texts per event (``_fastscan.c``: LAUNCH_KEYS) and
    the loader decodes one event's ``Launch`` per distinct hash; msgspec's path reads them from
    ``Args``. Either way each distinct configuration is read once (``launch_text``)."""

    grid: msgspec.Raw = msgspec.Raw(b"")
    block: msgspec.Raw = msgspec.Raw(b"")
    registers: msgspec.Raw = msgspec.Raw(b"")
    shared_memory: msgspec.Raw = msgspec.Raw(b"")
    occupancy: msgspec.Raw = msgspec.Raw(b"")


launch_key = msgspec.json.Encoder().encode
"""A ``Launch`` as bytes (``b"{}"`` for none): the key a configuration is read once under."""


def launch_of(a: Args) -> Launch:
    """The launch configuration fields of a decoded ``Args`` (those absent left at the default,
    which encoding omits)."""
    return Launch(**{f: v for f in LAUNCH_KEYS if len(v := getattr(a, f))})


def _dims(v: Any) -> list | None:
    return v if isinstance(v, list) and 0 < len(v) <= 3 and all(
        isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 40) for x in v) else None


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 40) else None


def _percent(v: Any) -> float | int | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1000
    return v if ok else None


def launch_text(key: bytes) -> str:
    """A ``launch_key`` as tracekit keeps it: compact JSON of the fields written with a
    readable value (``{"grid":[512,16,1],"block":[128,1,1],"registers":128,
    "shared_memory":13056,"occupancy":25}``), "" when none is; grid and block lists of up to
    three non-negative integers, registers and shared memory integers, occupancy a number."""
    try:
        d = msgspec.json.decode(key)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return ""
    if not isinstance(d, dict):
        return ""
    out = {}
    for f, read in (("grid", _dims), ("block", _dims), ("registers", _count), ("shared_memory", _count),
                    ("occupancy", _percent)):
        v = read(d.get(LAUNCH_KEYS[f]))
        if v is not None:
            out[f] = v
    return msgspec.json.encode(out).decode() if out else ""

_NO_TS = msgspec.Raw(b"")
"""A missing ``ts``: not a number, so the columns read it as unreadable (``_numbers.BAD``)."""
NO_CAT = "\0"
"""The ``cat`` of an event without one (metadata events have none; a complete event should)."""


class Event(msgspec.Struct, gc=False):
    """One element of ``traceEvents``; ``ts`` is the JSON number's text (microseconds).

    ``ph``, ``name``, ``pid``, ``tid`` and ``ts`` are required (Kineto writes them on every
    event): a piece with an element that lacks one is decoded by ``decode_lenient``, which
    counts it. A missing ``dur`` is NaN, which the columns count as unreadable."""

    ph: str
    name: str
    pid: int | str
    tid: int | str
    ts: msgspec.Raw
    cat: str = NO_CAT
    dur: float = float("nan")
    args: Args = NO_ARGS  # frozen, so one shared instance is a safe default


class LenientEvent(msgspec.Struct, gc=False):
    """The same keys with any JSON type (None: absent): used for a piece whose values do not
    fit ``Event``."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = _NO_TS
    dur: Any = None
    args: Any = ()  # absent (JSON decodes no tuple): distinct from null


EVENT_LIST = msgspec.json.Decoder(list[Event])
RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_LENIENT = msgspec.json.Decoder(LenientEvent)


class Lenient(list):
    """``decode_lenient``'s events, with what had to be read as absent."""

    problems: Counter
    """Field (``pid``, ``args.correlation``, ...) -> complete or ``[memory]`` events whose
    value was missing or of a type that cannot be read; ``not an object`` and ``no ph``
    count the elements that could not be events at all."""


def decode_lenient(data) -> Lenient:
    """Slow path for a piece that does not fit ``Event``: element by element, values of the
    wrong type as sentinels (counted in ``problems``), elements that are not objects skipped."""
    out = Lenient()
    problems: Counter = Counter()
    for raw in RAW_LIST.decode(data):
        try:
            le = _LENIENT.decode(raw)
        except msgspec.ValidationError:
            problems["not an object"] += 1
            continue
        e = coerce(le, problems)
        if e is not None:
            out.append(e)
    out.problems = problems
    return out


def _in_int64(v: int) -> int:
    return v if -(1 << 63) <= v < (1 << 63) else -1


def _as_int(v: Any) -> int:
    if isinstance(v, bool) or v is None:
        return -1
    if isinstance(v, int):
        return _in_int64(v)
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 9.2e18 else -1
    if isinstance(v, str):
        return str_id(v)
    return -1


def _as_float(v: Any) -> float:
    """A JSON number as a float; anything else (a string, null, a list) NaN: unreadable."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return float("nan")


def str_id(s: str) -> int:
    """A string pid/tid as an integer: ``"25738"`` -> 25738, ``"stream 7"`` -> 7, else -1."""
    s = s.strip()
    if s.startswith("stream "):
        s = s[7:].strip()
    try:
        return _in_int64(int(s))
    except ValueError:
        return -1


def _pid_or_tid(v: Any) -> int | str:
    """A string as it is (the columns read it with ``str_id``), an int in int64 range, else -1."""
    if isinstance(v, str):
        return v
    return _in_int64(v) if isinstance(v, int) and not isinstance(v, bool) else -1


_ARG_KEYS = {f: Args.__struct_encode_fields__[i] for i, f in enumerate(Args.__struct_fields__)}
STR_ARGS = frozenset(f for f in Args.__struct_fields__ if isinstance(getattr(NO_ARGS, f), str))
"""The ``Args`` fields that hold strings."""
RAW_ARGS = frozenset(f for f in Args.__struct_fields__ if isinstance(getattr(NO_ARGS, f), msgspec.Raw))
"""The ``Args`` fields kept as JSON text (``msgspec.Raw``); every other field is an integer."""


def raw_text(v: msgspec.Raw) -> str:
    """A ``RAW_ARGS`` value as the JSON text it was written as ("" when absent)."""
    return bytes(v).decode("utf-8", "replace") if len(v) else ""


def _as_raw(v: Any) -> msgspec.Raw:
    """A decoded value as JSON text again (the lenient path); absent or null: empty."""
    if v is None:
        return msgspec.Raw(b"")
    try:
        return msgspec.Raw(msgspec.json.encode(v))
    except (TypeError, ValueError, OverflowError):
        return msgspec.Raw(b"")


def _as_str(v: Any) -> str:
    """A string as it is; a number or a list as its JSON text (``[0, 1]``); else ""."""
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, (dict, bool)):
        return ""
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


def coerce(e: LenientEvent, problems: Counter | None = None) -> Event | None:
    """A lenient event as an ``Event``: values of the wrong type become sentinels, and each
    field of a complete or ``[memory]`` event so read is counted in ``problems``. None for an
    element without a string ``ph``."""
    if not isinstance(e, LenientEvent):
        return None
    bad = problems if problems is not None else Counter()
    if not isinstance(e.ph, str):
        bad["no ph"] += 1
        return None
    if e.ph == "i" and not isinstance(e.name, str):
        bad["name"] += 1  # it may have been a [memory] event
    read = e.ph == "X" or (e.ph == "i" and e.name == "[memory]")
    if not read:
        bad = Counter()  # the fields of events tracekit does not read do not matter
    a = e.args
    args = NO_ARGS
    if isinstance(a, dict):
        fields = {}
        for f, k in _ARG_KEYS.items():
            if k in a:
                if f in RAW_ARGS:
                    fields[f] = _as_raw(a[k])
                    continue
                v = (_as_str if f in STR_ARGS else _as_int)(a[k])
                if v in (-1, "") and a[k] not in (-1, "", None) and f != "correlation":
                    bad[f"args.{k}"] += 1  # (the columns count activities without correlation)
                fields[f] = v
        args = Args(**fields)
    elif a != () or e.ph == "i":  # null or not an object; a [memory] event's are its content
        bad["args"] += 1
    for f in ("pid", "tid"):
        v = getattr(e, f)
        if not (isinstance(v, str) or isinstance(v, int) and not isinstance(v, bool)
                and -(1 << 63) <= v < (1 << 63)):
            bad[f] += 1
    if not isinstance(e.name, str):
        bad["name"] += 1
    # ts, dur and cat the columns check for every event (missing ones included)
    return Event(
        ph=e.ph,
        cat=e.cat if isinstance(e.cat, str) else NO_CAT,
        name=e.name if isinstance(e.name, str) else ("" if e.name is None else str(e.name)),
        pid=_pid_or_tid(e.pid),
        tid=_pid_or_tid(e.tid),
        ts=e.ts,
        dur=_as_float(e.dur),
        args=args,
    )


# Category (``cat``) -> Kind. PyTorch 2.x names, the 2021 legacy names, ROCm's spellings.
CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "Operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "kernel": Kind.KERNEL,
    "Kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "Memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "Runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "hip_driver": Kind.DRIVER,
    "python_function": Kind.PYTHON,
    "cuda_sync": Kind.SYNC,
}

LEGACY_CATEGORIES = frozenset({"Operator", "Runtime", "Kernel", "Memcpy", "Memset"})

GPU_SIDE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.SYNC)
"""Kinds drawn on a GPU stream lane: their tid is the stream and their pid the device."""


def decode_events(data) -> list[Event]:
    """A JSON array of events -> Events; values of unexpected types degrade to sentinels.
    Raises ``msgspec.DecodeError`` if ``data`` is not a JSON array."""
    try:
        return EVENT_LIST.decode(data)
    except msgspec.ValidationError:
        return decode_lenient(data)
