"""What-if: the graph replayed with a change, and the step time it predicts.

A ``Change`` scales node durations, removes edges, adds edges (kind ``fix``) and moves nodes to
a side lane of their own (a stream of their own, say). ``predict(g, change)`` replays the
changed graph twice:

- *contention-free*: every activity keeps its duration wherever it lands, as if streams that
  now overlap each had the GPU to themselves;
- *contention-aware*: compute and communication kernels that overlap kernels of other streams
  of their device more than they did in the trace share the GPU: each is lengthened by the
  overlap it gained (``CONTENTION_SHARE``: two kernels that fill the SMs progress at half speed
  while they overlap, so a pair takes as long as one after the other), and the graph is
  replayed again with those durations.

A change that moves GPU work onto a stream of its own to run beside other work
(``Change.shares_gpu``: FusedSparseDist's side stream) gains only what the SMs can give it: its
prediction is the contention-aware replay (the contention-free one is kept, ``Prediction.
free_ns``); any other change's is the contention-free replay.

The predicted step time is the mean step length (``tracekit.graph.critical.step_windows``: from
one step's completion to the next's) over the steps that count: all but the first when there
are two or more (the first holds the pipeline's fill and the profiler's warm-up). The saving is
the observed mean minus the predicted one.

Generic what-ifs a user can ask for (``parse_spec``):

- ``kernel:REGEX=N`` kernels whose name matches REGEX N times faster (``N`` or ``Nx``);
- ``phase:NAME=N`` every GPU activity of that phase N times faster;
- ``host=N`` the host N times faster (runtime calls and the host time between them);
- ``sync:REGEX`` remove the host syncs whose name or op chain matches REGEX (``sync:all``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import _objarrays as objarrays
from tracekit import intervals, patterns
from tracekit.errors import TracekitError
from tracekit.frames import column
from tracekit.graph.build import lane_positions
from tracekit.graph.critical import step_windows
from tracekit.graph import blocks as blocks_mod
from tracekit.graph.model import COMMUNICATION, EdgeKind, Graph, NodeKind, main_lanes
from tracekit.graph.replay import Plan, replay

CONTENTION_SHARE = 1.0
"""The fraction of newly gained overlap (in the contention-free replay) added to a kernel's
duration in the contention-aware estimate. Two kernels that each fill the GPU's SMs progress
at half speed while they overlap: a kernel ``M`` overlapped by ``S`` (``s`` long, ``s <= m``)
for ``s`` of the contention-free replay shares the SMs for ``2 s`` and ends ``s`` later, ``S``
too: the pair then takes ``m + s``, the GPU doing the same work as one after the other. (Half
of the overlap, this estimate's value before 2026-11-27, is the half-speed rate applied to the
contention-free overlap once, without the longer overlap it causes: it let a pair of
saturating kernels finish in ``m + s / 2``, faster than the GPU can run them.)"""


COMMUNICATION_SHARE: float | None = None
"""The collective term, tried and not used (None): a compute kernel charged this share of the
overlap it gains beside communication kernels only (the rest of its gain, beside other compute
kernels, at ``CONTENTION_SHARE``), a communication kernel nothing (its length is its wait for
the other ranks and its link). ``python -m bench.gpu_under_collectives`` measures compute
kernels under a waiting NCCL kernel 22-32 % longer than on one GPU, against the whole overlap
(share 1) the model charges them; ``python -m bench.collective_term`` sets it to judge it on the
jobs' FusedSparseDist pairs (``bench/NOTES-explain.md``: it moves the dense pairs further from
their measured savings). None: every kernel charged ``CONTENTION_SHARE`` of all it gains."""


CONTENTION_MODEL = "blocks"
"""The contention-aware replay's model: ``"blocks"``, the block-level model (``tracekit.graph.
blocks``: each kernel's blocks and waves from the trace's launch configurations, the streams'
priorities; where a trace lacks them, the overlap model below), or ``"overlap"``: every kernel
charged ``CONTENTION_SHARE`` of the overlap it gains. ``"blocks+overlap"``, tried and not used:
the block-level model charging a kernel its wait for SMs *and* the overlap it gains (their sum,
not the longer): the dense FusedSparseDist traces pay both (set 7's 1-GPU ``dense_b20k``: its main
stream's kernels 2.34 ms a step late behind the side stream's, the kernels 1.37 ms longer, against
2.08 ms the model charges), but for one kernel that waits for a holder's last wave the sum counts
the overlap its wait already holds (``tests/tracekit/test_blocks.py``); judged with
``bench.contention_model`` (``bench/NOTES-explain.md``)."""
BLOCK_MODELS = ("blocks", "blocks+overlap")
"""The values of ``CONTENTION_MODEL`` that use the block-level model."""


class WhatIfError(TracekitError):
    """A ``--what-if`` spec that cannot be read."""


@dataclass(frozen=True)
class Change:
    """A change to a graph: what a fix would do."""

    dur: np.ndarray | None = None
    """New node durations (None: unchanged)."""
    drop: np.ndarray | None = None
    """bool per edge: edges removed."""
    lag: np.ndarray | None = None
    """New edge lags (None: unchanged)."""
    add_src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    add_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    add_lag: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    move: np.ndarray | None = None
    """bool per node: moved to a side lane (one per original lane), keeping their order."""
    speedup: bool = False
    """The change only makes work faster or removes dependencies (the generic what-ifs): in
    the contention-aware replay no kernel then takes longer than in the unchanged replay (the
    overlap it gains is time other work freed by finishing sooner)."""

    @property
    def shares_gpu(self) -> bool:
        """The change moves GPU work onto a stream of its own, to run beside the work it
        leaves (``move``): its gain is overlap on the SMs, so its prediction (``Prediction.
        predicted_ns``) is the contention-aware replay's, not the contention-free one's."""
        return self.move is not None and bool(np.any(self.move))


@dataclass(frozen=True)
class Prediction:
    """Observed, replayed and predicted step times of one what-if."""

    observed_ns: float
    """Mean length of the counted steps, as traced."""
    predicted_ns: float
    """The prediction: the contention-free replay's, or the contention-aware one's for a change
    that moves GPU work beside other work (``Change.shares_gpu``)."""
    predicted_contention_ns: float
    """Contention-aware prediction."""
    steps: list
    """Per step: ``(step, observed_ns, replayed_ns, predicted_ns, predicted_contention_ns)``."""
    replayed_ns: float | None = None
    """Mean length of the counted steps in the replay of the unchanged graph (the baseline a
    saving is measured from; None: the observed one)."""
    free_ns: float | None = None
    """The contention-free replay's mean step (``predicted_ns`` but for a change that shares
    the GPU; None: not computed)."""

    @property
    def baseline_ns(self) -> float:
        return self.observed_ns if self.replayed_ns is None else self.replayed_ns

    @property
    def saving_ns(self) -> float:
        """The unchanged graph's replayed step minus the changed one's."""
        return self.baseline_ns - self.predicted_ns

    @property
    def saving_contention_ns(self) -> float:
        return self.baseline_ns - self.predicted_contention_ns

    @property
    def saving_free_ns(self) -> float | None:
        """The contention-free replay's saving."""
        return None if self.free_ns is None else self.baseline_ns - self.free_ns


