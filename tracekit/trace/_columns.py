"""Decoded events -> numpy columns -> the ``Trace`` tables (see ``model.py``).

``Columns`` is the sink the reader feeds chunk by chunk: each chunk's events become small numpy
arrays at once (names as integer codes into one growing list), so no Python object outlives its
chunk and memory stays bounded by the columns themselves.
"""

from __future__ import annotations

import re
from collections import Counter
from operator import attrgetter, itemgetter

import msgspec
import numpy as np

from tracekit import _fastnp as fnp
from tracekit.intervals import is_nondecreasing
from tracekit.trace._numbers import BAD, us_float_to_ns, us_text_to_ns
from tracekit.trace._schema import (
    CATEGORY_KIND, GPU_SIDE_KINDS, LEGACY_CATEGORIES, NO_ARGS, NO_CAT, RAW_ARGS, STR_ARGS, Args,
    Event, Launch, str_id, launch_key, launch_of, launch_text,
)

try:  # the compiled scanner (setup.py builds it; optional: msgspec alone reads the same)
    from tracekit.trace import _fastscan
except ImportError:  # pragma: no cover - no compiler where tracekit was installed
    _fastscan = None
from tracekit.trace.model import (ARG_COLUMNS, EVENT_COLUMNS, GPU_ACTIVITY_KINDS, MEMORY_COLUMNS,
                                  SHAPE_NAME, Kind)

_get = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")}
_aget = {
    f: attrgetter(f)
    for f in (
        "external_id", "external_id_legacy", "correlation", "stream", "device", "nbytes", "mem_bytes",
        "total_allocated", "total_reserved", "addr", "device_type", "device_id",
    )
}
_ARGS = msgspec.json.Decoder(Args)
_LAUNCH = msgspec.json.Decoder(Launch)
# the column order of _fastscan's rows (see its header comment)
_X_COLS, _M_COLS = 15, 8
_X_LAUNCH = 14  # the launch configuration's hash (0: none)
_X_FIELD = {"external_id": 6, "external_id_legacy": 7, "correlation": 8, "stream": 9,
            "device": 10, "nbytes": 11}
_M_FIELD = {"device_type": 2, "device_id": 3, "mem_bytes": 4, "total_allocated": 5,
            "total_reserved": 6, "addr": 7}

def _scanner_matches_schema(scanner) -> bool:
    """Whether the built scanner reads exactly ``Args``' keys, with their types (a stale build
    after a schema change would accept values msgspec refuses: then it is not used)."""
    enc = dict(zip(Args.__struct_fields__, Args.__struct_encode_fields__))
    ints = {enc[f] for f in Args.__struct_fields__ if f not in STR_ARGS and f not in RAW_ARGS}
    strs = {enc[f] for f in STR_ARGS}
    return (scanner.COLS == (_X_COLS, _M_COLS) and set(scanner.INT_KEYS) == ints
            and set(scanner.STR_KEYS) == strs
            and [scanner.INT_KEYS[i] for i in range(12)] == [enc[f] for f in _SCANNED_INTS])


_SCANNED_INTS = ("external_id", "external_id_legacy", "correlation", "stream", "device", "nbytes",
                 "mem_bytes", "total_allocated", "total_reserved", "addr", "device_type", "device_id")
"""The ``Args`` integers the scanner writes into its rows, in its order."""
if _fastscan is not None and not _scanner_matches_schema(_fastscan):  # pragma: no cover - stale
    _fastscan = None
