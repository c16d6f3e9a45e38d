"""A rank's dependency graph reduced to its collectives: what a job's graph joins across ranks.

A rank's schedule (``tracekit.graph.replay``) is a max-plus function of the times it cannot
decide alone: when each of its collective kernels ends (the kernel waits in the GPU for every
member rank to arrive, then moves the data). With the collective kernels as *cuts*, every node
``v`` of the rank starts at

    start(v) = max( R(v), max over cuts c before v of end(c) + D(c, v) )

where ``R(v)`` is its start when no cut's end reaches it (the paths from the rank's own roots
that pass no collective, and the work replayed as traced before the counted steps: the first
step is pinned, as ``tracekit.graph.whatif`` pins it) and ``D(c, v)`` the longest path from the
end of cut ``c`` to the start of ``v`` that passes no other cut (a path through another cut
``c'`` is ``end(c') + D(c', v)``, and ``end(c')`` is a variable of its own). That is exact for
the replay's model: joining these functions of every rank at their collectives
(``tracekit.ranks.jobgraph``) replays the job's graph as the ranks' graphs concatenated with an
edge from every member's arrival at a collective to every member's end of it would.

``reduce(g, cuts)`` computes the terms the job needs: for the *arrival* (start) of every cut
after the pinned step and the *completion* of every step (the latest end among the nodes that
complete it, ``tracekit.graph.critical.step_windows``), ``R`` and the ``D`` of every cut that
reaches it. ``D(c, .)`` is one replay from ``c`` alone (``c`` ends at 0, no other root, no other
cut's edges out): over the nodes up to the end of the step after ``c``'s (``REACH_STEPS``;
a collective's end reaches further only through later collectives, which have terms of their
own). A term ``(c, t)`` is dropped when a later cut ``c'`` dominates it (``D(c, c') + D(c', t) >=
D(c, t)``: the path through ``c'`` is at least as long, whatever the wait at ``c'``).

Each term also says what its path is made of: its time by class (``CLASSES``: host, GPU compute
and copies, communication, sync, idle, as the critical path counts them) and the compute phase
with the most time on it, from a walk back along the replay's binding edges
(``tracekit.graph.critical.walk``). A job's critical path is made of these terms, the waits at
the collectives and their transfers.

Times are on the rank's own clock (ns); the job shifts them by the rank's clock offset.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tracekit import _fastnp as fnp

from tracekit.graph import whatif as wi
from tracekit.graph.critical import OWN, _walks, step_windows
from tracekit.graph.model import (
    COMPUTE, EDGE_CATEGORY, EdgeKind, Graph, NodeKind, bound_class,
)
from tracekit.graph.replay import NEG, Plan, rebind, replay

REACH_STEPS = 1
"""``D(c, .)`` is replayed over the nodes up to the end of this many steps after ``c``'s."""
CLASSES = ("host", "gpu", "communication", "sync", "idle", "unexplained")
"""What a term's path time is split into: ``bound_class`` of each segment's category (idle
time is ``idle``), and ``unexplained``: time the model does not explain (a thread that resumed
with nothing in the trace that woke it: a sleep, a wait for something the trace does not show),
which the skeleton keeps (``reduce``'s ``observed``)."""
OPEN_MAX_COUNTED = 1
"""A rank with at most this many counted steps has its open cuts (launched in the pinned step,
ended after it) ended by the job: the counted step's window starts at the rank's own pinned
completion, and the kernel's traced wait for a rank that arrived in the next step would
otherwise be counted as its own work in that step (2-GPU ``multitask_h56_b22k``: 10 ms of
rank 1's 47.5 ms a step). With two or more, the first counted step absorbs the pinned step's
skew and the job step is the period after it; opened there, a 2-rank GPU-bound job's period
(``ranks_2gpu_heavy_delay``) moved 14.689 -> 15.736 ms against 14.158 measured."""
UNREACHED = NEG // 2
UNEXPLAINED_CLASS = CLASSES.index("unexplained")
"""Times below this were reached from no source."""


