"""What the CUDA caching allocator holds, from a memory-snapshot pickle (docs/metrics.md,
"Allocator", second half).

Input: the pickle written by ``torch.cuda.memory._dump_snapshot(path)`` (equivalently
``pickle.dump(torch.cuda.memory._snapshot(), f)``): a dict with

- ``"segments"``: one dict per ``cudaMalloc``'d segment: ``device``, ``address``,
  ``total_size``, ``allocated_size``, ``active_size``, ``requested_size``, ``stream`` (the
  ``cudaStream_t`` the segment belongs to, as an integer: ``0`` is the default stream),
  ``segment_type`` (``"large"``/``"small"``: the allocator's two block pools),
  ``segment_pool_id`` (a ``(int, int)`` tuple: ``(0, 0)`` is the default pool, anything else a
  private pool such as a CUDA graph's or a ``MemPool``'s), ``is_expandable``, ``frames`` and
  ``blocks``: ``[{address, size, requested_size, state, frames}]`` with ``state`` one of
  ``"active_allocated"`` (used by a tensor), ``"active_pending_free"`` (freed by its tensor but
  still in use by another stream it was recorded on) and ``"inactive"`` (free, cached);
- ``"device_traces"``: per device, the allocator's action history (oldest first) when
  ``torch.cuda.memory._record_memory_history()`` was on: ``{action, addr, size, stream, ...}``
  with ``action`` one of ``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``,
  ``segment_free``, ``segment_map``, ``segment_unmap`` (expandable segments), ``oom``,
  ``snapshot``;
- ``"allocator_settings"`` (newer torch): ``PYTORCH_CUDA_ALLOC_CONF`` and friends (kept as is).

A pickle of ``torch.cuda.memory.memory_snapshot()`` (the list of segments alone) is read too.

Reading never imports torch and never runs code from the file: the unpickler resolves no global
except a few builtin container types, so a malicious pickle raises ``SnapshotError``.

Why these numbers: the caching allocator ties every segment to the stream it was allocated on,
and a free block only serves later allocations on that same stream, from the same pool
(default/private, small/large). So

- ``reserved_off_main``: bytes reserved on streams other than the main one: memory the main
  stream cannot reuse (a batch copied to the GPU under a side stream lands there);
- ``inactive_split``: free blocks inside segments that also hold active blocks: the segment
  cannot be released by ``empty_cache()`` and the free piece serves only what fits in it;
- ``largest_free`` vs ``free`` per (device, stream, pool): the biggest request that pool can
  serve without a new ``cudaMalloc``, against everything it holds free;
- ``pending_free``: bytes in ``active_pending_free`` blocks, waiting for another stream's
  work (``record_stream``) before they can be reused;
- from the history, when recorded: the peak of reserved bytes per stream and of reserved bytes
  off the main stream over the recorded window. The history is a ring buffer that may have lost
  its oldest entries, so it is walked backwards from the state the segments show: before a
  ``segment_alloc``/``segment_map`` of ``size`` on a stream, that stream held ``size`` less.

A snapshot beside a trace: ``find_snapshot(trace_path)`` looks, in this order, for
``<stem>.pickle`` and ``<stem>_snapshot.pickle`` in the trace's directory, where ``<stem>`` is
the file name without ``.json.gz``/``.json`` (so ``run.json.gz`` pairs with ``run.pickle`` or
``run_snapshot.pickle``); for Kineto's ``<name>.pt.trace.json.gz`` the same two names built
from ``<name>`` are tried next.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit._files import find_snapshot, snapshot_candidates  # noqa: F401 (part of this module's API)
from tracekit.analyses.snapshot_streams import address_handles
from tracekit.errors import SnapshotError

BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
"""Block states written by the caching allocator's snapshot."""

DEFAULT_POOL = (0, 0)
"""``segment_pool_id`` of the allocator's default pool."""

_SAFE_GLOBALS = {
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "list"),
    ("builtins", "dict"),
    ("builtins", "tuple"),
    ("builtins", "int"),
    ("builtins", "float"),
    ("builtins", "str"),
    ("builtins", "bytes"),
    ("builtins", "bytearray"),
    ("builtins", "bool"),
    ("builtins", "complex"),
    ("__builtin__", "set"),
    ("__builtin__", "frozenset"),
    ("collections", "OrderedDict"),
}
"""The only globals a snapshot pickle may name: plain container and scalar types (protocol 0-2
pickles refer to some of them by name). Nothing callable beyond these constructors."""

