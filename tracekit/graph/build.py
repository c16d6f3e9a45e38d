"""Building the dependency graph of a trace (``tracekit.graph.model``), vectorised.

``build_graph(trace, rules)`` reads the events once with numpy: no Python loop runs per event
(loops run per lane, per step or per blocking call, of which a trace has few).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import _objarrays as objarrays
from tracekit import intervals, phases
from tracekit import steps as steps_mod
from tracekit.calls import ASYNC_COPY, BLOCKING, HOST_SYNC_EVENT, POLL
from tracekit.frames import column, frame
from tracekit.graph.blocks import kernel_shape
from tracekit.graph.model import (
    COMMUNICATION, COMPUTE, HOST, MEMCPY, SYNC, EdgeKind, Graph, NodeKind, lane_order,
)
from tracekit.phases import Rules
from tracekit.trace.model import GPU_ACTIVITY_KINDS, Kind, Trace

QUEUE_FULL = "Command Buffer Full"
"""Kineto's overhead event for a launch that blocked because the launch queue was full."""
STREAM_WAIT = re.compile(r"^(cuda|hip)StreamWaitEvent(_v\d+)?$|^cuStreamWaitEvent")
STREAM_WAIT_EVENT = "Stream Wait Event"
"""The ``cuda_sync`` event of a stream waiting on another stream's event."""


@dataclass(frozen=True)
class GraphConfig:
    """How the graph infers what the trace does not record."""

    launch_latency_ns: int | None = None
    """Nominal launch latency (launch call end -> activity start); None: the trace's own, the
    median over activities whose stream was free when they were launched."""
    gap_ns: int | None = None
    """Nominal gap between consecutive activities of a stream, and from a cross-stream wait's
    producer to its consumer; None: the trace's own (``_stream_gap``)."""
    wait_ready_ns: int = 5_000
    """An activity that starts this much later than it was ready (launched, and its stream
    free) was held by something: a cross-stream wait is looked for."""
    wait_match_ns: int = 10_000
    """The inferred wait's source is the activity of another stream of the device that ended
    latest before the held activity started, if the other streams sat idle at most this long
    in between (time they ran kernels holding the GPU does not count)."""
    infer_waits: bool | None = None
    """Infer cross-stream waits: None = where the trace does not record them: every held
    activity when it records none (no ``cuda_sync`` ``Stream Wait Event``), else the producers
    of the recorded waits that name only their consumer; True = always, from timing and the
    ``cudaStreamWaitEvent`` calls (recorded ones are dropped, as the precision/recall test
    does); False = never."""
    idle_ns: int = 200_000
    """A CPU thread that records nothing (no op, call or annotation) for this long was blocked
    or asleep: the graph has a point where it stopped (``block``) and one where it resumed
    (``wake``), and the time between is not host work."""
    handoff_max_ns: int = 1_000_000
    """A thread that resumes at most this long after another thread stopped was woken by it
    (a handoff edge); a thread that resumes with no such stop before it resumes for a reason
    the trace does not show (a timer, a process outside it): unexplained."""
    host_wait_tolerance_ns: int = 100_000
    """A blocking call waited for the GPU activity that ended last before it returned, if that
    activity ended at most this long before the call returned (beyond that the call's own
    time, not the GPU, is what kept it)."""

    poll_loop_ns: int = 500_000
    """At least three polls (``cudaEventQuery``/``cudaStreamQuery``) in a row on a thread that
    is not a polling thread, spanning at least this long, are a wait loop: the thread waits for
    the GPU by asking (a busy or sleeping poll); the loop ends, in the model, half a poll
    interval after the GPU work it saw end (the caching allocator's queries, a few in tens of
    us, are not one)."""

    launch_queue_depth: int | None = None
    """How many launches a stream's launch queue holds: a launch cannot return before the
    activity launched that many launches earlier on its stream has ended (a what-if whose host
    runs further ahead of the GPU than the trace's fills it). None: measured from the trace's
    ``Command Buffer Full`` events where it has them, else ``DEFAULT_QUEUE_DEPTH``; 0: no
    limit."""

    def __post_init__(self) -> None:
        for f in ("wait_ready_ns", "wait_match_ns", "idle_ns", "handoff_max_ns",
                  "host_wait_tolerance_ns", "poll_loop_ns"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"GraphConfig.{f} must be a non-negative int, got {v!r}")
        for f in ("launch_latency_ns", "gap_ns"):
            v = getattr(self, f)
            if v is not None and (not isinstance(v, int) or v < 0):
                raise ValueError(f"GraphConfig.{f} must be a non-negative int or None")
        if self.launch_queue_depth is not None and (
                not isinstance(self.launch_queue_depth, int) or self.launch_queue_depth < 0):
            raise ValueError("GraphConfig.launch_queue_depth must be a non-negative int or None")
        if self.infer_waits not in (None, True, False):
            raise ValueError("GraphConfig.infer_waits must be None, True or False")


DEFAULT_CONFIG = GraphConfig()
DEFAULT_LAUNCH_LATENCY_NS = 2_500
"""Launch latency when the trace shows none (no activity launched onto an idle stream): the
runtime's H200 traces show 2.0-2.5 us from a launch call's return to its kernel's start."""
MAX_LAUNCH_LATENCY_NS = 20_000
"""The largest median launch latency taken from a trace."""
DEFAULT_GAP_NS = 1_000
"""The gap between two activities of a stream when the trace shows none: ~1.0-1.3 us between
queued kernels on the runtime's H200 traces."""
MAX_GAP_NS = 20_000
"""The largest gap taken from a trace."""
DEFAULT_HANDOFF_NS = 20_000
"""A thread's wake-up after another thread stops, when the trace shows none."""
POLLING_SHARE = 0.8
"""A thread whose calls are at least this share of polls (``POLL``), and at least
``POLLING_MIN`` of them, is a polling thread."""
POLLING_MIN = 10
GRAPH_LAUNCH = re.compile(r"^(cuda|hip)GraphLaunch|^cuGraphLaunch")
"""A CUDA/HIP graph replay: every kernel of the graph carries the launch's correlation id."""
UNTRACED_GRAPH_PHASE = "cuda_graph_untraced"
"""The phase of the time a blocking call waited after a graph launch whose kernels the trace
does not hold (``compute:cuda_graph_untraced`` on the critical path: GPU work, unseen)."""
DEFAULT_QUEUE_DEPTH = 1021
"""A stream's launch queue depth when the trace does not show it: the runtime's H200 traces
(torch 2.11, CUDA 13) block a launch on the activity launched 1,020-1,022 launches earlier."""


def lane_positions(lane: np.ndarray) -> np.ndarray:
    """Each node's position in its lane (node id order)."""
    order = lane_order(lane)
    ln = lane[order]
    start = fnp.r_(0, np.flatnonzero(ln[1:] != ln[:-1]) + 1)
    first = np.repeat(start, np.diff(fnp.r_(start, ln.size)))
    pos = np.empty(lane.size, np.int64)
    pos[order] = np.arange(lane.size) - first
    return pos


def _queue_depth(src, dst, ekind, launched, lane) -> int | None:
    """The launch queue's depth the trace shows: over the launches that blocked on a full queue,
    the median of (position of the activity launched) - (position of the one it waited for) on
    their stream; None without such launches."""
    q = np.flatnonzero(ekind == int(EdgeKind.QUEUE))
    if not q.size:
        return None
    a, w = launched[dst[q]], src[q]
    ok = (a >= 0) & (lane[np.maximum(a, 0)] == lane[w])
    if not ok.any():
        return None
    pos = lane_positions(lane.astype(np.int64))
    d = pos[a[ok]] - pos[w[ok]]
    d = d[d > 0]
    return int(np.median(d)) if d.size else None


def _sorted_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``(a, b)`` pairs sorted by ``a`` then ``b`` (as two arrays), and each row's
    index among them."""
    order = np.lexsort((b, a))
    a_s, b_s = a[order], b[order]
    new = fnp.r_(True, (a_s[1:] != a_s[:-1]) | (b_s[1:] != b_s[:-1])) if order.size else \
        np.zeros(0, bool)
    inv = np.empty(order.size, np.int64)
    inv[order] = np.cumsum(new) - 1
    return a_s[new], b_s[new], inv


def _pairs(lane: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive (prev, next) ids within each lane, ``ids`` ordered within lanes by id."""
    order = np.lexsort((ids, lane))
    li, ii = lane[order], ids[order]
    same = li[1:] == li[:-1]
    return ii[:-1][same], ii[1:][same]


