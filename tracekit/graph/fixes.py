"""The four fixes this project reproduces, as what-ifs on a trace's graph.

Each ``detect_*`` looks for the situation its fix addresses and returns a ``Fix``: whether it
applies, the measured evidence, and the ``Change`` (``tracekit.graph.whatif``) that replays the
trace as if the fix were in (or, for the in-place batch copy, the predicted peak reserved).

- ``fused_sparse_dist`` (TorchRec's FusedSparseDist): the embedding backward runs on a side
  stream right behind the dense backward that produces its gradient, the main stream goes on to
  the optimizer at once, and the next batch's lookup runs on that side stream behind the
  embedding backward only: the lookup and the embedding backward leave the optimizer's stream.
- ``async_delta_copy`` (FBGEMM's delta tracking without a blocking copy): the blocking calls in
  the delta-tracking region no longer wait for the GPU, and the copies they made leave the
  main stream (a device-to-device copy on a side stream, copied out by a host thread).
- ``precomputed_writeback`` (FBGEMM's sync-free writeback): the host syncs of the backward's
  dedup (``unique``/``nonzero`` ops, or the ``## writeback_legacy ##`` region) are gone.
- ``allocator_polls`` (the caching allocator's polls, issue 24): before it hands out a block
  that ``record_stream`` tied to side streams, the allocator queries the events it recorded on
  them (``cudaEventQuery``, one a stream each: ``tracekit.analyses.syncs``). The what-if takes
  those calls' host time out of the graph (their durations in the view explain replays: after
  the overhead model by default) and replays: where the host decides the step the step
  shortens, where the GPU does the replay shows it does not. The fix in words: fewer blocks
  tied to side streams (the side streams' tensors allocated up front, or a pool per stream).
- ``inplace_batch_copy`` (TorchRec): memory, not time. The batch copied under a side stream is
  reserved on that stream, which the main stream cannot reuse; allocated on the main stream
  instead, the batches in flight live in the main stream's pool: predicted peak reserved = the
  main stream's reserved bytes (memory snapshot) + batches in flight x bytes per batch copy
  (``[memory]`` events inside the batch-copy annotations; batches in flight from the batch
  indices of the copy and the forward annotations of one step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import intervals, phases
from tracekit.graph.model import COMMUNICATION, SYNC, EdgeKind, Graph, NodeKind
from tracekit.graph.whatif import Change, counted_steps, remove_syncs
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace


@dataclass(frozen=True)
class FixConfig:
    """Names the fixes look for (TorchRec's, FBGEMM's and the reference runtime's)."""

    emb_backward_phase: str = "emb_backward"
    """The phase of the fused embedding backward (table update)."""
    input_dist_phase: str = "input_dist"
    """The phase of the sparse input distribution."""
    batch_copy_phase: str = "batch_copy"
    """The phase of the batch's host -> device copy."""
    forward_phase: str = "forward"
    """The phase whose batch index tells which batch a step trains on."""
    delta_region: str = r"^## delta_tracking ##$"
    """Annotations around the delta tracking (rows updated this step streamed to the host)."""
    writeback_ops: str = (r"^aten::(_unique2|unique_dim|_unique|unique_consecutive|nonzero)$"
                          r"|^## writeback_legacy ##$")
    """Ops (or annotations) whose host syncs the precomputed writeback removes."""
    inplace_copy: str = r"^## inplace_copy_batch_to_gpu( \d+)? ##$"
    """The annotation of a batch copy that is already in place."""

    def __post_init__(self) -> None:
        for f in ("delta_region", "writeback_ops", "inplace_copy"):
            try:
                re.compile(getattr(self, f))
            except re.error as exc:
                raise ValueError(f"FixConfig.{f}: invalid regular expression: {exc}") from None
        for f in ("emb_backward_phase", "input_dist_phase", "batch_copy_phase", "forward_phase"):
            if not isinstance(getattr(self, f), str) or not getattr(self, f):
                raise ValueError(f"FixConfig.{f} must be a phase name")


@dataclass(frozen=True)
class Fix:
    """One fix's what-if on one trace."""

    id: str
    title: str
    """What the finding says."""
    fix: str
    """The fix's name."""
    applies: bool
    evidence: str
    """The measured facts that make it apply (or not)."""
    change: Change | None = None
    """The replay's change (time fixes)."""
    kind: str = "time"
    """``time`` or ``memory``."""
    memory: dict = field(default_factory=dict)
    """Memory fixes: ``peak_reserved_bytes``, ``predicted_peak_reserved_bytes`` (None when it
    cannot be predicted) and what they were computed from."""
    facts: dict = field(default_factory=dict)
    """Figures a time finding carries in JSON besides its saving (the allocator's polls: their
    count and host time per step, their call sites)."""


def _ms(ns) -> str:
    return f"{ns / 1e6:.3f} ms"


def _count(x: float) -> str:
    """A count per step: whole from 10 on, else to one decimal."""
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def _gib(b) -> str:
    return f"{b / 2**30:.3f} GiB"


def calls_inside(trace: Trace, g: Graph, pattern: str) -> np.ndarray:
    """bool per node: CPU calls inside a host event (an annotation or CPU op:
    ``phases.host_ops``) whose name matches ``pattern``, on the same thread."""
    out = np.zeros(g.n, bool)
    ev, codes, cats = phases.host_ops(trace)
    if ev.empty:
        return out
    hit = phases.name_matches(codes, cats, re.compile(pattern))
    if not hit.any():
        return out
    ts = ev["ts"].to_numpy(np.int64)[hit]
    end = ts + ev["dur"].to_numpy(np.int64)[hit]
    tid = ev["tid"].to_numpy(np.int64)[hit]
    calls = np.flatnonzero(g.kind == NodeKind.CALL)
    rows = g.row[calls]
    c_ts = trace.column("ts", np.int64)[rows]
    c_tid = trace.column("tid", np.int64)[rows]
    for t in np.unique(tid):
        u_s, u_e = intervals.union(ts[tid == t], end[tid == t])
        if not u_s.size:  # only events of 0 us on this thread: nothing is inside them
            continue
        mine = np.flatnonzero(c_tid == t)
        k = np.searchsorted(u_s, c_ts[mine], side="right") - 1
        ok = (k >= 0) & (u_e[np.maximum(k, 0)] > c_ts[mine])
        out[calls[mine[ok]]] = True
    return out


def launched_by(g: Graph, calls: np.ndarray) -> np.ndarray:
    """bool per node: GPU activities launched by the calls in the bool mask ``calls``."""
    has = g.launcher >= 0
    out = np.zeros(g.n, bool)
    out[has] = calls[g.launcher[has]]
    return out


def _runs(g: Graph, mask: np.ndarray) -> list[np.ndarray]:
    """Maximal runs of consecutive ``mask`` nodes within each lane (node ids, in order)."""
    out = []
    for ln in np.unique(g.lane[mask]):
        ids = np.flatnonzero(g.lane == ln)
        m = mask[ids]
        edges = np.diff(fnp.r_(0, m.astype(np.int8), 0))
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        out += [ids[a:b] for a, b in zip(starts, stops)]
    return out


def _lane_neighbours(g: Graph, run: np.ndarray, moved: np.ndarray) -> tuple[int, int]:
    """The nodes before and after ``run`` on its lane that are not moved (-1 if none)."""
    ids = np.flatnonzero(g.lane == g.lane[run[0]])
    i0 = np.searchsorted(ids, run[0])
    i1 = np.searchsorted(ids, run[-1])
    before = ids[:i0][~moved[ids[:i0]]]
    after = ids[i1 + 1:][~moved[ids[i1 + 1:]]]
    return (int(before[-1]) if before.size else -1, int(after[0]) if after.size else -1)


def same_top_op(trace: Trace, g: Graph, seeds: np.ndarray) -> np.ndarray:
    """bool per node: GPU activities launched inside the same top-level CPU op (autograd's
    ``evaluate_function: <Fn>Backward``, say) as one of the ``seeds`` activities."""
    out = seeds.copy()
    launch_dst = np.flatnonzero(g.launcher >= 0)  # every launched activity
    call_of = g.launcher
    seed_calls = call_of[np.flatnonzero(seeds)]
    seed_calls = seed_calls[seed_calls >= 0]
    if not seed_calls.size:
        return out
    ev = trace.events
    ops = phases.select(trace, Kind.CPU_OP, columns=("ts", "dur", "tid"))
    c_ts = trace.column("ts", np.int64)[g.row[call_of[launch_dst]]]
    c_tid = trace.column("tid", np.int64)[g.row[call_of[launch_dst]]]
    s_ts = trace.column("ts", np.int64)[g.row[seed_calls]]
    s_tid = trace.column("tid", np.int64)[g.row[seed_calls]]
    o_tid = ops["tid"].to_numpy(np.int64)
    for t in np.unique(s_tid):
        sel = o_tid == t
        u_s, u_e = intervals.union(ops["ts"].to_numpy(np.int64)[sel],
                                   ops["ts"].to_numpy(np.int64)[sel] + ops["dur"].to_numpy(np.int64)[sel])
        if not u_s.size:
            continue
        k = np.searchsorted(u_s, s_ts[s_tid == t], side="right") - 1
        tops = np.unique(k[(k >= 0) & (u_e[np.maximum(k, 0)] > s_ts[s_tid == t])])
        mine = c_tid == t
        j = np.searchsorted(u_s, c_ts[mine], side="right") - 1
        inside = (j >= 0) & fnp.isin(j, tops) & (u_e[np.maximum(j, 0)] > c_ts[mine])
        out[launch_dst[mine][inside]] = True
    return out


def launch_queue_stall_ns(g: Graph, windows) -> float:
    """The host's time blocked on a full launch queue, per counted step (ns, the mean over
    ``counted_steps(windows)``): the waits (``Graph.wait_ns``) of the launches that held Kineto's
    ``Command Buffer Full`` (an ``EdgeKind.QUEUE`` edge into them) and returned in a counted
    step's window. 0 without counted steps or such launches."""
    if not len(windows) or not g.wait_ns.size:
        return 0.0
    keep = counted_steps(windows)
    if not keep.any():
        return 0.0
    calls = np.unique(g.dst[g.edge_kind == int(EdgeKind.QUEUE)])
    if not calls.size:
        return 0.0
    lo = windows["start"].to_numpy(np.int64)[keep]
    hi = windows["end"].to_numpy(np.int64)[keep]
    at = g.start[calls]
    inside = ((at[:, None] >= lo[None, :]) & (at[:, None] < hi[None, :])).any(axis=1)
    return float(g.wait_ns[calls[inside]].sum()) / int(keep.sum())


def detect_fused(trace: Trace, g: Graph, rules: Rules, cfg: FixConfig) -> Fix:
    """Lookup and embedding backward off the optimizer's stream (module docstring). The
    embedding backward is its phase's activities and every activity launched inside the same
    top-level CPU op (autograd's ``_TBEFunctionBackward`` launches more than the table update)."""
    gpu = g.kind == NodeKind.GPU
    opt = gpu & (g.phase == rules.optimizer_phase)
    emb = gpu & (g.phase == cfg.emb_backward_phase)
    if emb.any():
        emb = same_top_op(trace, g, emb) & gpu & ~opt
    look = gpu & (g.phase == rules.lookup_phase)
    if look.any():  # the lookup's op launches more than the table lookup (its output's copy)
        look = same_top_op(trace, g, look) & gpu & ~opt & ~emb
    title = "the next lookup waits for the dense optimizer"
    fix = "FusedSparseDist: embedding backward and next lookup on a side stream"
    if not opt.any() or not (emb.any() or look.any()):
        return Fix("fused_sparse_dist", title, fix, False,
                   f"no GPU activity in phase {rules.optimizer_phase!r} or no lookup/embedding "
                   "backward to move")
    opt_lanes = np.unique(g.lane[opt])
    move = (emb | look) & fnp.isin(g.lane, opt_lanes)
    wait = fnp.isin(g.edge_kind, [int(EdgeKind.WAIT_RECORDED), int(EdgeKind.WAIT_INFERRED)])
    waits_on_opt = wait & opt[g.src] & look[g.dst]
    if not move.any() and not waits_on_opt.any():
        return Fix("fused_sparse_dist", title, fix, False,
                   "the lookup and the embedding backward already run on other streams than the "
                   "optimizer and do not wait for it")
    add_s, add_d = [], []
    emb_runs = _runs(g, emb & move)
    for run in emb_runs:  # the gradient it needs: the node before it on its old stream
        before, _ = _lane_neighbours(g, run, move)
        if before >= 0:
            add_s.append(before)
            add_d.append(run[0])
    emb_ids = np.flatnonzero(emb)
    for run in _runs(g, look & move):
        # tables updated: the last embedding-backward activity before it (batch i for i+1)
        b = g.batch[run[0]]
        prev = emb_ids[(emb_ids < run[0]) & ((g.batch[emb_ids] == b - 1) if b >= 0 else True)]
        if prev.size:
            add_s.append(int(prev[-1]))
            add_d.append(int(run[0]))
        _, after = _lane_neighbours(g, run, move)
        if after >= 0:  # what consumed the lookup on its old stream now waits for it
            add_s.append(int(run[-1]))
            add_d.append(after)
    add_l = [0] * len(add_s)
    early, l_s, l_d, l_l, host_dur, host_lag = _lookup_issued_early(g, look & move, rules)
    add_s += l_s
    add_d += l_d
    add_l += l_l
    a_s, a_d = np.array(add_s, np.int64), np.array(add_d, np.int64)
    ok = a_s < a_d
    relaunch = (g.edge_kind == int(EdgeKind.LAUNCH)) & early[g.dst]
    change = Change(dur=host_dur, drop=waits_on_opt | relaunch, lag=host_lag,
                    add_src=a_s[ok], add_dst=a_d[ok],
                    add_lag=np.array(add_l, np.int64)[ok], move=move)
    nsteps = max(1, len(g.steps))
    e_ms = g.dur[emb & move].sum() / nsteps
    l_ms = g.dur[look & move].sum() / nsteps
    lane = g.lane_label(int(opt_lanes[0]))
    evidence = (f"per step, {_ms(e_ms)} of embedding backward and {_ms(l_ms)} of lookup run on "
                f"the optimizer's stream ({lane})" if move.any() else
                f"{int(waits_on_opt.sum())} lookup activities wait for the optimizer")
    if early.any():
        host = 0 if host_lag is None else int((host_lag - g.lag).clip(min=0).sum())
        evidence += ("; the next lookup is issued in the forward, after the optimizer: issued "
                     "before it, its launches move there"
                     + (f" with {_ms(host / nsteps)} of host time per step" if host else ""))
    return Fix("fused_sparse_dist", title, fix, True, evidence, change)


def _lookup_issued_early(g: Graph, look: np.ndarray, rules: Rules):
    """What FusedSparseDist changes on the host: it issues batch i+1's lookup right after
    batch i's backward, before its optimizer (``runtime.pipelines.fused_sparse_dist``,
    ``before_optimizer``; TorchRec's ``embedding_lookup_before_optimizer``), not inside step
    i+1's forward.

    For each run of lookup activities ``look`` (those moved to the side stream) with the
    communication activities that wait for them (the output dist's all-to-all), the *block*:
    the calls of the launching thread from the first launch of those activities to the last.
    The *optimizer's start*: the first call of that thread in the optimizer's phase after the
    backward (before any wait of the optimizer: a full launch queue, a sync).

    - GPU: the run's launches move to the optimizer's start before it (the first after the
      previous run), each keeping its offset in the block plus the launch latency.
    - Host: the block's time (its calls and the host time between them) leaves the forward and
      is spent right before the optimizer's start that follows it in the same step (standing
      for the next batch's lookup, which the fused loop issues there): the host does the same
      work per step, and where it waits in the optimizer anyway that time is hidden. A block
      holding a blocking call keeps its place.

    Returns (bool per node: the activities whose launch moves; the added edges' sources,
    destinations and lags; new node durations and edge lags, None when the host is
    unchanged)."""
    early = np.zeros(g.n, bool)
    srcs: list = []
    dsts: list = []
    lags: list = []
    dur = lag = None
    if not look.any():
        return early, srcs, dsts, lags, dur, lag
    has = g.launcher >= 0
    wait = fnp.isin(g.edge_kind, [int(EdgeKind.WAIT_RECORDED), int(EdgeKind.WAIT_INFERRED)])
    comm = (g.kind == NodeKind.GPU) & (g.category == COMMUNICATION)
    out_edges = np.flatnonzero(wait & look[g.src] & comm[g.dst])  # the output dist's waits
    program = np.flatnonzero(g.edge_kind == int(EdgeKind.PROGRAM))
    into = np.full(g.n, -1, np.int64)  # the program edge into each node
    into[g.dst[program]] = program
    in_opt = (g.kind == NodeKind.CALL) & (g.phase == rules.optimizer_phase)
    # optimizer starts: an optimizer call whose previous call on its thread is not one (a
    # point where the thread stopped and resumed in between does not start another)
    calls_all = np.flatnonzero(g.kind == NodeKind.CALL)
    calls_all = calls_all[np.argsort(g.lane[calls_all], kind="stable")]
    same = fnp.r_(False, g.lane[calls_all][1:] == g.lane[calls_all][:-1])
    prev_opt = fnp.r_(False, in_opt[calls_all][:-1]) & same
    starts = np.sort(calls_all[in_opt[calls_all] & ~prev_opt])
    starts = starts[into[starts] >= 0]
    lanes = g.lane.astype(np.int64)
    by_lane = np.argsort(lanes, kind="stable")  # node ids by lane, in id order within one
    lane_at = np.searchsorted(lanes[by_lane], np.arange(int(lanes.max()) + 2))
    last_prev = -1
    for run in _runs(g, look):
        out = np.unique(g.dst[out_edges[fnp.isin(g.src[out_edges], run)]])
        ids = fnp.r_(run, out) if out.size else run
        ids = ids[has[ids]]
        if not ids.size:
            continue
        calls = g.launcher[ids]
        thread = g.lane[calls[0]]
        ids, calls = ids[g.lane[calls] == thread], calls[g.lane[calls] == thread]
        first, last = int(calls.min()), int(calls.max())
        mine = starts[g.lane[starts] == thread]
        before = mine[(mine > last_prev) & (mine < first)]
        last_prev = last
        if before.size:
            e = into[int(before[-1])]
            off = np.maximum(g.start[calls] - g.start[first], 0)
            early[ids] = True
            srcs += [int(g.src[e])] * ids.size
            dsts += ids.tolist()
            lags += (g.lag[e] + off + g.launch_latency_ns).astype(np.int64).tolist()
        # the host: the block's time moves before the next optimizer start of its step
        nxt = mine[mine > last]
        if not nxt.size:
            continue
        on = by_lane[lane_at[thread]:lane_at[thread + 1]]
        block = on[np.searchsorted(on, first):np.searchsorted(on, last, side="right")]
        if (g.category[block] == SYNC).any() or \
                not (g.step[block] == g.step[int(nxt[0])]).all():
            continue
        dur = g.dur.copy() if dur is None else dur
        lag = g.lag.copy() if lag is None else lag
        inner = into[block[1:]]
        inner = inner[inner >= 0]
        lag[into[int(nxt[0])]] += int(dur[block].sum() + lag[inner].sum())
        dur[block] = 0
        lag[inner] = 0
    return early, srcs, dsts, lags, dur, lag


def detect_async_delta(trace: Trace, g: Graph, cfg: FixConfig, keep_ns: int) -> Fix:
    """The delta tracking's blocking copies and syncs off the critical path."""
    title = "the delta tracking blocks the host on a device-to-host copy"
    fix = "non-blocking delta copy (device-to-device into a registered buffer, copied out by a thread)"
    region = calls_inside(trace, g, cfg.delta_region)
    blocking = region & (g.category == SYNC)
    if not blocking.any():
        why = "no delta-tracking region" if not region.any() else \
            "the delta-tracking region makes no blocking call"
        return Fix("async_delta_copy", title, fix, False, why)
    ch = remove_syncs(g, np.flatnonzero(blocking), keep_ns=keep_ns)
    move = launched_by(g, region)
    wait = g.wait_ns[blocking].sum() + g.dur[blocking].sum()
    evidence = (f"{int(blocking.sum())} blocking calls in the delta-tracking region, "
                f"{_ms(wait)} of host time in them; {int(move.sum())} GPU activities they "
                "launched leave the main stream")
    return Fix("async_delta_copy", title, fix, True, evidence,
               Change(dur=ch.dur, drop=ch.drop, move=move if move.any() else None))


def detect_writeback(trace: Trace, g: Graph, cfg: FixConfig, chains: np.ndarray) -> Fix:
    """The backward's dedup syncs removed."""
    title = "the embedding backward's dedup syncs the host"
    fix = "precomputed writeback (dedup mask computed in forward, backward sync-free)"
    rx = re.compile(cfg.writeback_ops)
    calls = np.flatnonzero((g.kind == NodeKind.CALL) & (g.category == SYNC))
    hit = np.array([any(rx.search(p.strip()) for p in str(chains[c]).split(" > ") if p)
                    for c in calls], bool) if calls.size else np.zeros(0, bool)
    inside = calls_inside(trace, g, cfg.writeback_ops)
    sel = np.union1d(calls[hit], np.flatnonzero(inside & (g.category == SYNC)))
    if not sel.size:
        return Fix("precomputed_writeback", title, fix, False,
                   "no host sync under unique/nonzero or in a legacy writeback region")
    wait = g.wait_ns[sel].sum() + g.dur[sel].sum()
    evidence = f"{sel.size} host syncs under the dedup ops, {_ms(wait)} of host time in them"
    return Fix("precomputed_writeback", title, fix, True, evidence,
               remove_syncs(g, sel, keep_ns=0))


def detect_inplace(trace: Trace, g: Graph, rules: Rules, cfg: FixConfig,
                   snapshot: object | None, peak_reserved: int | None) -> Fix:
    """Batch copies under a side stream (memory)."""
    title = "the batch copied under a side stream holds memory the main stream cannot reuse"
    fix = "in-place batch copy (destination allocated on the main stream)"
    gpu = g.kind == NodeKind.GPU
    copy = gpu & (g.phase == cfg.batch_copy_phase)
    if not copy.any():
        return Fix("inplace_batch_copy", title, fix, False, "no batch copy", kind="memory")
    ann, codes, cats = phases.host_ops(trace)
    if phases.name_matches(codes, cats, re.compile(cfg.inplace_copy)).any():
        return Fix("inplace_batch_copy", title, fix, False, "the batch copy is already in place",
                   kind="memory")
    # the main stream: the one with the most GPU time
    busy = pd.Series(g.dur[gpu]).groupby(g.lane[gpu]).sum()
    main_lane = int(busy.idxmax())
    copy_lanes = np.unique(g.lane[copy])
    if (copy_lanes == main_lane).all():
        return Fix("inplace_batch_copy", title, fix, False,
                   "the batch is copied on the main stream", kind="memory")
    per_copy, depth = _batch_bytes(trace, rules, cfg, ann, codes, cats)
    side = ", ".join(g.lane_label(int(x)) for x in copy_lanes if x != main_lane)
    mem: dict = {"peak_reserved_bytes": peak_reserved, "predicted_peak_reserved_bytes": None,
                 "bytes_per_batch_copy": per_copy, "batches_in_flight": depth,
                 "main_stream_reserved_bytes": None, "reserved_off_main_bytes": None}
    evidence = f"batch copies on {side}"
    if per_copy:
        evidence += f", {_gib(per_copy)} allocated per copy"
    if snapshot is not None:
        streams = snapshot.streams
        main = streams[streams["is_main"]]
        main_res = int(main["reserved"].sum())
        hist = getattr(snapshot, "history", None)
        if hist is not None and len(hist):
            hm = hist[hist["is_main"]]
            if len(hm):
                main_res = int(hm["peak_reserved"].sum())
        off = int(snapshot.reserved_off_main)
        mem["main_stream_reserved_bytes"] = main_res
        mem["reserved_off_main_bytes"] = off
        evidence += f"; snapshot: {_gib(off)} reserved off the main stream"
        if per_copy and depth:
            mem["predicted_peak_reserved_bytes"] = int(main_res + depth * per_copy)
    if off_main_zero(snapshot):
        return Fix("inplace_batch_copy", title, fix, False,
                   evidence + " (nothing reserved off the main stream)", kind="memory",
                   memory=mem)
    return Fix("inplace_batch_copy", title, fix, True, evidence, kind="memory", memory=mem)


def off_main_zero(snapshot) -> bool:
    return snapshot is not None and int(snapshot.reserved_off_main) == 0


def _batch_bytes(trace: Trace, rules: Rules, cfg: FixConfig, ann, codes, cats):
    """Median bytes allocated inside one batch-copy annotation, and the batches in flight (the
    copy's batch index minus the forward's of the same step, plus one)."""
    idx = phases.annotation_index(trace, rules).table
    cp = idx[idx["phase"] == cfg.batch_copy_phase]
    mem = trace.memory
    if cp.empty or mem.empty:
        return None, None
    m = mem[(mem["device_type"].to_numpy() == 1) & (mem["bytes"].to_numpy() > 0)]
    mts = m["ts"].to_numpy(np.int64)
    mtid = m["tid"].to_numpy(np.int64)
    mb = m["bytes"].to_numpy(np.int64)
    per = []
    for r in cp.itertuples(index=False):  # per batch copy (a few per step)
        sel = (mts >= r.ts) & (mts <= r.end) & (mtid == r.tid)
        per.append(int(mb[sel].sum()))
    per_copy = int(np.median(per)) if per and max(per) > 0 else None
    fw = idx[idx["phase"] == cfg.forward_phase]
    depth = None
    if len(fw) and (cp["batch"] >= 0).any() and (fw["batch"] >= 0).any():
        steps = phases.profiler_steps(trace, rules)
        cs = phases.step_of(steps, cp["ts"].to_numpy(np.int64))
        fs = phases.step_of(steps, fw["ts"].to_numpy(np.int64))
        d = []
        for s in np.unique(cs[cs >= 0]):
            cb = cp["batch"].to_numpy()[cs == s]
            fb = fw["batch"].to_numpy()[fs == s]
            if cb.size and fb.size and cb.max() >= 0 and fb.min() >= 0:
                d.append(int(cb.max() - fb.min() + 1))
        depth = int(np.median(d)) if d else None
    return per_copy, depth


ALLOCATOR_POLL_SITES = 3
"""Call sites of the caching allocator's polls an ``allocator_polls`` finding names."""


def detect_allocator_polls(g: Graph, polls: np.ndarray, sites: np.ndarray,
                           traced_dur: np.ndarray, counted: np.ndarray, known: bool,
                           all_polls: np.ndarray | None = None) -> Fix:
    """The caching allocator's polls off the host (module docstring). ``polls``: bool per node,
    the allocator's poll calls (``tracekit.analyses.syncs.allocator_polls``); ``sites``: per
    node, a poll's call site (op chain > call); ``traced_dur``: the nodes' durations as traced
    (``g`` is the view explain replays, the estimated untraced one by default: the what-if
    takes out its durations); ``counted``: the steps the figures are a mean over; ``known``:
    whether the trace's ``[memory]`` events tell which polls are the allocator's;
    ``all_polls``: bool per node, every poll call (the allocator's among them)."""
    title = "the caching allocator polls side streams' events before it reuses a block"
    fix = ("fewer blocks tied to side streams by record_stream: allocate the side streams' "
           "tensors up front (on the stream that uses them, or copied in place), or give each "
           "side stream its own pool")
    fid = "allocator_polls"
    if not known:
        return Fix(fid, title, fix, False, "no [memory] events (profile_memory off): which polls "
                   "are the caching allocator's cannot be told")
    sel = polls & (g.kind == NodeKind.CALL)
    if not sel.any():
        return Fix(fid, title, fix, False, "no poll of the caching allocator (a cudaEventQuery "
                   "right before a GPU allocation)")
    mine = sel & fnp.isin(g.step, counted)
    if not mine.any():
        return Fix(fid, title, fix, False, f"{int(sel.sum())} polls of the caching allocator, "
                   "none in the counted steps")
    n = max(int(np.asarray(counted).size), 1)
    ids = np.flatnonzero(mine)
    view = g.dur[ids].astype(np.int64)
    traced = np.asarray(traced_dur, np.int64)[ids]
    t = pd.DataFrame({"site": np.asarray(sites, object)[ids], "n": 1, "ns": view,
                      "traced": traced}).groupby("site", sort=False).sum()
    t = t.sort_values(["ns", "n"], ascending=False, kind="stable").head(ALLOCATOR_POLL_SITES)
    top = [{"call_site": str(k), "per_step": float(r.n) / n, "ns_per_step": float(r.ns) / n,
            "traced_ns_per_step": float(r.traced) / n} for k, r in t.iterrows()]
    every = polls if all_polls is None else all_polls
    facts = {"polls_per_step": float((every & fnp.isin(g.step, counted)).sum()) / n,
             "allocator_polls_per_step": ids.size / n,
             "allocator_poll_ns_per_step": float(view.sum()) / n,
             "allocator_poll_traced_ns_per_step": float(traced.sum()) / n,
             "allocator_poll_sites": top}
    host = f"{_ms(facts['allocator_poll_ns_per_step'])} of host time in them per step"
    if not np.array_equal(view, traced):
        host += f" ({_ms(facts['allocator_poll_traced_ns_per_step'])} as traced)"
    evidence = (f"{_count(facts['allocator_polls_per_step'])} polls of the caching allocator per "
                f"step (of {_count(facts['polls_per_step'])} polls: cudaEventQuery on side "
                f"streams' events before it reuses a block), {host}; "
                "call sites: " +
                "; ".join(f"{x['call_site']} ({_count(x['per_step'])}/step, "
                          f"{_ms(x['ns_per_step'])})" for x in top))
    dur = g.dur.copy()
    dur[sel] = 0
    return Fix(fid, title, fix, True, evidence, Change(dur=dur, speedup=True), facts=facts)
