"""Step time: every training step's time, and its CPU and GPU span; P50/P90 over steps.

Steps come from torch.profiler's ``ProfilerStep#N`` annotations (``Rules.profiler_step``). A
step owns the host work inside its annotation (its CPU span) and the GPU work launched from it
(linked by correlation id; an activity whose launch the trace lacks belongs to the step its
start falls in). Its GPU span runs from the first start to the last end of that GPU work, on
any stream.

**The step time** (the one definition every figure uses: this section, ``tracekit explain``,
its what-ifs, ``compare``, ``check``, the dashboard; ``docs/metrics.md``) is a step's period:
from the previous step's completion to its own. A step completes when its annotation has ended
and its GPU work on each device's main stream (the stream with the most activity time) has
ended; a step cannot complete before the one before it. The first step runs from its
annotation's start. Where the host waits for the GPU once a step (a loss's ``.item()``, the
pipelines' syncs) this is the ProfilerStep span itself; where the host runs ahead of the GPU it
is the GPU's period, not the host's enqueue (the CPU span). A copy a step launches on a side
stream for a later batch does not hold it open.

Without ProfilerStep, steps are inferred from optimizer boundaries: the top-level annotations
matching ``Rules.step_boundary`` (``## optimizer {i} ##`` or torch's ``Optimizer.step#...``;
when several kinds appear, digits stripped, the most frequent one). Step k then runs from the
end of boundary k-1 to the end of boundary k, so n boundaries give n-1 steps, numbered 1..n-1;
``source`` says so.

Percentiles are numpy's default (linear interpolation) over the steps that have a value; the
step time's over the *counted* steps: all but the first when there are two or more (the first
holds the pipeline's fill and the profiler's warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import phases
from tracekit.frames import column, frame
from tracekit.phases import Rules
from tracekit.trace.model import Trace

SOURCE_PROFILER_STEP = "ProfilerStep"
SOURCE_OPTIMIZER = "optimizer boundaries"
SOURCE_NONE = "none"


@dataclass(frozen=True)
class StepsResult:
    """Per-step CPU and GPU spans."""

    steps: pd.DataFrame
    """One row per step: ``step, step_start, step_end, step_ns`` (its window and step time, the
    module docstring), ``cpu_start, cpu_end, cpu_ns, gpu_start, gpu_end, gpu_ns, activities`` (ns;
    gpu_* are -1 and activities 0 for a step that launched no GPU work)."""
    source: str
    """``"ProfilerStep"``, ``"optimizer boundaries"`` (inferred) or ``"none"``."""
    boundary: str | None
    """The annotation name (digits as #) steps were inferred from, else None."""
    cpu_p50_ns: float | None
    cpu_p90_ns: float | None
    gpu_p50_ns: float | None
    """P50 of the GPU span over steps with GPU activity; None without any."""
    gpu_p90_ns: float | None
    p50_ns: float | None = None
    """P50 of the step time over the counted steps (the module docstring)."""
    p90_ns: float | None = None


def counted(n: int) -> np.ndarray:
    """Which of ``n`` steps the step time's figures count: all but the first when there are
    two or more."""
    keep = np.ones(n, bool)
    if n >= 2:
        keep[0] = False
    return keep


def _p50_p90(x: np.ndarray) -> tuple[float | None, float | None]:
    """P50 and P90 of ``x`` (None for no value), in one ``np.percentile`` call (numpy computes
    each quantile of a list as it does one alone: the same floats, at about half the cost); of
    a 1-D int64 array, numpy's own steps for its default (linear) method without the checks
    and dispatch around them (~65 us a call whatever the size, three calls a trace): the
    virtual indexes, their neighbours in the sorted values and numpy's ``_lerp``, the same
    operations on the same dtypes (``tests/tracekit/test_steps.py`` holds them to
    ``np.percentile``)."""
    if not x.size:
        return None, None
    if type(x) is not np.ndarray or x.dtype != np.int64 or x.ndim != 1:
        p50, p90 = np.percentile(x, [50, 90]).tolist()
        return p50, p90
    n = x.size
    virtual = (n - 1) * _QUANTILES
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above] = -1
    nxt[above] = -1
    prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
    s = np.sort(x)
    a, b = s[prev], s[nxt]
    t = np.asanyarray(virtual - prev, dtype=virtual.dtype)
    diff = b - a
    out = np.add(a, diff * t)
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5, casting="unsafe",
                dtype=type(out.dtype))
    p50, p90 = out.tolist()
    return p50, p90