def plan(g: Graph, change: Change, *, pin: int = -1) -> Plan:
    """The graph with ``change`` applied, ready to replay; nodes ``0..pin`` keep their
    observed times (``Plan.pin``)."""
    dur = g.dur if change.dur is None else change.dur
    if pin >= 0 and change.dur is not None:
        dur = fnp.r_(g.dur[:pin + 1], dur[pin + 1:])
    keep = np.ones(g.src.size, bool) if change.drop is None else ~change.drop
    lag = g.lag if change.lag is None else change.lag
    src, dst, kind, lag = g.src[keep], g.dst[keep], g.edge_kind[keep], lag[keep]
    lane = g.lane.astype(np.int64)
    lane_is_cpu = column(g.lanes, "type", object) == "cpu"
    if change.move is not None and change.move.any():
        src, dst, kind, lag, lane, lane_is_cpu = _move(g, change.move, src, dst, kind, lag,
                                                       lane, lane_is_cpu)
        src = _requeue(g, src, dst, kind, lane)
    if change.add_src.size:
        src = fnp.r_(src, change.add_src)
        dst = fnp.r_(dst, change.add_dst)
        kind = fnp.r_(kind, np.full(change.add_src.size, int(EdgeKind.FIX), np.int8))
        lag = fnp.r_(lag, change.add_lag)
    return Plan(start=g.start, dur=dur, lane=lane, lane_is_cpu=lane_is_cpu, src=src, dst=dst,
                kind=kind, lag=lag, pin=pin)


