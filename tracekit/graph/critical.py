"""Critical path of each step, as time segments, and what they add up to.

A step's window runs from the previous step's *completion* (its first step: its own CPU start)
to its own completion: the latest end among the nodes that belong to it (its CPU calls and end
marker, and the GPU activities it launched on each device's main stream, the one with the most
activity time; never earlier than the previous step's completion). Consecutive windows tile the trace, and a window's
length is the step's period, the figure a training loop's step time measures.

The critical path of a step is walked back from the node that completes it along *binding*
edges (the dependency that decided each node's start, ``tracekit.graph.model``) until it
reaches the window's start. It is HTA's longest path: with the graph's lags equal to the
observed gaps on binding edges, the binding chain is the longest path to the sink. Its
segments tile the window without gaps or overlap: a node's own time (a GPU activity, a call),
then the lag of the edge into it (host time between calls, launch latency, an idle stream),
cut where the next segment begins. So the breakdown of a step sums exactly to its length.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import _objarrays as objarrays
from tracekit.graph.model import (  # noqa: F401 (completes, main_lanes: named here as always)
    BOUNDS, EDGE_CATEGORY, EDGE_NAMES, UNEXPLAINED as UNEXPLAINED_CATEGORY, EdgeKind, Graph,
    NodeKind, bound_class, completes, main_lanes,
)
from tracekit.graph.replay import _core
from tracekit.frames import column, frame

SEGMENT_COLUMNS = ["step", "start", "end", "dur", "lane", "lane_type", "device", "stream", "pid",
                   "tid", "name", "category", "what", "node", "phase"]


def step_windows(g: Graph, start: np.ndarray | None = None,
                 end: np.ndarray | None = None) -> pd.DataFrame:
    """``step, start, end, sink`` per step, from node times ``start/end`` (default: observed,
    computed once per graph: explain, the overhead model and the replays ask for them; do not
    modify the frame).

    A graph without steps has one window, step -1, over the whole trace."""
    if start is None and end is None:
        got = g.__dict__.get("_observed_windows")
        if got is None:
            got = g.__dict__["_observed_windows"] = _step_windows(g, g.start, g.end)
        return got
    return _step_windows(g, g.start if start is None else start, g.end if end is None else end)


def _in_sorted(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``np.isin(values, table)`` for a sorted ``table`` (a binary search per value: ``np.isin``
    costs ~30 us a call on a few values)."""
    if not table.size:
        return np.zeros(values.shape, bool)
    k = np.minimum(np.searchsorted(table, values), table.size - 1)
    return table[k] == values


