"""Optimizer -> lookup gap: how long the GPU waits between a step's optimizer and the next lookup.

For each step's optimizer (GPU activities of phase ``Rules.optimizer_phase``) and the next
batch's embedding lookup (activities of phase ``Rules.lookup_phase``):

- optimizer end = last end of the optimizer's activities, lookup start = first start of the
  lookup's activities;
- gap = lookup start - optimizer end (negative: they overlap);
- overlap = length of [optimizer first start, optimizer end] ∩ [lookup start, lookup last end];
- idle = time within (optimizer end, lookup start) when no stream of the device is busy
  (0 when the gap is not positive).

"Next batch": when the phases carry TorchRec's batch index (``## optimizer {i} ##``, and the
lookup inside ``## start_embedding_lookup {j} ##`` or ``## forward {j} ##``), optimizer i pairs
with lookup i+1; activities without an index are then left out, as long as at least half of
each phase's activities have one. Otherwise (``matched_by = "time order"``) an optimizer occurrence pairs with
the next lookup occurrence in launch order. A lookup occurrence is then a run of lookup
activities launched one after another (no activity of another phase launched between
them), and an optimizer occurrence is all optimizer activities launched between two lookup
occurrences, so ``Optimizer.step#Shampoo.step`` and ``Optimizer.step#EMAOptimizer.step`` of
one step are one optimizer. Time order cannot see a lookup launched before the optimizer;
batch indices can.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import intervals
from tracekit import phases
from tracekit.phases import Rules
from tracekit.trace.model import Trace
from tracekit.frames import column, of_rows

MATCH_BATCH = "batch index"
MATCH_TIME = "time order"

COLUMNS = ["device", "step", "optimizer_batch", "lookup_batch", "optimizer_start",
           "optimizer_end", "lookup_start", "lookup_end", "gap_ns", "overlap_ns", "idle_ns",
           "matched_by"]


@dataclass(frozen=True)
class GapsResult:
    """One row per optimizer occurrence that has a next lookup."""

    gaps: pd.DataFrame
    """Columns: ``device, step`` (ProfilerStep of the optimizer's first launch, -1 none),
    ``optimizer_batch, lookup_batch`` (-1 unknown), ``optimizer_start, optimizer_end,
    lookup_start, lookup_end, gap_ns, overlap_ns, idle_ns`` (ns), ``matched_by``."""
    optimizer_occurrences: int
    """Optimizer occurrences seen (with or without a following lookup)."""
    lookup_occurrences: int
    mean_gap_ns: float | None
    median_gap_ns: float | None
    mean_idle_ns: float | None
    mean_overlap_ns: float | None
    note: str
    """Why there are no rows, or how they were matched."""


def _occurrences(a: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """Group one phase's activities by ``key``: start, end, first launch, batch; by launch."""
    launch = column(a, "launch_ts")
    g = pd.DataFrame({"key": key, "ts": column(a, "ts"), "end": column(a, "end"),
                      "launch": np.where(launch >= 0, launch, column(a, "ts")),
                      "batch": column(a, "batch")}).groupby("key")
    occ = g.agg(start=("ts", "min"), end=("end", "max"), launch=("launch", "min"),
                batch=("batch", "max"))
    return occ.sort_values("launch").reset_index()


def _device_gaps(d: pd.DataFrame, rules: Rules, steps: pd.DataFrame) -> tuple[list, int, int, str]:
    phase = column(d, "phase", object)
    if not ((phase == rules.optimizer_phase).any() or (phase == rules.lookup_phase).any()):
        return [], 0, 0, ""  # neither phase on this device: no occurrence of either
    # in launch order (GPU start order for activities without a launch)
    launch = np.where(column(d, "launch_ts") >= 0, column(d, "launch_ts"), column(d, "ts"))
    d = d.assign(launch_ts=launch).sort_values(["launch_ts", "ts"], kind="stable")
    d = d.reset_index(drop=True)
    opt = d[column(d, "phase", object) == rules.optimizer_phase]
    look = d[column(d, "phase", object) == rules.lookup_phase]
    # Batch indices decide when most activities of both phases carry one; the few without
    # (e.g. a lookup launched before the profiling window's first annotation) are left out.
    by_batch = bool(len(opt) and len(look) and (opt["batch"] >= 0).mean() >= 0.5
                    and (look["batch"] >= 0).mean() >= 0.5)
    if by_batch:
        opt = opt[column(opt, "batch") >= 0]
        look = look[column(look, "batch") >= 0]
        o = _occurrences(opt, column(opt, "batch", np.int64))
        lk = _occurrences(look, column(look, "batch", np.int64))
        j = pd.Index(lk["key"]).get_indexer(o["key"] + 1) if len(lk) else np.zeros(len(o), int) - 1
        matched = MATCH_BATCH
    else:
        # lookup occurrences: runs of lookup activities launched one after another; an
        # optimizer occurrence: all optimizer activities launched between two lookup runs
        run = np.cumsum(fnp.r_(True, np.diff(look.index.to_numpy()) != 1)) if len(look) else \
            np.zeros(0, np.int64)
        lk = _occurrences(look, run)
        m = np.searchsorted(column(lk, "launch"), column(opt, "launch_ts"), side="right")
        o = _occurrences(opt, m)
        j = np.where(column(o, "key") < len(lk), column(o, "key"), -1)
        matched = MATCH_TIME
    if o.empty or lk.empty:
        return [], len(o), len(lk), ""
    ok = j >= 0
    o = o[ok]
    j = j[ok]
    rows = []
    if len(o):
        ls = column(lk, "start")[j]
        le = column(lk, "end")[j]
        os_, oe = column(o, "start"), column(o, "end")
        gap = ls - oe
        overlap = np.maximum(0, np.minimum(oe, le) - np.maximum(os_, ls))
        busy = intervals.union(column(d, "ts", np.int64), column(d, "end", np.int64))
        covered = intervals.covered_in_windows(busy, oe, np.maximum(ls, oe))
        idle = np.where(gap > 0, gap - covered, 0)
        step = phases.step_of(steps, column(o, "launch"))
        dev = int(d["device"].iloc[0])
        for k in range(len(o)):
            rows.append((dev, int(step[k]), int(o["batch"].iloc[k]) if by_batch else -1,
                         int(lk["batch"].iloc[j[k]]) if by_batch else -1,
                         int(os_[k]), int(oe[k]), int(ls[k]), int(le[k]), int(gap[k]),
                         int(overlap[k]), int(idle[k]), matched))
    return rows, len(o) + int((~ok).sum()), len(lk), matched


def compute(trace: Trace, rules: Rules) -> GapsResult:
    """Optimizer -> next lookup gaps (see the module docstring)."""
    acts, _ = phases.activities(trace, rules)
    steps = phases.profiler_steps(trace, rules)
    rows: list = []
    n_opt = n_look = 0
    how = set()
    phase = column(acts, "phase", object)
    either = (phase == rules.optimizer_phase).any() or (phase == rules.lookup_phase).any()
    # a device with neither phase has no occurrence of either (``_device_gaps``): without any
    # on the trace, no device's group-by (~1 ms) is needed
    for _, d in acts.groupby("device", sort=True) if either else ():
        r, no, nl, m = _device_gaps(d, rules, steps)
        rows += r
        n_opt += no
        n_look += nl
        if m:
            how.add(m)
    table = of_rows(rows, COLUMNS)
    if acts.empty:
        note = "no GPU activity"
    elif n_opt == 0:
        note = f"no GPU activity in phase {rules.optimizer_phase!r}"
    elif n_look == 0:
        note = f"no GPU activity in phase {rules.lookup_phase!r}"
    elif table.empty:
        note = "no optimizer is followed by a lookup"
    else:
        note = "matched by " + " and ".join(sorted(how))
    gap = column(table, "gap_ns", np.float64)
    return GapsResult(
        gaps=table, optimizer_occurrences=n_opt, lookup_occurrences=n_look,
        mean_gap_ns=float(gap.mean()) if gap.size else None,
        median_gap_ns=float(np.median(gap)) if gap.size else None,
        mean_idle_ns=float(table["idle_ns"].mean()) if gap.size else None,
        mean_overlap_ns=float(table["overlap_ns"].mean()) if gap.size else None,
        note=note,
    )
