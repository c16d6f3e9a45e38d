"""Replaying a dependency graph: node times from durations and edges.

``replay(plan)`` computes every node's start as the latest of ``end(u) + lag`` over its edges
(a node nothing precedes keeps its observed start) and its end as start + duration. On an
unchanged graph that gives back the observed times exactly (``tracekit.graph.model``); a
what-if changes durations, edges or lanes first (``tracekit.graph.whatif``).

Where the compiled ``_replaycore`` is built, the recurrence below runs as one pass over the nodes
in id order (a topological order). Otherwise, how it stays fast without a Python loop per node: most edges join consecutive nodes of one
lane (program and stream order) or go from a CPU lane to a GPU lane (launches). Along one
lane, ``s[j] = max(s[j-1] + d[j-1] + lag[j], x[j])`` (``x``: the latest input from other lanes)
has the closed form ``s[j] = C[j] + max_{k<=j}(x[k] - C[k])`` with ``C`` the cumulative sum of
``d[j-1] + lag[j]``: one ``np.maximum.accumulate`` per lane. The few other edges (host waits,
cross-stream waits, handoffs, what-if edges) cut the node order into blocks; within a block
every input comes from an earlier block or, for a launch, from a CPU lane computed first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit import _fastnp as fnp
from tracekit.graph.model import EdgeKind, Graph, lane_order

try:  # setup.py builds it; optional: the numpy blocks below give the same times
    from tracekit.graph import _replaycore as _core
except ImportError:  # pragma: no cover - no compiler where tracekit was installed
    _core = None

NEG = np.iinfo(np.int64).min // 4
"""Minus infinity for times (far from overflow when lags are added)."""


@dataclass(frozen=True)
class Plan:
    """What to replay: a graph's nodes with (possibly changed) durations, lanes and edges.

    Edges need not be sorted; in-lane edges (program/stream order) must join consecutive nodes
    of a lane, anything else is a cross-lane edge. Node ids stay the graph's (a topological
    order): every edge must go from a lower to a higher id."""

    start: np.ndarray
    """Observed start (the release time of a node nothing precedes)."""
    dur: np.ndarray
    lane: np.ndarray
    lane_is_cpu: np.ndarray
    """bool per lane."""
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    lag: np.ndarray
    pin: int = -1
    """Nodes ``0..pin`` keep their observed start (``start``) and ``dur``, whatever their
    edges say: the schedule before the replayed window, as traced (-1: none)."""

    @classmethod
    def of(cls, g: Graph, *, pin: int = -1) -> "Plan":
        return cls(start=g.start, dur=g.dur, lane=g.lane.astype(np.int64),
                   lane_is_cpu=(g.lanes["type"].to_numpy(object) == "cpu"),
                   src=g.src, dst=g.dst, kind=g.edge_kind, lag=g.lag, pin=pin)


def replay(p: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every node (see the module docstring)."""
    n = p.start.size
    if n == 0:
        return p.start.copy(), p.start.copy()
    src, dst, kind, lag = p.src, p.dst, p.kind, p.lag
    if (src >= dst).any():
        raise ValueError("replay: an edge goes backwards in the node order")
    if p.pin >= 0:  # pinned nodes: nothing moves them
        free = dst > p.pin
        src, dst, kind, lag = src[free], dst[free], kind[free], lag[free]
    lane = p.lane
    # lane order: position of each node in its lane, its lane predecessor
    order = lane_order(lane)
    ln = lane[order]
    first = fnp.r_(True, ln[1:] != ln[:-1])
    lane_prev = np.full(n, -1, np.int64)
    lane_prev[order[~first]] = order[np.flatnonzero(~first) - 1]
    in_lane = fnp.isin(kind, [int(EdgeKind.PROGRAM), int(EdgeKind.STREAM)]) & \
        (lane_prev[dst] == src)
    # in-lane lag per node (NEG: no lane predecessor edge)
    ilag = np.full(n, NEG, np.int64)
    has_pred = np.zeros(n, bool)
    if in_lane.any():
        d_in = dst[in_lane]
        ilag[d_in] = lag[in_lane]
        has_pred[d_in] = True
    cs, cd, cl = src[~in_lane], dst[~in_lane], lag[~in_lane]
    o = np.argsort(cd, kind="stable")
    cs, cd, cl = cs[o], cd[o], cl[o]
    has_cross = np.zeros(n, bool)
    has_cross[cd] = True
    release = np.where(~has_pred & ~has_cross, p.start, NEG)
    if _core is not None:  # the same recurrence in one compiled pass over the nodes
        start = np.empty(n, np.int64)
        end = np.empty(n, np.int64)
        i64 = np.int64
        ptr = fnp.r_(0, np.cumsum(np.bincount(cd, minlength=n))).astype(i64)  # cd's start per node
        _core.run(np.ascontiguousarray(release, i64), np.ascontiguousarray(p.dur, i64), lane_prev,
                  has_pred.view(np.uint8), ilag, ptr, np.ascontiguousarray(cs, i64),
                  np.ascontiguousarray(cl, i64), start, end)
        return start, end
    # rare edges: everything but a launch from a CPU lane into a GPU lane
    cpu_src = p.lane_is_cpu[lane[cs]]
    cpu_dst = p.lane_is_cpu[lane[cd]]
    rare = ~(cpu_src & ~cpu_dst)
    bounds = np.unique(fnp.r_(0, cd[rare], n))
    # per lane: its nodes in order, and where each block starts in them
    cut = np.flatnonzero(first)
    lanes = {int(ln[c]): order[c:e] for c, e in zip(cut, fnp.r_(cut[1:], n))}
    cpu_lanes = [k for k in lanes if p.lane_is_cpu[k]]
    gpu_lanes = [k for k in lanes if not p.lane_is_cpu[k]]
    at = {k: np.searchsorted(ids, bounds).tolist() for k, ids in lanes.items()}
    # per block: its edges (sorted by destination); those into its first node come first, and
    # only they can come from CPU nodes' inputs (rare edges end at block starts); the others
    # are launches into GPU nodes
    e_lo = np.searchsorted(cd, bounds[:-1], side="left").tolist()
    e_first = np.searchsorted(cd, bounds[:-1], side="right").tolist()
    e_hi = np.searchsorted(cd, bounds[1:], side="left").tolist()
    start = np.full(n, NEG, np.int64)
    end = np.full(n, NEG, np.int64)
    dur = p.dur
    last_end = {k: NEG for k in lanes}  # end of the lane's last node computed so far
    x = release.copy()  # latest cross-lane input per node, filled block by block

    def scan(which: list[int], j: int) -> None:  # these lanes' nodes of block j
        for k in which:
            i0, i1 = at[k][j], at[k][j + 1]
            if i0 < i1:
                v = lanes[k][i0:i1]
                _scan(v, x, ilag, has_pred, dur, last_end[k], start, end)
                last_end[k] = end[v[-1]]

    for j in range(bounds.size - 1):
        lo, mid, hi = e_lo[j], e_first[j], e_hi[j]
        if mid > lo:  # inputs of the block's first node, all from earlier blocks
            _max_into(x, cd[lo:mid], end[cs[lo:mid]] + cl[lo:mid])
        scan(cpu_lanes, j)
        if hi > mid:  # launches (from this block's CPU nodes or earlier ones)
            _max_into(x, cd[mid:hi], end[cs[mid:hi]] + cl[mid:hi])
        scan(gpu_lanes, j)
    return start, end