@dataclass(frozen=True)
class Skeleton:
    """A rank reduced to its cuts (see the module docstring); plain arrays."""

    cuts: np.ndarray
    """int64 node ids of the cuts (the collective kernels), in id order."""
    pinned: np.ndarray
    """bool per cut: in the pinned part (its arrival and end stay as replayed alone). A cut
    launched in the pinned step that ends after it (*open*) is not pinned: its arrival has its
    ``R`` term (its replayed time) alone and its end is the job's."""
    arrive: np.ndarray
    """int64 per cut: its start in the replay of the rank alone."""
    end: np.ndarray
    """int64 per cut: its end in that replay."""
    steps: np.ndarray
    """int64 step ids of the rank's step windows, in order (the first is pinned when there are
    two or more)."""
    done: np.ndarray
    """int64 per step: its completion in the replay of the rank alone."""
    pin_done: int
    """The pinned first step's completion (the start of the first counted window); the first
    window's own start when nothing is pinned."""
    t_target: np.ndarray
    """int64 per term: ``0..len(cuts)-1`` a cut's arrival, ``len(cuts) + j`` step ``j``'s
    completion."""
    t_source: np.ndarray
    """int64 per term: the cut whose end it follows (index into ``cuts``), -1 for ``R``."""
    t_lag: np.ndarray
    """int64 per term: ``D`` (ns after the cut's end), or ``R`` (a time) for source -1."""
    t_classes: np.ndarray
    """int64 (terms, ``len(CLASSES)``): the term's path time by class (zeros for ``R``)."""
    t_phase: np.ndarray
    """object per term: the compute phase with most time on its path (``""`` for none)."""

    @property
    def n_targets(self) -> int:
        return int(self.cuts.size + self.steps.size)


def _sorted_plan(p: Plan) -> tuple[np.ndarray, ...]:
    o = np.argsort(p.dst, kind="stable")
    return p.src[o], p.dst[o], p.kind[o], p.lag[o]


def _class_index() -> dict[str, int]:
    return {c: i for i, c in enumerate(CLASSES)}


