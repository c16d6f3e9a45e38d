"""``load``: a Kineto trace file or a directory of per-rank traces -> ``TraceSet``.

Per file: look the file up in the cache (``tracekit.trace.cache``); on a miss stream it through
the reader (``_reader``: gunzip in a thread, pieces decoded by the compiled scanner or msgspec,
for big files part of the pieces in forked helper processes, ``_parallel``) into numpy columns (``_columns``), build the
``Trace``, and store the columns in the cache from a background thread.

Environment: ``TRACEKIT_CACHE_DIR`` (cache location), ``TRACEKIT_LOAD_PARALLEL=0`` (never fork
the helper).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping

from tracekit._files import (  # noqa: F401
    SNIFF_BYTES, TRACE_SUFFIXES, check_readable, display, is_trace_file, trace_files_in,
)
from tracekit.errors import EmptyTraceError, InputError
from tracekit.trace import cache
from tracekit.trace._frames import args_frame, events_frame, memory_frame
from tracekit.trace.model import Trace, TraceSet

# The parser (_reader, _columns: msgspec, the compiled scanner) is imported by parse_file, where
# it is needed: a load that finds its entries in the cache (the CLI's parent once its parse
# child has written them, tracekit.trace.prefetch) never imports it.

PARALLEL_MIN_BYTES = 48 << 20
"""Traces of about this much JSON or more (a .gz counts 12x its size) are decoded by two
processes (``_parallel``) where that is safe."""

READ_AHEAD_MIN_BYTES = 8 << 20
"""Traces of at least this much JSON (a .gz counts 12x its size) are read and inflated in a
thread ahead of the decoding (``_reader.read(threaded=True)``); a smaller one is decoded as one
piece (``_reader._CHUNK``), with nothing to overlap."""


def load(
    path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    entries: Mapping[str, int] | None = None,
) -> TraceSet:
    """Reads a ``.json``/``.json.gz`` Kineto trace, or a directory of per-rank traces (its
    ``.json``/``.json.gz`` files that ``is_trace_file``: metrics files beside them are skipped).

    ``cache_dir``: where parsed traces are cached (default ``$TRACEKIT_CACHE_DIR`` or the user
    cache dir); ``use_cache=False`` neither reads nor writes it. ``progress``: draw a progress
    bar on stderr (None: only for big files when stderr is a terminal). ``entries``: {file:
    open file holding its cache entry} for files parsed elsewhere (the CLI's parse child hands
    them over so, ``tracekit.trace.prefetch``), read as the cache's are (stamp and checksum
    checked), before the cache; only with ``use_cache``.

    Raises ``InputError`` (missing path, unreadable, a directory without traces),
    ``TraceFormatError`` (not JSON, not a Kineto trace, corrupt gzip) or ``EmptyTraceError``,
    each naming the file. The input is only ever read.
    """
    src = os.fspath(path)
    check_readable(src, "trace file or directory", directory_ok=True)
    if os.path.isdir(src):
        try:
            files = trace_files_in(src)
        except OSError as exc:
            raise InputError(f"cannot list directory: {exc.strerror or exc}", path=src) from None
        if not files:
            raise InputError("no trace files (*.json, *.json.gz holding traceEvents) in this directory", path=src)
    else:
        files = [src]
    directory = cache.cache_dir(cache_dir) if use_cache else None
    handed = entries or {}
    parsed = [_load_file(f, directory, progress, handed.get(f)) for f in files]
    traces = _assign_ranks(parsed, many=os.path.isdir(src))
    return TraceSet(source=src, traces=tuple(sorted(traces, key=lambda t: t.rank)))


MAX_RANK = 2**31 - 1
"""The largest rank a file may declare (torch.distributed's ranks are int32); a declared rank
below 0 or above it is no usable rank (the file gets one by position, with a warning)."""


def declared_rank(metadata: dict) -> int | None:
    """``distributedInfo.rank`` of a trace's top-level keys: an int, or a string of digits, in
    ``[0, MAX_RANK]``; None when absent or anything else (then the loader numbers the file by
    its position)."""
    info = metadata.get("distributedInfo")
    if not isinstance(info, dict):
        return None
    r = info.get("rank")
    if isinstance(r, bool):
        return None
    if isinstance(r, str) and re.fullmatch(r"\s*-?\d{1,12}\s*", r):
        r = int(r)
    if isinstance(r, int) and 0 <= r <= MAX_RANK:
        return r
    return None


def _assign_ranks(parsed: list[dict], *, many: bool) -> list[Trace]:
    """Declared ranks first; a file without one (or with a rank already taken) gets its position
    among the files, or the next free rank after it, with one warning saying which."""
    taken: dict[int, str] = {}
    rank_of: list[int | None] = []
    clash: list[str | None] = []
    for p in parsed:
        r = declared_rank(p["metadata"])
        other = taken.get(r) if r is not None else None
        clash.append(other)
        if other is not None:
            r = None
        if r is not None:
            taken[r] = p["source"]
        rank_of.append(r)
    out = []
    for i, (p, r) in enumerate(zip(parsed, rank_of)):
        if r is None:
            r = i
            while r in taken:
                r += 1
            taken[r] = p["source"]
            if clash[i] is not None:
                p["warnings"].append(
                    f"distributedInfo.rank {declared_rank(p['metadata'])} is also "
                    f"{display(os.path.basename(clash[i]))}'s rank; loaded as rank {r}")
            elif many:
                p["warnings"].append(f"no usable distributedInfo.rank; loaded as rank {r}")
        out.append(
            Trace(
                source=p["source"],
                rank=r,
                events=p["events"],
                memory=p["memory"],
                metadata=p["metadata"],
                schema=p["schema"],
                platform=p["platform"],
                warnings=tuple(p["warnings"]),
                args=p["args"],
                thread_names=p["thread_names"],
            )
        )
    return out


_writers: list[threading.Thread] = []
_writers_lock = threading.Lock()


def wait_for_cache_writes() -> None:
    """Returns once every cache entry this process started writing is on disk (or failed)."""
    with _writers_lock:
        pending = list(_writers)
        _writers.clear()
    for t in pending:
        t.join()


def _write_in_background(where: str, st: dict, entry: cache.Entry) -> None:
    """Writes the cache entry in a thread (file writes and crc32 release the GIL) so that the
    caller's analyses run meanwhile; not a daemon, so the interpreter finishes it at exit."""

    def run() -> None:
        try:
            cache.write(where, st, entry)
        except OSError:
            pass  # a read-only or full cache dir only costs speed

    t = threading.Thread(target=run, name="tracekit-cache-write")
    with _writers_lock:
        _writers.append(t)
    t.start()


def _read_entry(handed: int | None, where: str, st: dict) -> cache.Entry | None:
    """The entry in the open file ``handed`` (if any) or else in the cache at ``where``, if
    intact and stamped ``st``."""
    if handed is not None:
        try:
            return cache.read_fd(handed, st)
        except cache.Invalid:
            pass
    try:
        return cache.read(where, st)
    except cache.Invalid:
        return None


def _load_file(path: str, directory: str | None, progress: bool | None,
               handed: int | None = None) -> dict:
    check_readable(path, "trace file")  # a directory's FIFO or symlink loop: named, not opened
    # An entry still being written by this process is finished first (it may be this one), and
    # no writer thread may run when the next parse forks its helper.
    wait_for_cache_writes()
    st = entry = None
    if directory is not None:
        try:
            st = cache.stamp(path)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
        where = cache.entry_path(directory, st)
        entry = _read_entry(handed, where, st)
    if entry is None:
        entry = parse_file(path, progress=progress)
        if directory is not None:
            _write_in_background(where, st, entry)
    info = entry.info
    return {
        "source": path,
        "events": events_frame(entry.events, entry.names, info["launches"]),
        "memory": memory_frame(entry.memory),
        "args": args_frame(entry.args, entry.arg_strings),
        "metadata": info["metadata"],
        "schema": info["schema"],
        "platform": info["platform"],
        "warnings": list(info["warnings"]),
        "thread_names": {tid: name for _, tid, name in reversed(info.get("thread_names", []))},
    }


def _is_gzip(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None


def _shared_correlations(events: dict) -> str | None:
    """A warning when runtime calls share a correlation id (Kineto gives each call its own:
    a GPU activity's launch, so its phase and step, is then a guess), else None."""
    import numpy as np

    from tracekit.trace.model import Kind

    kind = events["kind"]
    corr = events["correlation"][(kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER))]
    corr = corr[corr >= 0]
    if corr.size < 2 or bool(np.all(corr[1:] > corr[:-1])):  # the usual case: one pass
        return None
    ids, counts = np.unique(corr, return_counts=True)
    if counts.max() < 2:
        return None
    extra = int((counts - 1).sum())
    top = int(np.argmax(counts))
    return (f"{extra + int((counts > 1).sum()):,} runtime calls share a correlation id with "
            f"another (id {int(ids[top])}: {int(counts[top]):,} calls); the launch of a GPU "
            "activity, so its phase and step (steps' GPU time, gaps, critical path), may be off")


MAX_EVENT_NS = 86_400 * 10**9
"""The longest event taken as physical: one day (a profiler's trace of a training job covers
seconds to minutes; a kernel of 5e18 ns is 58 years). A longer event is kept as written, with a
warning naming the longest (``_implausible_durations``; docs/limits.md)."""


def _implausible_durations(events: dict, names: list[str]) -> str | None:
    """A warning when events last longer than ``MAX_EVENT_NS``, naming the longest, else None."""
    import numpy as np

    from tracekit.trace.model import Kind

    dur = events["dur"]
    long = np.flatnonzero(dur > MAX_EVENT_NS)
    if not long.size:
        return None
    i = int(long[np.argmax(dur[long])])
    k = int(events["kind"][i])
    kind = Kind(k).name.lower() if k in Kind._value2member_map_ else "event"
    name = names[int(events["name"][i])]
    name = name if len(name) <= 60 else name[:57] + "..."
    d = int(dur[i])
    return (f"{long.size:,} event{'s' if long.size > 1 else ''} last{'' if long.size > 1 else 's'}"
            f" longer than a day, longer than any profiled event can "
            f"({'the longest: ' if long.size > 1 else ''}{kind} "
            f"{name!r} at ts {int(events['ts'][i]) / 1000:.3f} us, {d / 1e6:,.3f} ms = "
            f"{d / MAX_EVENT_NS:,.0f} days): kept as written, so the figures that count "
            f"{'them' if long.size > 1 else 'it'} (step time, busy time, the critical path, "
            "what-if savings) are not physical")


def parse_file(path: str, *, progress: bool | None = None, threaded: bool = True) -> cache.Entry:
    """Parses one trace file (no cache) into the columns a ``Trace`` is built from."""
    from tracekit.trace import _reader
    from tracekit.trace._columns import (
        Columns, platform_of, problem_warnings, unreadable_reason,
    )
    from tracekit.trace._progress import Progress

    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    bar = Progress(path, size, progress)
    cols = Columns()
    gz = _is_gzip(path)
    parallel = threaded and size * (12 if gz else 1) >= PARALLEL_MIN_BYTES
    # a file read and decoded in one piece leaves a read-ahead thread nothing to overlap: its
    # start, queue and join cost ~0.4 ms of CPU, a third of the parse of a rank of a few events
    ahead = threaded and size * (12 if gz else 1) >= READ_AHEAD_MIN_BYTES
    try:
        header = _reader.read(path, cols, progress=bar, threaded=ahead, parallel=parallel,
                              reset=cols.reset)
    finally:
        bar.close()
    warnings = list(header.warnings)
    if header.truncated:
        warnings.append(
            f"{header.truncated}; read the {cols.n_events:,} complete events before the cut"
        )
    if cols.negative_durations:
        warnings.append(f"{cols.negative_durations} events had a negative duration, read as 0")
    problems = problem_warnings(cols.problems, cols.dropped, cols.dropped_names)
    warnings += problems
    if cols.n_events == 0 and cols.n_memory == 0:
        if header.truncated:
            raise EmptyTraceError(f"{header.truncated} before its first complete event", path=path)
        if sum(cols.dropped.values()):
            raise EmptyTraceError(f"none of its {sum(cols.dropped.values()):,} complete or [memory] "
                                  f"events could be read ({unreadable_reason(cols.problems)})",
                                  path=path)
        odd = cols.problems["not an object"] + cols.problems["no ph"]
        if odd:
            raise EmptyTraceError(f"traceEvents holds {odd:,} elements that are not events "
                                  "(not objects, or without a ph) and no complete (ph X) or "
                                  "[memory] event", path=path)
        if header.n_elements == 0:
            raise EmptyTraceError("traceEvents is empty", path=path)
        raise EmptyTraceError("traceEvents holds no complete (ph X) or [memory] events", path=path)
    events = cols.event_arrays()
    shared = _shared_correlations(events)
    if shared:
        warnings.append(shared)
    args, arg_strings = cols.arg_arrays()
    memory = cols.memory_arrays()
    names = cols.sorted_names(events)
    long = _implausible_durations(events, names)
    if long:
        warnings.append(long)
    info = {
        "metadata": header.metadata,
        "schema": cols.schema,
        "platform": platform_of(events, names),
        "warnings": warnings,
        "thread_names": cols.thread_names(events),
        "launches": cols.launches.values_,
    }
    return cache.Entry(events=events, memory=memory, names=names, info=info, args=args,
                       arg_strings=arg_strings)


__all__ = ["load", "parse_file", "declared_rank", "MAX_RANK", "MAX_EVENT_NS", "wait_for_cache_writes", "is_trace_file", "TRACE_SUFFIXES"]
