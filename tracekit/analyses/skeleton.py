"""The rank's dependency graph reduced to its collectives (``tracekit.graph.skeleton``): what
``tracekit.ranks.jobgraph`` joins across the ranks of a job into the job's graph.

The graph is explain's (``tracekit.analyses.explain.view_graph``: the estimated untraced step
by default, the profiler's host cost taken out), its cuts the rank's collective kernels
(``tracekit.analyses.collectives``). ``compute`` returns it as plain columns (``to_dict``), each
cut named by its kernel's row in the rank's ``collectives.kernels``. None for a rank without
collective kernels or steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit import _fastnp as fnp

from tracekit.graph import skeleton as sk
from tracekit.phases import Rules
from tracekit.trace.model import Trace


@dataclass(frozen=True)
class SkeletonResult:
    """A rank's skeleton with its cuts named by collective kernel (``kernels``)."""

    view: str
    """``untraced`` (the estimated untraced step) or ``traced``: which graph it reduces."""
    kernels: np.ndarray
    """int64 per cut: its row in the rank's ``collectives.kernels``."""
    skeleton: sk.Skeleton
    asleep_ns: float = 0.0
    """Host time per step the trace does not show the rank's main thread doing anything
    (``host_asleep``): what a sleep, or a wait outside the trace, costs it."""
    op_counts: dict | None = None
    """Every host op's count per step (``tracekit.analyses.profile.op_counts``): which ops the
    straggler runs more often than the median rank, without reading either trace again."""
    input_dist_gpu: tuple = ()
    """The distinct names of the rank's GPU activities in its input dist (its collective
    kernels left out): whether the input dist already permutes the features by owner
    (``tracekit.ranks.whatif.PERMUTE_PATTERN``), which the balanced what-if asks of every rank
    without reading its trace again."""

    def to_dict(self) -> dict:
        s = self.skeleton
        terms = {"target": s.t_target.tolist(), "source": s.t_source.tolist(),
                 "lag": s.t_lag.tolist()}
        for i, c in enumerate(sk.CLASSES):
            terms[c] = s.t_classes[:, i].tolist()
        terms["phase"] = [str(p) for p in s.t_phase]
        return {"view": self.view, "kernels": self.kernels.tolist(),
                "pinned": s.pinned.tolist(), "arrive": s.arrive.tolist(), "end": s.end.tolist(),
                "steps": s.steps.tolist(), "done": s.done.tolist(), "pin_done": int(s.pin_done),
                "asleep_ns": float(self.asleep_ns), "op_counts": dict(self.op_counts or {}),
                "input_dist_gpu": list(self.input_dist_gpu), "terms": terms}


def host_asleep(g) -> np.ndarray:
    """The nodes of ``g``'s main thread (the one holding the steps: the training loop) that
    started later than their dependencies and their modelled lags say, with an edge that decided
    their start (``Graph.unexplained``, ``Graph.binding``): host time in which the trace shows
    the thread doing nothing the model explains (a ``time.sleep``, a wait for something outside
    the trace: ``tracekit.graph.build``'s ``idle_ns``). Each one's binding edge's observed lag
    holds that time (``tracekit.graph.build.observed_lags``). Other threads are left out: a
    helper thread waiting for work (a copy thread, a pool) is idle, not late."""
    from tracekit.graph.model import NodeKind

    return np.flatnonzero((g.kind != NodeKind.GPU) & (g.lane == g.main_lane)
                          & (g.unexplained > 0) & (g.binding >= 0))


def asleep_per_step(g) -> float:
    """``host_asleep``'s unexplained time per step, over the nodes in ``g``'s steps (ns)."""
    steps = g.steps["step"].to_numpy(np.int64) if len(g.steps) else np.zeros(0, np.int64)
    if not steps.size:
        return 0.0
    v = host_asleep(g)
    v = v[fnp.isin(g.step[v], steps)]
    return float(g.unexplained[v].sum()) / steps.size


def cut_nodes(g, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(node ids of the graph's nodes for these event rows, the rows' positions in ``events``),
    for the rows that have a node."""
    pos = np.full(int(max(g.row.max(initial=-1), events.max(initial=-1))) + 1, -1, np.int64)
    pos[events] = np.arange(events.size)
    has = g.row >= 0
    nodes = np.flatnonzero(has)
    k = pos[g.row[nodes]]
    hit = k >= 0
    return nodes[hit], k[hit]


def compute(trace: Trace, rules: Rules, *, config=None) -> SkeletonResult | None:
    """The skeleton of ``trace`` (module docstring); ``config``: explain's
    (``tracekit.analyses.explain.ExplainConfig``), whose graph it reduces."""
    from tracekit.analyses import collectives
    from tracekit.analyses.explain import ExplainConfig, view_graph
    from tracekit.analyses.profile import op_counts

    config = ExplainConfig() if config is None else config
    events = collectives.kernel_events(trace, rules)
    if not events.size:
        return None
    _, g, est = view_graph(trace, rules, config)
    if not len(g.steps):
        return None
    nodes, which = cut_nodes(g, events)
    if not nodes.size:
        return None
    o = np.argsort(nodes, kind="stable")
    nodes, which = nodes[o], which[o]
    s = sk.reduce(g, nodes)
    view = "untraced" if est is not None and config.untraced else "traced"
    return SkeletonResult(view=view, kernels=which, skeleton=s, asleep_ns=asleep_per_step(g),
                          op_counts=op_counts(trace, rules),
                          input_dist_gpu=input_dist_gpu(g, nodes))


def input_dist_gpu(g, cuts: np.ndarray) -> tuple:
    """The distinct names (sorted) of ``g``'s GPU activities in phase ``input_dist``, the nodes
    ``cuts`` (the collective kernels: their indices or a mask over ``g``'s nodes) left out."""
    from tracekit.graph.model import NodeKind

    sel = (g.kind == NodeKind.GPU) & (g.phase == "input_dist")
    sel[cuts] = False
    return tuple(sorted({str(x) for x in g.name[sel].tolist()}))