def reduce(g: Graph, cuts: np.ndarray, change: wi.Change | None = None, *,
           dur: np.ndarray | None = None, windows=None, observed: bool = True) -> Skeleton:
    """The skeleton of ``g`` with ``cuts`` (node ids of its collective kernels) as the cuts;
    ``change``: a what-if applied first (``tracekit.graph.whatif.Change``); ``dur``: node
    durations to use instead (a contention-aware replay's); ``windows``: ``step_windows(g)``
    when the caller has it. ``observed``: the edges' lags are the trace's own
    (``tracekit.graph.build.observed_lags``: the model's delays and the time it does not
    explain, class ``unexplained``), so that a rank's sleep or a wait the trace does not show
    stays its own work; False: the model's lags alone (the replay explain measures)."""
    win = step_windows(g) if windows is None else windows
    pin = wi.pin_of(g, win)
    change = wi.Change() if change is None else change
    model_lag = g.lag if change.lag is None else change.lag
    if observed:
        from tracekit.graph.build import observed_lags

        # a change that sets lags of its own (the FusedSparseDist what-if moves host time) moves
        # them by as much from the trace's own: the time the model does not explain stays, as it
        # does in the unchanged skeleton it is compared with (a lag the change shortens never
        # below the shorter of the two: the trace's own lag can be under the model's)
        obs = observed_lags(g)
        if change.lag is not None:
            obs = np.maximum(obs + (change.lag - g.lag), np.minimum(obs, change.lag))
        change = replace(change, lag=obs)
    p = wi.plan(g, change, pin=pin)
    d = p.dur if dur is None else dur
    # per plan edge: its model lag (the rest of its lag is unexplained time)
    keep_e = np.ones(g.src.size, bool) if change.drop is None else ~change.drop
    nominal = fnp.r_(model_lag[keep_e], p.lag[int(keep_e.sum()):])
    if nominal.size != p.lag.size or (change.move is not None and change.move.any()):
        nominal = p.lag  # edges rebuilt by a move: no split of their time
    o = np.argsort(p.dst, kind="stable")
    nominal = nominal[o]
    src, dst, kind, lag = _sorted_plan(p)
    n = g.n
    cuts = np.unique(np.asarray(cuts, np.int64))
    lane = p.lane.astype(np.int64)
    lane_cpu = p.lane_is_cpu
    base = replay(Plan(start=g.start, dur=d, lane=lane, lane_is_cpu=lane_cpu, src=src, dst=dst,
                       kind=kind, lag=lag, pin=pin))
    s0, e0 = base
    w0 = step_windows(g, s0, e0)
    steps = w0["step"].to_numpy(np.int64)
    done = w0["end"].to_numpy(np.int64)
    pin_done = int(w0["start"].iloc[0]) if len(w0) else 0
    if pin >= 0 and len(w0):
        pin_done = int(w0["end"].iloc[0])
    # with one counted step, a cut launched in the pinned step whose replayed end lies after
    # it (a collective that waited across the pinned step's completion for a rank that arrived
    # in the next step) is open: its arrival keeps its replayed time (its ``R`` term), its end
    # is the job's variable (the last member's arrival and its transfer), not the end its
    # traced wait gave it alone (``OPEN_MAX_COUNTED``)
    inside = cuts <= pin
    opened = (inside & (e0[cuts] > pin_done) if pin >= 0 and steps.size - 1 <= OPEN_MAX_COUNTED
              else np.zeros(cuts.size, bool))
    pinned = inside & ~opened
    is_cut = np.zeros(n, bool)
    is_cut[cuts[~pinned]] = True
    is_target = is_cut.copy()  # an open cut's arrival is its R term alone
    is_target[cuts[opened]] = False
    ncut = cuts.size
    cut_of = np.full(n, -1, np.int64)
    cut_of[cuts] = np.arange(ncut)

    # completing nodes per step (their end is a completion term)
    comp = g.completing
    step_idx = {int(st): j for j, st in enumerate(steps)}
    comp_ids = np.flatnonzero(comp & fnp.isin(g.step, steps))
    comp_step = np.array([step_idx[int(x)] for x in g.step[comp_ids]], np.int64)
    # a collective kernel that completes its step: the completion follows its end (a variable
    # of the job), not its traced duration
    comp_cut = is_cut[comp_ids]
    cut_done = (cut_of[comp_ids[comp_cut]], ncut + comp_step[comp_cut])
    comp_ids, comp_step = comp_ids[~comp_cut], comp_step[~comp_cut]

    t_target: list[np.ndarray] = []
    t_source: list[np.ndarray] = []
    t_lag: list[np.ndarray] = []
    t_cls: list[np.ndarray] = []
    t_ph: list[np.ndarray] = []

    def add(targets, source, lags, cls=None, ph=None):
        m = targets.size
        if not m:
            return
        t_target.append(targets.astype(np.int64))
        t_source.append(np.full(m, source, np.int64))
        t_lag.append(lags.astype(np.int64))
        t_cls.append(np.zeros((m, len(CLASSES)), np.int64) if cls is None else cls)
        t_ph.append(np.full(m, "", dtype=object) if ph is None else ph)

    lag_cls = np.full(len(EdgeKind), 4, np.int64)
    ci = _class_index()
    for k_, cat in EDGE_CATEGORY.items():
        b = bound_class(cat)
        lag_cls[int(k_)] = ci.get(b, 4) if b else 4
    node_cls = np.full(n, 4, np.int64)
    cats, inv = np.unique(g.category.astype(str), return_inverse=True)
    for j, cat in enumerate(cats):
        b = bound_class(cat)
        node_cls[inv == j] = ci.get(b, 4) if b else 4
    is_compute = np.array([str(c).startswith(COMPUTE) for c in cats], bool)[inv]
    # R: the rank's own roots, no unpinned cut's end
    has_pred = np.zeros(n, bool)
    has_pred[dst] = True
    keep = ~is_cut[src]
    release = np.where(has_pred & (np.arange(n) > pin), NEG, g.start)
    pR = Plan(start=release, dur=d, lane=lane, lane_is_cpu=lane_cpu, src=src[keep],
              dst=dst[keep], kind=kind[keep], lag=lag[keep], pin=pin)
    nomR = nominal[keep]
    sR, eR = replay(pR)
    arr_R = sR[cuts[~pinned]]
    ok = arr_R > UNREACHED
    r_targets = [np.flatnonzero(~pinned)[ok]]
    r_lags = [arr_R[ok]]
    r_sinks = [cuts[~pinned][ok]]
    r_end = [np.zeros(int(ok.sum()), bool)]
    if comp_ids.size:
        dR = np.full(steps.size, NEG, np.int64)
        whoR = np.full(steps.size, -1, np.int64)
        o = np.lexsort((eR[comp_ids], comp_step))
        last = fnp.r_(comp_step[o][1:] != comp_step[o][:-1], True)
        dR[comp_step[o][last]] = eR[comp_ids][o][last]
        whoR[comp_step[o][last]] = comp_ids[o][last]
        ok = dR > UNREACHED
        r_targets.append(ncut + np.flatnonzero(ok))
        r_lags.append(dR[ok])
        r_sinks.append(whoR[ok])
        r_end.append(np.ones(int(ok.sum()), bool))
    rt = np.concatenate(r_targets)
    if rt.size:
        # the R paths' make-up: walked back to the pinned step's completion (the counted
        # steps' start), or to the first window's start without a pin
        cls, ph = _walk_classes(pR, sR, eR, np.concatenate(r_sinks), np.concatenate(r_end),
                                node_cls, lag_cls, is_compute, g.phase, nomR, t_from=pin_done)
        add(rt, -1, np.concatenate(r_lags), cls, ph)

    if cut_done[0].size:
        for c_i, t_i in zip(*cut_done):
            add(np.array([t_i]), int(c_i), np.zeros(1, np.int64))

    # D(c, .): one replay per unpinned cut over its reach
    wend = w0["end"].to_numpy(np.int64)
    order_by_start = np.argsort(g.start, kind="stable")
    starts_sorted = g.start[order_by_start]
    run_max = np.maximum.accumulate(order_by_start)
    for c in cuts[~pinned].tolist():
        # the reach: nodes up to the end of the REACH_STEPS-th window after c's
        wi_c = int(np.searchsorted(wend, g.start[c], side="left"))
        last_w = wi_c + REACH_STEPS
        if last_w < wend.size:
            k = int(np.searchsorted(starts_sorted, wend[last_w], side="left"))
            hi = int(run_max[k - 1]) if k > 0 else c
        else:
            hi = n - 1
        hi = max(hi, c)
        lo_e = int(np.searchsorted(dst, c, side="right"))
        hi_e = int(np.searchsorted(dst, hi, side="right"))
        es, ed, ek, el = src[lo_e:hi_e], dst[lo_e:hi_e], kind[lo_e:hi_e], lag[lo_e:hi_e]
        en = nominal[lo_e:hi_e]
        sel = (es >= c) & ~(is_cut[es] & (es != c))
        es, ed, ek, el, en = es[sel] - c, ed[sel] - c, ek[sel], el[sel], en[sel]
        m = hi - c + 1
        rel = np.full(m, NEG, np.int64)
        rel[0] = -int(d[c])
        ld = d[c:hi + 1]
        ll = lane[c:hi + 1]
        pl = Plan(start=rel, dur=ld, lane=ll, lane_is_cpu=lane_cpu, src=es, dst=ed, kind=ek,
                  lag=el)
        s, e = replay(pl)
        # targets in reach: later unpinned cuts' arrivals, completions of steps in reach
        tc = np.flatnonzero(is_target[c + 1:hi + 1]) + 1
        tc = tc[s[tc] > UNREACHED]
        targets = cut_of[tc + c]
        lags_c = s[tc]
        sinks_c = tc
        in_reach = (comp_ids >= c) & (comp_ids <= hi)
        if c <= pin:  # an open cut: the pinned step's completion keeps its replayed time
            in_reach &= comp_step > 0
        dT = np.full(steps.size, NEG, np.int64)
        who = np.full(steps.size, -1, np.int64)
        if in_reach.any():
            ids = comp_ids[in_reach] - c
            st = comp_step[in_reach]
            v = e[ids]
            o = np.lexsort((v, st))
            last = fnp.r_(st[o][1:] != st[o][:-1], True)
            dT[st[o][last]] = v[o][last]
            who[st[o][last]] = ids[o][last]
        okd = dT > UNREACHED
        targets = fnp.r_(targets, ncut + np.flatnonzero(okd))
        lags_c = fnp.r_(lags_c, dT[okd])
        cls, ph = _walk_classes(pl, s, e, fnp.r_(sinks_c, who[okd]),
                                fnp.r_(np.zeros(sinks_c.size, bool), np.ones(int(okd.sum()), bool)),
                                node_cls[c:hi + 1], lag_cls, is_compute[c:hi + 1],
                                g.phase[c:hi + 1], en)
        add(targets, int(cut_of[c]), lags_c, cls, ph)

    if t_target:
        tt, ts_, tl = np.concatenate(t_target), np.concatenate(t_source), np.concatenate(t_lag)
        tcls, tph = np.concatenate(t_cls), np.concatenate(t_ph)
    else:
        tt = ts_ = tl = np.zeros(0, np.int64)
        tcls, tph = np.zeros((0, len(CLASSES)), np.int64), np.zeros(0, dtype=object)
    keep = _undominated(tt, ts_, tl, ncut)
    return Skeleton(cuts=cuts, pinned=pinned, arrive=s0[cuts], end=e0[cuts], steps=steps,
                    done=done, pin_done=pin_done, t_target=tt[keep], t_source=ts_[keep],
                    t_lag=tl[keep], t_classes=tcls[keep], t_phase=tph[keep])


