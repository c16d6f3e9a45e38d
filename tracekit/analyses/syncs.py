"""Sync stalls: host calls that block the CPU on the GPU, where they come from and what they cost.

A *stall* is one of:

- a runtime call that always blocks: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``cudaEventSynchronize``, synchronous ``cudaMemcpy`` (also 2D/3D/Peer/ToSymbol/FromSymbol),
  their ``hip*`` and driver (``cu*``) equivalents, and ``hipMemcpyWithStream`` (PyTorch's
  synchronous copy on ROCm) (``BLOCKING``);
- a ``cudaMemcpyAsync`` (or hip) whose GPU memcpy, linked by correlation id, is to or from
  pageable memory (its name says ``Pageable``): the host waits for it;
- a Kineto ``cuda_sync`` event (``Stream Sync``, ``Event Sync``, ``Context Sync``; not
  ``Stream Wait Event``, which blocks a stream, not the host). When its correlation id points
  to a runtime call, that call is the stall (counted once); otherwise the event itself is.
  Except a *poll*: a runtime call that only asks whether the GPU got there
  (``cudaEventQuery``, ``cudaStreamQuery``, their ``hip*``/``cu*`` forms, ``POLL``) never
  blocks, whatever ``cuda_sync`` event Kineto wrote for it (``Event Sync``, with
  ``enable_cuda_sync_events``).

Polls are counted apart (``SyncsResult.polls``): every poll call, with its op chain, phase and
step like a stall. A poll is the *caching allocator's* when its thread's next GPU allocation
(a ``[memory]`` event with bytes > 0 on a CUDA/HIP device) comes before its thread's next
runtime call other than a poll or the allocator's own (``cudaMalloc``/``cudaFree``...): before
it hands out a block freed while ``record_stream`` tied it to other streams, the allocator
queries the events it recorded on them (``process_events``), one ``cudaEventQuery`` each. That
is host time a pipeline's side streams cost at every allocation (what it costs the step:
explain's ``allocator_polls`` finding, ``tracekit.graph.fixes.detect_allocator_polls``). Without
``[memory]`` events
(``profile_memory`` off) which polls are the allocator's cannot be told
(``SyncsResult.allocator_known`` is False).

For each stall: its CPU duration; its op chain, the ``cpu_op`` events on the same thread that
enclose it, outermost first and innermost last (``aten::item > aten::_local_scalar_dense``);
its call site (op chain, then the call's name); its phase (the innermost phase annotation, as
for GPU activities, else ``other``); its ProfilerStep; and the GPU idle it leaves: from the
call's end until the next GPU activity starts on any stream of the device (0 if the device is
busy at that moment, NaN if nothing follows). The device of a call is that of the activity or
sync event it is linked to, else that of the last activity its thread launched before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import _objarrays as objarrays
from tracekit import intervals
from tracekit import phases
from tracekit.calls import (  # noqa: F401 (also named here, as always)
    ALLOCATOR_CALL, ASYNC_COPY, BLOCKING, HOST_SYNC_EVENT, POLL,
)
from tracekit.emptyresult import kept
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace
from tracekit.frames import BuiltWhenRead, column

STALL_COLUMNS = ["ts", "end", "dur_ns", "name", "tid", "device", "op_chain", "call_site",
                 "phase", "step", "idle_after_ns", "source"]
POLL_COLUMNS = ["ts", "end", "dur_ns", "name", "tid", "op_chain", "call_site", "phase", "step",
                "allocator"]


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in columns})


@dataclass(frozen=True)
class SyncsResult(BuiltWhenRead):
    """Every stall and its totals (ns)."""

    stalls: pd.DataFrame
    """One row per stall, by time: ``ts, end, dur_ns, name, tid`` (-1 for a cuda_sync event
    with no runtime call), ``device, op_chain, call_site, phase, step, idle_after_ns`` (float,
    NaN when no GPU activity follows), ``source`` (``runtime`` or ``cuda_sync``)."""
    by_call_site: pd.DataFrame
    """``call_site, count, total_ns, max_ns, idle_after_ns``, largest total first."""
    by_phase: pd.DataFrame
    """``phase, count, total_ns, max_ns, idle_after_ns``, largest total first."""
    by_step: pd.DataFrame
    """``step, count, total_ns, idle_after_ns`` by step (-1: outside any ProfilerStep)."""
    count: int
    total_ns: int
    idle_after_ns: int
    """Sum of the finite idle_after_ns."""
    polls: pd.DataFrame = field(default_factory=lambda: _empty(POLL_COLUMNS))
    """One row per poll (``POLL``: never a stall), by time: ``ts, end, dur_ns, name, tid,
    op_chain, call_site, phase, step``, ``allocator`` (bool: the caching allocator's, see the
    module docstring)."""
    polls_by_call_site: pd.DataFrame = field(
        default_factory=lambda: _empty(["call_site", "count", "total_ns", "max_ns",
                                        "allocator_count"]))
    """``call_site, count, total_ns, max_ns, allocator_count``, largest total first."""
    polls_by_step: pd.DataFrame = field(
        default_factory=lambda: _empty(["step", "count", "total_ns", "allocator_count",
                                        "allocator_ns"]))
    """``step, count, total_ns, allocator_count, allocator_ns`` by step (-1: outside)."""
    poll_count: int = 0
    poll_total_ns: int = 0
    """CPU time in polls."""
    allocator_poll_count: int = 0
    allocator_poll_total_ns: int = 0
    """CPU time in the caching allocator's polls."""
    allocator_known: bool = False
    """Whether the trace has the ``[memory]`` events that tell the allocator's polls."""


    def to_dict(self) -> dict:
        """JSON: every field but the per-poll table (a big trace holds ~10^5 polls; their totals
        by call site and step say what they cost)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "polls"}


def op_chains(trace: Trace, tid: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The enclosing cpu_op names on the same thread, ' > '-joined, outermost first."""
    out = objarrays.full(tid.size, "")
    if tid.size == 0:
        return out
    ops = phases.select(trace, Kind.CPU_OP, columns=("name", "ts", "dur", "tid"))
    if ops.empty:
        return out
    codes, cats = phases.name_codes(ops)
    names = cats.astype(str).tolist()
    otid = column(ops, "tid", np.int64)
    ots = column(ops, "ts", np.int64)
    oend = ots + column(ops, "dur", np.int64)
    for t in np.unique(tid):
        sel = np.flatnonzero(tid == t)
        mine = np.flatnonzero(otid == t)
        # only ops that hold the start of some stall can enclose one: nesting survives the cut
        qs = np.sort(ts[sel])
        k = np.searchsorted(qs, ots[mine], side="left")
        mine = mine[(k < qs.size) & (qs[np.minimum(k, qs.size - 1)] <= oend[mine])]
        if not mine.size:
            continue
        order = mine[np.lexsort((-oend[mine], ots[mine]))]
        s, e = ots[order], oend[order]
        par = intervals.innermost_containers(s, e)
        k = intervals.innermost_enclosing(s, e, par, ts[sel], end[sel])
        for q, i in zip(sel, k):
            chain = []
            while i >= 0:
                chain.append(names[codes[order[i]]])
                i = par[i]
            out[q] = " > ".join(reversed(chain))
    return out


