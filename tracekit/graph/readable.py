"""What a trace does not let the dependency graph read, and how that changes the verdict.

Each check looks at the graph (``tracekit.graph.model``) of one trace and returns a ``Limit``:
what cannot be read, as a warning a user reads, and what follows for the bound:

- ``linking``: few GPU activities linked to their launch, or few launches to their activity
  (an event-sampled or filtered trace, a trace without correlation ids or flows): the host ->
  GPU dependencies are not in the graph, so whether the host or the GPU decides a step cannot
  be told; a host (or sync) bound is then unknown.
- ``gpu_late``: GPU activities that started far later (``LATE_NS``, and ``LATE_LATENCIES``
  launch latencies) than their launch, their stream and their waits allow: the GPU ran work the
  trace does not show (events sampled away, another process): the host is not the bound.
- ``gpu_behind``: a step whose GPU work ran, median, far behind its launches: the host ran
  ahead, its launches did not decide when the GPU worked; the step is not host-bound, whatever
  the path through the recorded events says.
- ``graph_untraced``: CUDA/HIP graph launches whose kernels the trace does not hold (a graph's
  kernels share the launch's correlation id; where they are in the trace they are one launch
  of a known chain). The time a blocking call waited after one is counted as GPU work
  (``compute:cuda_graph_untraced``, ``tracekit.graph.build``).
- ``polling``: threads that poll (``cudaEventQuery``/``cudaStreamQuery``): a polling thread
  waits for the GPU by asking on its own timer, and nothing in the trace says for what; it
  neither wakes nor is woken by other threads in the model. A wait loop of polls on another
  thread is modelled as a wait for the GPU work its last poll saw end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit import _fastnp as fnp
from tracekit.graph.model import Graph, NodeKind

LINKED_SHARE = 0.5
"""Fewer GPU activities (or launch calls) linked than this share: the links cannot be read."""
LATE_NS = 1_000_000
"""A GPU activity this much later than the model allows ran behind work the trace lacks..."""
LATE_LATENCIES = 100
"""... and this many launch latencies later."""
LATE_SHARE = 0.01
"""That many of the GPU activities late (and at least ``LATE_MIN``): the GPU is not all here."""
LATE_MIN = 3


@dataclass(frozen=True)
class Limit:
    """One thing the trace does not let the graph read."""

    id: str
    """``linking``, ``gpu_late``, ``gpu_behind``, ``graph_untraced``, ``polling``."""
    warning: str
    """What cannot be read and what follows, in words."""
    host_not_bound: bool = False
    """The host cannot be the bound (of ``steps``, or of every step when empty)."""
    bound_unknown: bool = False
    """Whether the host or the GPU decides a step cannot be told: a host or sync bound is
    unknown."""
    steps: tuple[int, ...] = ()


def _names_match(names: np.ndarray, f) -> np.ndarray:
    """bool per name: ``f(name)``, asked once per distinct name."""
    if not names.size:
        return np.zeros(0, bool)
    codes, uniq = fnp.factorize(names)
    return np.array([bool(f(str(u))) for u in uniq], bool)[codes]


def _ms(ns) -> str:
    return f"{ns / 1e6:,.3f} ms"


def linking(g: Graph) -> Limit | None:
    gpu = np.flatnonzero(g.kind == NodeKind.GPU)
    calls = np.flatnonzero(g.kind == NodeKind.CALL)
    if gpu.size < 10 or not calls.size:
        return None
    # activities that started before the first host call cannot have their launch in the trace
    after = gpu[g.start[gpu] > g.start[calls].min()]
    a = float((g.launcher[after] >= 0).mean()) if after.size else 1.0
    launch = calls[_names_match(g.name[calls], lambda n: "Launch" in n)]
    lk = float((g.launched[launch] >= 0).mean()) if launch.size >= 10 else 1.0
    if a >= LINKED_SHARE and lk >= LINKED_SHARE:
        return None
    return Limit("linking", f"only {100 * a:.0f}% of the GPU activities are linked to their "
                 f"launch ({100 * lk:.0f}% of the launch calls to an activity): the trace is "
                 "event-sampled or filtered, or lacks correlation ids; the host -> GPU "
                 "dependencies it lacks are not in the graph, so whether the host or the GPU "
                 "decides a step cannot be read here (a host or sync bound is reported as "
                 "unknown, and the host's what-ifs are not offered)", bound_unknown=True)


def gpu_late(g: Graph, steps: np.ndarray) -> Limit | None:
    gpu = np.flatnonzero((g.kind == NodeKind.GPU) & fnp.isin(g.step, steps))
    if not gpu.size:
        return None
    thr = max(LATE_NS, LATE_LATENCIES * g.launch_latency_ns)
    late = gpu[g.unexplained[gpu] >= thr]
    if late.size < LATE_MIN or late.size < LATE_SHARE * gpu.size:
        return None
    return Limit("gpu_late", f"{late.size} of {gpu.size} GPU activities "
                 f"({100 * late.size / gpu.size:.1f}%) started at least {_ms(thr)} later than "
                 f"their launch, their stream and their waits allow (median "
                 f"{_ms(np.median(g.unexplained[late]))}): the GPU ran work this trace does not "
                 "show (events sampled or filtered away, another process): the host is not the "
                 "bound, and the host's what-ifs are not offered", host_not_bound=True)


def gpu_behind(g: Graph, steps: np.ndarray) -> Limit | None:
    gpu = np.flatnonzero((g.kind == NodeKind.GPU) & (g.launcher >= 0) & fnp.isin(g.step, steps))
    if not gpu.size:
        return None
    lag = g.start[gpu] - g.end[g.launcher[gpu]]
    # the median lag per step (steps ascending), by one sort: a pandas group-by's fixed cost
    # (~1 ms) was most of this check on a trace of a few events
    step = g.step[gpu]
    o = np.lexsort((lag, step))
    s_sorted, l_sorted = step[o], lag[o].astype(np.float64)
    cut = np.flatnonzero(fnp.r_(True, s_sorted[1:] != s_sorted[:-1]))
    size = np.diff(fnp.r_(cut, s_sorted.size))
    lo = cut + (size - 1) // 2
    med = (l_sorted[lo] + l_sorted[cut + size // 2]) / 2
    thr = max(LATE_NS, LATE_LATENCIES * g.launch_latency_ns)
    late = med > thr
    if not late.any():
        return None
    st = tuple(int(s) for s in s_sorted[cut][late].tolist())
    return Limit("gpu_behind", f"in {len(st)} step{'s' if len(st) != 1 else ''} the GPU work "
                 f"ran {_ms(np.median(med[late]))} (median) behind its launches: the host ran ahead, "
                 "its launches did not decide when the GPU worked; such a step is not "
                 "host-bound, whatever the path through the recorded events says",
                 host_not_bound=True, steps=st)


def graph_untraced(g: Graph) -> Limit | None:
    from tracekit.graph.build import GRAPH_LAUNCH

    calls = np.flatnonzero(g.kind == NodeKind.CALL)
    gl = calls[_names_match(g.name[calls], lambda n: GRAPH_LAUNCH.search(n) is not None)]
    if not gl.size:
        return None
    dark = gl[g.launched[gl] < 0]
    if not dark.size:
        return None
    return Limit("graph_untraced", f"{dark.size} of {gl.size} CUDA graph launches have no kernel "
                 "in the trace (the profiler did not record the graph's kernels): the GPU work "
                 "they launched is invisible; the time a blocking call waited after one counts "
                 "as GPU work (compute:cuda_graph_untraced), not as host or sync time")


def polling(g: Graph, loops: int = 0) -> Limit | None:
    if not g.polling_lanes.size and not loops:
        return None
    parts = []
    for ln in g.polling_lanes.tolist():
        ids = np.flatnonzero((g.lane == ln) & (g.kind == NodeKind.CALL))
        gap = np.median(np.diff(g.start[ids])) if ids.size > 1 else 0
        parts.append(f"{g.lane_label(ln)} polls ({ids.size} calls, one every "
                     f"{gap / 1e3:,.0f} us)")
    text = "; ".join(parts)
    if parts:
        text += (": a polling thread waits for the GPU by asking, on its own timer, and the trace "
                 "does not say for what: the model neither waits for it nor lets it wake "
                 "another thread")
    if loops:
        text += ("; " if text else "") + (f"{loops} wait loop{'s' if loops != 1 else ''} of "
                                          "polls on other threads, each modelled as a wait for "
                                          "the GPU work its last poll saw end (sync time)")
    return Limit("polling", text)


def limits(g: Graph, steps: np.ndarray, *, loops: int = 0,
           behind_in: np.ndarray | None = None) -> list[Limit]:
    """Every check (module docstring) on ``g`` over the counted ``steps``; ``gpu_behind`` only
    over ``behind_in`` when given (the steps whose path says host: elsewhere a GPU far behind
    its launches changes nothing, the path already goes through the GPU)."""
    got = [linking(g), gpu_late(g, steps),
           gpu_behind(g, steps if behind_in is None else np.intersect1d(steps, behind_in)),
           graph_untraced(g), polling(g, loops)]
    return [x for x in got if x is not None]


__all__ = ["Limit", "limits", "linking", "gpu_late", "gpu_behind", "graph_untraced", "polling"]