def _move(g, move, src, dst, kind, lag, lane, lane_is_cpu):
    """Moved nodes go to a new lane per original lane; in-lane edges are rebuilt: the nodes left
    behind follow each other with the lag that followed the removed run, the moved ones keep the
    lags between nodes that were consecutive and start a new run with none."""
    in_lane = fnp.isin(kind, [int(EdgeKind.PROGRAM), int(EdgeKind.STREAM)])
    touched = in_lane & (move[src] | move[dst])
    # the lag into each node from its lane predecessor, as traced
    lag_in = np.full(g.n, 0, np.int64)
    prev_in = np.full(g.n, -1, np.int64)
    lag_in[dst[in_lane]] = lag[in_lane]
    prev_in[dst[in_lane]] = src[in_lane]
    ekind_in = np.full(g.n, int(EdgeKind.STREAM), np.int8)
    ekind_in[dst[in_lane]] = kind[in_lane]
    old_lanes = np.unique(lane[move])
    new_lane = lane.copy()
    base = lane_is_cpu.size
    for i, ln in enumerate(old_lanes):
        new_lane[move & (lane == ln)] = base + i
    lane_is_cpu = fnp.r_(lane_is_cpu, lane_is_cpu[old_lanes])
    keep = ~touched
    s_add, d_add, k_add, l_add = [], [], [], []
    for ln in np.unique(new_lane[fnp.isin(lane, old_lanes)]):
        ids = np.flatnonzero(new_lane == ln)
        if ids.size < 2:
            continue
        a, b = ids[:-1], ids[1:]
        consecutive = prev_in[b] == a
        s_add.append(a)
        d_add.append(b)
        k_add.append(ekind_in[b])
        l_add.append(np.where(consecutive | ~move[b], lag_in[b], 0))
    if s_add:
        src = fnp.r_(src[keep], np.concatenate(s_add))
        dst = fnp.r_(dst[keep], np.concatenate(d_add))
        kind = fnp.r_(kind[keep], np.concatenate(k_add)).astype(np.int8)
        lag = fnp.r_(lag[keep], np.concatenate(l_add))
    else:
        src, dst, kind, lag = src[keep], dst[keep], kind[keep], lag[keep]
    return src, dst, kind, lag, new_lane, lane_is_cpu


def pin_of(g: Graph, windows) -> int:
    """The last node a replay keeps as traced: the node that completed the first step when the
    mean counts the others (``counted_steps``): the counted steps are replayed from the state
    the trace was in when they began, so the mean of their replayed lengths only ever shrinks
    when work gets faster. -1 (nothing pinned) with a single window."""
    keep = counted_steps(windows)
    if keep.size < 2:
        return -1
    return int(column(windows, "sink", np.int64)[0])


@dataclass(frozen=True)
class Schedule:
    """A replay of a graph: node times and step windows."""

    start: np.ndarray
    end: np.ndarray
    windows: object
    """``step_windows`` of the replay (pandas DataFrame)."""
    plan: Plan


def schedule(g: Graph, change: Change | None = None, *, windows=None,
             contention: bool = False) -> Schedule:
    """The model's replay of ``g`` with ``change`` (None: unchanged); ``windows``: the observed
    ``step_windows(g)`` when the caller has them (they decide what is pinned, ``pin_of``).
    ``contention``: the contention-aware replay (module docstring)."""
    obs = step_windows(g) if windows is None else windows
    pin = pin_of(g, obs)
    unchanged = change is None
    change = Change() if change is None else change
    p = plan(g, change, pin=pin)
    queue = queue_pairs(g, p.lane)
    s, e = replay_queued(g, p, queue)
    if contention and not unchanged:
        base = base_schedule(g, obs)
        dur2 = _contention_durations(g, p, s, e, base, change.speedup)
        if dur2 is not None:
            p = replace(p, dur=dur2)
            s, e = replay_queued(g, p, queue)
    return Schedule(s, e, step_windows(g, s, e), p)