def _totals(stalls: pd.DataFrame, key: str) -> pd.DataFrame:
    g = stalls.groupby(key, sort=False)
    out = g.agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"), max_ns=("dur_ns", "max"),
                idle_after_ns=("idle_after_ns", "sum")).reset_index()
    out["idle_after_ns"] = out["idle_after_ns"].astype(np.int64)
    return out.sort_values(["total_ns", key], ascending=[False, True]).reset_index(drop=True)


def _member(ids: np.ndarray, among: np.ndarray) -> np.ndarray:
    """``np.isin(ids, among)`` for int64 ids, by binary search in ``among`` sorted: numpy's own
    hashes or sorts both sides (0.1 s a call for the ~300 k runtime calls of a big trace)."""
    if not len(ids) or not len(among):
        return np.zeros(len(ids), dtype=bool)
    s = np.sort(among)
    i = np.minimum(np.searchsorted(s, ids), len(s) - 1)
    return s[i] == ids


def compute(trace: Trace, rules: Rules) -> SyncsResult:
    """Every host-blocking call with its cost and attribution (see the module docstring)."""
    acts, index = phases.activities(trace, rules)
    rt = phases.select(trace, Kind.RUNTIME, Kind.DRIVER,
                       columns=("name", "ts", "dur", "tid", "correlation"))
    rcodes, rcats = phases.name_codes(rt)
    rcorr = column(rt, "correlation", np.int64)
    blocking = phases.name_matches(rcodes, rcats, BLOCKING)
    # async copies whose memcpy is pageable (names looked at only where there is a copy)
    is_copy = column(acts, "kind") == int(Kind.MEMCPY)
    if is_copy.any():
        inv, uniq = pd.factorize(acts["name"])
        pageable = np.array(["Pageable" in str(n) for n in uniq], bool)
        pageable_corr = column(acts, "correlation", np.int64)[is_copy & pageable[inv]]
    else:
        pageable_corr = column(acts, "correlation", np.int64)[is_copy]
    blocking |= phases.name_matches(rcodes, rcats, ASYNC_COPY) & _member(rcorr, pageable_corr)
    source = objarrays.full(len(rt), "runtime")
    # cuda_sync events: through their runtime call, or on their own
    sy = phases.select(trace, Kind.SYNC, columns=("name", "ts", "dur", "correlation", "device"))
    scodes, scats = phases.name_codes(sy)
    host_sync = phases.name_matches(scodes, scats, HOST_SYNC_EVENT)
    sy = sy[host_sync]
    scorr = column(sy, "correlation", np.int64)
    poll = phases.name_matches(rcodes, rcats, POLL)
    via_rt = _member(rcorr, scorr[scorr >= 0]) & (rcorr >= 0) & ~poll
    source[via_rt & ~blocking] = "cuda_sync"
    blocking |= via_rt
    alone = sy[~_member(scorr, rcorr[rcorr >= 0]) | (scorr < 0)]
    if not blocking.any() and not len(alone) and not poll.any():
        # no stall and no poll: empty tables, the same for every such trace
        # (tracekit.emptyresult)
        return kept("syncs", lambda: _result(trace, rules, acts, index, rt, rcodes, rcats, rcorr,
                                             blocking, source, sy, scorr, alone, poll),
                    allocator_known=allocations_recorded(trace))
    return _result(trace, rules, acts, index, rt, rcodes, rcats, rcorr, blocking, source, sy,
                   scorr, alone, poll)