_SEGMENT_KEYS = ("total_size", "stream", "blocks")
_BLOCK_KEYS = ("size", "state")

STREAM_COLUMNS = [
    "device",
    "stream",
    "is_main",
    "segments",
    "reserved",
    "allocated",
    "active",
    "pending_free",
    "free",
    "inactive_split",
]
"""Columns of ``SnapshotResult.streams`` (bytes unless named otherwise)."""

HISTORY_COLUMNS = ["device", "stream", "is_main", "segment_events", "reserved_at_start",
                   "reserved_now", "peak_reserved"]
"""Columns of ``SnapshotResult.history``."""

_GROW = ("segment_alloc", "segment_map")
_SHRINK = ("segment_free", "segment_unmap")

POOL_COLUMNS = [
    "device",
    "stream",
    "pool_id",
    "segment_type",
    "segments",
    "reserved",
    "free",
    "free_blocks",
    "largest_free",
    "free_fragmentation",
]
"""Columns of ``SnapshotResult.pools``."""


@dataclass(frozen=True)
class SnapshotResult:
    """The allocator's state in one snapshot. Byte counts are ints; tables are sorted."""

    source: str
    """Path of the pickle."""
    main_stream: int
    """Stream treated as the main one (``0``, the default stream, unless asked otherwise)."""
    segments: int
    """Number of segments (``cudaMalloc`` calls still held)."""
    reserved: int
    """All bytes held by the allocator (sum of ``total_size``)."""
    allocated: int
    """Bytes in ``active_allocated`` blocks."""
    pending_free: int
    """Bytes in ``active_pending_free`` blocks."""
    free: int
    """Bytes in ``inactive`` blocks (cached, reusable by their own stream and pool)."""
    reserved_off_main: int
    """Bytes reserved on streams other than ``main_stream``: what the main stream cannot reuse."""
    inactive_split: int
    """Bytes in inactive blocks of segments that also hold an active block."""
    streams: pd.DataFrame
    """One row per (device, stream), columns ``STREAM_COLUMNS``; ``is_main`` marks the main stream."""
    pools: pd.DataFrame
    """One row per (device, stream, pool_id, segment_type), columns ``POOL_COLUMNS``;
    ``free_fragmentation`` is ``1 - largest_free / free`` (0 when nothing is free)."""
    trace_entries: int
    """Allocator history entries in ``device_traces`` (0 when history was not recorded)."""
    history: pd.DataFrame | None = None
    """From the history, per (device, stream): ``segment_events`` (segment allocs, frees, maps
    and unmaps recorded), ``reserved_at_start`` (before the first recorded entry) and
    ``peak_reserved`` over the recorded window (the snapshot's state included), columns
    ``HISTORY_COLUMNS``; None without history."""
    peak_reserved_off_main: int | None = None
    """The largest sum, at one moment of the recorded window, of bytes reserved on streams other
    than the main one (per device; summed over devices); None without history."""
    allocator_settings: dict = field(default_factory=dict)
    """``allocator_settings`` as written by torch (empty for older snapshots)."""
    addresses: pd.DataFrame | None = None
    """Per (device, address) the handle its history entries and blocks name
    (``tracekit.analyses.snapshot_streams.address_handles``): what matches the snapshot's
    streams to a trace's. Not part of the JSON report."""


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only ``_SAFE_GLOBALS``; any other global or persistent id is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return pickle.Unpickler.find_class(self, module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refusing to load a persistent id")


def read_snapshot(path: str | os.PathLike[str]) -> dict:
    """Unpickle a snapshot file safely and check its shape; returns ``{"segments": [...], ...}``.

    Raises ``SnapshotError`` for a missing/unreadable file, a pickle naming any non-builtin
    global (it is not executed), a corrupt pickle, or data that is not a memory snapshot.
    """
    p = str(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise SnapshotError("no such file", path=p) from None
    except IsADirectoryError:
        raise SnapshotError("is a directory, not a snapshot pickle", path=p) from None
    except OSError as exc:
        raise SnapshotError(f"cannot read: {exc.strerror or exc}", path=p) from None
    try:
        data = _RestrictedUnpickler(io.BytesIO(raw)).load()
    except pickle.UnpicklingError as exc:
        raise SnapshotError(f"not a memory snapshot pickle ({exc})", path=p) from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            OverflowError, MemoryError, UnicodeDecodeError) as exc:
        raise SnapshotError(
            f"not a memory snapshot pickle ({type(exc).__name__}: {exc})", path=p
        ) from None
    if isinstance(data, list):  # torch.cuda.memory.memory_snapshot(): the segments alone
        data = {"segments": data}
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise SnapshotError(
            "not a CUDA memory snapshot: expected a dict with a 'segments' list "
            "(torch.cuda.memory._dump_snapshot writes one)",
            path=p,
        )
    for i, seg in enumerate(data["segments"]):
        _check_segment(seg, i, p)
    traces = data.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("not a CUDA memory snapshot: 'device_traces' is not a list of lists", path=p)
    return data


def _check_segment(seg: Any, i: int, path: str) -> None:
    def bad(what: str) -> SnapshotError:
        return SnapshotError(f"not a CUDA memory snapshot: segment {i} {what}", path=path)

    if not isinstance(seg, dict):
        raise bad("is not a dict")
    for key in _SEGMENT_KEYS:
        if key not in seg:
            raise bad(f"has no '{key}'")
    if not _is_int(seg["total_size"]) or seg["total_size"] < 0:
        raise bad("has a bad 'total_size'")
    if not _is_int(seg["stream"]):
        raise bad("has a bad 'stream'")
    if not isinstance(seg["blocks"], list):
        raise bad("has no 'blocks' list")
    pool = seg.get("segment_pool_id", DEFAULT_POOL)
    if not (isinstance(pool, (tuple, list)) and all(_is_int(x) for x in pool)):
        raise bad("has a bad 'segment_pool_id'")
    for j, b in enumerate(seg["blocks"]):
        if not isinstance(b, dict) or any(k not in b for k in _BLOCK_KEYS):
            raise bad(f"block {j} lacks 'size'/'state'")
        if not _is_int(b["size"]) or b["size"] < 0:
            raise bad(f"block {j} has a bad 'size'")
        if b["state"] not in BLOCK_STATES:
            raise bad(f"block {j} has unknown state {b['state']!r}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def compute_snapshot(
    snapshot_path: str | os.PathLike[str], *, main_stream: int = 0
) -> SnapshotResult:
    """Read the snapshot at ``snapshot_path`` and compute ``SnapshotResult``.

    ``main_stream``: the stream the training loop runs on; ``0`` (the default stream) unless
    the job ran its main work on a stream of its own.
    """
    data = read_snapshot(snapshot_path)
    return summarize_snapshot(data, source=str(snapshot_path), main_stream=main_stream)


def summarize_snapshot(data: dict, *, source: str = "", main_stream: int = 0) -> SnapshotResult:
    """``SnapshotResult`` of an already-read snapshot dict (as ``read_snapshot`` returns it)."""
    stream_rows: dict[tuple[int, int], dict[str, int]] = {}
    pool_rows: dict[tuple[int, int, tuple[int, ...], str], dict[str, int]] = {}
    for seg in data["segments"]:
        device = int(seg.get("device", 0))
        stream = int(seg["stream"])
        pool = tuple(int(x) for x in seg.get("segment_pool_id", DEFAULT_POOL))
        seg_type = str(seg.get("segment_type", "large"))
        by_state = dict.fromkeys(BLOCK_STATES, 0)
        largest_free = 0
        free_blocks = 0
        for b in seg["blocks"]:
            by_state[b["state"]] += b["size"]
            if b["state"] == "inactive":
                free_blocks += 1
                largest_free = max(largest_free, b["size"])
        has_active = by_state["active_allocated"] + by_state["active_pending_free"] > 0
        s = stream_rows.setdefault(
            (device, stream),
            dict(segments=0, reserved=0, allocated=0, active=0, pending_free=0, free=0,
                 inactive_split=0),
        )
        s["segments"] += 1
        s["reserved"] += seg["total_size"]
        s["allocated"] += by_state["active_allocated"]
        s["active"] += by_state["active_allocated"] + by_state["active_pending_free"]
        s["pending_free"] += by_state["active_pending_free"]
        s["free"] += by_state["inactive"]
        s["inactive_split"] += by_state["inactive"] if has_active else 0
        p = pool_rows.setdefault(
            (device, stream, pool, seg_type),
            dict(segments=0, reserved=0, free=0, free_blocks=0, largest_free=0),
        )
        p["segments"] += 1
        p["reserved"] += seg["total_size"]
        p["free"] += by_state["inactive"]
        p["free_blocks"] += free_blocks
        p["largest_free"] = max(p["largest_free"], largest_free)

    streams = pd.DataFrame(
        [
            dict(device=d, stream=st, is_main=(st == main_stream), **v)
            for (d, st), v in sorted(stream_rows.items())
        ],
        columns=STREAM_COLUMNS,
    )
    pools = pd.DataFrame(
        [
            dict(
                device=d, stream=st, pool_id=str(pool), segment_type=t, **v,
                free_fragmentation=(1.0 - v["largest_free"] / v["free"]) if v["free"] else 0.0,
            )
            for (d, st, pool, t), v in sorted(pool_rows.items())
        ],
        columns=POOL_COLUMNS,
    )
    int_cols = [c for c in STREAM_COLUMNS if c not in ("is_main",)]
    streams = streams.astype({c: "int64" for c in int_cols}).astype({"is_main": bool})
    pools = pools.astype(
        {c: "int64" for c in ("device", "stream", "segments", "reserved", "free",
                              "free_blocks", "largest_free")}
    ).astype({"free_fragmentation": float})

    def total(col: str, frame: pd.DataFrame = streams) -> int:
        return int(frame[col].sum()) if len(frame) else 0

    history, peak_off = _history(data, stream_rows, main_stream)
    settings = data.get("allocator_settings")
    return SnapshotResult(
        source=source,
        main_stream=main_stream,
        segments=total("segments"),
        reserved=total("reserved"),
        allocated=total("allocated"),
        pending_free=total("pending_free"),
        free=total("free"),
        reserved_off_main=total("reserved", streams[~streams["is_main"]]),
        inactive_split=total("inactive_split"),
        streams=streams,
        pools=pools,
        trace_entries=sum(len(t) for t in data.get("device_traces", [])),
        history=history,
        peak_reserved_off_main=peak_off,
        allocator_settings=dict(settings) if isinstance(settings, dict) else {},
        addresses=address_handles(data),
    )


def _history(
    data: dict, stream_rows: dict[tuple[int, int], dict[str, int]], main_stream: int
) -> tuple[pd.DataFrame | None, int | None]:
    """Peaks of reserved bytes over the recorded history (see the module docstring)."""
    traces = data.get("device_traces") or []
    if not any(traces):
        return None, None
    rows = []
    peak_off_all = 0
    for device, entries in enumerate(traces):
        now = {st: v["reserved"] for (d, st), v in stream_rows.items() if d == device}
        cur = dict(now)
        peak = dict(now)
        events: dict[int, int] = {}
        off = sum(v for st, v in cur.items() if st != main_stream)
        peak_off = off
        for e in reversed(entries):  # undo each segment change, newest first
            if not isinstance(e, dict) or e.get("action") not in _GROW + _SHRINK:
                continue
            st, size = int(e.get("stream", 0)), int(e.get("size", 0))
            sign = -1 if e["action"] in _GROW else 1
            cur[st] = cur.get(st, 0) + sign * size
            peak[st] = max(peak.get(st, 0), cur[st])
            events[st] = events.get(st, 0) + 1
            if st != main_stream:
                off += sign * size
                peak_off = max(peak_off, off)
        peak_off_all += peak_off
        for st in sorted(set(cur) | set(events)):
            rows.append(dict(device=device, stream=st, is_main=st == main_stream,
                             segment_events=events.get(st, 0), reserved_at_start=cur.get(st, 0),
                             reserved_now=now.get(st, 0), peak_reserved=peak.get(st, 0)))
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    return frame, int(peak_off_all)