def _event_rows(trace: Trace, kinds) -> np.ndarray:
    return np.flatnonzero(phases.of_kinds(trace.column("kind"), kinds))


def _calls(trace: Trace) -> pd.DataFrame:
    """Runtime/driver calls, nested ones folded into the outermost call of their thread:
    ``row, ts, end, pid, tid, outer, corr`` (outer: position of the kept call; its end covers
    the calls nested in it)."""
    rows = _event_rows(trace, (Kind.RUNTIME, Kind.DRIVER))
    ts = trace.column("ts", np.int64)[rows]
    end = ts + trace.column("dur", np.int64)[rows]
    pid = trace.column("pid", np.int64)[rows]
    tid = trace.column("tid", np.int64)[rows]
    order = np.lexsort((-end, ts, tid, pid))
    ts, end, pid, tid, rows = ts[order], end[order], pid[order], tid[order], rows[order]
    n = rows.size
    outer = np.arange(n)
    if n:
        same = fnp.r_(False, (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1]))
        # reach of the thread so far (reset at each new thread; a trace has few threads)
        first = np.flatnonzero(~same)
        reach = np.empty_like(end)
        for a, b in zip(first.tolist(), fnp.r_(first[1:], n).tolist()):
            reach[a:b] = np.maximum.accumulate(end[a:b])
        nested = same & (ts < fnp.r_(0, reach[:-1]))
        top = ~nested
        outer = np.maximum.accumulate(np.where(top, np.arange(n), 0))
        # each outer call's end covers its nested calls' (the calls of one are consecutive)
        cut = np.flatnonzero(top)
        end = np.repeat(np.maximum.reduceat(end, cut), np.diff(fnp.r_(cut, n)))
    return frame({"row": rows, "ts": ts, "end": end, "pid": pid, "tid": tid,
                  "outer": outer, "corr": trace.column("correlation", np.int64)[rows]},
                 copy=False)


@dataclass(frozen=True)
class _Points:
    """Where CPU threads stopped (``block``) and resumed (``wake``) work, and who woke whom."""

    lane: np.ndarray
    time: np.ndarray
    wake: np.ndarray
    """bool: a wake point (else a block point)."""
    trigger: np.ndarray
    """Per point: for a wake, the block point of another thread that woke it (-1: none)."""
    polling: np.ndarray
    """The lanes of polling threads."""


def _host_points(trace: Trace, cl: pd.DataFrame, base: int, main_lane: int,
                 k_lane: np.ndarray, k_poll: np.ndarray, config: GraphConfig) -> _Points:
    """Per CPU lane (``cl``: its pid, tid; lane ids from ``base``): the stretches of at least
    ``config.idle_ns`` in which its thread recorded nothing (no CPU op, runtime or driver call,
    nor the start or end of an annotation or a Python function: a frame that stays open across
    a wait, as ``run_backward`` does while autograd's thread runs, is no work), as a block point
    at the stretch's start and a wake point at its end; a thread other than the main one also wakes at its first
    event and blocks after its last. A wake point is triggered by the latest block point of
    another thread at most ``config.handoff_max_ns`` before it (a baton pass: autograd's
    engine thread running the backward while the main thread waits in ``backward()``, and
    back); polling threads (other than the main one, ``POLLING_SHARE`` of their calls polls)
    neither wake nor are woken by others: they stop and resume on their own timer."""
    kinds = trace.column("kind")
    busy = phases.of_kinds(kinds, (Kind.CPU_OP, Kind.RUNTIME, Kind.DRIVER))
    # a Python function (with_stack) is a frame on the stack, as an annotation is a scope: its
    # start and end are activity, its span is not (the main thread blocked in backward() sits
    # inside `run_backward` while autograd's thread runs the backward: a baton pass)
    ann = phases.of_kinds(kinds, (Kind.ANNOTATION, Kind.PYTHON))
    cpu = busy | ann
    rows = np.flatnonzero(cpu)
    tid = trace.column("tid", np.int64)[rows]
    pid = trace.column("pid", np.int64)[rows]
    ts = trace.column("ts", np.int64)[rows]
    end = ts + trace.column("dur", np.int64)[rows]
    is_ann = ann[rows]
    lanes_l, time_l, wake_l = [], [], []
    polling = []
    for i, (p, t) in enumerate(zip(column(cl, "pid", np.int64).tolist(),
                                   column(cl, "tid", np.int64).tolist())):
        ln = base + i
        mine = k_lane == ln
        if ln != main_lane and mine.sum() >= POLLING_MIN and k_poll[mine].mean() >= POLLING_SHARE:
            polling.append(ln)
        sel = (tid == t) & (pid == p)
        if not sel.any():
            continue
        a = is_ann[sel]
        s_b, e_b = ts[sel][~a], end[sel][~a]
        pts = fnp.r_(ts[sel][a], end[sel][a])
        s = fnp.r_(s_b, pts)
        e = fnp.r_(e_b, pts)
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
        reach = np.maximum.accumulate(e)
        idle = np.flatnonzero(s[1:] - reach[:-1] >= config.idle_ns)
        blocks, wakes = reach[idle], s[idle + 1]
        if ln != main_lane:  # a thread of its own: it starts, and ends
            wakes = fnp.r_(s[0], wakes)
            blocks = fnp.r_(blocks, reach[-1])
        lanes_l += [np.full(blocks.size + wakes.size, ln, np.int64)]
        time_l += [fnp.r_(blocks, wakes)]
        wake_l += [fnp.r_(np.zeros(blocks.size, bool), np.ones(wakes.size, bool))]
    if not lanes_l:
        z = np.zeros(0, np.int64)
        return _Points(z, z, np.zeros(0, bool), z, np.array(polling, np.int64))
    lane = np.concatenate(lanes_l)
    time = np.concatenate(time_l)
    wake = np.concatenate(wake_l)
    trigger = np.full(lane.size, -1, np.int64)
    can = np.flatnonzero(~wake & ~fnp.isin(lane, polling))
    can = can[np.argsort(time[can], kind="stable")]
    for ln in np.setdiff1d(np.unique(lane[wake]), polling):  # per thread (a trace has a few)
        w = np.flatnonzero(wake & (lane == ln))
        c = can[lane[can] != ln]
        if not c.size:
            continue
        k = np.searchsorted(time[c], time[w], side="left") - 1
        ok = (k >= 0) & (time[w] - time[c[np.maximum(k, 0)]] <= config.handoff_max_ns)
        trigger[w[ok]] = c[k[ok]]
    return _Points(lane, time, wake, trigger, np.array(polling, np.int64))


def _polls(name: np.ndarray) -> np.ndarray:
    """bool per node: a poll (``syncs.POLL``), the regex run once per distinct name."""
    codes, uniq = fnp.factorize(name)
    hit = np.array([POLL.search(str(u)) is not None for u in uniq], bool)
    return hit[codes] if codes.size else np.zeros(0, bool)