def base_schedule(g: Graph, windows=None) -> Schedule:
    """``schedule(g)`` (the model's replay of the unchanged graph), computed once per graph."""
    got = g.__dict__.get("_base_schedule")
    if got is None:
        got = schedule(g, windows=windows)
        g.__dict__["_base_schedule"] = got
    return got


def predict(g: Graph, change: Change, *, windows=None) -> Prediction:
    """Replay the changed graph, contention-free and contention-aware (module docstring).
    ``windows``: ``step_windows(g)`` when the caller has it."""
    obs = step_windows(g) if windows is None else windows
    base = base_schedule(g, obs)
    w1 = schedule(g, change, windows=obs).windows
    w2 = schedule(g, change, windows=obs, contention=True).windows
    keep = counted_steps(obs)
    o = (obs["end"] - obs["start"]).to_numpy(np.int64)
    r = aligned(obs, base.windows)
    a = aligned(obs, w1)
    b = aligned(obs, w2)
    head = b if change.shares_gpu else a
    rows = [(int(st), int(x), int(y), int(z), int(q))
            for st, x, y, z, q in zip(obs["step"], o, r, head, b)]
    if not keep.any():
        return Prediction(0.0, 0.0, 0.0, rows, 0.0, 0.0)
    free, aware = float(a[keep].mean()), float(b[keep].mean())
    return Prediction(float(o[keep].mean()), aware if change.shares_gpu else free, aware, rows,
                      float(r[keep].mean()), free)


def _requeue(g: Graph, src, dst, kind, new_lane) -> np.ndarray:
    """A launch blocked on its stream's full queue waits for the activity launched ``D``
    before it on that stream (the queue's depth, as traced); after a move the stream holds
    other activities, so ``D`` back is another one (an earlier one when activities left)."""
    q = np.flatnonzero((kind == int(EdgeKind.QUEUE)) & (g.launched[dst] >= 0))
    if not q.size:
        return src
    src = src.copy()
    a = g.launched[dst[q]]
    w = src[q]
    same = g.lane[w] == g.lane[a]
    old_pos = lane_positions(g.lane.astype(np.int64))
    new_pos = lane_positions(new_lane)
    depth = old_pos[a] - old_pos[w]
    by_lane = {int(ln): np.flatnonzero(new_lane == ln) for ln in np.unique(new_lane[a])}
    for i in np.flatnonzero(same & (depth > 0)):
        ids = by_lane[int(new_lane[a[i]])]
        t = new_pos[a[i]] - depth[i]
        if t >= 0 and ids[t] < dst[q[i]]:
            src[q[i]] = ids[t]
    return src


QUEUE_ROUNDS = 50
"""At most this many replays to settle the launch queues (``replay_queued``)."""


def queue_pairs(g: Graph, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The launch queues' constraints on lanes ``lane`` (a plan's): for each GPU activity
    launched ``g.queue_depth`` or more activities after the first of its lane, (the activity
    that many before it, the call that launched it): the call cannot start before that activity
    ends. Only constraints the trace honoured are kept (a queue that held slightly more than
    the depth, or launches the trace does not show, do not make the unchanged graph move)."""
    e = np.zeros(0, np.int64)
    depth = g.queue_depth
    gpu = np.flatnonzero(g.kind == NodeKind.GPU)
    if depth <= 0 or not gpu.size or not (g.launched >= 0).any():
        return e, e
    call_of = np.full(g.n, -1, np.int64)
    calls = np.flatnonzero(g.launched >= 0)
    call_of[g.launched[calls]] = calls
    gl = lane[gpu]
    order = np.lexsort((gpu, gl))
    ids, gl = gpu[order], gl[order]
    pos = np.arange(ids.size) - np.searchsorted(gl, gl, side="left")
    k = np.flatnonzero(pos >= depth)
    a, c = ids[k - depth], call_of[ids[k]]
    ok = (c >= 0) & (a < c)
    a, c = a[ok], c[ok]
    held = g.start[c] >= g.end[a]
    return a[held], c[held]


def replay_queued(g: Graph, p: Plan, queue: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``replay`` with each stream's launch queue held to ``g.queue_depth``: a host that the
    change lets run further ahead of the GPU than the trace's blocks when a stream's queue is
    full (the launch waits for the activity ``depth`` launches earlier on that stream). The
    replay is repeated with an edge for every constraint it broke until none is (a launch
    pushed later can only push later launches later). ``queue``: ``queue_pairs(g, p.lane)``
    when the caller has it."""
    return replay_queued_plan(g, p, queue)[1:]


