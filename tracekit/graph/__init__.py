"""The dependency graph of a trace, its critical path, and what-if replays of it.

    from tracekit.graph import build_graph, critical_path
    g = build_graph(trace, rules)                 # nodes, edges (tracekit.graph.model)
    segs = critical_path(trace, rules, step=52)   # the step's critical path as time segments

This package reads a ``Trace`` and knows nothing of rendering.
"""

from tracekit.graph.build import GraphConfig, build_graph, wait_agreement
from tracekit.graph.model import BOUNDS, EdgeKind, Graph, NodeKind

__all__ = ["BOUNDS", "EdgeKind", "Graph", "GraphConfig", "NodeKind", "build_graph",
           "wait_agreement"]


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
