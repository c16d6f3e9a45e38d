"""The dependency graph of a trace, its critical path, and what-if replays of it.

    from tracekit.graph import build_graph, critical_path
    g = build_graph(trace, rules)                 # nodes, edges (tracekit.graph.model)
    segs = critical_path(trace, rules, step=52)   # the step's critical path as time segments

This package reads a ``Trace`` and knows nothing of rendering.
"""

from tracekit.graph.build import GraphConfig, build_graph
from tracekit.graph.model import BOUNDS, EdgeKind, Graph, NodeKind

__all__ = ["BOUNDS", "EdgeKind", "Graph", "GraphConfig", "NodeKind", "build_graph"]