_QUANTILES = np.true_divide(np.array([50, 90]), 100)
"""The quantiles of ``_p50_p90``, as ``np.percentile`` makes them of ``[50, 90]``."""


def _inferred_steps(trace: Trace, rules: Rules) -> tuple[pd.DataFrame, str | None]:
    ev, codes, cats = phases.host_ops(trace)
    hit = phases.name_matches(codes, cats, rules.step_boundary)
    if not hit.any():
        return pd.DataFrame(columns=["step", "ts", "end"]), None
    names = pd.Series(np.asarray(cats.astype(str), dtype=object)[codes[hit]])
    keys = names.str.replace(r"\d+", "#", regex=True).to_numpy(object)
    ts = column(ev, "ts", np.int64)[hit]
    end = ts + column(ev, "dur", np.int64)[hit]
    # the most frequent kind of boundary (ties: the one that appears first)
    counts = pd.Series(keys).value_counts(sort=False)
    best = counts[counts == counts.max()].index
    first_seen = {k: i for i, k in reversed(list(enumerate(keys)))}
    key = min(best, key=lambda k: first_seen[k])
    sel = keys == key
    ts, end = ts[sel], end[sel]
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    # keep top-level ones only (a boundary nested in another is the same step)
    reach = np.maximum.accumulate(end)
    top = np.ones(ts.size, bool)
    top[1:] = ts[1:] >= reach[:-1]
    end = end[top]
    if end.size < 2:
        return pd.DataFrame(columns=["step", "ts", "end"]), key
    return frame({"step": np.arange(1, end.size, dtype=np.int64),
                  "ts": end[:-1], "end": end[1:]}), key


def compute(trace: Trace, rules: Rules) -> StepsResult:
    """Steps and their CPU/GPU spans (see the module docstring); memoised per trace object and
    rules (explain's graph asks for them too): do not modify the result's frame."""
    return phases.derived(trace, rules, "steps", lambda: _compute(trace, rules))


def _compute(trace: Trace, rules: Rules) -> StepsResult:
    spans = phases.profiler_steps(trace, rules)
    source, boundary = SOURCE_PROFILER_STEP, None
    if spans.empty:
        spans, boundary = _inferred_steps(trace, rules)
        source = SOURCE_OPTIMIZER if not spans.empty else SOURCE_NONE
    acts, _ = phases.activities(trace, rules)
    n = len(spans)
    gpu_start = np.full(n, -1, np.int64)
    gpu_end = np.full(n, -1, np.int64)
    count = np.zeros(n, np.int64)
    if n and len(acts):
        step = phases.step_of(spans, column(acts, "launch_ts", np.int64))
        linked = (column(acts, "launch_ts", np.int64) >= 0) & (step >= 0)
        if linked.any():
            # per step: first start, last end and count of its activities (sorted by step, then
            # one reduceat per figure: a pandas groupby cost ~4 ms more on a 42 MB trace)
            linked_step = step[linked]
            order = np.argsort(linked_step, kind="stable")
            by_step = linked_step[order]
            first = np.flatnonzero(fnp.r_(True, by_step[1:] != by_step[:-1]))
            pos = fnp.index_of(column(spans, "step", np.int64), by_step[first])
            gpu_start[pos] = np.minimum.reduceat(column(acts, "ts", np.int64)[linked][order], first)
            gpu_end[pos] = np.maximum.reduceat(column(acts, "end", np.int64)[linked][order], first)
            count[pos] = np.diff(fnp.r_(first, by_step.size))
    cpu_start = column(spans, "ts", np.int64)
    cpu_end = column(spans, "end", np.int64)
    gpu_ns = np.where(count > 0, gpu_end - gpu_start, -1)
    start, end = windows(spans, acts)
    table = frame({
        "step": column(spans, "step", np.int64),
        "step_start": start, "step_end": end, "step_ns": end - start,
        "cpu_start": cpu_start, "cpu_end": cpu_end, "cpu_ns": cpu_end - cpu_start,
        "gpu_start": gpu_start, "gpu_end": gpu_end, "gpu_ns": gpu_ns,
        "activities": count,
    })
    cpu = column(table, "cpu_ns")
    gpu = gpu_ns[count > 0]
    per = (end - start)[counted(n)]
    (cpu50, cpu90), (gpu50, gpu90), (p50, p90) = _p50_p90(cpu), _p50_p90(gpu), _p50_p90(per)
    return StepsResult(
        steps=table, source=source, boundary=boundary,
        cpu_p50_ns=cpu50, cpu_p90_ns=cpu90, gpu_p50_ns=gpu50, gpu_p90_ns=gpu90,
        p50_ns=p50, p90_ns=p90,
    )