def replay_queued_plan(g: Graph, p: Plan, queue: tuple[np.ndarray, np.ndarray] | None = None
                       ) -> tuple[Plan, np.ndarray, np.ndarray]:
    """``(plan, start, end)``: ``replay_queued``'s schedule and the plan it last replayed
    (``p`` with a ``QUEUE`` edge for every queue constraint added)."""
    s, e = replay(p)
    a, c = queue_pairs(g, p.lane) if queue is None else queue
    if not a.size:
        return p, s, e
    added = np.zeros(a.size, bool)
    for _ in range(QUEUE_ROUNDS):
        broke = ~added & (s[c] < e[a])
        if not broke.any():
            break
        added |= broke
        n = int(broke.sum())
        p = Plan(start=p.start, dur=p.dur, lane=p.lane, lane_is_cpu=p.lane_is_cpu,
                 src=fnp.r_(p.src, a[broke]), dst=fnp.r_(p.dst, c[broke]),
                 kind=fnp.r_(p.kind, np.full(n, int(EdgeKind.QUEUE), np.int8)),
                 lag=fnp.r_(p.lag, np.zeros(n, np.int64)))
        s, e = replay(p)
    return p, s, e


def counted_steps(windows) -> np.ndarray:
    """Which steps a mean step time counts: all but the first when there are two or more."""
    keep = np.ones(len(windows), bool)
    if keep.size >= 2:
        keep[0] = False
    return keep


def aligned(obs, w) -> np.ndarray:
    """Each observed step's length in windows ``w`` (0 for a step ``w`` lacks)."""
    d = column(w, "end", np.int64) - column(w, "start", np.int64)
    at = fnp.index_of(column(w, "step", np.int64), column(obs, "step", np.int64))
    return np.where(at >= 0, d[np.maximum(at, 0)] if d.size else 0, 0).astype(np.int64)


def uses_blocks(g: Graph) -> bool:
    """Whether the contention-aware replay of ``g`` uses the block-level model
    (``CONTENTION_MODEL`` and the trace's launch configurations: ``blocks.KNOWN_SHARE`` of the
    kernel time with a shape); else the overlap model."""
    return CONTENTION_MODEL in BLOCK_MODELS and has_shapes(g)


def has_shapes(g: Graph) -> bool:
    """Whether ``g``'s trace gives the block-level model its kernels' shapes: at least
    ``blocks.KNOWN_SHARE`` of the kernel time has one (computed once per graph)."""
    got = g.__dict__.get("_has_shapes")
    if got is None:
        sh = g.shape
        kern = g.kernels
        got = False
        if sh is not None and sh.blocks.size == g.n and kern.any():
            total = float(g.dur[kern].sum())
            got = total > 0 and float(g.dur[kern & sh.known].sum()) >= blocks_mod.KNOWN_SHARE * total
        g.__dict__["_has_shapes"] = got
    return got


def _lane_devices(g: Graph, p: Plan) -> np.ndarray:
    lanes = g.lanes
    dev = np.full(p.lane_is_cpu.size, -1, np.int64)
    dev[: len(lanes)] = column(lanes, "device", np.int64)
    # a side lane inherits its device from its nodes
    moved = p.lane != g.lane
    if moved.any():
        dev[p.lane[moved]] = column(lanes, "device", np.int64)[g.lane[moved]]
    return dev