def _poll_loops(calls, lane, ev_ts, end, is_poll, polling, is_gpu, config: GraphConfig):
    """Wait loops of polls (``GraphConfig.poll_loop_ns``) on threads that are not polling
    threads: ``(first, mid, first_of_mid, last, producer, lag)`` node ids (``producer``: the
    GPU activity that ended last before the last poll and after the one before it, -1 for
    none; ``lag``: half the loop's median interval between polls), None without any."""
    out = {k: [] for k in ("first", "mid", "mid_first", "last", "src", "lag")}
    gpu = np.flatnonzero(is_gpu)
    by_end = gpu[np.argsort(end[gpu], kind="stable")]
    g_end = end[by_end]
    for ln in np.unique(lane[calls]):
        if ln in polling:
            continue
        c = calls[lane[calls] == ln]
        q = is_poll[c]
        if q.sum() < 3:
            continue
        edges = np.diff(fnp.r_(0, q.astype(np.int8), 0))
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            run = c[a:b]
            if run.size < 3 or end[run[-1]] - ev_ts[run[0]] < config.poll_loop_ns:
                continue
            out["first"].append(run[0])
            out["mid"] += run[1:-1].tolist()
            out["mid_first"] += [run[0]] * (run.size - 2)
            out["last"].append(run[-1])
            k = np.searchsorted(g_end, ev_ts[run[-1]], side="right") - 1
            out["src"].append(int(by_end[k]) if k >= 0 and g_end[k] > ev_ts[run[-2]] else -1)
            out["lag"].append(int(np.median(np.diff(ev_ts[run])) // 2))
    if not out["last"]:
        return None
    return tuple(np.array(out[k], np.int64) for k in ("first", "mid", "mid_first", "last", "src",
                                                      "lag"))


def _after_dark(dark, blocking, lane, ts) -> np.ndarray:
    """bool per call: a blocking call (``blocking``) that follows, on its thread, a graph launch
    whose kernels the trace does not hold (``dark``), with no blocking call in between."""
    out = np.zeros(dark.size, bool)
    for ln in np.unique(lane[dark]):
        mine = np.flatnonzero(lane == ln)
        mine = mine[np.argsort(ts[mine], kind="stable")]
        pending = False
        for i in mine.tolist():  # a thread's calls, in order (few lanes have graph launches)
            if dark[i]:
                pending = True
            elif blocking[i] and pending:
                out[i] = True
                pending = False
    return out


def _main_thread(trace: Trace, rules: Rules, calls: pd.DataFrame) -> tuple[int, int]:
    """(pid, tid) of the thread holding the steps (else the one with most calls)."""
    _, index = phases.activities(trace, rules)
    tid = index.main_tid
    if tid < 0:
        if calls.empty:
            return -1, -1
        pt = calls.groupby(["pid", "tid"]).size().idxmax()
        return int(pt[0]), int(pt[1])
    mine = trace.column("pid", np.int64)[trace.column("tid", np.int64) == tid]
    # the most frequent pid, the smallest of a tie (pandas' ``Series.mode().iloc[0]``, without
    # its Series and sort: ~0.15 ms a trace)
    if mine.size:
        pids, counts = np.unique(mine, return_counts=True)
        pid = int(pids[np.argmax(counts)])
    else:
        pid = -1
    return pid, int(tid)


NONE = np.iinfo(np.int64).min // 2
"""A time that precedes every other (an activity first on its stream has no previous end)."""


def stream_prev_end(a_start, a_end, a_lane) -> np.ndarray:
    """Per activity: the end of the one before it on its stream (``NONE`` for the first)."""
    order = np.lexsort((a_start, a_lane))
    same = fnp.r_(False, a_lane[order][1:] == a_lane[order][:-1])
    out = np.full(a_start.size, NONE, np.int64)
    out[order] = np.where(same, fnp.r_(0, a_end[order][:-1]), NONE)
    return out


def _launch_latency(a_start, a_end, a_lane, launch_end, nominal: int | None) -> int:
    """The nominal launch latency: ``nominal``, else the median of activity start - launch end
    over the activities whose stream was free when their launch returned (``DEFAULT_LAUNCH_
    LATENCY_NS`` without any, or when that median is beyond ``MAX_LAUNCH_LATENCY_NS``)."""
    if nominal is not None:
        return nominal
    free = (launch_end >= 0) & (stream_prev_end(a_start, a_end, a_lane) < launch_end)
    lat = (a_start - launch_end)[free]
    if not lat.size:
        return DEFAULT_LAUNCH_LATENCY_NS
    med = int(np.median(lat))
    # beyond MAX_LAUNCH_LATENCY_NS it is not a launch latency: something the trace does not show
    # held those activities (their stream was free)
    return max(med, 0) if med <= MAX_LAUNCH_LATENCY_NS else DEFAULT_LAUNCH_LATENCY_NS


def _stream_gap(a_start, a_end, a_lane, launch_end, lat: int, nominal: int | None) -> int:
    """The gap between consecutive activities of a stream: ``nominal``, else the median of
    start - previous end over activities launched well before their stream was free (20 us
    before: the stream, not the launch, held them; ``DEFAULT_GAP_NS`` without any)."""
    if nominal is not None:
        return nominal
    prev = stream_prev_end(a_start, a_end, a_lane)
    queued = (prev > NONE) & (launch_end >= 0) & (launch_end + lat + 20_000 < prev)
    gap = (a_start - prev)[queued]
    if not gap.size:
        return DEFAULT_GAP_NS
    return int(np.clip(np.median(gap), 0, MAX_GAP_NS))


def build_graph(trace: Trace, rules: Rules, config: GraphConfig | None = None) -> Graph:
    """The dependency graph of ``trace`` (see ``tracekit.graph.model``), memoised per trace
    object, rules and config (do not modify it)."""
    config = DEFAULT_CONFIG if config is None else config
    return phases.derived(trace, rules, f"graph:{config!r}", lambda: _build(trace, rules, config))


def _build(trace: Trace, rules: Rules, config: GraphConfig) -> Graph:  # noqa: C901 - one pass
    ev = trace.events
    warnings: list[str] = []
    limits: list[str] = []  # warnings of a limit of tracekit's own (also in warnings)
    acts, index = phases.activities(trace, rules)
    grow = _event_rows(trace, GPU_ACTIVITY_KINDS)
    assert grow.size == len(acts)
    calls = _calls(trace)
    main_pid, main_tid = _main_thread(trace, rules, calls)
    st = steps_mod.compute(trace, rules).steps

    # ---- lanes ----------------------------------------------------------------------------
    # the GPU lanes: the activities' (device, stream) pairs, sorted; the CPU lanes: the calls'
    # (pid, tid) pairs and the thread holding the steps, sorted
    g_dev, g_stream, a_lane = _sorted_pairs(column(acts, "device", np.int64),
                                            column(acts, "stream", np.int64))
    with_main = bool(len(st) and main_tid >= 0)
    c_pid, c_tid, c_pair = _sorted_pairs(
        np.concatenate([column(calls, "pid", np.int64),
                        np.array([main_pid] if with_main else [], np.int64)]),
        np.concatenate([column(calls, "tid", np.int64),
                        np.array([main_tid] if with_main else [], np.int64)]))
    n_gl, n_cl = g_dev.size, c_pid.size
    types = ["gpu"] * n_gl + ["cpu"] * n_cl  # as a list, pandas makes no row a float column
    lanes = frame({
        "lane": np.arange(n_gl + n_cl),
        "type": np.array(types, dtype=object) if types else types,
        "device": fnp.r_(g_dev, np.full(n_cl, -1)),
        "stream": fnp.r_(g_stream, np.full(n_cl, -1)),
        "pid": fnp.r_(np.full(n_gl, -1), c_pid),
        "tid": fnp.r_(np.full(n_gl, -1), c_tid),
    })
    is_kept = column(calls, "outer") == np.arange(len(calls))
    kept = calls[is_kept]
    c_lane = (c_pair[: len(calls)][is_kept] + n_gl).astype(np.int64)
    at_main = np.flatnonzero((c_pid == main_pid) & (c_tid == main_tid))
    main_lane = (int(at_main[0]) if at_main.size else -1) + n_gl if n_cl else -1

    # ---- GPU activities ---------------------------------------------------------------------
    a_start = column(acts, "ts", np.int64)
    a_end = column(acts, "end", np.int64)
    a_launch = column(acts, "launch_ts", np.int64)
    a_corr = column(acts, "correlation", np.int64)
    ncodes, ncats = phases.name_codes(ev)
    a_codes = ncodes[grow]  # acts' names (row i of acts is event grow[i])
    comm = phases.name_matches(a_codes, ncats, rules.communication)
    a_kind = column(acts, "kind")
    a_phase = column(acts, "phase", object)
    ph_code, ph_uniq = fnp.factorize(a_phase)  # phases are strings, a few distinct ones
    a_cat = np.array([COMPUTE + str(p) for p in ph_uniq] + [""], dtype=object)[ph_code]
    a_cat[comm] = COMMUNICATION
    a_cat[a_kind != int(Kind.KERNEL)] = MEMCPY

    # ---- CPU calls: which block on the GPU, and on what ------------------------------------
    names = ev["name"]
    k_rows = column(kept, "row", np.int64)
    k_ts = column(kept, "ts", np.int64)
    k_end = column(kept, "end", np.int64)
    k_tid = column(kept, "tid", np.int64)
    blocking = phases.name_matches(ncodes[k_rows], ncats, BLOCKING)
    pageable = phases.name_matches(a_codes, ncats, re.compile("Pageable")) & \
        (a_kind == int(Kind.MEMCPY))
    # correlation of every call (nested ones belong to their outer call)
    c_outer = column(calls, "outer", np.int64)
    kept_pos = np.full(len(calls), -1, np.int64)
    kept_pos[column(calls, "outer") == np.arange(len(calls))] = np.arange(len(kept))
    c_node_of_call = kept_pos[c_outer]  # kept index of each call's outer call
    c_corr = column(calls, "corr", np.int64)
    async_copy = phases.name_matches(ncodes[column(calls, "row", np.int64)], ncats, ASYNC_COPY)
    pc = fnp.isin(c_corr, a_corr[pageable]) & async_copy & (c_corr >= 0)
    blocking[np.unique(c_node_of_call[pc])] = True
    # calls Kineto saw block the host (cuda_sync Stream/Event/Context Sync linked to them)
    sy = _event_rows(trace, (Kind.SYNC,))
    if sy.size:
        host = phases.name_matches(ncodes[sy], ncats, HOST_SYNC_EVENT)
        scorr = trace.column("correlation", np.int64)[sy[host]]
        # a poll (cudaEventQuery/cudaStreamQuery) returns at once, whatever Kineto calls it
        poll = phases.name_matches(ncodes[column(calls, "row", np.int64)], ncats, POLL)
        hit = fnp.isin(c_corr, scorr[scorr >= 0]) & (c_corr >= 0) & ~poll
        blocking[np.unique(c_node_of_call[hit])] = True
    k_poll = phases.name_matches(ncodes[k_rows], ncats, POLL)
    # which activity each (kept) call launched: the correlation ids
    act_call = np.full(len(acts), -1, np.int64)  # per activity: the kept call that launched it
    ok = c_corr >= 0
    cc, cn = c_corr[ok], c_node_of_call[ok]
    o = np.argsort(cc, kind="stable")
    cc, cn = cc[o], cn[o]
    if cc.size and len(acts):
        k = np.minimum(np.searchsorted(cc, a_corr), cc.size - 1)
        linked = (a_corr >= 0) & (cc[k] == a_corr)
        act_call[linked] = cn[k[linked]]
    call_act = np.full(len(kept), -1, np.int64)  # per kept call: an activity it launched
    has = np.flatnonzero(act_call >= 0)
    call_act[act_call[has]] = has
    # launches that blocked on a full launch queue: the call holds one of Kineto's overhead
    # events for it. The queue is per stream (a launch waits for the activity launched ~1021
    # launches before it on the same stream), so it waited for an activity of its own stream.
    queue = np.zeros(len(kept), bool)
    qrows = _event_rows(trace, (Kind.OTHER,))
    qrows = qrows[np.asarray(names.array[qrows]).astype(str) == QUEUE_FULL] if qrows.size else qrows
    if qrows.size and k_ts.size:
        q_s, q_e = intervals.union(trace.column("ts", np.int64)[qrows],
                                   (trace.column("ts", np.int64) + trace.column("dur", np.int64))[qrows])
        k = np.searchsorted(q_s, k_ts, side="left")
        queue = (k < q_s.size) & (q_e[np.minimum(k, q_s.size - 1)] <= k_end) & (call_act >= 0)
        blocking |= queue
    only_lane = np.where(queue, a_lane[np.maximum(call_act, 0)] if len(acts) else -1, -1)
    device_sync = phases.name_matches(ncodes[k_rows], ncats,
                                      re.compile(r"DeviceSynchronize|CtxSynchronize|ThreadSynchronize"))
    hw_src, hw_dst = _host_waits(
        np.flatnonzero(blocking), k_ts, k_end, device_sync, a_start, a_end, a_launch, a_lane,
        only_lane, config.host_wait_tolerance_ns)
    # a blocking call that launched a copy (a synchronous or pageable one) waits for that copy,
    # however long the call takes after it (a pageable copy's host side)
    own = np.flatnonzero(blocking & ~queue & (call_act >= 0))
    if own.size:
        a = call_act[own]
        ok = (a_end[a] <= k_end[own]) & (a_end[a] > k_ts[own])
        hw_src = fnp.r_(hw_src, a[ok]).astype(np.int64)
        hw_dst = fnp.r_(hw_dst, own[ok]).astype(np.int64)
    # graph start of a call: after the GPU work it waited for
    c_start = k_ts.copy()
    if hw_dst.size:
        gmax = pd.Series(a_end[hw_src]).groupby(hw_dst).max()
        idx = gmax.index.to_numpy(np.int64)
        c_start[idx] = np.minimum(np.maximum(k_ts[idx], gmax.to_numpy(np.int64)), k_end[idx])
    c_wait = c_start - k_ts

    # phase of a CPU call: its enclosing phase annotation
    c_phase = objarrays.full(len(kept), phases.OTHER)
    c_batch = np.full(len(kept), -1, np.int64)
    if len(kept) and not index.table.empty:
        ann = index.enclosing(k_tid, k_ts, k_end)
        has = ann >= 0
        c_phase[has] = column(index.table, "phase", object)[ann[has]]
        c_batch[has] = column(index.table, "batch", np.int64)[ann[has]]

    # ---- step markers -----------------------------------------------------------------------
    n_st = len(st) if main_lane >= 0 else 0
    m_time = fnp.r_(column(st, "cpu_start", np.int64), column(st, "cpu_end", np.int64))[
        :2 * n_st] if n_st else np.zeros(0, np.int64)
    m_step = fnp.r_(column(st, "step", np.int64), column(st, "step", np.int64)) if n_st \
        else np.zeros(0, np.int64)
    m_steps = column(st, "step", np.int64).tolist() if n_st else []
    m_name = np.array([f"step {s} start" for s in m_steps] + [f"step {s} end" for s in m_steps],
                      dtype=object) if n_st else np.zeros(0, object)

    # ---- where threads stopped and resumed ----------------------------------------------------
    pts = _host_points(trace, frame({"pid": c_pid, "tid": c_tid}), n_gl, main_lane, c_lane,
                       k_poll, config)
    n_pt = pts.lane.size
    pt_name = np.where(pts.wake, "thread wakes", "thread blocks").astype(object)

    # ---- all nodes, in topological order ---------------------------------------------------
    na, nc, nm = len(acts), len(kept), m_time.size
    kind = fnp.r_(np.full(na, NodeKind.GPU), np.full(nc, NodeKind.CALL), np.full(nm, NodeKind.MARK),
                 np.full(n_pt, NodeKind.POINT))
    start = fnp.r_(a_start, c_start, m_time, pts.time)
    dur = fnp.r_(a_end - a_start, k_end - c_start, np.zeros(nm + n_pt, np.int64))
    # at one time: a wake first, then markers, calls, GPU activities, a block last
    tie = fnp.r_(np.full(na, 2), np.full(nc, 1), np.zeros(nm, np.int64),
                np.where(pts.wake, -1, 3))
    order = np.lexsort((tie, start))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    kind = kind[order].astype(np.int8)
    lane = fnp.r_(a_lane, c_lane, np.full(nm, main_lane), pts.lane)[order].astype(np.int32)
    start, dur = start[order], dur[order]
    row = fnp.r_(grow, k_rows, np.full(nm + n_pt, -1))[order].astype(np.int64)
    ev_ts = fnp.r_(a_start, k_ts, m_time, pts.time)[order]  # the event's own start (calls: before waiting)
    wait = fnp.r_(np.zeros(na, np.int64), c_wait, np.zeros(nm + n_pt, np.int64))[order]
    spans = st if n_st else st.iloc[:0]
    spans = frame({"step": column(spans, "step", np.int64),
                   "ts": column(spans, "cpu_start", np.int64),
                   "end": column(spans, "cpu_end", np.int64)})
    a_step = phases.step_of(spans, np.where(a_launch >= 0, a_launch, a_start))
    c_step = phases.step_of(spans, k_ts)
    step = fnp.r_(a_step, c_step, m_step, phases.step_of(spans, pts.time))[order]
    c_cat = objarrays.where(blocking, SYNC, HOST)
    # graph launches whose kernels the trace does not hold, and the blocking calls of their
    # thread that waited for nothing the trace shows after them: waits on the graph's kernels
    glaunch = phases.name_matches(ncodes[k_rows], ncats, GRAPH_LAUNCH)
    dark = glaunch & (call_act < 0)
    if dark.any():
        waited_for = np.zeros(len(kept), bool)
        waited_for[hw_dst] = True
        c_cat[_after_dark(dark, blocking & ~waited_for, c_lane, k_ts)] = \
            COMPUTE + UNTRACED_GRAPH_PHASE
    category = fnp.r_(a_cat, c_cat, objarrays.full(nm + n_pt, HOST))[order]
    name = fnp.r_(column(acts, "name", object), phases.name_strings(ncodes[k_rows], ncats)
                 if nc else np.zeros(0, object), m_name, pt_name)[order]
    phase = fnp.r_(a_phase, c_phase, objarrays.full(nm + n_pt, phases.OTHER))[order]
    batch = fnp.r_(column(acts, "batch", np.int64), c_batch, np.full(nm + n_pt, -1))[order]
    a_id = rank[:na]
    c_id = rank[na:na + nc]
    m_id = rank[na + nc:na + nc + nm]
    p_id = rank[na + nc + nm:]
    end = start + dur

    # ---- edges, with modelled lags ---------------------------------------------------------
    srcs, dsts, kinds, noms = [], [], [], []

    def add(s, d, k, nominal):
        s = np.asarray(s, np.int64)
        srcs.append(s)
        dsts.append(np.asarray(d, np.int64))
        kinds.append(np.full(s.size, int(k), np.int8))
        noms.append(np.broadcast_to(np.asarray(nominal, np.int64), s.shape).copy())

    is_gpu = kind == NodeKind.GPU
    ids = np.arange(kind.size)
    # program order: the host time between consecutive nodes of a thread; none across the
    # stretch where it was blocked (from its block point to its wake point)
    cpu = ~is_gpu
    p_prev, p_next = _pairs(lane[cpu].astype(np.int64), ids[cpu])
    p_nom = np.maximum(ev_ts[p_next] - end[p_prev], 0)
    blocked = np.zeros(kind.size, bool)
    blocked[p_id[~pts.wake]] = True
    woke = np.zeros(kind.size, bool)
    woke[p_id[pts.wake]] = True
    p_nom[blocked[p_prev] & woke[p_next]] = 0
    # launches: the activity's correlation -> the (outer) call carrying it
    linked = act_call >= 0
    l_src, l_dst = c_id[act_call[linked]], a_id[linked]
    launch_end = np.full(na, -1, np.int64)  # per activity: end of its launch call
    if l_dst.size:
        by_node = np.full(kind.size, -1, np.int64)
        # a call that waited ended after its own work began: not a launch latency sample
        by_node[l_dst] = np.where(wait[l_src] > 0, -1, end[l_src])
        launch_end = by_node[a_id]
    lat = _launch_latency(a_start, a_end, a_lane, launch_end, config.launch_latency_ns)
    gap = _stream_gap(a_start, a_end, a_lane, launch_end, lat, config.gap_ns)
    # stream order
    s_prev, s_next = _pairs(lane[is_gpu].astype(np.int64), ids[is_gpu])
    add(s_prev, s_next, EdgeKind.STREAM, gap)
    # a blocking call launched its work when it began, before its wait: that launch edge comes
    # from the call before it on its thread, with the host time up to the call's start
    l_nom = np.full(l_src.size, lat, np.int64)
    waited = wait[l_src] > 0
    if waited.any():
        pred_of = np.full(kind.size, -1, np.int64)
        pred_of[p_next] = p_prev
        pr = pred_of[l_src[waited]]
        has = pr >= 0
        idx = np.flatnonzero(waited)[has]
        l_nom[idx] = np.maximum(ev_ts[l_src[idx]] - end[pr[has]], 0) + lat
        l_src = l_src.copy()
        l_src[idx] = pr[has]
    add(l_src, l_dst, EdgeKind.LAUNCH, l_nom)
    if na and not l_dst.size:
        warnings.append("no GPU activity is linked to its launch (no correlation ids or flows): "
                        "the graph has no launch edges; host and GPU are explained separately")
    # host waits
    qw = queue[hw_dst]
    add(a_id[hw_src[~qw]], c_id[hw_dst[~qw]], EdgeKind.HOST_WAIT, 0)
    add(a_id[hw_src[qw]], c_id[hw_dst[qw]], EdgeKind.QUEUE, 0)
    # cross-stream waits: recorded, else inferred
    rec_s, rec_d, rec_cons = _recorded_waits(trace, acts, calls, ev)
    recorded = rec_s.size + rec_cons.size > 0
    use_rec = config.infer_waits is not True
    if use_rec and rec_s.size:
        add(a_id[rec_s], a_id[rec_d], EdgeKind.WAIT_RECORDED, gap)
    hint = None
    if use_rec and recorded:
        # the trace says which activities waited (the consumers); where it does not say on
        # what (no producer recorded), the producer is inferred for those consumers only
        hint = np.zeros(na, bool)
        hint[rec_cons] = True
    elif config.infer_waits is True or (config.infer_waits is None and not recorded):
        sw = phases.name_matches(ncodes[k_rows], ncats, STREAM_WAIT)
        hint = _wait_hints(a_launch, column(acts, "launch_tid", np.int64), a_lane,
                           k_ts[sw], k_tid[sw])
    if hint is not None and na and hint.any():
        w_src, w_dst = _inferred_waits(a_start, a_end, a_lane, column(acts, "device", np.int64),
                                       launch_end, lat, config, hint, warnings, limits)
        add(a_id[w_src], a_id[w_dst], EdgeKind.WAIT_INFERRED, gap)
    wait_consumers = np.unique(a_id[fnp.r_(rec_d, rec_cons).astype(np.int64)])
    # handoffs between CPU threads: a thread stopped, another resumed right after
    trig = np.flatnonzero(pts.trigger >= 0)
    h_src, h_dst = p_id[pts.trigger[trig]], p_id[trig]
    h_obs = start[h_dst] - end[h_src]
    handoff = int(np.clip(np.median(h_obs), 0, config.handoff_max_ns)) if h_obs.size else \
        min(DEFAULT_HANDOFF_NS, config.handoff_max_ns)
    # wait loops of polls: the loop collapses, and its last poll waits for the GPU work it saw
    # end (half a poll interval after it)
    loops = _poll_loops(ids[kind == NodeKind.CALL], lane, ev_ts, end, _polls(name), pts.polling,
                        is_gpu, config)
    n_loops = 0
    if loops is not None:
        first, mid, mid_first, last, src_l, lag_l = loops
        n_loops = int(last.size)
        inner = fnp.isin(p_next, fnp.r_(mid, last))
        p_prev, p_next, p_nom = p_prev[~inner], p_next[~inner], p_nom[~inner]
        add(mid_first, mid, EdgeKind.PROGRAM, 0)
        add(first, last, EdgeKind.PROGRAM, 0)
        ok = src_l >= 0
        add(src_l[ok], last[ok], EdgeKind.HOST_WAIT, lag_l[ok])
        category[fnp.r_(first, mid, last)] = SYNC
    add(p_prev, p_next, EdgeKind.PROGRAM, p_nom)
    add(h_src, h_dst, EdgeKind.HANDOFF, handoff)

    src = np.concatenate(srcs)
    dst = np.concatenate(dsts)
    ekind = np.concatenate(kinds)
    nom = np.concatenate(noms)
    bad = src >= dst
    if bad.any():
        warnings.append(f"{int(bad.sum())} dependencies go backwards in time (clock skew between "
                        "host and GPU?) and were left out")
        src, dst, ekind, nom = src[~bad], dst[~bad], ekind[~bad], nom[~bad]
    o = np.argsort(dst.astype(np.int64) * max(kind.size, 1) + src, kind="stable")  # (dst, src)
    src, dst, ekind, nom = src[o], dst[o], ekind[o], nom[o]
    binding, unexplained = _bind(src, dst, ekind, nom, start, end)
    # copies held by a copy engine busy with another stream's copy of the same direction
    e_src, e_dst = _engine_waits(a_id, a_kind, column(acts, "name", object), a_start, a_end,
                                 a_lane, column(acts, "device", np.int64),
                                 unexplained[a_id], config)
    if e_src.size:
        src, dst = fnp.r_(src, e_src), fnp.r_(dst, e_dst)
        ekind = fnp.r_(ekind, np.full(e_src.size, int(EdgeKind.ENGINE), np.int8))
        nom = fnp.r_(nom, np.full(e_src.size, gap, np.int64))
        o = np.argsort(dst.astype(np.int64) * max(kind.size, 1) + src, kind="stable")
        src, dst, ekind, nom = src[o], dst[o], ekind[o], nom[o]
        binding, unexplained = _bind(src, dst, ekind, nom, start, end)

    launched = np.full(kind.size, -1, np.int64)
    launched[c_id[act_call[linked]]] = a_id[linked]
    launcher = np.full(kind.size, -1, np.int64)
    launcher[a_id[linked]] = c_id[act_call[linked]]
    depth = config.launch_queue_depth
    if depth is None:
        depth = _queue_depth(src, dst, ekind, launched, lane) or DEFAULT_QUEUE_DEPTH
    steps_t = frame({
        "step": column(st, "step", np.int64) if n_st else np.zeros(0, np.int64),
        "cpu_start": column(st, "cpu_start", np.int64) if n_st else np.zeros(0, np.int64),
        "cpu_end": column(st, "cpu_end", np.int64) if n_st else np.zeros(0, np.int64),
        "start_node": m_id[:n_st] if n_st else np.zeros(0, np.int64),
        "end_node": m_id[n_st:] if n_st else np.zeros(0, np.int64),
    })
    shape = kernel_shape(ev, np.where(kind == NodeKind.GPU, row, -1),
                         column(lanes, "device", np.int64)[lane], trace.metadata)
    return Graph(kind=kind, lane=lane, start=start, dur=dur, row=row, step=step,
                 category=category, name=name, phase=phase, batch=batch, lanes=lanes,
                 src=src, dst=dst, edge_kind=ekind, lag=nom, binding=binding, steps=steps_t,
                 wait_ns=wait, launched=launched, launcher=launcher, launch_latency_ns=lat,
                 wait_consumers=wait_consumers, queue_depth=int(depth),
                 unexplained=unexplained, gap_ns=gap, handoff_ns=handoff,
                 polling_lanes=pts.polling, main_lane=main_lane, poll_loops=n_loops,
                 warnings=tuple(warnings), limits=tuple(limits), shape=shape)


_PRIORITY = {EdgeKind.HOST_WAIT: 6, EdgeKind.QUEUE: 6, EdgeKind.WAIT_RECORDED: 5, EdgeKind.WAIT_INFERRED: 4,
             EdgeKind.FIX: 4, EdgeKind.ENGINE: 4, EdgeKind.STREAM: 3, EdgeKind.HANDOFF: 2,
             EdgeKind.LAUNCH: 1, EdgeKind.PROGRAM: 0}


def edge_priority(kind: np.ndarray) -> np.ndarray:
    """Tie-break between edges whose sources are ready at the same time: a wait or the stream
    before the launch, the launch before the host's own program order."""
    table = np.zeros(len(EdgeKind), np.int64)
    for k, p in _PRIORITY.items():
        table[int(k)] = p
    return table[kind.astype(np.int64)]


COPY_DIRECTION = re.compile(r"^Memcpy (\w+)")


def _engine_waits(a_id, a_kind, a_name, a_start, a_end, a_lane, a_dev, a_unexplained,
                  config: GraphConfig) -> tuple[np.ndarray, np.ndarray]:
    """Copies held by the copy engine (node ids: source, destination): a copy that started more
    than ``wait_ready_ns`` later than the model says, within ``wait_match_ns`` of the end of a
    copy of the same direction (``Memcpy DtoH``...) on another stream of its device, waited for
    that copy (a device's copies of one direction run on one engine, one at a time)."""
    cp = np.flatnonzero(a_kind == int(Kind.MEMCPY))
    if cp.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    dirs = np.array([(m.group(1) if (m := COPY_DIRECTION.match(str(n))) else "")
                     for n in a_name[cp]], dtype=object)
    out_s, out_d = [], []
    for key in set(zip(a_dev[cp].tolist(), dirs.tolist())):
        sel = cp[(a_dev[cp] == key[0]) & (dirs == key[1])]
        if sel.size < 2 or not key[1]:
            continue
        by_end = sel[np.argsort(a_end[sel], kind="stable")]
        held = sel[a_unexplained[sel] > config.wait_ready_ns]
        for c in held.tolist():  # a trace has few
            k = np.searchsorted(a_end[by_end], a_start[c], side="right") - 1
            while k >= 0 and a_lane[by_end[k]] == a_lane[c]:
                k -= 1
            if k >= 0 and a_start[c] - a_end[by_end[k]] <= config.wait_match_ns:
                out_s.append(a_id[by_end[k]])
                out_d.append(a_id[c])
    return np.array(out_s, np.int64), np.array(out_d, np.int64)


def _bind(src, dst, ekind, nom, start, end) -> tuple[np.ndarray, np.ndarray]:
    """Each node's binding edge (the one whose source's end + modelled lag is latest: the
    dependency that decided its start, ties broken by ``edge_priority``) and its unexplained
    time: its start minus that time (what the model does not explain; negative where the node
    started earlier than the model says; 0 for a node nothing precedes)."""
    cand = end[src] + nom
    binding = np.full(start.size, -1, np.int64)
    if src.size and intervals.is_nondecreasing(dst):
        # edges by destination (as the graph keeps them): per destination, the edge with the
        # latest candidate start, then the highest priority, then the last: what the sort
        # below picks, without sorting
        first = np.flatnonzero(fnp.r_(True, dst[1:] != dst[:-1]))
        group = np.cumsum(fnp.r_(True, dst[1:] != dst[:-1])) - 1
        best = cand == np.maximum.reduceat(cand, first)[group]
        prio = np.where(best, edge_priority(ekind), -1)
        best &= prio == np.maximum.reduceat(prio, first)[group]
        binding[dst[first]] = np.maximum.reduceat(np.where(best, np.arange(src.size), -1), first)
    elif src.size:
        o = np.lexsort((edge_priority(ekind), cand, dst))
        last = fnp.r_(dst[o][1:] != dst[o][:-1], True)
        binding[dst[o][last]] = o[last]
    unexplained = np.zeros(start.size, np.int64)
    b = np.flatnonzero(binding >= 0)
    unexplained[b] = start[b] - cand[binding[b]]
    return binding, unexplained


def _host_waits(calls_idx, c_ts, c_end, device_sync, a_start, a_end, a_launch, a_lane,
                only_lane, tolerance) -> tuple[np.ndarray, np.ndarray]:
    """For blocking calls: the GPU activities each waited for (activity index, call index).

    A call waited for the activity launched before it that ended last before it returned (a
    device synchronize: the last one of every stream; a launch blocked on a full queue: the
    last one of ``only_lane``, its own stream); it waited if that activity was still running
    when the call began, and ended within ``tolerance`` of the call's return."""
    if not calls_idx.size or not a_start.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # an activity whose launch is not in the trace was launched before it began
    launch = np.where(a_launch >= 0, a_launch, NONE)
    out_a, out_c = [], []
    single = calls_idx[~device_sync[calls_idx]]
    multi = calls_idx[device_sync[calls_idx]]
    # per lane: activities by end (the activities of a stream end in launch order)
    for ln in np.unique(a_lane):
        sel = np.flatnonzero(a_lane == ln)
        sel = sel[np.argsort(a_end[sel], kind="stable")]
        e = a_end[sel]
        lm = np.maximum.accumulate(launch[sel])  # launches are in order on a stream
        for group in (single, multi):
            group = group[(only_lane[group] < 0) | (only_lane[group] == ln)]
            if not group.size:
                continue
            k = np.searchsorted(e, c_end[group], side="right") - 1
            ok = k >= 0
            kk = np.maximum(k, 0)
            ok &= lm[kk] <= c_ts[group]  # launched before the call or by it (not by another thread meanwhile)
            ok &= e[kk] > c_ts[group]  # still running when the call began
            ok &= c_end[group] - e[kk] <= tolerance
            out_a.append(sel[kk[ok]])
            out_c.append(group[ok])
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a = np.concatenate(out_a)
    c = np.concatenate(out_c)
    # a single-stream wait keeps only the activity that ended last (the stream it synchronized)
    df = pd.DataFrame({"a": a, "c": c, "e": a_end[a], "multi": device_sync[c]})
    single_rows = df[~df["multi"]].sort_values(["c", "e"]).drop_duplicates("c", keep="last")
    df = pd.concat([single_rows, df[df["multi"]]])
    return column(df, "a", np.int64), column(df, "c", np.int64)


def _wait_hints(a_launch, a_tid, a_lane, wait_ts, wait_tid) -> np.ndarray:
    """bool per activity: a ``cudaStreamWaitEvent`` call may precede it (the trace records no
    waits, only the runtime calls, which do not say which stream waits). PyTorch makes a stream
    wait right before it launches onto it: a wait call on the launching thread since that
    thread's previous launch (onto any stream), or on another thread since the previous launch
    onto the activity's stream (``stream.wait_stream(main)`` on the main thread, then autograd's
    thread launching the backward onto that stream). Without wait calls in the trace (an old
    one, another runtime): every activity."""
    n = a_launch.size
    if not wait_ts.size:
        return np.ones(n, bool)
    has = a_launch >= 0
    lo = np.iinfo(np.int64).min
    hinted = np.zeros(n, bool)
    o = np.argsort(wait_ts, kind="stable")
    w_ts, w_tid = wait_ts[o], wait_tid[o]
    # the previous launch by the same thread (onto any stream), and onto the same stream
    prev_thread = _prev_in_group(a_launch, a_tid, has, lo)
    prev_stream = _prev_in_group(a_launch, a_lane, has, lo)
    for t in np.unique(a_tid[has]):
        sel = np.flatnonzero(has & (a_tid == t))
        mine = np.sort(w_ts[w_tid == t])
        other = np.sort(w_ts[w_tid != t])
        same = (np.searchsorted(mine, a_launch[sel], side="left")
                - np.searchsorted(mine, prev_thread[sel], side="right")) > 0
        cross = (np.searchsorted(other, a_launch[sel], side="left")
                 - np.searchsorted(other, prev_stream[sel], side="right")) > 0
        hinted[sel] = same | cross
    return hinted


def _prev_in_group(t, group, valid, missing) -> np.ndarray:
    """Per element: the largest ``t`` before it among the valid elements of its group
    (``missing`` for the first)."""
    out = np.full(t.size, missing, np.int64)
    idx = np.flatnonzero(valid)
    o = idx[np.lexsort((t[idx], group[idx]))]
    same = fnp.r_(False, group[o][1:] == group[o][:-1])
    out[o] = np.where(same, fnp.r_(missing, t[o][:-1]), missing)
    return out


MAX_WAIT_LANES = 256
"""Waits are inferred into at most this many streams of a device (those with the most
activities that may have waited); a trace with more says so in a warning."""


def _inferred_waits(a_start, a_end, a_lane, a_dev, launch_end, lat, config: GraphConfig,
                    hint: np.ndarray, warnings: list[str] | None = None,
                    limits: list[str] | None = None):
    """Cross-stream waits from timing: an activity ``hint`` allows (a wait may precede it:
    ``_wait_hints``, or the trace recorded that it waited without saying on what) that started
    ``wait_ready_ns`` after it was ready (its launch + the launch latency, its stream's previous
    activity) waited for the activity of another stream of its device that ended last before it
    started (and after it was ready), if the other streams sat idle at most ``wait_match_ns``
    in between: a consumer whose wait is satisfied starts within a few us, or, while kernels of
    other streams hold the GPU (the producer's stream going on to its next kernel, say), when
    they let it in. When several streams ended an activity within ``wait_match_ns`` of that
    latest end, the stream this one was seen to wait on when only one did. Each stream costs
    a pass over its device's activities: past ``MAX_WAIT_LANES`` streams of a device, only
    the busiest are looked at (a warning in ``warnings`` says so, and in ``limits``)."""
    prev_end = stream_prev_end(a_start, a_end, a_lane)
    ready = np.maximum(prev_end, np.where(launch_end >= 0, launch_end + lat, NONE))
    has_ready = ready > NONE
    held = hint & has_ready & (a_start - ready > config.wait_ready_ns)
    out_s, out_d = [], []
    for dev in np.unique(a_dev):
        lanes_held, n_held = np.unique(a_lane[held & (a_dev == dev)], return_counts=True)
        if lanes_held.size > MAX_WAIT_LANES:
            keep = np.sort(np.argsort(-n_held, kind="stable")[:MAX_WAIT_LANES])
            capped = (f"device {int(dev)}: {lanes_held.size:,} streams with activities that "
                      f"may have waited on another stream; waits inferred into the "
                      f"{MAX_WAIT_LANES} with the most")
            for said in (warnings, limits):
                if said is not None:
                    said.append(capped)
            lanes_held = lanes_held[keep]
        for ln in lanes_held:
            d = np.flatnonzero(held & (a_lane == ln))
            if not d.size:
                continue
            other = np.flatnonzero((a_dev == dev) & (a_lane != ln))
            if not other.size:
                continue
            busy = intervals.union(a_start[other], a_end[other])
            other = other[np.argsort(a_end[other], kind="stable")]
            e = a_end[other]
            # idle time of the other streams up to t (non-decreasing in t)
            idle_e = e - intervals.covered_upto(busy, e)
            idle_s = a_start[d] - intervals.covered_upto(busy, a_start[d])
            lo = np.maximum(np.searchsorted(idle_e, idle_s - config.wait_match_ns, side="left"),
                            np.searchsorted(e, ready[d] + 1, side="left"))
            hi = np.searchsorted(e, a_start[d], side="right")
            ok = hi > lo
            d, lo, hi = d[ok], lo[ok], hi[ok]
            if not d.size:
                continue
            pick = hi - 1  # the latest end
            # several streams ended near it: the one this stream waited on when only one did
            lo = np.maximum(lo, np.searchsorted(e, e[pick] - config.wait_match_ns, side="left"))
            changes = fnp.r_(0, np.cumsum(a_lane[other][1:] != a_lane[other][:-1]))
            one = changes[hi - 1] == changes[lo]
            if not one.all():
                f_lane, f_n = np.unique(a_lane[other[pick[one]]], return_counts=True)
                for i in np.flatnonzero(~one):  # the ambiguous few
                    cand = np.arange(lo[i], hi[i])
                    c_lane = a_lane[other[cand]]
                    j = np.minimum(np.searchsorted(f_lane, c_lane), max(f_lane.size - 1, 0))
                    score = np.where((f_lane.size > 0) & (f_lane[j] == c_lane), f_n[j], 0) \
                        if f_lane.size else np.zeros(cand.size, np.int64)
                    best = np.flatnonzero(score == score.max())
                    pick[i] = cand[best[-1]]
            out_s.append(other[pick])
            out_d.append(d)
    if not out_s:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_s), np.concatenate(out_d)


def _recorded_waits(trace, acts, calls, ev):
    """Waits recorded by Kineto's ``cuda_sync`` ``Stream Wait Event`` events (with
    ``Trace.args``). The consumer: the first activity launched on the waiting stream (the
    event's ``stream``) after the ``cudaStreamWaitEvent`` call (its correlation). The producer:
    the last activity launched on the stream the event was recorded on (``wait_on_stream``)
    before the ``cudaEventRecord`` call (``wait_on_cuda_event_record_corr_id``; without it,
    before the wait call). Kineto leaves both -1 when it did not see the record (torch 2.11 with
    CUDA 13 does for every wait): such a wait names its consumer only.

    Returns activity indexes: (producers, consumers) of the waits that name both, and the
    consumers of those that name only their consumer."""
    e = np.zeros(0, np.int64)
    args = getattr(trace, "args", None)
    if args is None or len(args) == 0 or not len(acts):
        return e, e, e
    sy = _event_rows(trace, (Kind.SYNC,))
    if not sy.size:
        return e, e, e
    nm = np.asarray(ev["name"].array[sy]).astype(str)
    sy = sy[nm == STREAM_WAIT_EVENT]
    a = args.set_index("event")
    sy = sy[fnp.isin(sy, a.index.to_numpy())]
    if not sy.size:
        return e, e, e
    wstream = a.loc[sy, "wait_stream"].to_numpy(np.int64)
    wcorr = a.loc[sy, "wait_correlation"].to_numpy(np.int64)
    stream = trace.column("stream", np.int64)[sy]
    device = trace.column("device", np.int64)[sy]
    corr = trace.column("correlation", np.int64)[sy]
    # the runtime calls by correlation: record call and wait call times
    cc = column(calls, "corr", np.int64)
    cts = column(calls, "ts", np.int64)
    o = np.argsort(cc, kind="stable")
    cc, cts = cc[o], cts[o]

    def call_ts(c):
        if not cc.size:
            return np.full(c.size, -1, np.int64)
        k = np.minimum(np.searchsorted(cc, c), cc.size - 1)
        return np.where((c >= 0) & (cc[k] == c), cts[k], -1)

    rec_ts = call_ts(wcorr)
    wait_ts = call_ts(corr)
    dev = column(acts, "device", np.int64)
    st = column(acts, "stream", np.int64)
    launch = column(acts, "launch_ts", np.int64)
    launch = np.where(launch >= 0, launch, column(acts, "ts", np.int64))
    # the activities of each (device, stream) by launch (ties: by index), for binary searches:
    # one per wait, not a pass over every activity (120 k waits took 94 s)
    order = np.lexsort((np.arange(dev.size), launch, st, dev))
    blocks: dict[tuple[int, int], tuple[int, int]] = {}
    if order.size:
        key_d, key_s = dev[order], st[order]
        cut = np.flatnonzero((key_d[1:] != key_d[:-1]) | (key_s[1:] != key_s[:-1])) + 1
        starts, ends = fnp.r_(0, cut), fnp.r_(cut, order.size)
        blocks = {(int(key_d[b0]), int(key_s[b0])): (int(b0), int(b1))
                  for b0, b1 in zip(starts.tolist(), ends.tolist())}
    sorted_launch = launch[order]
    out_s, out_d, only = [], [], []
    for i in range(sy.size):
        if wait_ts[i] < 0:
            continue
        b0, b1 = blocks.get((int(device[i]), int(stream[i])), (0, 0))
        k = b0 + int(np.searchsorted(sorted_launch[b0:b1], wait_ts[i], side="right"))
        if k >= b1:  # nothing launched on the waiting stream after the wait call
            continue
        c = int(order[k])  # the first launched after it (the lowest index among equals)
        if wstream[i] == stream[i]:  # a stream waiting on itself: stream order already
            continue
        if wstream[i] < 0:
            only.append(c)
            continue
        before = rec_ts[i] if rec_ts[i] >= 0 else wait_ts[i]
        p0, p1 = blocks.get((int(device[i]), int(wstream[i])), (0, 0))
        k = p0 + int(np.searchsorted(sorted_launch[p0:p1], before, side="left")) - 1
        if k < p0:  # nothing recorded on that stream yet: nothing to wait for
            continue
        k = p0 + int(np.searchsorted(sorted_launch[p0:p1], sorted_launch[k], side="left"))
        out_s.append(int(order[k]))  # the last launched before it (the lowest index among equals)
        out_d.append(c)
    s, d = np.array(out_s, np.int64), np.array(out_d, np.int64)
    cons_only = np.setdiff1d(np.array(only, np.int64), d)
    return s, d, cons_only


def observed_lags(g: Graph) -> np.ndarray:
    """Edge lags that reproduce the trace exactly: the binding edge's modelled lag plus its
    destination's unexplained time, every other edge's modelled lag clipped to the observed
    gap. What the model and its unexplained time add up to (a replay of the graph with these
    lags is the trace): the model's own replay leaves the unexplained time out."""
    lag = np.minimum(g.lag, g.start[g.dst] - g.end[g.src])
    b = np.flatnonzero(g.binding >= 0)
    lag[g.binding[b]] = g.lag[g.binding[b]] + g.unexplained[b]
    return lag


def host_spans(g: Graph, trace: Trace) -> pd.DataFrame:
    """The host time each CPU node (a call or a step marker) stands for, for a ``HostCost``
    (``tracekit.graph.model``): one row per CPU node, ``node, pid, tid, gap_start, start,
    end`` (ns, the trace's clock): the call's own span is ``[start, end)`` (the event's, a
    blocking call's wait included; a marker's is empty) and the host time before it on its
    thread ``[gap_start, start)`` (from the previous CPU node's end; the node's own start for
    the first node of a thread). ``own_ns`` is taken off the first, ``before_ns`` off the
    second."""
    cpu = np.flatnonzero(g.kind != NodeKind.GPU)
    row = g.row[cpu]
    has = row >= 0
    ts = g.start[cpu].copy()
    end = g.end[cpu].copy()
    if has.any():
        ts[has] = trace.column("ts", np.int64)[row[has]]
        end[has] = ts[has] + trace.column("dur", np.int64)[row[has]]
    lane = g.lane[cpu].astype(np.int64)
    order = np.lexsort((cpu, lane))  # node order within each lane
    same = fnp.r_(False, lane[order][1:] == lane[order][:-1])
    gap = ts.copy()
    prev_end = fnp.r_(0, end[order][:-1])
    gap[order] = np.where(same, np.minimum(prev_end, ts[order]), ts[order])
    lanes = g.lanes
    return frame({"node": cpu, "pid": column(lanes, "pid", np.int64)[lane],
                  "tid": column(lanes, "tid", np.int64)[lane], "gap_start": gap,
                  "start": ts, "end": end})


def ready_times(g: Graph) -> np.ndarray:
    """Per node: when a GPU activity could have started without a cross-stream wait (its
    stream's previous activity ended, and its launch call returned + the launch latency; a
    blocking call's own launch gives no time), ``NONE`` for other nodes and where neither."""
    ready = np.full(g.n, NONE, np.int64)
    end = g.end
    st = g.edge_kind == int(EdgeKind.STREAM)
    np.maximum.at(ready, g.dst[st], end[g.src[st]])
    calls = np.flatnonzero((g.launched >= 0) & (g.wait_ns <= 0)) if g.launched.size else \
        np.zeros(0, np.int64)
    np.maximum.at(ready, g.launched[calls], end[calls] + g.launch_latency_ns)
    return ready


def held_by_a_wait(g: Graph, ids: np.ndarray, ready_ns: int) -> np.ndarray:
    """The GPU activities of ``ids`` that a cross-stream wait can have held: they started more
    than ``ready_ns`` after they were ready (``ready_times``), and an activity of another stream
    of their device ended in between (a wait ends when its producer, an activity of another
    stream, ends: without such an end, the wait was satisfied before they were ready)."""
    ids = np.asarray(ids, np.int64)
    ready = ready_times(g)[ids]
    ids, ready = ids[g.start[ids] - ready > ready_ns], ready[g.start[ids] - ready > ready_ns]
    if not ids.size:
        return ids
    gpu = np.flatnonzero(g.kind == NodeKind.GPU)
    dev = column(g.lanes, "device", np.int64)
    keep = np.zeros(ids.size, bool)
    for i, (v, r) in enumerate(zip(ids.tolist(), ready.tolist())):  # a trace records few
        o = gpu[(g.lane[gpu] != g.lane[v]) & (dev[g.lane[gpu]] == dev[g.lane[v]])]
        keep[i] = bool(((g.end[o] > r) & (g.end[o] <= g.start[v])).any())
    return ids[keep]


def wait_agreement(trace: Trace, rules: Rules, config: GraphConfig | None = None) -> dict | None:
    """Inferred cross-stream waits against the recorded ones of the same trace (None when it
    records none): the graph is built with the recorded waits, then with every wait inferred
    from timing and the runtime's ``cudaStreamWaitEvent`` calls (the recorded ones dropped, as
    for a trace without ``cuda_sync`` events).

    A recorded wait counts when it held its consumer: when it names its producer, it is the
    edge that decided when the consumer started (a wait already satisfied leaves no trace in
    the timing to infer it from, and changes nothing on the critical path); when it names only
    its consumer (``wait_on_stream`` -1), a wait can have held the consumer
    (``held_by_a_wait``), and an inferred wait matches it by its consumer.
    ``precision`` = inferred waits that match a counted recorded one / inferred waits;
    ``recall`` = counted recorded waits inferred / counted recorded waits (None when there is
    nothing to divide by). ``recorded_producer``: how many recorded waits name their producer
    (only those check the inferred producer)."""
    base = DEFAULT_CONFIG if config is None else config
    rec_cfg = GraphConfig(**{**base.__dict__, "infer_waits": False})
    inf_cfg = GraphConfig(**{**base.__dict__, "infer_waits": True})
    g = build_graph(trace, rules, rec_cfg)
    rec = np.flatnonzero(g.edge_kind == int(EdgeKind.WAIT_RECORDED))
    cons_only = np.setdiff1d(g.wait_consumers, g.dst[rec])
    if not rec.size and not cons_only.size:
        return None
    binding = rec[g.binding[g.dst[rec]] == rec]
    truth = set(zip(g.src[binding].tolist(), g.dst[binding].tolist()))
    truth_cons = set(held_by_a_wait(g, cons_only, base.wait_ready_ns).tolist())
    h = build_graph(trace, rules, inf_cfg)
    inf = np.flatnonzero(h.edge_kind == int(EdgeKind.WAIT_INFERRED))
    got = set(zip(h.src[inf].tolist(), h.dst[inf].tolist()))
    got_dst = {d for _, d in got}
    right = sum(1 for p in got if p in truth or p[1] in truth_cons)
    found = len(truth & got) + len(truth_cons & got_dst)
    n_truth = len(truth) + len(truth_cons)
    return {"recorded": int(rec.size + cons_only.size), "recorded_producer": int(rec.size),
            "recorded_binding": n_truth, "inferred": len(got), "matched": found,
            "precision": right / len(got) if got else None,
            "recall": found / n_truth if n_truth else None}