def _result(trace, rules, acts, index, rt, rcodes, rcats, rcorr, blocking, source, sy, scorr,
            alone, poll) -> SyncsResult:
    """``compute``'s stalls and polls, attributed, with their totals."""
    b = rt[blocking]
    ts = fnp.r_(column(b, "ts", np.int64), column(alone, "ts", np.int64))
    dur = fnp.r_(column(b, "dur", np.int64), column(alone, "dur", np.int64))
    end = ts + dur
    tid = fnp.r_(column(b, "tid", np.int64), np.full(len(alone), -1, np.int64))
    name = fnp.r_(np.asarray(rcats.astype(str), dtype=object)[rcodes[blocking]],
                 alone["name"].astype(str).to_numpy(object))
    src = fnp.r_(source[blocking], objarrays.full(len(alone), "cuda_sync"))
    corr = fnp.r_(rcorr[blocking], np.full(len(alone), -1, np.int64))

    # device: linked activity / sync event, else the thread's last launch before the call
    device = fnp.r_(np.full(len(b), -1, np.int64), column(alone, "device", np.int64))
    link = pd.concat([
        pd.DataFrame({"c": column(acts, "correlation", np.int64), "d": column(acts, "device")}),
        pd.DataFrame({"c": scorr, "d": column(sy, "device", np.int64)}),
    ]).drop_duplicates("c").set_index("c")["d"]
    got = link.reindex(corr).to_numpy()
    device = np.where((device < 0) & ~pd.isna(got), np.nan_to_num(got, nan=-1), device).astype(np.int64)
    for t in np.unique(tid[device < 0]):
        sel = np.flatnonzero((tid == t) & (device < 0))
        mine = acts[column(acts, "launch_tid") == t].sort_values("launch_ts")
        if mine.empty:
            continue
        k = np.searchsorted(column(mine, "launch_ts"), ts[sel], side="right") - 1
        device[sel] = np.where(k >= 0, column(mine, "device")[np.maximum(k, 0)], -1)
    if len(acts):
        device = np.where(device < 0, int(acts["device"].min()), device)

    # GPU idle after each stall
    idle = np.full(ts.size, np.nan)
    for dev, d in acts.groupby("device"):
        sel = np.flatnonzero(device == dev)
        if sel.size:
            u = intervals.union(column(d, "ts", np.int64), column(d, "end", np.int64))
            busy, nxt = intervals.next_free_start(u, end[sel])
            idle[sel] = np.where(busy, 0.0, np.where(nxt >= 0, (nxt - end[sel]).astype(float),
                                                     np.nan))

    chain = op_chains(trace, tid, ts, end)
    ann = index.enclosing(tid, ts, end) if not index.table.empty else np.full(ts.size, -1)
    phase = np.where(ann >= 0, column(index.table, "phase", object)[np.maximum(ann, 0)]
                     if not index.table.empty else phases.OTHER, phases.OTHER)
    site = np.array([f"{c} > {n}" if c else n for c, n in zip(chain, name)], dtype=object)
    stalls = pd.DataFrame({
        "ts": ts, "end": end, "dur_ns": dur, "name": name, "tid": tid, "device": device,
        "op_chain": chain, "call_site": site, "phase": phase.astype(object),
        "step": phases.step_of(phases.profiler_steps(trace, rules), ts),
        "idle_after_ns": idle, "source": src,
    }, columns=STALL_COLUMNS).sort_values("ts", kind="stable").reset_index(drop=True)
    by_step = stalls.groupby("step").agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"),
                                         idle_after_ns=("idle_after_ns", "sum")).reset_index()
    by_step["idle_after_ns"] = by_step["idle_after_ns"].astype(np.int64)
    pl = _polls(trace, rules, rt[poll], rt, rcodes, rcats, index)
    known = allocations_recorded(trace)
    alloc = column(pl, "allocator", bool) if len(pl) else np.zeros(0, bool)
    return SyncsResult(
        stalls=stalls,
        by_call_site=_totals(stalls, "call_site"),
        by_phase=_totals(stalls, "phase"),
        by_step=by_step,
        count=len(stalls),
        total_ns=int(stalls["dur_ns"].sum()),
        idle_after_ns=int(np.nansum(column(stalls, "idle_after_ns"))),
        polls=pl,
        polls_by_call_site=_poll_totals(pl, "call_site"),
        polls_by_step=_poll_steps(pl),
        poll_count=len(pl),
        poll_total_ns=int(pl["dur_ns"].sum()) if len(pl) else 0,
        allocator_poll_count=int(alloc.sum()),
        allocator_poll_total_ns=int(column(pl, "dur_ns", np.int64)[alloc].sum()) if len(pl) else 0,
        allocator_known=known,
    )