def _block_waits(g: Graph, p: Plan, start, end) -> np.ndarray | None:
    """``blocks.waits`` of a replay of plan ``p`` (the graph's kernels, its lanes' assumed
    priorities); None where the model does not run (too many streams)."""
    dev = _lane_devices(g, p)
    prio = g.__dict__.get("_stream_priorities")
    if prio is None or prio.size != p.lane_is_cpu.size:
        prio = blocks_mod.stream_priorities(g.lanes, main_lanes(g), p.lane_is_cpu.size)
        g.__dict__["_stream_priorities"] = prio
    return blocks_mod.waits(p.lane, dev, prio, g.kernels, g.shape, start, end, p.dur)


def block_waits(g: Graph, sched: "Schedule") -> np.ndarray | None:
    """The block-level model's wait for SMs (``tracekit.graph.blocks.waits``, float ns per
    node) of every kernel in a replay ``sched`` of ``g``: None where the trace gives no shapes
    (``has_shapes``) or a device holds too many streams."""
    if not has_shapes(g):
        return None
    return _block_waits(g, sched.plan, sched.start, sched.end)


def _gained_waits(g: Graph, p: Plan, start, end, base: "Schedule", kern) -> np.ndarray | None:
    """Per node, the block-level wait (``tracekit.graph.blocks``) a kernel ``kern`` gained in
    the replay (``start, end``) over the unchanged replay (``base``), carried along its stream
    (a run waits once); None where the model does not run."""
    key = blocks_mod.HONOUR_PRIORITIES
    cached = g.__dict__.get("_base_block_waits")
    if cached is None or cached[0] is not base or cached[1] != key:
        cached = (base, key, _block_waits(g, base.plan, base.start, base.end))
        g.__dict__["_base_block_waits"] = cached
    bw = cached[2]
    w = _block_waits(g, p, start, end)
    if w is None or bw is None:
        return None
    gw = np.where(kern, np.maximum(w - bw, 0.0), 0.0)
    if not gw.any():
        return np.zeros(g.n, np.int64)
    return np.round(blocks_mod.carried(gw, p.lane, g.kind == NodeKind.GPU, start, end)
                    ).astype(np.int64)


def _contention_durations(g: Graph, p: Plan, start, end, base: "Schedule | None",
                          speedup: bool) -> np.ndarray | None:
    """Kernel durations lengthened by ``CONTENTION_SHARE`` of the overlap with other streams'
    kernels that each gained in the replay (``start, end``) over the unchanged replay
    (``base``; None: the replay is the unchanged one: nothing gained) or, with the block-level
    model (``uses_blocks``), by the longer of that and the wait for SMs it gained
    (``_gained_waits``); for a ``speedup`` change no kernel ends up longer than in the
    unchanged replay. None when no kernel gained any."""
    kern = g.kernels
    if not kern.any() or base is None:
        return None
    dev = _lane_devices(g, p)
    if p.pin >= 0:
        kern = kern & (np.arange(g.n) > p.pin)
    waits = _gained_waits(g, p, start, end, base, kern) if uses_blocks(g) else None
    gained = np.zeros(g.n, np.int64)
    comm = g.category == COMMUNICATION if COMMUNICATION_SHARE is not None else None
    for d in np.unique(dev[p.lane[kern]]):
        on = kern & (dev[p.lane] == d)
        before = overlap_others(g.lane[on], base.start[on], base.end[on])
        after = overlap_others(p.lane[on], start[on], end[on])
        if comm is None:
            gained[on] = CONTENTION_SHARE * np.maximum(after - before, 0)
            continue
        # the collective term (COMMUNICATION_SHARE): beside compute kernels, beside
        # communication kernels only
        every_b, every_a = np.zeros(g.n, np.int64), np.zeros(g.n, np.int64)
        every_b[on], every_a[on] = before, after
        cmp = on & ~comm
        cb = overlap_others(g.lane[cmp], base.start[cmp], base.end[cmp])
        ca = overlap_others(p.lane[cmp], start[cmp], end[cmp])
        beside_comm = np.maximum((every_a[cmp] - ca) - (every_b[cmp] - cb), 0)
        gained[cmp] = (CONTENTION_SHARE * np.maximum(ca - cb, 0) +
                       COMMUNICATION_SHARE * beside_comm).astype(np.int64)
    if waits is not None:  # the block-level model: the longer of its wait and its overlap
        gained = gained + waits if CONTENTION_MODEL == "blocks+overlap" else \
            np.maximum(gained, waits)
    if not gained.any():
        return None
    dur = p.dur + gained.astype(np.int64)
    if speedup:
        base_dur = base.plan.dur
        dur = np.where(kern, np.minimum(dur, np.maximum(base_dur, p.dur)), dur)
    return dur


