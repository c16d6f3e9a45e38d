"""The job's graph: every rank's graph, reduced to its collectives, joined at the collectives.

Each rank brings its skeleton (``tracekit.analyses.skeleton``: explain's dependency graph of
the rank, the estimated untraced step by default, reduced exactly to the times of its collective
kernels, ``tracekit.graph.skeleton``). The job's graph has, per rank, a node for the *arrival*
(kernel start) and the *end* of every collective kernel and one for the completion of every
step; per collective instance matched across ranks (``tracekit.ranks.match``) a *barrier*. Its
edges:

============ ========================================= =========================================
edge         from -> to                                lag
============ ========================================= =========================================
work         end of a collective (or the rank's        the rank's longest path between them
             origin) -> an arrival or a completion     (``D``; from the origin: ``R``)
arrive       every member's arrival -> the barrier     0: the collective begins when the last
                                                       member has arrived
transfer     the barrier -> each member's end          the member's transfer: its kernel's end
                                                       less the last arrival, as traced (on the
                                                       aligned clocks, at least 0)
order        a step's completion -> the next one's     0
============ ========================================= =========================================

A collective kernel that matched no complete instance ends its own replayed duration after its
arrival; what lies in the pinned first step keeps its replayed times. The graph is replayed by
``tracekit.graph.replay`` (its nodes renumbered in a topological order): on unchanged
skeletons the times are each rank's model with the waits decided across ranks.

From the replay, per step of the job (the steps every rank has, all but the first):

- the *path across ranks*: walked back from the latest completion along binding edges; it
  crosses to another rank at a barrier (the last member to arrive decided it). Its time splits
  into (rank, class) pieces: a work edge's path time by class (``host``, ``gpu``,
  ``communication``, ``sync``, ``idle``), transfers as ``communication``. The step's *bound* is
  the (rank, class) with the most time on it.
- each rank's step split into its *own work*, its *transfers* and its *wait*: walking back from
  its own completion along its own edges only, at each collective the time from its arrival to
  the last arrival is a wait for the rank that arrived last.

The job step is the slowest rank's mean step over the counted steps (the runtime measures the
slowest rank's step; with one counted step, the largest rank's own work and transfers in it,
``own_cycle``); a what-if replays the graph with some ranks' skeletons or transfers
changed (``predict``), and its saving is measured from the unchanged graph's replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit.graph.replay import NEG, replay_points
from tracekit.ranks.compact import KernelMap, lookup

CLASSES = ("host", "gpu", "communication", "sync", "idle", "unexplained")
"""The classes of time on a path (``tracekit.graph.skeleton.CLASSES``)."""

ORIGIN, ARRIVE, END, BARRIER, DONE = range(5)
"""Node kinds."""
WORK, RELEASE, JOIN, TRANSFER, SELF, ORDER, KEPT = range(7)
"""Edge kinds: a work term from a collective's end; a work term from the rank's origin (``R``);
an arrival -> barrier; a barrier -> end (transfer); an unmatched kernel's own duration; step
order; a pinned time kept."""

UNREACHED = NEG // 2


@dataclass
class RankInput:
    """What the job's graph reads of one rank."""

    rank: int
    skeleton: dict
    """``schema.Skeleton``."""
    offset_ns: int = 0
    """Its clock minus the reference's (applied): subtracted from its times."""
    instance: dict = field(default_factory=dict)
    """Its collective kernel row -> the matched instance id (a dict, or a
    ``tracekit.ranks.compact.KernelMap``: two arrays read as one, as ``transfer`` and
    ``received`` are from ``job.rank_inputs``)."""
    transfer: dict = field(default_factory=dict)
    """Its collective kernel row -> its transfer (ns)."""
    received: dict = field(default_factory=dict)
    """Its collective kernel row -> the bytes it received (-1: unknown)."""


@dataclass(frozen=True)
class JobGraph:
    """Nodes (topological order) and edges of the job's graph."""

    kind: np.ndarray
    rank: np.ndarray
    """Per node: its rank (-1 for a barrier)."""
    item: np.ndarray
    """Per node: the cut index in its rank's skeleton (arrival, end), the instance (barrier),
    the step index (completion), -1 (origin)."""
    release: np.ndarray
    """Per node: its release time (origins 0, every other node ``NEG``)."""
    src: np.ndarray
    dst: np.ndarray
    lag: np.ndarray
    ekind: np.ndarray
    term: np.ndarray
    """Per edge: its term in the rank's skeleton (work and release edges), else -1."""
    ranks: list
    """The ``RankInput`` of each rank, in order."""
    done: dict
    """rank -> node ids of its step completions, in step order."""
    steps: dict
    """rank -> its step ids, in order."""
    pinned_first: dict
    """rank -> whether its first step is pinned (not counted)."""
    warnings: tuple = ()


