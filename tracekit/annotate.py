"""A copy of a trace with tracekit's findings drawn into it, for Perfetto or chrome://tracing.

``write_annotated(source, dest, explain, syncs, gaps)`` copies the trace file byte for
byte and adds, at the start of its ``traceEvents`` array, one process ("tracekit explain") with
three threads:

- ``critical path``: every segment of every step's critical path (name ``<category>: <event>``,
  args: the lane it lies on, what it is, the step);
- ``sync stalls``: each blocking call (its call site);
- ``optimizer -> lookup gap``: from each optimizer's end to the next lookup's start (positive
  gaps only);

and flow arrows (category ``tracekit_critical_path``) along the critical path, from each event
on it to the next one on another lane. The input is only read; the copy is streamed (the
original events are never parsed), so a large trace costs its copy time.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile

from tracekit._files import check_new_file, check_out
from tracekit.errors import InputError

PID = 2_147_480_000
"""The pid of the added process (out of the way of real pids)."""
FLOW_ID0 = 1 << 50
_HEAD = 1 << 20


def _us(ns: int) -> float:
    return round(int(ns) / 1000, 3)


def _events(explain, syncs, gaps) -> list[dict]:
    out: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "tracekit explain"}},
        {"name": "process_sort_index", "ph": "M", "pid": PID, "tid": 0, "args": {"sort_index": -1}},
    ]
    for tid, name in ((1, "critical path"), (2, "sync stalls"), (3, "optimizer -> lookup gap")):
        out.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
    path = explain.path
    if path is not None and len(path):
        prev = None
        flow = FLOW_ID0
        for r in path.itertuples(index=False):
            lane = (f"GPU {r.device} stream {r.stream}" if r.lane_type == "gpu"
                    else f"CPU {r.pid}/{r.tid}")
            out.append({"name": f"{r.category}: {r.name}", "ph": "X", "cat": "tracekit",
                        "pid": PID, "tid": 1, "ts": _us(r.start), "dur": _us(r.end - r.start),
                        "args": {"lane": lane, "what": r.what, "step": int(r.step)}})
            if r.what not in ("activity", "call"):
                continue
            here = (int(r.device), int(r.stream)) if r.lane_type == "gpu" else (int(r.pid), int(r.tid))
            if prev is not None and prev[0] != here:
                out.append({"name": "critical path", "ph": "s", "cat": "tracekit_critical_path",
                            "id": flow, "pid": prev[0][0], "tid": prev[0][1], "ts": prev[1]})
                out.append({"name": "critical path", "ph": "f", "bp": "e",
                            "cat": "tracekit_critical_path", "id": flow, "pid": here[0],
                            "tid": here[1], "ts": _us(r.start)})
                flow += 1
            prev = (here, _us(r.start))
    for r in syncs.stalls.itertuples(index=False):
        out.append({"name": f"sync stall: {r.call_site}", "ph": "X", "cat": "tracekit", "pid": PID,
                    "tid": 2, "ts": _us(r.ts), "dur": _us(r.dur_ns),
                    "args": {"phase": r.phase, "step": int(r.step)}})
    for r in gaps.gaps.itertuples(index=False):
        if r.gap_ns > 0:
            out.append({"name": f"optimizer -> lookup gap ({r.gap_ns / 1e6:.3f} ms)", "ph": "X",
                        "cat": "tracekit", "pid": PID, "tid": 3, "ts": _us(r.optimizer_end),
                        "dur": _us(r.gap_ns), "args": {"step": int(r.step)}})
    return out


def write_annotated(source: str, dest: str, explain, syncs, gaps, *,
                    rules_path: str | None = None) -> int:
    """Write ``dest`` (gzipped when it ends in ``.gz``); returns the number of events added.
    ``dest`` may not be empty, a device, FIFO, socket or directory, nor anything the command
    reads (the trace, the snapshot beside it, ``rules_path``, or a link to one); it is written
    under a fresh temporary name in its directory, then renamed."""
    check_new_file(dest, what="--annotate")
    check_out(dest, [source], rules_path=rules_path, what="--annotate")
    extra = _events(explain, syncs, gaps)
    blob = ",".join(json.dumps(e, separators=(",", ":")) for e in extra).encode()
    opener = gzip.open if _is_gzip(source) else open
    out_open = gzip.open if dest.endswith(".gz") else open
    tmp = None
    try:
        # a fresh name (O_EXCL): never a file that exists, an input named like "<dest>.tmp"
        fd, tmp = tempfile.mkstemp(prefix=".tracekit-", suffix=".part",
                                   dir=os.path.dirname(os.path.abspath(dest)))
        os.close(fd)
        with opener(source, "rb") as src, out_open(tmp, "wb") as dst:
            head = src.read(_HEAD)
            k = head.find(b'"traceEvents"')
            j = head.find(b"[", k) if k >= 0 else -1
            if j < 0:
                raise InputError("no traceEvents array near the start of the file", path=source)
            rest = head[j + 1:].lstrip()
            more = src.read(1) if not rest else b""
            empty = (rest or more)[:1] == b"]"
            dst.write(head[: j + 1])
            dst.write(blob)
            if not empty:
                dst.write(b",")
            dst.write(head[j + 1:])
            dst.write(more)
            shutil.copyfileobj(src, dst, 1 << 22)
        os.replace(tmp, dest)
        tmp = None
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", path=dest) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return len(extra)


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"