def overlap_others(lane, s, e) -> np.ndarray:
    """For each interval, how much of it other lanes' intervals cover. One sweep for the lanes
    whose own intervals do not overlap (a stream's, in stream order): there, other lanes cover
    what two or more intervals cover; a pass per lane only for the others (a trace of
    thousands of streams would cost thousands of passes)."""
    out = np.zeros(s.size, np.int64)
    if s.size == 0:
        return out
    order = np.lexsort((s, lane))
    ls, le, ll = s[order], e[order], lane[order]
    reach = pd.Series(le).groupby(ll).cummax().to_numpy(np.int64)  # per lane: ends so far
    same = ll[1:] == ll[:-1]
    overlapping = np.unique(ll[1:][same & (ls[1:] < reach[:-1])])
    # where two or more intervals are at once: depth by a sweep (ends before starts at a tie)
    t = fnp.r_(s, e)
    step = fnp.r_(np.ones(s.size, np.int64), -np.ones(e.size, np.int64))
    o = np.lexsort((step, t))
    depth = np.cumsum(step[o])
    t = t[o]
    seg = (depth[:-1] >= 2) & (t[1:] > t[:-1])
    two = intervals.union(t[:-1][seg], t[1:][seg])
    simple = ~fnp.isin(lane, overlapping)
    out[simple] = intervals.covered_in_windows(two, s[simple], e[simple])
    for ln in overlapping:
        mine = lane == ln
        if mine.all():
            continue
        u = intervals.union(s[~mine], e[~mine])
        out[mine] = intervals.covered_in_windows(u, s[mine], e[mine])
    return out


# ---- generic what-ifs ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """A parsed ``--what-if``."""

    text: str
    """As the user wrote it."""
    what: str
    """``kernel``, ``phase``, ``host`` or ``sync``."""
    pattern: str
    """The regex (kernel, sync) or phase name; empty for host."""
    factor: float
    """Times faster (1 for sync)."""

    @property
    def title(self) -> str:
        if self.what == "sync":
            return f"host syncs matching {self.pattern!r} removed"
        if self.what == "host":
            return f"host {self.factor:g}x faster"
        return f"{self.what} {self.pattern!r} {self.factor:g}x faster"


_SPEC = re.compile(r"^(?P<what>kernel|phase):(?P<pat>.+)=(?P<n>[0-9.eE+-]+)x?$"
                   r"|^host=(?P<hn>[0-9.eE+-]+)x?$|^sync:(?P<sync>.+)$")


def parse_spec(text: str) -> Spec:
    """``kernel:REGEX=N``, ``phase:NAME=N``, ``host=N`` or ``sync:REGEX`` (module docstring)."""
    m = _SPEC.match(text.strip())
    if not m:
        raise WhatIfError(f"--what-if {text!r}: expected kernel:REGEX=N, phase:NAME=N, host=N "
                          "or sync:REGEX (N: how many times faster)")
    if m.group("sync"):
        pat = m.group("sync")
        pat = ".*" if pat == "all" else pat
        _regex(pat, text)
        return Spec(text, "sync", pat, 1.0)
    n = m.group("n") or m.group("hn")
    try:
        factor = float(n)
    except ValueError:
        factor = 0.0
    if not factor >= 1 or factor == float("inf"):
        raise WhatIfError(f"--what-if {text!r}: the factor must be a finite number >= 1 (N: how "
                          "many times faster; a slower one is not modelled)")
    if m.group("hn"):
        return Spec(text, "host", "", factor)
    if m.group("what") == "kernel":
        _regex(m.group("pat"), text)
    return Spec(text, m.group("what"), m.group("pat"), factor)


