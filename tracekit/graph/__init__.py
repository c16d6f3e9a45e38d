"""The dependency graph of a trace, its critical path, and what-if replays of it.

    from tracekit.graph import build_graph, critical_path
    g = build_graph(trace, rules)                 # nodes, edges (tracekit.graph.model)
    segs = critical_path(trace, rules, step=52)   # the step's critical path as time segments

This package reads a ``Trace`` and knows nothing of rendering.

Host corrections (the seam for an overhead model): a ``HostCost`` holds, per node, host time
to take out of a replay (what the profiler cost the host): ``own_ns`` off a CPU call's
duration, ``before_ns`` off the host time before it on its thread. ``host_spans(g, trace)``
says which span of the trace each CPU node stands for (to count the events recorded in it);
``g.with_host_cost(cost)`` is the graph without that cost, on which every replay, what-if and
critical path works unchanged. The profiler's overhead model (``tracekit.graph.overhead``) gives
its estimate as one (``overhead.host_cost``) and builds explain's untraced view with it;
``tracekit.analyses.explain.compute(..., host_cost=f)`` with ``f(trace, graph) -> HostCost``
puts another correction in its place::

    g = build_graph(trace, rules)
    cost = HostCost(own_ns=..., before_ns=...)       # e.g. per recorded event in host_spans(g, trace)
    g2 = g.with_host_cost(cost)
    start, end = replay(Plan.of(g2))                 # the schedule without the profiler's cost

The graph is plain data (numpy arrays and small tables; node ids are a topological order,
every edge goes from a lower to a higher id): graphs of several ranks can be concatenated
(lanes renumbered, nodes renumbered by their start on one aligned clock so that every edge,
the added ones included, still goes forward) and joined with extra edges (a collective's
kernels on every rank, say), then replayed the same way.
"""

from tracekit.graph.build import GraphConfig, build_graph, host_spans, wait_agreement
from tracekit.graph.model import BOUNDS, EdgeKind, Graph, HostCost, NodeKind

__all__ = ["BOUNDS", "EdgeKind", "Graph", "GraphConfig", "HostCost", "NodeKind", "build_graph",
           "host_spans", "wait_agreement"]


def critical_path(trace, rules=None, *, step: int | None = None,
                  config: GraphConfig | None = None):
    """The critical path of every step (or of ``step``) as time segments, earliest first.

    A DataFrame with ``tracekit.graph.critical.SEGMENT_COLUMNS``: ``step, start, end, dur``
    (ns), the lane (``lane_type`` "gpu" with ``device, stream``; "cpu" with ``pid, tid``),
    ``name`` (the event), ``category`` (``host``, ``compute:<phase>``, ``communication``,
    ``memcpy``, ``sync``, ``idle``), ``what`` (the event's own time, or the edge before it:
    launch latency, host time, a wait...), ``node`` and ``phase``. The segments of a step
    tile its window (``tracekit.graph.critical``) without gaps or overlap.
    """
    from tracekit.graph import critical as _cr
    from tracekit.phases import default_rules

    g = build_graph(trace, default_rules() if rules is None else rules, config)
    win = _cr.step_windows(g)
    if step is not None:
        win = win[win["step"] == step]
    return _cr.step_paths(g, windows=win)


__all__ += ["critical_path"]