def _max_into(x: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    np.maximum.at(x, idx, vals)


SMALL = 24
"""Lane segments up to this many nodes are scanned in Python (numpy's call overhead is larger)."""


def _scan(v, x, ilag, has_pred, dur, prev_end, start, end) -> None:
    """One lane's nodes ``v`` (in order): s[j] = max(s[j-1] + d[j-1] + lag[j], x[j])."""
    if v.size <= SMALL:
        e = prev_end
        for i in v.tolist():
            s = int(x[i])
            if has_pred[i] and e > NEG:
                s = max(s, e + int(ilag[i]))
            start[i] = s
            e = s + int(dur[i])
            end[i] = e
        return
    y = x[v].copy()
    if has_pred[v[0]] and prev_end > NEG:
        y[0] = max(y[0], prev_end + ilag[v[0]])
    inc = np.zeros(v.size, np.int64)
    if v.size > 1:
        step = dur[v[:-1]] + ilag[v[1:]]
        # a node without a lane predecessor edge starts a new chain: nothing carries over
        step = np.where(has_pred[v[1:]], step, NEG)
        inc[1:] = step
    if (inc[1:] == NEG).any():
        # chains broken inside the lane: scan each piece on its own
        brk = fnp.r_(0, np.flatnonzero(inc == NEG), v.size)
        brk = np.unique(brk)
        for a, b in zip(brk[:-1], brk[1:]):
            c = np.cumsum(fnp.r_(0, inc[a + 1:b]))
            s = c + np.maximum.accumulate(y[a:b] - c)
            start[v[a:b]] = s
    else:
        c = np.cumsum(inc)
        start[v] = c + np.maximum.accumulate(y - c)
    end[v] = start[v] + dur[v]


def rebind(p: Plan, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each node's binding edge in a replayed schedule (the edge whose end + lag is latest),
    -1 where none; the same tie-break as the graph's."""
    from tracekit.graph.build import edge_priority

    binding = np.full(start.size, -1, np.int64)
    if p.src.size:
        cand = end[p.src] + p.lag
        o = np.lexsort((edge_priority(p.kind), cand, p.dst))
        last = fnp.r_(p.dst[o][1:] != p.dst[o][:-1], True)
        sel = o[last]
        ok = cand[sel] >= start[p.dst[sel]]  # it decided the start (not a released node)
        binding[p.dst[sel][ok]] = sel[ok]
    return binding


def replay_points(release: np.ndarray, src: np.ndarray, dst: np.ndarray,
                  lag: np.ndarray) -> np.ndarray:
    """The time of every node of a graph whose nodes take no time and share no lane (a job's
    graph, ``tracekit.ranks.jobgraph``): the latest of its ``release`` and, over its incoming
    edges, the source's time + the edge's lag (nodes in topological order: every edge goes
    forward). ``replay`` of that plan gives the same times; with ``dst`` sorted this is one
    compiled pass over the edges as given, without ``replay``'s lane bookkeeping and its copies
    of every edge (a job of a million collectives has millions of edges)."""
    n = release.size
    if n == 0:
        return release.copy()
    if (src >= dst).any():
        raise ValueError("replay: an edge goes backwards in the node order")
    if _core is None or (dst.size and (dst[1:] < dst[:-1]).any()):
        z = np.zeros(n, np.int64)
        t, _ = replay(Plan(start=release, dur=z, lane=z, lane_is_cpu=np.array([True]),
                           src=src, dst=dst, kind=np.full(src.size, int(EdgeKind.FIX), np.int8),
                           lag=lag))
        return t
    i64 = np.int64
    counts = np.bincount(dst, minlength=n)
    start = np.empty(n, i64)
    end = np.empty(n, i64)
    _core.run(np.where(counts > 0, NEG, release).astype(i64), np.zeros(n, i64),
              np.full(n, -1, i64), np.zeros(n, np.uint8), np.full(n, NEG, i64),
              fnp.r_(0, np.cumsum(counts)).astype(i64), np.ascontiguousarray(src, i64),
              np.ascontiguousarray(lag, i64), start, end)
    return start