def _walk_classes(pl: Plan, s, e, sinks, at_end, node_cls, lag_cls, is_compute, phase,
                  nominal, *, t_from: int = 0):
    """Per sink (local ids): its path's time by class back to ``t_from`` (0: the source's
    end), and the compute phase with most time on it. ``nominal``: per plan edge, its model
    lag: an edge's time beyond it is ``unexplained``."""
    out = np.zeros((sinks.size, len(CLASSES)), np.int64)
    top = np.full(sinks.size, "", dtype=object)
    if not sinks.size:
        return out, top
    binding = rebind(pl, s, e)
    # a walk into an arrival stops at the node's start: walk from a zero-length stand-in, the
    # node itself with its end taken as its start
    e2 = e.copy()
    arr = ~at_end
    e2[sinks[arr]] = s[sinks[arr]]
    i, a, b, v, edge = _walks(s, e2, binding, pl.src, pl.lag, sinks.astype(np.int64),
                              np.full(sinks.size, t_from, np.int64))
    if not i.size:
        return out, top
    dur = b - a
    own = edge == OWN
    on_edge = edge >= 0
    eidx = np.maximum(edge, 0)
    cls = np.where(own, node_cls[v], np.where(on_edge, lag_cls[pl.kind[eidx].astype(np.int64)],
                                              UNEXPLAINED_CLASS))
    # an edge's time beyond its model lag: unexplained
    extra = np.where(on_edge, np.clip(dur - np.maximum(nominal[eidx], 0), 0, dur), 0)
    np.add.at(out, (i, cls), dur - extra)
    np.add.at(out, (i, np.full(i.size, UNEXPLAINED_CLASS)), extra)
    comp = own & is_compute[v]
    if comp.any():
        import pandas as pd

        t = pd.DataFrame({"i": i[comp], "ph": phase[v[comp]], "d": dur[comp]})
        best = t.groupby(["i", "ph"], sort=False)["d"].sum().reset_index()
        best = best.sort_values(["i", "d"], ascending=[True, False]).drop_duplicates("i")
        top[best["i"].to_numpy(np.int64)] = best["ph"].to_numpy(object)
    return out, top


def _undominated(target, source, lag, ncut) -> np.ndarray:
    """bool per term: not dominated by a path through a later cut (module docstring)."""
    keep = np.ones(target.size, bool)
    real = np.flatnonzero(source >= 0)
    if not real.size:
        return keep
    d = {}
    for j in real.tolist():
        d[(int(source[j]), int(target[j]))] = int(lag[j])
    by_source: dict[int, list[tuple[int, int]]] = {}
    for (c, t), v in d.items():
        by_source.setdefault(c, []).append((t, v))
    for j in real.tolist():
        c, t, v = int(source[j]), int(target[j]), int(lag[j])
        for mid, v1 in by_source.get(c, ()):
            if mid >= ncut or mid == t:
                continue
            v2 = d.get((mid, t))
            if v2 is not None and v1 + v2 >= v:
                keep[j] = False
                break
    return keep
