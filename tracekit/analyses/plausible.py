"""Figures outside their physical range: a warning, never a silent number (issue 29,
docs/limits.md). Every figure tracekit computes from a trace lies inside the trace's span: no
step, GPU activity or stream's busy time lasts longer than the time from the trace's first event
to its last end, the GPU busy time of a class is at most that span times the devices with GPU
work, and no duration is negative. A figure outside this range comes from arithmetic that went
wrong (an int64 sum that wrapped: two 5e18 ns kernels once gave a GPU busy time of -8.45e18 ns)
or from events whose times cannot be right; the figure is kept and said to be off.

A GPU activity cannot pass the span (the span is computed exactly from every event); an event
longer than a day is warned of where the trace is read (``tracekit.trace.loader.MAX_EVENT_NS``):
that is a property of the input, this of the figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracekit.trace.model import Trace
from tracekit.frames import column

if TYPE_CHECKING:
    from tracekit.analyses.overlap import OverlapResult
    from tracekit.steps import StepsResult


SPAN_CHUNK = 1 << 16
"""Events summed at a time for the span's end (``ts + dur`` may pass int64: summed as uint64)."""


def trace_span(trace: Trace) -> tuple[int, int] | None:
    """(first start, last end) of the trace's events in ns, exact (Python ints: ``ts + dur``
    may pass int64), None for a trace without events."""
    ev = trace.events
    if not len(ev):
        return None
    ts, dur = trace.column("ts"), trace.column("dur")
    last = 0
    for i in range(0, ts.size, SPAN_CHUNK):  # in pieces: no copy of the columns
        end = ts[i:i + SPAN_CHUNK].astype(np.uint64) + dur[i:i + SPAN_CHUNK].astype(np.uint64)
        last = max(last, int(end.max()))
    return int(ts.min()), last


def _ms(ns: int | float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def check(trace: Trace, steps: StepsResult, overlap: OverlapResult) -> tuple[str, ...]:
    """Warnings for the figures of ``steps`` (``tracekit.steps.StepsResult``) and ``overlap``
    (``tracekit.analyses.overlap.OverlapResult``) outside the trace's physical range (the module
    docstring); () when every figure is inside it."""
    span = trace_span(trace)
    if span is None:
        return ()
    length = span[1] - span[0]
    where = f"the trace's span, {_ms(length)} from its first event to its last end"
    out = []
    st = steps.steps
    if len(st):
        for col, what in (("step_ns", "step time"), ("cpu_ns", "CPU span"), ("gpu_ns", "GPU span")):
            v = column(st, col, np.int64)
            bad = np.flatnonzero((v > length) | ((v < 0) & (col == "step_ns" or v != -1)))
            if bad.size:
                i = int(bad[np.argmax(np.abs(v[bad]))])
                out.append(f"the {what} of {bad.size:,} step{'s' if bad.size > 1 else ''} is "
                           f"outside 0 to {where} (step {int(st['step'].iat[i])}: "
                           f"{_ms(int(v[i]))}): not physical, kept as computed")
    s = overlap.streams
    if len(s):
        busy = column(s, "busy_ns", np.int64)
        if int(busy.max()) > length or int(busy.min()) < 0:
            j = int(np.argmax(np.abs(busy)))
            out.append(f"stream {int(s['device'].iat[j])}:{int(s['stream'].iat[j])}'s busy time "
                       f"{_ms(int(busy[j]))} is outside 0 to {where}: not physical, kept as "
                       "computed")
        for name in ("gpu_busy_ns", "compute_ns", "communication_ns", "memcpy_ns"):
            v = int(getattr(overlap, name))
            if 0 <= v <= length:  # within one device's span: no need to count the devices
                continue
            devices = int(np.unique(column(s, "device")).size)
            limit = length * devices
            if v > limit or v < 0:
                out.append(f"{name} {_ms(v)} is outside 0 to the trace's span times its "
                           f"{devices} device{'s' if devices > 1 else ''} ({_ms(limit)}): "
                           "not physical, kept as computed")
                break
    return tuple(out)