def _terms(sk: dict) -> dict[str, np.ndarray]:
    t = sk["terms"]
    out = {k: np.asarray(t[k], np.int64) for k in ("target", "source", "lag", *CLASSES)}
    ph = t.get("phase")
    out["phase"] = np.asarray([""] * len(t["target"]) if ph is None or not len(ph) else ph,
                              dtype=object)
    return out


def build(inputs: list[RankInput]) -> JobGraph:
    """The job's graph of the ranks ``inputs`` (module docstring)."""
    kinds, ranks, items = [], [], []
    src, dst, lag, ek, term = [], [], [], [], []
    done_nodes: dict[int, np.ndarray] = {}
    steps: dict[int, np.ndarray] = {}
    pinned_first: dict[int, bool] = {}
    warnings: list[str] = []
    n = 0

    def nodes(kind: int, rank: int, count: int, item=None) -> np.ndarray:
        nonlocal n
        ids = np.arange(n, n + count, dtype=np.int64)
        kinds.append(np.full(count, kind, np.int8))
        ranks.append(np.full(count, rank, np.int64))
        items.append(np.arange(count, dtype=np.int64) if item is None else
                     np.asarray(item, np.int64))
        n += count
        return ids

    def edges(s, d, lg, kind, tm=None) -> None:
        s = np.asarray(s, np.int64)
        src.append(s)
        dst.append(np.asarray(d, np.int64))
        lag.append(np.asarray(lg, np.int64))
        ek.append(np.full(s.size, kind, np.int8))
        term.append(np.full(s.size, -1, np.int64) if tm is None else np.asarray(tm, np.int64))

    bar = np.full(0, -1, np.int64)  # instance -> its barrier node (-1: none yet)

    def barriers(ids: np.ndarray) -> np.ndarray:
        """The barrier nodes of instances ``ids``, made (in order of first mention) for those
        that have none yet."""
        nonlocal bar
        top = int(ids.max()) + 1 if ids.size else 0
        if top > bar.size:
            bar = fnp.r_(bar, np.full(top - bar.size, -1, np.int64))
        new = ids[bar[ids] < 0]
        if new.size:
            u, first = np.unique(new, return_index=True)
            u = u[np.argsort(first, kind="stable")]
            bar[u] = nodes(BARRIER, -1, u.size, u)
        return bar[ids]

    arrive_of: list[tuple[np.ndarray, np.ndarray]] = []  # per rank: (A ids, instance per cut)
    for ri in inputs:
        sk = ri.skeleton
        off = int(ri.offset_ns)
        kern = np.asarray(sk["kernels"], np.int64)
        k = kern.size
        pinned = np.asarray(sk["pinned"], bool)
        arrive = np.asarray(sk["arrive"], np.int64) - off
        end = np.asarray(sk["end"], np.int64) - off
        st = np.asarray(sk["steps"], np.int64)
        dn = np.asarray(sk["done"], np.int64) - off
        o = nodes(ORIGIN, ri.rank, 1, [-1])[0]
        A = nodes(ARRIVE, ri.rank, k)
        E = nodes(END, ri.rank, k)
        D = nodes(DONE, ri.rank, st.size)
        done_nodes[ri.rank] = D
        steps[ri.rank] = st
        pin = st.size >= 2
        pinned_first[ri.rank] = pin
        t = _terms(sk)
        tgt = t["target"]
        to = np.where(tgt < k, A[np.minimum(tgt, max(k - 1, 0))] if k else 0,
                      D[np.maximum(tgt - k, 0)] if st.size else 0)
        real = t["source"] >= 0
        idx = np.arange(tgt.size)
        if real.any():
            edges(E[t["source"][real]], to[real], t["lag"][real], WORK, idx[real])
        if (~real).any():
            edges(np.full(int((~real).sum()), o), to[~real], t["lag"][~real] - off, RELEASE,
                  idx[~real])
        has_in = np.zeros(k + st.size, bool)
        has_in[tgt] = True
        # pinned cuts keep their replayed times; so does the pinned first step
        pc = np.flatnonzero(pinned)
        edges(np.full(pc.size, o), A[pc], arrive[pc], KEPT)
        edges(np.full(pc.size, o), E[pc], end[pc], KEPT)
        if pin:
            edges([o], [D[0]], [int(sk["pin_done"]) - off], KEPT)
            has_in[k] = True
        # an arrival or a completion no term reaches: as replayed alone
        lost = np.flatnonzero(~has_in[:k] & ~pinned)
        if lost.size:
            edges(np.full(lost.size, o), A[lost], arrive[lost], KEPT)
        lost_d = np.flatnonzero(~has_in[k:])
        if lost_d.size:
            edges(np.full(lost_d.size, o), D[lost_d], dn[lost_d], KEPT)
        if st.size > 1:
            edges(D[:-1], D[1:], np.zeros(st.size - 1, np.int64), ORDER)
        inst = lookup(ri.instance, kern, -1).astype(np.int64, copy=False)
        arrive_of.append((A, inst))
        # unmatched, unpinned kernels: their own replayed duration
        own = np.flatnonzero((inst < 0) & ~pinned)
        edges(A[own], E[own], (end - arrive)[own], SELF)
        # matched, unpinned: the barrier's transfer
        mt = np.flatnonzero((inst >= 0) & ~pinned)
        if mt.size:
            # (a transfer scaled by a what-if is a float: truncated, as int() does)
            tr = lookup(ri.transfer, kern[mt], 0).astype(np.int64)
            edges(barriers(inst[mt]), E[mt], np.maximum(tr, 0), TRANSFER)
    for A, inst in arrive_of:
        m = np.flatnonzero(inst >= 0)
        m = m[inst[m] < bar.size]
        m = m[bar[inst[m]] >= 0]
        if m.size:
            edges(A[m], bar[inst[m]], np.zeros(m.size, np.int64), JOIN)
    del arrive_of

    def cat(xs: list, dt) -> np.ndarray:
        out = np.concatenate(xs).astype(dt, copy=False) if xs else np.zeros(0, dt)
        xs.clear()  # the pieces freed as soon as they are joined
        return out

    kind, rank, item = cat(kinds, np.int8), cat(ranks, np.int64), cat(items, np.int64)
    s, d, lg, k_, tm = (cat(src, np.int64), cat(dst, np.int64), cat(lag, np.int64),
                        cat(ek, np.int8), cat(term, np.int64))
    order, cyclic = _topological(n, s, d)
    if cyclic.size:
        warnings.append(f"the job's graph has a cycle through {cyclic.size} nodes (collectives "
                        "ordered differently on different ranks): their edges were dropped")
        bad = fnp.isin(s, cyclic) | fnp.isin(d, cyclic)
        s, d, lg, k_, tm = s[~bad], d[~bad], lg[~bad], k_[~bad], tm[~bad]
    new = np.empty(n, np.int64)
    new[order] = np.arange(order.size)
    release = np.where(kind == ORIGIN, 0, NEG).astype(np.int64)
    o = np.argsort(new[d], kind="stable")
    return JobGraph(kind=kind[order], rank=rank[order], item=item[order],
                    release=release[order], src=new[s][o], dst=new[d][o], lag=lg[o],
                    ekind=k_[o], term=tm[o], ranks=list(inputs),
                    done={r: new[v] for r, v in done_nodes.items()}, steps=steps,
                    pinned_first=pinned_first, warnings=tuple(warnings))


