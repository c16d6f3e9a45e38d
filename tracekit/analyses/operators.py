"""Operators: every host op (torch's ``aten::`` ops and the other CPU ops, and the user's
``record_function`` annotations) with its calls, CPU time and the GPU time of what it launched,
over all steps and per step; what TensorBoard's profiler plugin calls its operator view.

For each host event (``Kind.CPU_OP``, ``Kind.ANNOTATION``), on its thread:

- **CPU total** = its duration; **CPU self** = its duration minus the durations of the events it
  directly contains (its children: the innermost enclosing host event of a child is it), never
  below 0;
- **GPU self** = the GPU time (kernels, memcpys, memsets) of the activities whose launching
  runtime call it is the innermost host event around; **GPU total** = the GPU time of the
  activities launched inside it at any depth (its own and its descendants');
- **step**: the step (``tracekit.steps``) whose CPU span holds its start, -1 outside steps;
- **name**: as written, but an annotation's step or batch number is left out
  (``## forward {i} ##``: ``step_free_name``), so one op is one row over all steps;
- **input shapes**: the ``Input Dims`` ``record_shapes`` wrote, where the trace records them and
  the loader keeps them (``Trace.args.input_dims``: embedding ops and ``tracekit_tbe::`` ranges,
  ``trace/model.py``); "" elsewhere.

Rows are per (name, input shapes): an op without recorded shapes is one row per name. A pure
function of the parsed trace; the per-thread nesting (``host_tree``) is shared with
``tracekit.analyses.kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import intervals, phases, steps
from tracekit.analyses import _groups as g
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace
from tracekit.frames import column

OP_COLUMNS = ["name", "kind", "input_dims", "calls", "cpu_total_ns", "cpu_self_ns", "gpu_self_ns",
              "gpu_total_ns", "activities"]
"""The columns of ``OperatorsResult.ops`` (``by_step``: ``step`` first)."""


@dataclass(frozen=True)
class HostTree:
    """The host events of a trace (annotations and CPU ops) nested per thread: what the
    operators and the kernels ask of the host side. Row ids are rows of ``phases.host_ops``."""

    order: np.ndarray
    """Host-op row ids sorted by (thread, start, end descending): the sorted positions'."""
    starts: np.ndarray
    """Their starts, each thread shifted past the one before (``shift``), so one sorted array
    holds every thread and no interval of one thread contains another thread's."""
    ends: np.ndarray
    parents: np.ndarray
    """Per sorted position: the position of the innermost host event containing it, -1 for none."""
    shift: dict
    """tid -> what its times were shifted by."""

    def enclosing(self, tid: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Sorted position of the innermost host event around each ``[ts, end]`` on its thread,
        -1 for none (a thread without host events: -1)."""
        tid = np.asarray(tid, np.int64)
        uniq, k = np.unique(tid, return_inverse=True)
        o = np.array([self.shift.get(int(t), 0) for t in uniq], np.int64)[k]
        known = np.array([int(t) in self.shift for t in uniq], bool)[k]
        out = np.full(tid.size, -1, np.int64)
        if known.any() and self.starts.size:
            out[known] = intervals.innermost_enclosing(self.starts, self.ends, self.parents,
                                                       np.asarray(ts, np.int64)[known] + o[known],
                                                       np.asarray(end, np.int64)[known] + o[known])
        return out


def _nesting_order(thread: np.ndarray, ts: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The order ``intervals.innermost_containers`` needs: by (thread, start, end descending).
    The events come sorted by start (``Trace.events``): a stable sort by thread (a radix sort of
    small integers) keeps that order within each thread, and only the runs of equal starts are
    sorted again by end."""
    if not bool(np.all(ts[1:] >= ts[:-1])):  # not in start order: sort it all
        return np.lexsort((-e, s))
    small = thread.astype(np.int16) if thread.size and int(thread.max()) < 2**15 else thread
    order = np.argsort(small, kind="stable")
    so = s[order]
    tie = np.flatnonzero(so[1:] == so[:-1])
    if tie.size:  # outer first among equal starts
        idx = np.unique(np.concatenate([tie, tie + 1]))
        sub = np.lexsort((-e[order[idx]], so[idx]))
        order[idx] = order[idx][sub]
    return order


def host_tree(trace: Trace) -> HostTree:
    """The nesting of ``phases.host_ops`` per thread (memoised per trace object)."""

    def compute() -> HostTree:
        ops, _, _ = phases.host_ops(trace)
        tid = column(ops, "tid", np.int64)
        ts = column(ops, "ts", np.int64)
        end = ts + column(ops, "dur", np.int64)
        if not tid.size:
            z = np.zeros(0, np.int64)
            return HostTree(z, z, z, z, {})
        lo, hi = int(ts.min()), int(end.max())
        span = hi - lo + 1
        tids, thread = np.unique(tid, return_inverse=True)
        thread = thread.reshape(-1)
        shift = {int(t): int(i * span - lo) for i, t in enumerate(tids)}
        off = (thread * span - lo).astype(np.int64)
        s, e = ts + off, end + off
        order = _nesting_order(thread, ts, s, e)
        s, e = s[order], e[order]
        return HostTree(order, s, e, intervals.innermost_containers(s, e), shift)

    return phases.derived(trace, None, "host_tree", compute)


@dataclass(frozen=True)
class OperatorsResult:
    """Every host op of a trace, over all steps and per step."""

    ops: pd.DataFrame
    """One row per (op name, input shapes) over the whole trace: ``OP_COLUMNS`` — ``kind``
    (``cpu_op`` or ``annotation``), ``input_dims`` (recorded input shapes as compact JSON, ""
    where none), ``calls``, ``cpu_total_ns, cpu_self_ns, gpu_self_ns, gpu_total_ns``,
    ``activities`` (GPU activities launched inside it at any depth); largest GPU total first,
    then largest CPU total."""
    by_step: pd.DataFrame
    """The same per step: ``step`` (-1: outside every step), then ``OP_COLUMNS``."""
    steps: list
    """The steps found (``tracekit.steps``), in order."""
    gpu_ns: int
    """GPU time of every activity (the whole a ``gpu_self_ns`` column adds up to, with
    ``unlaunched_gpu_ns``)."""
    unlaunched_gpu_ns: int
    """GPU time of activities no host op is known to have launched (no runtime call linked, or
    launched outside every host op)."""


def _aggregate(keys: list[np.ndarray], f: dict, names: dict) -> pd.DataFrame:
    """One row per group of equal ``keys`` (``key0``... and the ``OP_COLUMNS``), largest GPU
    total first, then largest CPU total."""
    gid, first, n = g.groups(*keys)
    out = pd.DataFrame({
        **{f"key{i}": k[first] for i, k in enumerate(keys)},
        "name": names["name"][f["name"][first]], "kind": f["kind"][first], "input_dims": names["dims"][f["dims"][first]],
        "calls": g.total(gid, n), "cpu_total_ns": g.total(gid, n, f["dur"]), "cpu_self_ns": g.total(gid, n, f["self"]),
        "gpu_self_ns": g.total(gid, n, f["gpu_self"]), "gpu_total_ns": g.total(gid, n, f["gpu_total"]),
        "activities": g.total(gid, n, f["acts"]),
    })
    return out.sort_values(["gpu_total_ns", "cpu_total_ns"], ascending=False, kind="stable", ignore_index=True)


def compute(trace: Trace, rules: Rules) -> OperatorsResult:
    """Every host op of ``trace``, with its CPU and GPU time, over all steps and per step."""
    ops, codes, cats = phases.host_ops(trace)
    tree = host_tree(trace)
    n = len(ops)
    st = steps.compute(trace, rules)
    step_list = st.steps["step"].astype(int).tolist() if len(st.steps) else []
    acts, _ = phases.activities(trace, rules)
    act_dur = (acts["end"] - acts["ts"]).to_numpy(np.int64)
    gpu_ns = int(act_dur.sum())
    cols = OP_COLUMNS
    if not n:
        empty = pd.DataFrame({c: [] for c in cols})
        return OperatorsResult(empty, pd.DataFrame({c: [] for c in ["step", *cols]}), step_list, gpu_ns, gpu_ns)

    dur = column(ops, "dur", np.int64)
    order, parents = tree.order, tree.parents
    # CPU self: minus the children's durations (positions are sorted; map back to rows)
    child = np.flatnonzero(parents >= 0)
    kids = np.rint(np.bincount(parents[child], weights=dur[order[child]], minlength=n)).astype(np.int64)
    self_pos = np.maximum(dur[order] - kids, 0)
    # GPU: each activity to the innermost host op around its launch, then up the ancestors
    gpu_self = np.zeros(n, np.int64)
    gpu_total = np.zeros(n, np.int64)
    count = np.zeros(n, np.int64)
    launched = np.flatnonzero(column(acts, "launch_ts", np.int64) >= 0)
    unlaunched = gpu_ns
    if launched.size:
        ltid = column(acts, "launch_tid", np.int64)[launched]
        lts = column(acts, "launch_ts", np.int64)[launched]
        pos = tree.enclosing(ltid, lts, lts)
        inside = pos >= 0
        pos, d = pos[inside], act_dur[launched][inside]
        unlaunched = gpu_ns - int(d.sum())
        gpu_self += np.rint(np.bincount(pos, weights=d, minlength=n)).astype(np.int64)
        at, ds = [], []
        while pos.size:  # one level of ancestors a round, counted once at the end
            at.append(pos)
            ds.append(d)
            pos = parents[pos]
            keep = pos >= 0
            pos, d = pos[keep], d[keep]
        every, every_d = np.concatenate(at), np.concatenate(ds)
        gpu_total += np.rint(np.bincount(every, weights=every_d, minlength=n)).astype(np.int64)
        count += np.bincount(every, minlength=n)
    # back from sorted positions to rows of ``ops``
    row_self = np.empty(n, np.int64)
    row_self[order] = self_pos
    row = {"gpu_self": np.empty(n, np.int64), "gpu_total": np.empty(n, np.int64), "acts": np.empty(n, np.int64)}
    row["gpu_self"][order] = gpu_self
    row["gpu_total"][order] = gpu_total
    row["acts"][order] = count

    name_code, name_vals = _step_free_names(codes, cats, rules)
    kind = np.where(_kinds(trace, ops) == int(Kind.ANNOTATION), "annotation", "cpu_op").astype(object)
    dims_code, dims_vals = g.codes(_input_dims(trace, ops, n))
    ts = column(ops, "ts", np.int64)
    win = pd.DataFrame({"ts": column(st.steps, "cpu_start", np.int64), "end": column(st.steps, "cpu_end", np.int64),
                        "step": column(st.steps, "step", np.int64)}) if len(st.steps) else pd.DataFrame()
    step = phases.step_of(win, ts) if len(win) else np.full(n, -1, np.int64)
    f = {"name": name_code, "kind": kind, "dims": dims_code, "dur": dur, "self": row_self,
         "gpu_self": row["gpu_self"], "gpu_total": row["gpu_total"], "acts": row["acts"]}
    names = {"name": name_vals, "dims": np.asarray(dims_vals, dtype=object)}
    total = _aggregate([name_code, dims_code], f, names)[cols]
    lo = int(step.min()) if step.size else 0
    per_step = _aggregate([step - lo, name_code, dims_code], f, names)
    per_step["step"] = per_step["key0"] + lo
    per_step = per_step.sort_values(["step", "gpu_total_ns", "cpu_total_ns"], ascending=[True, False, False],
                                    kind="stable", ignore_index=True)[["step", *cols]]
    return OperatorsResult(total, per_step, step_list, gpu_ns, unlaunched)


def step_free_name(name: str, rules: Rules) -> str:
    """An annotation's name without its step or batch number, so that one op is one row over
    all steps: ``ProfilerStep#7`` -> ``ProfilerStep#{step}``, ``## forward 7 ##`` ->
    ``## forward {i} ##`` (the rules' ``profiler_step`` and ``batch_index`` patterns); any other
    name as it is."""
    import re

    for pattern, word in ((rules.profiler_step, "{step}"), (rules.batch_index, "{i}")):
        m = re.search(pattern, name)
        if m and m.group(1) is not None:
            return name[:m.start(1)] + word + name[m.end(1):]
    return name


def _step_free_names(codes: np.ndarray, cats: pd.Index, rules: Rules) -> tuple[np.ndarray, np.ndarray]:
    """The host ops' names (``step_free_name``) as codes into the distinct names, worked out
    once per name."""
    if not len(cats):
        return np.zeros(len(codes), np.int64), np.array([], dtype=object)
    free = [step_free_name(str(c), rules) for c in cats]
    uniq, inv = np.unique(np.array(free, dtype=object), return_inverse=True)
    return inv.reshape(-1)[codes].astype(np.int64), uniq.astype(object)


def _kinds(trace: Trace, ops: pd.DataFrame) -> np.ndarray:
    """The ``Kind`` of each row of ``phases.host_ops`` (it selects annotations and CPU ops in
    the events' order)."""
    kind = column(trace.events, "kind")
    mask = phases.of_kinds(kind, (Kind.ANNOTATION, Kind.CPU_OP))
    out = kind[mask]
    assert out.size == len(ops)
    return out


def _input_dims(trace: Trace, ops: pd.DataFrame, n: int) -> np.ndarray:
    """The recorded input shapes of each row of ``phases.host_ops`` ("" where none)."""
    out = np.full(n, "", dtype=object)
    args = trace.args
    if args is None or not len(args) or "input_dims" not in args:
        return out
    dims = args["input_dims"].astype(str).to_numpy(object)
    has = np.flatnonzero(dims != "")
    if not has.size:
        return out
    mask = phases.of_kinds(column(trace.events, "kind"), (Kind.ANNOTATION, Kind.CPU_OP))
    row_of_event = np.full(mask.size, -1, np.int64)
    row_of_event[mask] = np.arange(int(mask.sum()))
    ev = column(args, "event", np.int64)[has]
    rows = row_of_event[ev]
    ok = rows >= 0
    out[rows[ok]] = dims[has][ok]
    return out


__all__ = ["HostTree", "OP_COLUMNS", "OperatorsResult", "compute", "host_tree", "step_free_name"]