def _step_windows(g: Graph, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    if g.n == 0:
        return pd.DataFrame({"step": [], "start": [], "end": [], "sink": []}, dtype=np.int64)
    steps = column(g.steps, "step", np.int64)
    if not steps.size:
        sink = int(np.argmax(end))
        return pd.DataFrame({"step": [-1], "start": [int(start.min())], "end": [int(end[sink])],
                             "sink": [sink]})
    ids = np.flatnonzero(_in_sorted(g.step, np.sort(steps)) & g.completing)
    # per step, its completing node that ends last (the highest id among those)
    o = np.lexsort((ids, end[ids], g.step[ids]))
    by_step = g.step[ids][o]
    last = fnp.r_(by_step[1:] != by_step[:-1], True) if o.size else np.zeros(0, bool)
    b_step, b_end, b_id = by_step[last], end[ids][o][last], ids[o][last]
    at = np.minimum(np.searchsorted(b_step, steps), max(b_step.size - 1, 0))
    ok = b_step[at] == steps if b_step.size else np.zeros(steps.size, bool)
    steps = steps[ok]
    comp = b_end[at[ok]].astype(np.int64)
    sink = b_id[at[ok]].astype(np.int64)
    # a step cannot complete before the one before it (work it left running ends it)
    late = comp < np.maximum.accumulate(comp)
    if late.any():
        run = np.maximum.accumulate(np.where(late, -1, np.arange(comp.size)))
        comp, sink = comp[run], sink[run]
    if not steps.size:
        return pd.DataFrame({"step": [], "start": [], "end": [], "sink": []}, dtype=np.int64)
    # the first step's start node (its row of g.steps, one per step)
    at_first = np.flatnonzero(column(g.steps, "step", np.int64) == steps[0])[0]
    first = int(column(g.steps, "start_node", np.int64)[at_first])
    begin = fnp.r_(start[first], comp[:-1]).astype(np.int64)
    # one int64 block (``frame``: the same table as pandas makes of a 2-D block, without its
    # checks; explain asks for a rank's windows four to six times)
    return frame({"step": steps.astype(np.int64), "start": begin, "end": comp, "sink": sink},
                 copy=False)


OWN, RELEASED, UNEXPLAINED = -1, -2, -3
"""A segment's ``edge`` when it is not an edge's lag: a node's own time; time before a node
nothing precedes; time before a node beyond its binding edge's modelled lag (unexplained)."""


def walk(g: Graph, sink: int, t_from: int, *, start: np.ndarray | None = None,
         end: np.ndarray | None = None, binding: np.ndarray | None = None,
         src: np.ndarray | None = None, lag: np.ndarray | None = None) -> list[tuple]:
    """Segments ``(start, end, node, edge)`` of the path into ``sink`` back to ``t_from``,
    latest first; ``edge`` is ``OWN``, ``RELEASED``, ``UNEXPLAINED`` or the edge whose lag it
    is. ``start/end/binding/src/lag`` default to the observed schedule and the graph's edges (a
    replay passes its own)."""
    w = _Walker(g, start, end, binding, src, lag)
    return w.walk(int(sink), w.end[int(sink)], int(t_from))


class _Walker:
    """The schedule as Python lists, converted once for every walk over it."""

    def __init__(self, g: Graph, start, end, binding, src, lag=None) -> None:
        self.start = (g.start if start is None else start).tolist()
        self.end = (g.end if end is None else end).tolist()
        self.binding = (g.binding if binding is None else binding).tolist()
        self.src = (g.src if src is None else src).tolist()
        self.lag = (g.lag if lag is None else lag).tolist()

    def walk(self, v: int, t: int, t_from: int) -> list[tuple]:
        """The walk from node ``v`` at time ``t`` (``end[v]`` for a sink; ``_walks`` hands
        over walks it began at the loop's top)."""
        start, end_l, binding_l, src, lag = self.start, self.end, self.binding, self.src, self.lag
        out = []
        while t > t_from:
            s = max(start[v], t_from)
            if t > s:
                out.append((s, t, v, -1))
            t = min(t, s)
            if t <= t_from:
                break
            e = binding_l[v]
            if e < 0:  # nothing precedes it: the rest of the window is unexplained
                out.append((t_from, t, v, RELEASED))
                break
            u = src[e]
            if end_l[u] < t:
                lo = max(end_l[u], t_from)
                ready = end_l[u] + max(lag[e], 0)
                if ready < t:  # beyond the modelled lag: unexplained
                    mid = max(ready, lo)
                    out.append((mid, t, v, UNEXPLAINED))
                    t = mid
                if lo < t:
                    out.append((lo, t, v, e))
                t = lo
            v = u
            t = min(t, end_l[v])
        return out


_LOCKSTEP_MIN = 16
"""``_walks`` advances the walks together, one node per numpy pass, while at least this many
are still going; the last few (a long step, or a trace without steps: one walk) finish in
``_Walker.walk``'s Python loop, which is faster for a handful."""


def _walks(start: np.ndarray, end: np.ndarray, binding: np.ndarray, src: np.ndarray,
           lag: np.ndarray, sinks: np.ndarray, t_from: np.ndarray,
           python=None) -> tuple[np.ndarray, ...]:
    """``walk`` from every ``sinks[i]`` back to ``t_from[i]`` at once: the segments as arrays
    ``(walk, start, end, node, edge)``, walk by walk in the order given, each latest first
    (exactly ``walk``'s segments, concatenated). The walks advance together (the same steps
    as ``walk``'s loop, one node per pass for every walk still going); ``python``: a function
    returning the ``_Walker`` that finishes the last few (None: all in numpy). Where the
    compiled ``_replaycore`` is built, every walk runs in its loop there (the same segments).
    """
    if _core is not None:
        i64 = np.int64
        try:
            cols = _core.walks(*(np.ascontiguousarray(a, i64)
                                 for a in (start, end, binding, src, lag, sinks, t_from)))
        except ValueError:  # an edge backwards: walked below, as where it is not built
            pass
        else:
            return tuple(np.frombuffer(c, i64) for c in cols)
    n = sinks.size
    v = sinks.astype(np.int64)
    t = end[v]
    tf = t_from.astype(np.int64)
    live = np.flatnonzero(t > tf)
    parts: list[tuple] = []  # (walk, pass, sub, start, end, node, edge) per emitted group
    k = 0
    while live.size >= _LOCKSTEP_MIN or (python is None and live.size):
        vi, ti, fi = v[live], t[live], tf[live]
        s = np.maximum(start[vi], fi)
        own = ti > s
        if own.any():
            parts.append((live[own], k, 0, s[own], ti[own], vi[own], -1))
        ti = np.minimum(ti, s)
        go = ti > fi
        e = binding[vi]
        none = go & (e < 0)  # nothing precedes it: the rest of the window is unexplained
        if none.any():
            parts.append((live[none], k, 1, fi[none], ti[none], vi[none], RELEASED))
        go &= e >= 0
        live, vi, ti, fi, e = live[go], vi[go], ti[go], fi[go], e[go]
        u = src[e]
        eu = end[u]
        lagged = eu < ti
        if lagged.any():
            lo = np.maximum(eu, fi)
            ready = eu + np.maximum(lag[e], 0)
            mid = np.maximum(ready, lo)
            un = lagged & (ready < ti)
            if un.any():
                parts.append((live[un], k, 1, mid[un], ti[un], vi[un], UNEXPLAINED))
            ti = np.where(un, mid, ti)
            ok = lagged & (lo < ti)
            if ok.any():
                parts.append((live[ok], k, 2, lo[ok], ti[ok], vi[ok], e[ok]))
            ti = np.where(lagged, lo, ti)
        ti = np.minimum(ti, eu)
        v[live], t[live] = u, ti
        live = live[ti > fi]
        k += 1
    walker = python() if live.size else None
    for i in live.tolist():  # the last few, in Python
        segs = walker.walk(int(v[i]), int(t[i]), int(tf[i]))
        if segs:
            a = np.array(segs, dtype=np.int64).reshape(-1, 4)
            parts.append((np.full(len(segs), i), k + np.arange(len(segs)), 0,
                          a[:, 0], a[:, 1], a[:, 2], a[:, 3]))
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z, z, z
    sizes = [p[0].size for p in parts]
    col = [np.concatenate([np.broadcast_to(np.asarray(p[j], np.int64), (m,))
                           for p, m in zip(parts, sizes)]) for j in range(7)]
    o = np.lexsort((col[2], col[1], col[0]))
    return tuple(c[o] for c in (col[0], col[3], col[4], col[5], col[6]))


def _segments(g: Graph, step, s, e, v, edge, edge_kind) -> pd.DataFrame:
    """Segments given as arrays (step, start, end, node, edge: ``OWN``, ``RELEASED``,
    ``UNEXPLAINED`` or the edge whose lag it is) as a ``SEGMENT_COLUMNS`` table, earliest first;
    ``edge_kind``: the kinds of the edges they used (default: the graph's)."""
    if not s.size:
        return pd.DataFrame({c: [] for c in SEGMENT_COLUMNS})
    own = edge == OWN
    cat = objarrays.where(own, g.category[v], UNEXPLAINED_CATEGORY)
    kinds = g.edge_kind if edge_kind is None else edge_kind
    ek = np.where(edge >= 0, kinds[np.maximum(edge, 0)], -1) if kinds.size else \
        np.full(edge.size, -1)
    for k in EdgeKind:
        cat[ek == int(k)] = EDGE_CATEGORY[k]
    what = objarrays.where(own, np.array(["activity", "call", "marker", "thread"],
                                         dtype=object)[g.kind[v]], "unexplained before")
    for k in EdgeKind:
        what[ek == int(k)] = _EDGE_WHAT[k]
    # an edge's time is drawn on the lane of the node it leads into
    lanes = g.lanes
    ln = g.lane[v]
    return frame({
        "step": step, "start": s, "end": e, "dur": e - s,
        "lane": ln.astype(np.int64), "lane_type": column(lanes, "type", object)[ln],
        "device": column(lanes, "device", np.int64)[ln],
        "stream": column(lanes, "stream", np.int64)[ln],
        "pid": column(lanes, "pid", np.int64)[ln], "tid": column(lanes, "tid", np.int64)[ln],
        "name": g.name[v], "category": cat, "what": what, "node": v, "phase": g.phase[v],
    }, copy=False)  # in SEGMENT_COLUMNS' order (naming them again costs pandas a reindex)


_EDGE_WHAT = {
    EdgeKind.PROGRAM: "host time before",
    EdgeKind.HANDOFF: "host time in another thread before",
    EdgeKind.LAUNCH: "launch latency before",
    EdgeKind.STREAM: "stream gap before",
    EdgeKind.WAIT_RECORDED: "cross-stream wait before",
    EdgeKind.WAIT_INFERRED: "cross-stream wait (inferred) before",
    EdgeKind.HOST_WAIT: "wake-up after the GPU, before",
    EdgeKind.QUEUE: "wake-up after a full launch queue, before",
    EdgeKind.FIX: "what-if dependency before",
    EdgeKind.ENGINE: "copy engine busy before",
}


def step_paths(g: Graph, *, start=None, end=None, binding=None, src=None, edge_kind=None,
               lag=None, windows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The critical path of every step as one segments table (earliest first per step); a
    replay passes its times, binding edges and edges (``src``, ``edge_kind``, ``lag``)."""
    win = step_windows(g, start, end) if windows is None else windows
    start = g.start if start is None else start
    end = g.end if end is None else end
    binding = g.binding if binding is None else binding
    src = g.src if src is None else src
    lag = g.lag if lag is None else lag
    sinks = column(win, "sink", np.int64)
    t_from = column(win, "start", np.int64)
    i, s, e, v, edge = _walks(start, end, binding, src, lag, sinks[::-1], t_from[::-1],
                              lambda: _Walker(g, start, end, binding, src, lag))
    # latest step first, each latest first: reversed once, earliest first
    step = column(win, "step", np.int64)[::-1][i]
    r = slice(None, None, -1)
    return _segments(g, step[r], s[r], e[r], v[r], edge[r], edge_kind)


def breakdown(segs: pd.DataFrame) -> dict[str, int]:
    """Time per category (ns), largest first."""
    if segs.empty:
        return {}
    s = segs.groupby("category")["dur"].sum().sort_values(ascending=False, kind="stable")
    return {str(k): int(v) for k, v in s.items()}


def bound_of(bd: dict[str, int], total: int) -> tuple[str | None, float | None]:
    """The class (``BOUNDS``) with the largest share of ``total``, and that share."""
    if total <= 0:
        return None, None
    cls = {b: 0 for b in BOUNDS}
    for c, ns in bd.items():
        b = bound_class(c)
        if b is not None:
            cls[b] += ns
    best = max(BOUNDS, key=lambda b: (cls[b], -BOUNDS.index(b)))
    if cls[best] <= 0:
        return None, None
    return best, cls[best] / total


__all__ = ["SEGMENT_COLUMNS", "breakdown", "bound_of", "step_paths", "step_windows", "walk",
           "NodeKind", "EDGE_NAMES"]