def _allocations(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(tid, ts) of the GPU allocations (``[memory]`` bytes > 0 on a CUDA/HIP device)."""
    m = trace.memory
    if m is None or not len(m):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sel = (column(m, "bytes", np.int64) > 0) & fnp.isin(column(m, "device_type"), (1, 6))
    return column(m, "tid", np.int64)[sel], column(m, "ts", np.int64)[sel]


def _polls(trace: Trace, rules: Rules, p: pd.DataFrame, rt: pd.DataFrame, rcodes, rcats,
           index) -> pd.DataFrame:
    """Every poll call with its attribution (module docstring)."""
    if not len(p):
        return _empty(POLL_COLUMNS)
    ts = column(p, "ts", np.int64)
    dur = column(p, "dur", np.int64)
    end = ts + dur
    tid = column(p, "tid", np.int64)
    name = p["name"].astype(str).to_numpy(object)
    allocator = _allocator(tid, end, trace, rt, rcodes, rcats)
    chain = op_chains(trace, tid, ts, end)
    ann = index.enclosing(tid, ts, end) if not index.table.empty else np.full(ts.size, -1)
    phase = np.where(ann >= 0, column(index.table, "phase", object)[np.maximum(ann, 0)]
                     if not index.table.empty else phases.OTHER, phases.OTHER)
    site = np.array([f"{c} > {n}" if c else n for c, n in zip(chain, name)], dtype=object)
    return pd.DataFrame({
        "ts": ts, "end": end, "dur_ns": dur, "name": name, "tid": tid, "op_chain": chain,
        "call_site": site, "phase": phase.astype(object),
        "step": phases.step_of(phases.profiler_steps(trace, rules), ts), "allocator": allocator,
    }, columns=POLL_COLUMNS).sort_values("ts", kind="stable").reset_index(drop=True)


def allocations_recorded(trace: Trace) -> bool:
    """Whether the trace has the ``[memory]`` events (GPU allocations) that tell the allocator's
    polls (``SyncsResult.allocator_known``)."""
    return bool(_allocations(trace)[0].size)


def allocator_polls(trace: Trace, tid: np.ndarray, end: np.ndarray) -> np.ndarray:
    """bool per poll call (its thread ``tid`` and end ``end``, ns): the caching allocator's, by
    the rule of the module docstring (its thread's next GPU allocation comes before its
    thread's next runtime call other than a poll or the allocator's own). All False without
    ``[memory]`` events (``SyncsResult.allocator_known``)."""
    rt = phases.select(trace, Kind.RUNTIME, Kind.DRIVER, columns=("name", "ts", "tid"))
    rcodes, rcats = phases.name_codes(rt)
    return _allocator(np.asarray(tid, np.int64), np.asarray(end, np.int64), trace, rt, rcodes,
                      rcats)


def _allocator(tid: np.ndarray, end: np.ndarray, trace: Trace, rt: pd.DataFrame, rcodes,
               rcats) -> np.ndarray:
    """``allocator_polls`` with the trace's runtime calls (``rt``, their name codes) given."""
    a_tid, a_ts = _allocations(trace)
    allocator = np.zeros(tid.size, bool)
    if not a_ts.size:
        return allocator
    other = ~phases.name_matches(rcodes, rcats, POLL) & \
        ~phases.name_matches(rcodes, rcats, ALLOCATOR_CALL)
    o_tid = column(rt, "tid", np.int64)[other]
    o_ts = column(rt, "ts", np.int64)[other]
    for t in np.unique(tid):
        sel = np.flatnonzero(tid == t)
        at = np.sort(a_ts[a_tid == t])
        if not at.size:
            continue
        ot = np.sort(o_ts[o_tid == t])
        k = np.searchsorted(at, end[sel], side="left")
        has = k < at.size
        nxt = at[np.minimum(k, at.size - 1)]
        j = np.searchsorted(ot, end[sel], side="left")
        call = np.where(j < ot.size, ot[np.minimum(j, max(ot.size - 1, 0))] if ot.size else 0,
                        np.iinfo(np.int64).max)
        allocator[sel] = has & (nxt <= call)
    return allocator


def _poll_totals(polls: pd.DataFrame, key: str) -> pd.DataFrame:
    if not len(polls):
        return _empty([key, "count", "total_ns", "max_ns", "allocator_count"])
    g = polls.groupby(key, sort=False)
    out = g.agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"), max_ns=("dur_ns", "max"),
                allocator_count=("allocator", "sum")).reset_index()
    out["allocator_count"] = out["allocator_count"].astype(np.int64)
    return out.sort_values(["total_ns", key], ascending=[False, True]).reset_index(drop=True)


def _poll_steps(polls: pd.DataFrame) -> pd.DataFrame:
    cols = ["step", "count", "total_ns", "allocator_count", "allocator_ns"]
    if not len(polls):
        return _empty(cols)
    t = polls.assign(a_ns=np.where(column(polls, "allocator", bool),
                                   column(polls, "dur_ns", np.int64), 0))
    out = t.groupby("step").agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"),
                                allocator_count=("allocator", "sum"),
                                allocator_ns=("a_ns", "sum")).reset_index()
    out["allocator_count"] = out["allocator_count"].astype(np.int64)
    return out[cols]