_ARG_NAME = re.compile(r"^record_param_comms$|(?i:nccl|rccl)")
"""Names of the events (besides every cuda_sync event) whose args go into ``Trace.args``."""
_HOST_SIDE = np.array([int(Kind.CPU_OP), int(Kind.ANNOTATION)], dtype=np.int8)
_ARG_FIELDS = tuple(c for c in ARG_COLUMNS if c != "event")
_THREAD_NAME = "thread_name"
_ARG_GET = {f: attrgetter(f) for f in _ARG_FIELDS}
_LEGACY_ANNOTATION = re.compile(r"ProfilerStep#\d+$|## .* ##$|Optimizer\.(step|zero_grad)#")
_GPU_SIDE = np.array(sorted(int(k) for k in GPU_SIDE_KINDS), dtype=np.int8)
_HOST_ONLY = np.array([int(Kind.CPU_OP), int(Kind.ANNOTATION), int(Kind.PYTHON)], dtype=np.int8)
_GPU_ACTIVITY = np.array([int(k) for k in GPU_ACTIVITY_KINDS], dtype=np.int8)
_COPIES = np.array([int(Kind.MEMCPY), int(Kind.MEMSET)], dtype=np.int8)
_LINKED = np.array([int(k) for k in GPU_ACTIVITY_KINDS] + [int(Kind.RUNTIME)], dtype=np.int8)
_NAMES_SHOWN = 3
_AFFECTS = {
    "KERNEL": "GPU", "MEMCPY": "GPU", "MEMSET": "GPU", "GPU_ANNOTATION": "GPU",
    "ANNOTATION": "steps and phases", "RUNTIME": "launches, phases and sync stalls",
    "SYNC": "sync stalls", "CPU_OP": "sync stalls' op chains", "[memory]": "allocator",
}
_FIELD_TEXT = {
    "ts": "ts missing, not a JSON number or beyond int64 ns (nanoseconds written as µs?)",
    "dur": "dur missing or not a number",
    "ts<0": "ts negative (before the epoch of the trace's clock)",
}


def _canonical(raw: msgspec.Raw) -> str:
    """A ``RAW_ARGS`` value as compact JSON text ("" when absent or not JSON): the same text
    whichever path decoded the piece."""
    if not len(raw):
        return ""
    try:
        return msgspec.json.encode(msgspec.json.decode(raw)).decode()
    except (msgspec.DecodeError, UnicodeDecodeError):
        return ""


def _kind_label(k: int) -> str:
    return "OTHER" if k < 0 else Kind(k).name


def unreadable_reason(problems: Counter) -> str:
    """Why events were left out: ``ts ...: 3; dur ...: 1``."""
    return "; ".join(f"{_FIELD_TEXT[f]}: {problems[f]:,}" for f in ("ts", "ts<0", "dur")
                     if problems[f])


def problem_warnings(problems: Counter, dropped: Counter, names: list[str]) -> list[str]:
    """One sentence for the events left out, one for the values read as absent."""
    out = []
    n = sum(dropped.values())
    if n:
        why = unreadable_reason(problems)
        kinds = ", ".join(f"{k.lower()} {c:,}" for k, c in dropped.most_common())
        hit = sorted({_AFFECTS[k] for k in dropped if k in _AFFECTS})
        out.append(f"{n:,} events could not be read and are left out ({why}): {kinds}, e.g. "
                   + ", ".join(repr(s[:60]) for s in names)
                   + (f"; figures from them ({', '.join(hit)}) may be off" if hit else ""))
    rest = [(f, c) for f, c in problems.most_common() if f not in ("ts", "ts<0", "dur", "not an object")]
    if rest:
        out.append("values missing or of an unexpected type, read as absent: "
                   + ", ".join(f"{f} {c:,}" for f, c in rest)
                   + " (events); figures that use them may be off")
    return out


class _Codes(dict):
    """str -> dense integer code, growing as new strings appear."""

    def __init__(self) -> None:
        super().__init__()
        self.values_: list[str] = []

    def __missing__(self, key: str) -> int:
        code = len(self.values_)
        self.values_.append(key)
        self[key] = code
        return code


class _KindOf(dict):
    def __missing__(self, cat: str) -> int:
        k = -1 if cat == NO_CAT else int(CATEGORY_KIND.get(cat, Kind.OTHER))  # -1: counted
        self[cat] = k
        return k


def _ints(get, items: list, n: int, dtype=np.int64) -> np.ndarray:
    """``get(item)`` for every item as an int array: strings as ids (``str_id``), other odd
    values (out of range, not ints) as -1."""
    try:
        return np.fromiter(map(get, items), dtype=dtype, count=n)
    except (TypeError, ValueError, OverflowError):
        pass
    # A few strings (Kineto's "Spans" pid, legacy "stream 7" tids) in a column of ints: read
    # them as ids in place, then the one C pass again.
    values = list(map(get, items))
    for i in [i for i, v in enumerate(values) if v.__class__ is str]:
        values[i] = str_id(values[i])
    try:
        return np.fromiter(values, dtype=dtype, count=n)
    except (TypeError, ValueError, OverflowError):
        info = np.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
        return np.fromiter(
            (v if isinstance(v, int) and lo <= v <= hi else -1 for v in values),
            dtype=dtype, count=n,
        )