def check_phases(specs: list[Spec], rules) -> None:
    """``WhatIfError`` for a ``phase:NAME=N`` whose NAME is no phase of ``rules``
    (``tracekit.phases.Rules``), naming the phases there are."""
    known = rules.phase_names
    for sp in specs:
        if sp.what == "phase" and sp.pattern not in known:
            raise WhatIfError(f"--what-if {sp.text!r}: no phase {sp.pattern!r} (phases: {', '.join(known)})")


def _regex(pat: str, text: str):
    try:
        return patterns.compile(pat)  # RE2: linear in the name, whatever the pattern
    except patterns.PatternError as exc:
        raise WhatIfError(f"--what-if {text!r}: invalid regular expression: {exc}") from None


def spec_change(g: Graph, spec: Spec, op_chain: np.ndarray | None = None) -> tuple[Change, int]:
    """The change a spec asks for, and how many nodes it touches. ``op_chain``: per node, the
    op chain of a CPU call (for ``sync:``), else empty."""
    dur = g.dur.copy()
    if spec.what in ("kernel", "phase"):
        gpu = g.kind == NodeKind.GPU
        if spec.what == "kernel":
            rx = patterns.compile(spec.pattern)
            names = g.name[gpu]
            uniq, inv = np.unique(names.astype(str), return_inverse=True)
            hit_u = np.array([rx.search(u) is not None for u in uniq], bool)
            sel = np.flatnonzero(gpu)[hit_u[inv]] if uniq.size else np.zeros(0, np.int64)
        else:
            sel = np.flatnonzero(gpu & (g.phase == spec.pattern))
        dur[sel] = np.round(dur[sel] / spec.factor).astype(np.int64)
        return Change(dur=dur, speedup=True), int(sel.size)
    if spec.what == "host":
        return _host_change(g, spec.factor)
    # sync: remove the host waits of matching blocking calls
    rx = patterns.compile(spec.pattern)
    calls = np.flatnonzero((g.kind == NodeKind.CALL) & (g.category == "sync"))
    chain = op_chain[calls] if op_chain is not None else objarrays.full(calls.size, "")
    hit = np.array([rx.search(str(g.name[c])) is not None or rx.search(str(ch)) is not None
                    for c, ch in zip(calls, chain)], bool)
    return replace(remove_syncs(g, calls[hit]), speedup=True), int(hit.sum())


def _host_change(g: Graph, factor: float) -> tuple[Change, int]:
    """Runtime calls and the host time between them (program and handoff lags) scaled; what it
    touches: the calls and the program and handoff edges with a lag (a CPU-only trace has no
    runtime call, only the host time between its step marks, which is what it scales)."""
    lagged = fnp.isin(g.edge_kind, [int(EdgeKind.PROGRAM), int(EdgeKind.HANDOFF)]) & (g.lag > 0)
    return replace(with_host(g, Change(), factor), speedup=True), \
        int((g.kind == NodeKind.CALL).sum() + lagged.sum())


def with_host(g: Graph, change: Change, factor: float) -> Change:
    """``change`` with the host ``factor`` times faster on top: runtime calls and the host time
    between them (program and handoff lags) divided by ``factor``."""
    cpu = g.kind == NodeKind.CALL
    dur = (g.dur if change.dur is None else change.dur).copy()
    dur[cpu] = np.round(dur[cpu] / factor).astype(np.int64)
    lag = (g.lag if change.lag is None else change.lag).copy()
    prog = fnp.isin(g.edge_kind, [int(EdgeKind.PROGRAM), int(EdgeKind.HANDOFF)])
    lag[prog] = np.round(lag[prog] / factor).astype(np.int64)
    return Change(dur=dur, drop=change.drop, lag=lag, add_src=change.add_src,
                  add_dst=change.add_dst, add_lag=change.add_lag, move=change.move)


def remove_syncs(g: Graph, calls: np.ndarray, *, keep_ns: int = 0) -> Change:
    """The blocking calls ``calls`` no longer wait for the GPU, and take ``keep_ns`` at most."""
    drop = (g.edge_kind == int(EdgeKind.HOST_WAIT)) & fnp.isin(g.dst, calls)
    dur = g.dur.copy()
    dur[calls] = np.minimum(dur[calls], keep_ns)
    return Change(dur=dur, drop=drop)