def _topological(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a topological order of the nodes, by levels; the nodes left on a cycle, appended at
    the end of the order)."""
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    o = np.argsort(src, kind="stable")
    s_sorted, d_by_src = src[o], dst[o]
    ptr = np.searchsorted(s_sorted, np.arange(n + 1))
    frontier = np.flatnonzero(indeg == 0)
    out = []
    seen = 0
    while frontier.size:
        out.append(frontier)
        seen += frontier.size
        lo, hi = ptr[frontier], ptr[frontier + 1]
        cnt = hi - lo
        if not cnt.sum():
            break
        idx = np.repeat(lo - fnp.r_(0, np.cumsum(cnt)[:-1]), cnt) + np.arange(cnt.sum())
        nxt = d_by_src[idx]
        np.subtract.at(indeg, nxt, 1)
        cand = np.unique(nxt)
        frontier = cand[indeg[cand] == 0]
    order = np.concatenate(out) if out else np.zeros(0, np.int64)
    if seen < n:
        rest = np.setdiff1d(np.arange(n), order)
        return fnp.r_(order, rest), rest
    return order, np.zeros(0, np.int64)


def replay_job(jg: JobGraph, lag: np.ndarray | None = None) -> np.ndarray:
    """Every node's time (nodes take no time: the work is on the edges); ``lag``: other edge
    lags (a what-if's)."""
    return replay_points(jg.release, jg.src, jg.dst, jg.lag if lag is None else lag)


def _binding(jg: JobGraph, t: np.ndarray, lag: np.ndarray) -> np.ndarray:
    """Per node: the edge that decided its time (the latest end + lag; ties: the last edge)."""
    b = np.full(t.size, -1, np.int64)
    if not jg.src.size:
        return b
    cand = t[jg.src] + lag
    o = np.lexsort((np.arange(cand.size), cand, jg.dst))
    last = fnp.r_(jg.dst[o][1:] != jg.dst[o][:-1], True)
    sel = o[last]
    ok = cand[sel] >= t[jg.dst[sel]]
    b[jg.dst[sel][ok]] = sel[ok]
    return b


@dataclass(frozen=True)
class Schedule:
    """A replay of the job's graph and what it says per step."""

    t: np.ndarray
    binding: np.ndarray
    lag: np.ndarray
    windows: pd.DataFrame
    """Per (rank, step): ``rank, step, start, end, counted``."""
    step_ns: float
    """The job step: its period over the counted steps (``_period``)."""
    slowest_rank: int | None
    """The rank with the longest mean counted step."""


def schedule(jg: JobGraph, lag: np.ndarray | None = None) -> Schedule:
    """Replay ``jg`` (with ``lag`` instead of its lags) and its step windows."""
    lag = jg.lag if lag is None else lag
    t = replay_job(jg, lag)
    w = _windows(jg, t)
    c = w[w["counted"] & w["start"].notna()]
    slowest = None
    if len(c):
        per = (c["end"] - c["start"]).groupby(c["rank"]).mean()
        slowest = int(per.idxmax())
    binding = _binding(jg, t, lag)
    step_ns = _period(jg, w)
    steps = counted_steps(jg)
    if len(steps) == 1:  # the largest own cycle (``own_cycle``), not the largest window
        sc = Schedule(t=t, binding=binding, lag=lag, windows=w, step_ns=step_ns,
                      slowest_rank=slowest)
        step_ns = own_cycle(jg, sc, steps[0], step_ns)
    return Schedule(t=t, binding=binding, lag=lag, windows=w, step_ns=step_ns,
                    slowest_rank=slowest)


def own_cycle(jg: JobGraph, sc: "Schedule", step: int, fallback: float) -> float:
    """With one counted step, the job step: the largest over the ranks of its own work and
    transfers in the step (``rank_split``: its window less its waits). Each rank's window runs
    from its own completion of the pinned step, and the ranks end the pinned step apart: a rank
    that ended it early waits in the counted step for that skew, which its window holds (the
    2-GPU ``multitask_b10k``: rank 1's window 37.26 ms, 5.39 of it waiting for rank 0, whose own
    chain of 34.57 ms bounds the job). The rank that bounds the job waits for none: its own
    cycle is the step. ``fallback`` (the largest window) where no rank has a window."""
    w = sc.windows.set_index(["rank", "step"])
    best = None
    for ri in jg.ranks:
        r = ri.rank
        if (r, step) not in w.index:
            continue
        st = w.loc[(r, step), "start"]
        if st != st:
            continue
        j = {int(x): k for k, x in enumerate(jg.steps[r].tolist())}[step]
        sp = rank_split(jg, sc, r, int(jg.done[r][j]), int(st), {})
        v = float(sp["own_ns"] + sp["transfer_ns"])
        best = v if best is None else max(best, v)
    return fallback if best is None else best


def replay_step(jg: JobGraph, lag: np.ndarray) -> float:
    """The job step (``_period``) of ``jg`` replayed with ``lag``: a what-if that changes only
    lags re-uses the job's graph, with none of ``schedule``'s path bookkeeping."""
    return _period(jg, _windows(jg, replay_job(jg, lag)))


def _windows(jg: JobGraph, t: np.ndarray) -> pd.DataFrame:
    """Per (rank, step) of a replay ``t``: ``rank, step, start, end, counted``."""
    rows = []
    for ri in jg.ranks:
        r = ri.rank
        d = jg.done[r]
        st = jg.steps[r]
        if not d.size:
            continue
        ends = t[d]
        starts = fnp.r_(ends[0], ends[:-1]) if jg.pinned_first[r] else fnp.r_(
            np.nan, ends[:-1])
        for j in range(d.size):
            counted = (j >= 1) if jg.pinned_first[r] else True
            rows.append((r, int(st[j]), starts[j], int(ends[j]), counted))
    return pd.DataFrame(rows, columns=["rank", "step", "start", "end", "counted"])


def _rank_of(jg: JobGraph) -> dict[int, RankInput]:
    return {ri.rank: ri for ri in jg.ranks}


def _term_classes(jg: JobGraph, e: int, inputs: dict[int, RankInput]) -> tuple[np.ndarray, str]:
    """The class split and top phase of the work edge ``e`` (its skeleton term's)."""
    r = int(jg.rank[jg.dst[e]])
    tm = int(jg.term[e])
    sk = inputs[r].skeleton["terms"]
    cls = np.array([sk[c][tm] for c in CLASSES], np.float64)
    ph = sk.get("phase")
    return cls, (str(ph[tm]) if ph is not None and len(ph) else "")


def _label(jg: JobGraph, v: int, names: dict) -> str:
    """A node as text: ``all_to_allv 11:2`` (a collective), ``step 11`` (a completion)."""
    k = int(jg.kind[v])
    r = int(jg.rank[v])
    if k in (ARRIVE, END):
        return names.get((r, int(jg.item[v])), f"collective {int(jg.item[v])}")
    if k == DONE:
        return f"the end of step {int(jg.steps[r][int(jg.item[v])])}"
    if k == BARRIER:
        return names.get(("i", int(jg.item[v])), f"instance {int(jg.item[v])}")
    return "the step's start"


def path(jg: JobGraph, sc: Schedule, sink: int, t_from: int, names: dict) -> list[dict]:
    """The path into ``sink`` back to ``t_from``, earliest first: one piece per edge,
    ``rank, kind (work|transfer|kept|collective), from, to, ns`` and ``classes`` (ns by class)
    and ``phase`` for work."""
    inputs = _rank_of(jg)
    out = []
    v, t = int(sink), int(sc.t[int(sink)])
    while t > t_from:
        e = int(sc.binding[v])
        if e < 0:
            break
        u = int(jg.src[e])
        lo = max(int(sc.t[u]), t_from)
        dur = t - lo
        kind = int(jg.ekind[e])
        if dur > 0:
            r = int(jg.rank[v])
            piece = {"rank": r, "from": _label(jg, u, names), "to": _label(jg, v, names),
                     "ns": int(dur)}
            if kind in (WORK, RELEASE):
                cls, ph = _term_classes(jg, e, inputs)
                full = float(cls.sum())
                scale = dur / full if full > 0 else 0.0
                piece.update(kind="work", phase=ph,
                             classes={c: int(round(x * scale)) for c, x in zip(CLASSES, cls)}
                             if full > 0 else {"host": 0, "gpu": 0, "communication": 0,
                                               "sync": 0, "idle": int(dur)})
                if full <= 0:  # a path the skeleton could not split: the rank's own work
                    piece["classes"] = {c: 0 for c in CLASSES} | {"idle": int(dur)}
            elif kind in (TRANSFER, SELF):
                piece.update(kind="transfer", phase="",
                             classes={c: 0 for c in CLASSES} | {"communication": int(dur)})
            else:
                piece.update(kind="kept", phase="", classes={c: 0 for c in CLASSES} | {
                    "idle": int(dur)})
            out.append(piece)
        t = int(sc.t[u])
        v = u
    return out[::-1]


def rank_split(jg: JobGraph, sc: Schedule, rank: int, sink: int, t_from: int,
               names: dict) -> dict:
    """Rank ``rank``'s window into ``sink`` split into its own work, transfers and waits,
    walking back along its own edges (module docstring): ``own_ns, transfer_ns, wait_ns`` and
    ``waits``: per (rank waited for, collective) the time."""
    own = transfer = wait = 0
    classes = np.zeros(len(CLASSES), np.float64)
    waits: dict[tuple[int, str], int] = {}
    inputs = _rank_of(jg)
    v, t = int(sink), int(sc.t[int(sink)])
    by_dst = {}
    # the edges into each node, for the step back from an end to its own arrival
    while t > t_from:
        e = int(sc.binding[v])
        if e < 0:
            break
        kind = int(jg.ekind[e])
        u = int(jg.src[e])
        if kind == TRANSFER:
            # the end waited at the barrier: back to this rank's own arrival
            a = _own_arrival(jg, v, by_dst)
            ta = int(sc.t[a]) if a >= 0 else int(sc.t[u])
            tb = int(sc.t[u])
            lo = max(tb, t_from)
            transfer += max(t - lo, 0)
            w_lo = max(ta, t_from)
            if tb > w_lo:
                wait += tb - w_lo
                who = int(jg.rank[jg.src[sc.binding[u]]]) if sc.binding[u] >= 0 else rank
                key = (who, _label(jg, u, names))
                waits[key] = waits.get(key, 0) + (tb - w_lo)
            v, t = (a, ta) if a >= 0 else (u, tb)
            continue
        lo = max(int(sc.t[u]), t_from)
        dur = max(t - lo, 0)
        if kind in (WORK, RELEASE):
            own += dur
            cls, _ = _term_classes(jg, e, inputs)
            full = float(cls.sum())
            if full > 0:
                classes += cls * (dur / full)
            else:
                classes[CLASSES.index("idle")] += dur
        elif kind == SELF:
            transfer += dur
        else:
            own += dur
            classes[CLASSES.index("idle")] += dur
        v, t = u, int(sc.t[u])
    rows = sorted(({"rank": k[0], "at": k[1], "ns": int(x)} for k, x in waits.items()),
                  key=lambda x: -x["ns"])
    return {"own_ns": int(own), "transfer_ns": int(transfer), "wait_ns": int(wait),
            "own_classes": {c: int(round(x)) for c, x in zip(CLASSES, classes)},
            "waits": rows}


def _own_arrival(jg: JobGraph, end_node: int, cache: dict) -> int:
    """The arrival node of the same rank and cut as ``end_node``."""
    if not cache:
        a = np.flatnonzero(jg.kind == ARRIVE)
        for x in a.tolist():
            cache[(int(jg.rank[x]), int(jg.item[x]))] = x
    return cache.get((int(jg.rank[end_node]), int(jg.item[end_node])), -1)


# ---- what the job object says -----------------------------------------------------------------

def counted_steps(jg: JobGraph) -> list[int]:
    """The step ids every rank counts (its first step pinned when it has two or more)."""
    common = None
    for ri in jg.ranks:
        st = jg.steps[ri.rank].tolist()
        if jg.pinned_first[ri.rank]:
            st = st[1:]
        common = set(st) if common is None else common & set(st)
    return sorted(common or ())


def _merge(pieces: list[dict]) -> list[dict]:
    """Consecutive pieces of one rank and kind as one."""
    out: list[dict] = []
    for p in pieces:
        last = out[-1] if out else None
        if last and last["rank"] == p["rank"] and last["kind"] == p["kind"]:
            last["to"] = p["to"]
            last["ns"] += p["ns"]
            for c in CLASSES:
                last["classes"][c] += p["classes"].get(c, 0)
            if p.get("phase") and not last.get("phase"):
                last["phase"] = p["phase"]
        else:
            out.append({**p, "classes": dict(p["classes"])})
    return out


def _bound(pieces: list[dict]) -> dict | None:
    """The (rank, class) with most time on a path, and its share."""
    tot: dict[tuple[int, str], int] = {}
    total = 0
    for p in pieces:
        total += p["ns"]
        for c, x in p["classes"].items():
            if x > 0:
                tot[(p["rank"], c)] = tot.get((p["rank"], c), 0) + x
    if not tot or total <= 0:
        return None
    (r, c), x = max(tot.items(), key=lambda kv: (kv[1], -kv[0][0]))
    return {"rank": r, "class": c, "ns": int(x), "share": x / total}


def summarise(jg: JobGraph, sc: Schedule, names: dict, *, kept_steps: int = 64) -> dict:
    """The job's critical path per counted step, its bound, and each rank's step split into
    own work, transfers and waits (means over the counted steps)."""
    steps = counted_steps(jg)
    w = sc.windows.set_index(["rank", "step"])
    per_step = []
    split_rows: dict[int, list[dict]] = {ri.rank: [] for ri in jg.ranks}
    all_pieces: list[dict] = []
    for s in steps:
        ends = {ri.rank: int(w.loc[(ri.rank, s), "end"]) for ri in jg.ranks
                if (ri.rank, s) in w.index}
        if not ends:
            continue
        sink_rank = max(ends, key=lambda r: (ends[r], -r))
        st_idx = {int(x): j for j, x in enumerate(jg.steps[sink_rank].tolist())}
        sink = int(jg.done[sink_rank][st_idx[s]])
        start = w.loc[(sink_rank, s), "start"]
        t_from = int(start) if start == start else int(sc.t[sink])
        pieces = path(jg, sc, sink, t_from, names)
        all_pieces += pieces
        merged = _merge(pieces)
        per_step.append({"step": int(s), "ns": int(ends[sink_rank] - t_from),
                         "sink_rank": int(sink_rank), "bound": _bound(pieces),
                         "path": merged})
        for ri in jg.ranks:
            r = ri.rank
            if (r, s) not in w.index:
                continue
            j = {int(x): k for k, x in enumerate(jg.steps[r].tolist())}[s]
            st_r = w.loc[(r, s), "start"]
            tf = int(st_r) if st_r == st_r else int(sc.t[jg.done[r][j]])
            sp = rank_split(jg, sc, r, int(jg.done[r][j]), tf, names)
            sp["step_ns"] = int(sc.t[jg.done[r][j]]) - tf
            split_rows[r].append(sp)
    ranks = []
    for r, rows in split_rows.items():
        if not rows:
            continue
        k = len(rows)
        waits: dict[tuple[int, str], int] = {}
        for x in rows:
            for wt in x["waits"]:
                waits[(wt["rank"], wt["at"])] = waits.get((wt["rank"], wt["at"]), 0) + wt["ns"]
        by_rank: dict[int, int] = {}
        for (who, _), ns in waits.items():
            by_rank[who] = by_rank.get(who, 0) + ns
        step_ns = sum(x["step_ns"] for x in rows) / k
        own = sum(x["own_ns"] for x in rows) / k
        wait = sum(x["wait_ns"] for x in rows) / k
        cls = {c: sum(x["own_classes"][c] for x in rows) / k for c in CLASSES}
        ranks.append({
            "rank": r, "steps": k, "step_ns": step_ns, "own_ns": own,
            "transfer_ns": sum(x["transfer_ns"] for x in rows) / k, "wait_ns": wait,
            "wait_share": wait / step_ns if step_ns > 0 else None,
            "own_classes": cls,
            "waits_for": [{"rank": who, "ns": ns / k} for who, ns in
                          sorted(by_rank.items(), key=lambda kv: -kv[1])],
            "waits_at": [{"rank": who, "at": at, "ns": ns / k} for (who, at), ns in
                         sorted(waits.items(), key=lambda kv: -kv[1])[:5]],
            "waiting": bool(wait > own),
        })
    bound = _bound(all_pieces)
    if bound is not None and per_step:
        bound["ns"] = bound["ns"] / len(per_step)
    return {"step_ns": sc.step_ns, "slowest_rank": sc.slowest_rank, "counted_steps": steps,
            "bound": bound, "steps": per_step[:kept_steps], "ranks": ranks}


# ---- what-ifs on the job's graph --------------------------------------------------------------

def _period(jg: JobGraph, windows: pd.DataFrame) -> float:
    """The job's step: the time between the last rank's completions of the first and of the
    last counted step, over the steps between (ns); with a single counted step, the slowest
    rank's step, each rank's from its own completion of the pinned step (the ranks' pinned
    completions differ: the latest of them is no start for another rank; ``schedule`` takes
    each rank's own cycle instead, ``own_cycle``). Each completion is measured the same way
    (a step completes with the GPU work it launched on each rank's main stream), so a change
    that shortens that tail shortens the period only where the next step waits for it; and the
    ranks end the pinned step at different times, which the first counted step absorbs. Over
    many steps it is the slowest rank's step, what the runtime measures."""
    steps = counted_steps(jg)
    if not steps:
        return 0.0
    w = windows.set_index(["rank", "step"])

    def latest(step: int, col: str) -> int | None:
        vals = [w.loc[(r.rank, step), col] for r in jg.ranks if (r.rank, step) in w.index]
        vals = [int(v) for v in vals if v == v]
        return max(vals) if vals else None

    last_end = latest(steps[-1], "end")
    if len(steps) >= 2:
        first_end = latest(steps[0], "end")
        if last_end is None or first_end is None:
            return 0.0
        return (last_end - first_end) / (len(steps) - 1)
    # one counted step: the slowest rank's (each from its own completion of the pinned step)
    one = w.xs(steps[0], level="step")
    one = (one["end"] - one["start"]).dropna()
    return float(one.max()) if len(one) else 0.0


def rank_period(jg: JobGraph, windows: pd.DataFrame) -> float | None:
    """The slowest rank's own period over the counted steps (ns): per rank, its completion of
    the last counted step less its completion of the first over the steps between, the
    largest; what the runtime measures (each rank's step, the slowest rank's). None with fewer
    than two counted steps. Beside ``_period`` (the last rank's completions, which may be two
    different ranks'), it is the other edge of a replay over two counted steps: a change that
    moves one rank's first counted completion and not the last's moves that rank's period
    (``whatif._row``'s ``rank_periods``)."""
    steps = counted_steps(jg)
    if len(steps) < 2:
        return None
    w = windows.set_index(["rank", "step"])
    best = None
    for ri in jg.ranks:
        a, b = (ri.rank, steps[0]), (ri.rank, steps[-1])
        if a not in w.index or b not in w.index:
            continue
        e0, e1 = w.loc[a, "end"], w.loc[b, "end"]
        if e0 != e0 or e1 != e1:
            continue
        v = (int(e1) - int(e0)) / (len(steps) - 1)
        best = v if best is None else max(best, v)
    return best


def with_skeleton(ri: RankInput, skeleton: dict) -> RankInput:
    """``ri`` with ``skeleton`` (a what-if's: the rank's graph changed and reduced again) in
    place of its own, each matched collective's transfer moved by as much as the change moved
    the kernel's own duration in the rank's replay (``end - arrive`` of the two skeletons; at
    least 0). A change that makes a collective share the GPU with work that now overlaps it
    (the contention-aware skeleton of FusedSparseDist) lengthens the kernel: its transfer, which
    the job's graph takes from the trace, is that much longer too."""
    old = ri.skeleton
    before = {int(k): int(e) - int(a) for k, a, e in zip(old["kernels"], old["arrive"], old["end"])}
    moved = {}
    for k, a, e in zip(skeleton["kernels"], skeleton["arrive"], skeleton["end"]):
        k = int(k)
        if k in ri.transfer and k in before:
            d = int(e) - int(a) - before[k]
            if d:
                moved[k] = max(int(ri.transfer[k]) + d, 0)
    transfer = (ri.transfer.replaced(moved) if isinstance(ri.transfer, KernelMap)
                else {**ri.transfer, **moved})
    return RankInput(rank=ri.rank, skeleton=skeleton, offset_ns=ri.offset_ns,
                     instance=ri.instance, transfer=transfer, received=ri.received)


def with_host_speed(ri: RankInput, factor: float) -> RankInput:
    """``ri`` with its host work ``factor`` times faster: each term of its skeleton loses that
    share of the host time on its path (``lag - host * (1 - 1 / factor)``; the path's other
    classes as they are)."""
    sk = dict(ri.skeleton)
    t = dict(sk["terms"])
    host = np.asarray(t["host"], np.float64)
    cut = np.round(host * (1.0 - 1.0 / float(factor))).astype(np.int64)
    t["lag"] = np.asarray(t["lag"], np.int64) - cut
    t["host"] = np.asarray(t["host"], np.int64) - cut
    sk["terms"] = t
    return RankInput(rank=ri.rank, skeleton=sk, offset_ns=ri.offset_ns, instance=ri.instance,
                     transfer=ri.transfer, received=ri.received)


def at_host_speed(inputs: list[RankInput], factor: float) -> list[RankInput]:
    """Every rank of ``inputs`` with its host work ``factor`` times faster (``with_host_speed``;
    ``inputs`` themselves where ``factor`` is 1)."""
    if float(factor) == 1.0:
        return list(inputs)
    return [with_host_speed(ri, factor) for ri in inputs]


def host_speed_for_step(inputs: list[RankInput], step_ns: float, *,
                        speeds: tuple[float, float] = (1.0, 4.0),
                        tolerance: float = 0.001) -> float | None:
    """The factor in ``speeds`` (``lo``, ``hi``) by which every rank's host work, made that many
    times faster (``at_host_speed``; below 1: slower), brings the job step to ``step_ns``
    (within ``tolerance`` of it, by bisection: the step never grows as the hosts get faster).
    None where even ``hi`` times faster leaves it longer (the job is bound by other than its
    hosts).

    The range says what is searched:

    - from 1 (the default: the hosts only made faster): the job's analogue of explain's
      calibration by a given untraced step (``tracekit.graph.overhead``: "the untraced step
      given sets the scale"); ``lo`` (1.0) where the job step is already at most
      ``step_ns``; the bisection halves the range itself;
    - from below 1 (either way: ``tracekit.ranks.border``'s band, a step longer than the
      model's reached with slower hosts): None also where even ``lo`` leaves it shorter; the
      bisection halves the range's ratio (as many halvings slower as faster: 1 is the first
      midpoint of ``(1 / x, x)``)."""
    def step(f: float) -> float:
        return schedule(build(at_host_speed(inputs, f))).step_ns

    lo, hi = float(speeds[0]), float(speeds[1])
    faster_only = lo >= 1.0
    if faster_only and step(lo) <= step_ns:
        return lo
    if step(hi) > step_ns * (1.0 + tolerance):
        return None
    if not faster_only and step(lo) < step_ns * (1.0 - tolerance):
        return None
    for _ in range(40):
        mid = (lo + hi) / 2.0 if faster_only else (lo * hi) ** 0.5
        got = step(mid)
        if abs(got - step_ns) <= tolerance * step_ns:
            return mid
        lo, hi = (mid, hi) if got > step_ns else (lo, mid)
    return hi if faster_only else (lo * hi) ** 0.5


def scaled_transfers(ri: RankInput, factor: dict[int, float]) -> RankInput:
    """``ri`` with the transfers of the instances in ``factor`` (instance -> factor) scaled."""
    if isinstance(ri.transfer, KernelMap):
        keys = ri.transfer.keys_
        f = np.array([factor.get(int(i), np.nan) for i in range(
            int(max(factor, default=-1)) + 1)], np.float64)
        i = lookup(ri.instance, keys, -1).astype(np.int64)
        got = np.where((i >= 0) & (i < f.size), f[np.clip(i, 0, max(f.size - 1, 0))]
                       if f.size else np.nan, np.nan)
        v = ri.transfer.values_
        tr = KernelMap(keys, np.where(np.isnan(got), v, v * got)) if np.isfinite(got).any() \
            else ri.transfer
    else:
        tr = {k: (v * factor[ri.instance[k]] if ri.instance.get(k, -1) in factor else v)
              for k, v in ri.transfer.items()}
    return RankInput(rank=ri.rank, skeleton=ri.skeleton, offset_ns=ri.offset_ns,
                     instance=ri.instance, transfer=tr, received=ri.received)


def predict(inputs: list[RankInput], changed: dict[int, RankInput]) -> tuple[Schedule, JobGraph]:
    """The job's graph with the ranks in ``changed`` replaced, replayed."""
    new = [changed.get(ri.rank, ri) for ri in inputs]
    jg = build(new)
    return schedule(jg), jg


@dataclass(frozen=True)
class Context:
    """A job's graph with what built it: what a what-if replays again."""

    inputs: list
    """``RankInput`` per rank."""
    names: dict
    """(rank, cut) -> the collective's label (``tracekit.ranks.job.cut_names``)."""
    graph: JobGraph
    schedule: Schedule
    """The unchanged graph's replay."""