def main_streams(acts: pd.DataFrame) -> np.ndarray:
    """bool per activity: on its device's main stream (the one with the most activity time;
    of streams tied on it, the highest stream id)."""
    if not len(acts):
        return np.zeros(0, bool)
    dur = column(acts, "end", np.int64) - column(acts, "ts", np.int64)
    device = column(acts, "device", np.int64)
    stream = column(acts, "stream", np.int64)
    # busy time per (device, stream), the pairs sorted (numpy: a pandas group-by and MultiIndex
    # cost ~3 ms a call whatever the trace's size)
    order = np.lexsort((stream, device))
    d, s = device[order], stream[order]
    first = np.flatnonzero(fnp.r_(True, (d[1:] != d[:-1]) | (s[1:] != s[:-1])))
    busy = np.add.reduceat(dur[order], first)
    pair_dev = d[first]
    # per device the pair that ends its run sorted by busy time (stable: a tie keeps the stream
    # order, the last is the highest stream)
    by = np.lexsort((busy, pair_dev))
    last = by[fnp.r_(pair_dev[by][1:] != pair_dev[by][:-1], True)]
    main = np.zeros(first.size, bool)
    main[last] = True
    pair = np.repeat(np.arange(first.size), np.diff(fnp.r_(first, order.size)))
    out = np.empty(order.size, bool)
    out[order] = main[pair]
    return out


def windows(spans: pd.DataFrame, acts: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each step's window (``start``, ``end``: the module docstring's step time), from its span
    (``step, ts, end``) and the activities (``phases.activities``)."""
    n = len(spans)
    end = column(spans, "end", np.int64).copy()
    if n and len(acts):
        launch = column(acts, "launch_ts", np.int64)
        st = phases.step_of(spans, np.where(launch >= 0, launch, column(acts, "ts", np.int64)))
        sel = (st >= 0) & main_streams(acts)
        if sel.any():  # the last end of each step's activities on the main streams
            order = np.argsort(st[sel], kind="stable")
            by_step = st[sel][order]
            first = np.flatnonzero(fnp.r_(True, by_step[1:] != by_step[:-1]))
            last = np.maximum.reduceat(column(acts, "end", np.int64)[sel][order], first)
            pos = fnp.index_of(column(spans, "step", np.int64), by_step[first])
            ok = pos >= 0
            end[pos[ok]] = np.maximum(end[pos[ok]], last[ok])
    end = np.maximum.accumulate(end) if n else end  # never before the step before it
    start = fnp.r_(column(spans, "ts", np.int64)[:1], end[:-1]) if n else end
    return start.astype(np.int64), end.astype(np.int64)