def _pick(items: list, rows: np.ndarray) -> list:
    """``items`` at ``rows``."""
    if len(rows) < 2:
        return [items[i] for i in rows.tolist()]
    return list(itemgetter(*rows.tolist())(items))


def _narrow(a: np.ndarray, dtype) -> np.ndarray:
    """int64 values as ``dtype``, those that do not fit it as -1 (as ``_ints`` reads them)."""
    if dtype == np.int64:
        return a.copy()
    info = np.iinfo(dtype)
    return np.where((a < info.min) | (a > info.max), -1, a).astype(dtype)


class Columns:
    """The reader's sink: call it with each decoded piece (or ``add_part`` a piece decoded by
    the helper); ``event_arrays()``/``memory_arrays()``/``sorted_names()`` then give the tables'
    columns in file order, sorted by ts."""

    def __init__(self) -> None:
        self.names = _Codes()
        self.kind_of = _KindOf()
        self._ev: list[tuple[int, dict[str, np.ndarray]]] = []  # (piece index, columns)
        self._mem: list[tuple[int, dict[str, np.ndarray]]] = []
        self.n_events = 0
        self.n_memory = 0
        self.negative_durations = 0
        self.problems: Counter = Counter()
        """What could not be read (``problems_warnings`` says it): field -> events."""
        self.dropped: Counter = Counter()
        """Kind (``Kind`` name, or ``memory``) -> events left out as unreadable."""
        self.dropped_names: list[str] = []
        """The first few names of the events left out."""
        self._wants_args = np.zeros(0, dtype=bool)  # name code -> its events' args are kept
        self._wants_shapes = np.zeros(0, dtype=bool)  # name code -> its host ops' inputs are kept
        self._arg_parts: list[dict] = []
        self._order: np.ndarray | None = None  # file order -> ts order, set by event_arrays
        self._thread_names: list[tuple[int, int, int, str]] = []  # (piece, pid, tid, name)
        self.launches = _Codes()
        """The kernels' launch configurations (``_schema.launch_text``): ``launch`` codes."""
        self._launch_code: dict[bytes, int] = {}  # launch_key -> code (-1: none recorded)

    def reset(self) -> None:
        self.__init__()

    def __call__(self, chunk: list[Event], index: int = 0) -> None:
        """Adds a decoded piece of the file; ``index`` is its position among the pieces."""
        problems = getattr(chunk, "problems", None)  # a piece decode_lenient read
        if problems:
            self.problems.update(problems)
        xs = [e for e in chunk if e.ph == "X"]
        if len(xs) != len(chunk):
            mem = [e for e in chunk if e.ph == "i" and e.name == "[memory]"]
            if mem:
                self._add_memory(mem, index)
            self._thread_names += [
                (index, pid, tid, e.args.label) for e in chunk
                if e.ph == "M" and e.name == _THREAD_NAME and e.args.label
                and isinstance(pid := e.pid, int) and isinstance(tid := e.tid, int)]
        if xs:
            self._add_events(xs, index)

    def export(self) -> dict:
        """This (one-piece) accumulator's content, for ``add_part`` in another process."""
        return {
            "ev": [p for _, p in self._ev],
            "mem": [p for _, p in self._mem],
            "names": self.names.values_,
            "cats": set(self.kind_of),
            "neg": self.negative_durations,
            "problems": self.problems,
            "dropped": self.dropped,
            "dropped_names": self.dropped_names,
            "thread_names": self._thread_names,
            "launches": self.launches.values_,
        }

    def add_part(self, index: int, part: dict) -> None:
        """Adds a piece decoded elsewhere (``export()``), its name codes mapped onto ours."""
        names = part["names"]
        remap = np.fromiter(map(self.names.__getitem__, names), dtype=np.int32, count=len(names))
        launches = part["launches"]
        lmap = np.fromiter(map(self.launches.__getitem__, launches), dtype=np.int32, count=len(launches))
        lmap = np.append(lmap, np.int32(-1))  # code -1 (none) stays -1
        for ev in part["ev"]:
            ev["name"] = remap[ev["name"]]
            ev["launch"] = lmap[ev["launch"]]
            self._ev.append((index, ev))
            self.n_events += len(ev["ts"])
        for mem in part["mem"]:
            self._mem.append((index, mem))
            self.n_memory += len(mem["ts"])
        for cat in part["cats"]:
            self.kind_of[cat]  # noqa: B018 - registers the category
        self.negative_durations += part["neg"]
        self.problems.update(part["problems"])
        self._thread_names += [(index, *t[1:]) for t in part["thread_names"]]
        self.dropped.update(part["dropped"])
        self.dropped_names += part["dropped_names"][: _NAMES_SHOWN - len(self.dropped_names)]

    def _unreadable(self, what: list[Event], bad: np.ndarray, kinds: list[str]) -> list[Event]:
        """Counts the events ``bad`` marks (by kind, first names) and returns the others."""
        self.dropped.update(kinds)
        for i in np.flatnonzero(bad)[: _NAMES_SHOWN - len(self.dropped_names)].tolist():
            self.dropped_names.append(what[i].name)
        return [e for e, b in zip(what, bad.tolist()) if not b]

    def _add_events(self, xs: list[Event], index: int) -> None:
        ts = us_text_to_ns(list(map(_get["ts"], xs)))
        dur = us_float_to_ns(np.fromiter(map(_get["dur"], xs), dtype=np.float64, count=len(xs)))
        bad = (ts < 0) | (dur == BAD)  # BAD < 0; a negative ts is no time of this trace
        if bad.any():  # left out, counted and named (``problem_warnings``)
            self.problems["ts"] += int((ts == BAD).sum())
            self.problems["ts<0"] += int(((ts < 0) & (ts != BAD)).sum())
            self.problems["dur"] += int(((dur == BAD) & (ts >= 0)).sum())
            kinds = [_kind_label(self.kind_of[xs[i].cat]) for i in np.flatnonzero(bad).tolist()]
            xs = self._unreadable(xs, bad, kinds)
            ts, dur = ts[~bad], dur[~bad]
            if not xs:
                return
        n = len(xs)
        kind = np.fromiter(map(self.kind_of.__getitem__, map(_get["cat"], xs)), dtype=np.int8, count=n)
        name = np.fromiter(map(self.names.__getitem__, map(_get["name"], xs)), dtype=np.int32, count=n)
        args = list(map(_get["args"], xs))

        def fields(fs: tuple[str, ...], rows: np.ndarray | None = None) -> list[np.ndarray]:
            sub = args if rows is None else _pick(args, rows)
            return [_ints(_aget[f], sub, len(sub)) for f in fs]

        def launch_at(rows: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
            keys = [launch_key(launch_of(a)) for a in _pick(args, rows)]
            first = {k: i for i, k in enumerate(dict.fromkeys(keys))}  # in order of appearance
            return np.fromiter(map(first.__getitem__, keys), dtype=np.int64, count=len(keys)), list(first)

        self._event_columns(index, kind, name, ts, dur, _ints(_get["pid"], xs, n),
                            _ints(_get["tid"], xs, n), fields, lambda rows: _pick(args, rows), launch_at)

    def _event_columns(self, index: int, kind: np.ndarray, name: np.ndarray, ts: np.ndarray,
                       dur: np.ndarray, pid: np.ndarray, tid: np.ndarray, fields, args_at, launch_at) -> None:
        """Adds a piece's complete events, every one readable (``ts``, ``dur`` in ns). ``kind``
        may hold -1 (no cat); ``fields(names, rows=None)`` gives those ``Args`` integer fields
        (of the rows, or of every event) as int64 arrays; ``args_at(rows)`` the rows' ``Args``;
        ``launch_at(rows)`` the rows' launch configurations as (a group per row, each group's
        ``_schema.launch_key`` bytes)."""
        n = len(ts)
        if kind.min() < 0:  # complete events without a cat (or not a string): Kind.OTHER
            self.problems["cat"] += int((kind < 0).sum())
            kind[kind < 0] = int(Kind.OTHER)
        if dur.min(initial=0) < 0:
            self.negative_durations += int((dur < 0).sum())
            np.maximum(dur, 0, out=dur)
        ext, s_all = fields(("external_id", "stream"))
        if (ext == -1).any():
            legacy, = fields(("external_id_legacy",))
            ext = np.where(ext == -1, legacy, ext)
        # correlation/device/bytes mean something only for runtime/driver calls and GPU-side
        # events: the host's ops, annotations and Python frames (three quarters of a big trace)
        # are not asked for them. The stream is read for every event in one pass: a cpu_op that
        # names one (Triton's launcher writes "stream": 0) keeps it, as HTA's parser does (which
        # counts the op as a kernel), with its correlation.
        corr = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        device = np.full(n, -1, dtype=np.int64)
        nbytes = np.full(n, -1, dtype=np.int64)
        sel = np.flatnonzero(~fnp.isin(kind, _HOST_ONLY))
        if len(sel):
            corr[sel], d_args, nb = fields(("correlation", "device", "nbytes"), sel)
            # GPU-side events: the stream is the tid and the device the pid when args do not say.
            k = kind[sel]
            gpu = fnp.isin(k, _GPU_SIDE)
            s_args = s_all[sel]
            stream[sel] = np.where(gpu, np.where(s_args >= 0, s_args, tid[sel]), -1)
            device[sel] = np.where(gpu, np.where(d_args >= 0, d_args, pid[sel]), -1)
            copies = fnp.isin(k, _COPIES)  # memcpy/memset carry bytes
            nbytes[sel] = np.where(copies, nb, -1)
            # Kineto links every runtime call and GPU activity by correlation id: without one,
            # an activity's launch (so its phase) is unknown
            unlinked = int((fnp.isin(k, _LINKED) & (corr[sel] == -1)).sum())
            if unlinked:
                self.problems["args.correlation"] += unlinked
        ops = np.flatnonzero((kind == int(Kind.CPU_OP)) & (s_all >= 0))
        if len(ops):
            stream[ops] = s_all[ops]
            corr[ops], = fields(("correlation",), ops)
        cols = {
            "_args": self._extra_args(kind, name, args_at),
            "kind": kind,
            "name": name,
            "ts": ts,
            "dur": dur,
            "pid": pid,
            "tid": tid,
            "stream": np.clip(stream, -1, np.iinfo(np.int32).max).astype(np.int32),
            "device": np.clip(device, -1, np.iinfo(np.int16).max).astype(np.int16),
            "correlation": corr,
            "external_id": ext,
            "bytes": nbytes,
            "launch": self._launch_codes(kind, launch_at),
        }
        self._ev.append((index, cols))
        self.n_events += n

    def _launch_codes(self, kind: np.ndarray, launch_at) -> np.ndarray:
        """Each event's launch configuration as a code into ``self.launches`` (-1: none; only
        kernels are read), each distinct configuration read once."""
        out = np.full(len(kind), -1, dtype=np.int32)
        rows = np.flatnonzero(kind == int(Kind.KERNEL))
        if not len(rows):
            return out
        known = self._launch_code
        group, keys = launch_at(rows)
        for k in keys:
            if k not in known:
                text = launch_text(k)
                known[k] = self.launches[text] if text else -1
        codes = np.fromiter(map(known.__getitem__, keys), dtype=np.int32, count=len(keys))
        out[rows] = codes[group]
        return out

    def _extra_args(self, kind: np.ndarray, name: np.ndarray, args_at) -> dict | None:
        """The ``Trace.args`` fields of this piece's events that carry them (``row``: the
        event's row in the piece), None when none does."""
        known = len(self._wants_args)
        if len(self.names.values_) > known:
            fresh = self.names.values_[known:]
            new = [bool(_ARG_NAME.search(s)) for s in fresh]
            self._wants_args = np.concatenate([self._wants_args, np.array(new, dtype=bool)])
            new = [bool(SHAPE_NAME.search(s)) for s in fresh]
            self._wants_shapes = np.concatenate([self._wants_shapes, np.array(new, dtype=bool)])
        shapes = self._wants_shapes[name] & fnp.isin(kind, _HOST_SIDE)
        rows = np.flatnonzero(self._wants_args[name] | (kind == int(Kind.SYNC)) | shapes)
        if not len(rows):
            return None
        sub = args_at(rows)
        with_shapes = shapes[rows].tolist()
        out: dict = {"row": rows}
        for f in _ARG_FIELDS:
            if f == "group":  # the name; older traces wrote a numeric "Process Group ID"
                out[f] = [a.group or (str(a.group_id) if a.group_id >= 0 else "") for a in sub]
            elif f in RAW_ARGS:  # as canonical JSON text, for the shape rows only
                out[f] = [_canonical(_ARG_GET[f](a)) if keep else ""
                          for a, keep in zip(sub, with_shapes)]
            elif f in STR_ARGS:
                out[f] = list(map(_ARG_GET[f], sub))
            else:
                out[f] = _ints(_ARG_GET[f], sub, len(sub))
        del sub  # its Raw values may hold the reader's buffer
        carries = np.zeros(len(rows), dtype=bool)  # the events that wrote any of the fields
        for f in _ARG_FIELDS:
            carries |= (np.array([v != "" for v in out[f]], dtype=bool)
                        if f in STR_ARGS or f in RAW_ARGS else out[f] != -1)
        if not carries.any():
            return None
        if not carries.all():
            keep = carries.nonzero()[0].tolist()
            out = {f: ([v[i] for i in keep] if isinstance(v, list) else v[carries])
                   for f, v in out.items()}
        return out

    def _add_memory(self, mem: list[Event], index: int) -> None:
        ts = us_text_to_ns(list(map(_get["ts"], mem)))
        if (ts < 0).any():  # BAD, or a negative ts
            self.problems["ts"] += int((ts == BAD).sum())
            self.problems["ts<0"] += int(((ts < 0) & (ts != BAD)).sum())
            mem = self._unreadable(mem, ts < 0, ["[memory]"] * int((ts < 0).sum()))
            ts = ts[ts >= 0]
            if not mem:
                return
        n = len(mem)
        args = list(map(_get["args"], mem))
        self._memory_columns(index, ts, _ints(_get["tid"], mem, n),
                             lambda f, dtype=np.int64: _ints(_aget[f], args, n, dtype))

    def _memory_columns(self, index: int, ts: np.ndarray, tid: np.ndarray, col) -> None:
        """Adds a piece's ``[memory]`` events; ``col(field, dtype)``: that ``Args`` field of
        every event, values that do not fit ``dtype`` as -1."""
        device_type = col("device_type", np.int8)
        if (device_type == -1).any():  # torch writes it on every [memory] event
            self.problems["args.Device Type"] += int((device_type == -1).sum())
        cols = {
            "ts": ts,
            "device_type": device_type,
            "device_id": col("device_id", np.int16),
            "bytes": col("mem_bytes"),
            "total_allocated": col("total_allocated"),
            "total_reserved": col("total_reserved"),
            "addr": col("addr"),
            "tid": tid,
        }
        self._mem.append((index, cols))
        self.n_memory += len(ts)

    def add_raw(self, data, index: int = 0) -> int | None:
        """Adds a piece given as its JSON text (an array of events), read by the compiled
        scanner (``_fastscan``) without one Python object per event; the number of elements
        read, or None (nothing added) where the scanner does not read this piece: the caller
        then decodes it with msgspec (``_schema.decode_events``) and calls ``self(events)``.
        Both ways give the same columns (tests/tracekit/test_fastscan.py)."""
        if _fastscan is None:
            return None
        got = _fastscan.scan(data)
        return None if got is None else self.add_scanned(data, index, got)

    def add_scanned(self, data, index: int, got: tuple) -> int | None:
        """``add_raw`` for a piece ``data`` that ``_fastscan.scan`` already read into ``got``
        (elsewhere: ``_scanthread``)."""
        n_elements, strings, x, mem, threads, fixups = got
        x = np.frombuffer(x, dtype=np.int64).reshape(-1, _X_COLS)
        mem = np.frombuffer(mem, dtype=np.int64).reshape(-1, _M_COLS)
        dur = us_float_to_ns(x[:, 5].view(np.float64))
        if (dur == BAD).any() or (x[:, 4] < 0).any() or (len(mem) and (mem[:, 0] < 0).any()):
            return None  # beyond int64 ns, negative ts: msgspec's path counts these events
        fix: dict[int, list] = {}
        for col, row, s in fixups:  # string pids/tids: read as ids, as ``_ints`` does
            fix.setdefault(col, []).append((row, str_id(s)))

        def fixed(a: np.ndarray, col: int) -> np.ndarray:
            a = a.copy()
            for row, v in fix.get(col, ()):
                a[row] = v
            return a

        if len(mem):
            def mcol(f: str, dtype=np.int64) -> np.ndarray:
                return _narrow(mem[:, _M_FIELD[f]], dtype)

            self._memory_columns(index, mem[:, 0].copy(), fixed(mem[:, 1], 2), mcol)
        self._thread_names += [(index, pid, tid, label) for pid, tid, label in threads]
        if len(x):
            codes = x[:, 0].astype(np.int32)
            lut = np.zeros(len(strings), dtype=np.int32)
            used = np.unique(codes).tolist()
            lut[used] = [self.names[strings[c]] for c in used]
            cats = x[:, 1]
            klut = np.full(len(strings) + 1, -1, dtype=np.int8)  # the last: no cat
            ucats = np.unique(cats).tolist()
            klut[ucats] = [self.kind_of[strings[c] if c >= 0 else NO_CAT] for c in ucats]
            spans = x[:, 12:14]

            def fields(fs: tuple[str, ...], rows: np.ndarray | None = None) -> list[np.ndarray]:
                return [x[:, _X_FIELD[f]].copy() if rows is None else x[rows, _X_FIELD[f]]
                        for f in fs]

            def args_at(rows: np.ndarray) -> list:
                with memoryview(data) as text:  # released at once: the reader reuses the buffer
                    return [NO_ARGS if s < 0 else _ARGS.decode(text[s:e])
                            for s, e in spans[rows].tolist()]

            def launch_at(rows: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
                # the scanner hashed each event's launch configuration (its values' text): the
                # first event of each hash is read (``Launch``: msgspec skips the other keys),
                # in order of appearance; no Python object per kernel
                h = x[rows, _X_LAUNCH]
                uniq, first, group = np.unique(h, return_index=True, return_inverse=True)
                seen = np.argsort(first, kind="stable")  # groups in order of appearance
                rank = np.empty_like(seen)
                rank[seen] = np.arange(len(seen))
                picked = rows[first[seen]]
                with memoryview(data) as text:
                    keys = [launch_key(_LAUNCH.decode(text[s:e])) if hv != 0 and s >= 0 else b"{}"
                            for hv, (s, e) in zip(uniq[seen].tolist(), spans[picked].tolist())]
                return rank[group.reshape(-1)], keys

            self._event_columns(index, klut[cats], lut[codes], x[:, 4].copy(),
                                dur, fixed(x[:, 2], 0),
                                fixed(x[:, 3], 1), fields, args_at, launch_at)
        return n_elements

    # ---- building the tables -------------------------------------------------------------

    def event_arrays(self) -> dict[str, np.ndarray]:
        """The events table's columns (name as int32 codes into ``self.names.values_``), by ts."""
        parts = [p for _, p in sorted(self._ev, key=lambda ip: ip[0])]  # file order (stable)
        cols = {c: _cat([p[c] for p in parts], t) for c, t in EVENT_COLUMNS.items()}
        self._arg_parts, offset = [], 0
        for p in parts:  # each piece's args, their rows made rows of the whole file
            if p.get("_args") is not None:
                self._arg_parts.append({**p["_args"], "row": p["_args"]["row"] + offset})
            offset += len(p["ts"])
        self._ev = []
        if self.schema == "legacy2021":
            # The 2021 schema wrote record_function ranges as "Operator": the names torch and
            # TorchRec give their annotations make them annotations again.
            ann = [i for i, s in enumerate(self.names.values_) if _LEGACY_ANNOTATION.match(s)]
            if ann:
                sel = fnp.isin(cols["name"], ann) & (cols["kind"] == int(Kind.CPU_OP))
                cols["kind"] = np.where(sel, np.int8(Kind.ANNOTATION), cols["kind"]).astype(np.int8)
        cols, self._order = _sorted_by_ts(cols)
        return cols

    def arg_arrays(self) -> tuple[dict[str, np.ndarray], list[str]]:
        """The ``Trace.args`` table's columns (strings as int32 codes into the returned list),
        sorted by event row; call after ``event_arrays``."""
        parts, self._arg_parts = self._arg_parts, []
        strings = _Codes()
        if not parts:
            return {c: np.empty(0, dtype=np.int32 if t == "category" else t)
                    for c, t in ARG_COLUMNS.items()}, []
        rows = np.concatenate([p["row"] for p in parts])
        if self._order is not None:  # file row -> row in the ts-sorted table
            where = np.empty_like(self._order)
            where[self._order] = np.arange(len(self._order), dtype=self._order.dtype)
            rows = where[rows]
        cols: dict[str, np.ndarray] = {"event": rows.astype(np.int64)}
        for f in _ARG_FIELDS:
            if f in STR_ARGS or f in RAW_ARGS:
                values = [v for p in parts for v in p[f]]
                cols[f] = np.fromiter(map(strings.__getitem__, values), dtype=np.int32, count=len(values))
            else:
                cols[f] = np.concatenate([p[f] for p in parts]).astype(ARG_COLUMNS[f])
        order = np.argsort(cols["event"], kind="stable")
        return {c: a[order] for c, a in cols.items()}, strings.values_

    def sorted_names(self, cols: dict[str, np.ndarray]) -> list[str]:
        """The names in sorted order, ``cols["name"]`` recoded to match: the same categories
        whatever order the pieces were decoded in."""
        names = self.names.values_
        order = sorted(range(len(names)), key=names.__getitem__)
        recode = np.empty(len(names), dtype=np.int32)
        recode[order] = np.arange(len(names), dtype=np.int32)
        cols["name"] = recode[cols["name"]]
        return [names[i] for i in order]

    def memory_arrays(self) -> dict[str, np.ndarray]:
        parts = [p for _, p in sorted(self._mem, key=lambda ip: ip[0])]
        cols = {c: _cat([p[c] for p in parts], t) for c, t in MEMORY_COLUMNS.items()}
        self._mem = []
        return _sorted_by_ts(cols)[0]

    def thread_names(self, events: dict[str, np.ndarray]) -> list[list]:
        """``[pid, tid, name]`` of the host threads Kineto named (``thread_name`` metadata), in
        file order, first name of a thread only; the GPU's stream lanes (pids that are the
        device of GPU-side events) are left out."""
        gpu = fnp.isin(events["kind"], _GPU_SIDE)
        gpu_pids = set(np.unique(events["pid"][gpu]).tolist())
        out, seen = [], set()
        for _, pid, tid, name in sorted(self._thread_names, key=lambda t: t[0]):
            if pid not in gpu_pids and (pid, tid) not in seen:
                seen.add((pid, tid))
                out.append([pid, tid, name])
        return out

    @property
    def schema(self) -> str:
        return "legacy2021" if LEGACY_CATEGORIES.intersection(self.kind_of) else "pytorch2"


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    """The pieces' column in one array (of ``dtype`` when there are none; names as codes)."""
    if dtype == "category":
        dtype = np.int32
    if not parts:
        return np.empty(0, dtype=dtype)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _sorted_by_ts(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The columns sorted by ts (stable), and the order applied (None: already sorted)."""
    ts = cols["ts"]
    if is_nondecreasing(ts):
        return cols, None
    order = np.argsort(ts, kind="stable")
    return {c: a[order] for c, a in cols.items()}, order


def platform_of(cols: dict[str, np.ndarray], names: list[str]) -> str:
    """"cpu" without any GPU activity, "rocm" when runtime/driver calls are hip*, else "cuda"."""
    kind = cols["kind"]
    if not fnp.isin(kind, _GPU_ACTIVITY).any():
        return "cpu"
    rt = np.unique(cols["name"][fnp.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)])])
    if any(names[i].startswith("hip") for i in rt):
        return "rocm"
    return "cuda"
