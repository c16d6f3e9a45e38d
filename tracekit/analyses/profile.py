"""Where one rank's step goes, by phase and by op: what a job compares across its ranks.

Over the steps of the trace (``tracekit.steps``: from the first step's CPU start to the last
one's CPU end), per step on average:

- ``phases``: per phase (``tracekit.phases``), the GPU time of its activities (kernels, copies,
  memsets, summed over streams; an activity counts when its launch, else its start, lies in the
  steps) and its host time: the time inside that phase's annotations, less the phase
  annotations nested in them (so the host times of the phases add up to the annotated time of
  each thread);
- ``host_ops``: CPU ops and annotations by name (digits replaced by ``#``: ``## backward 12 ##``
  of every step is one name), their *self* time (duration less the ops and annotations nested
  in them on the same thread: the self times of a thread add up to its recorded time), the
  ``TOP`` largest;
- ``kernels``: GPU activities by name, their time, the ``TOP`` largest.

Names are cut to ``NAME_CHARS`` characters. ``tracekit.ranks.straggler`` reads these of every
rank to say why the straggler is slower than the median rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import intervals, phases
from tracekit import steps as steps_mod
from tracekit.phases import Rules
from tracekit.trace.model import Trace
from tracekit.frames import column, frame

TOP = 60
"""Host ops and kernels kept (largest first)."""
NAME_CHARS = 160
"""Names longer than this are cut (templated kernel names run to thousands of characters)."""
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class ProfileResult:
    """Per step on average (ns), over ``steps`` steps."""

    steps: int
    """Steps averaged over (0: the trace has none; every figure is then over the whole trace)."""
    phases: pd.DataFrame
    """``phase, gpu_ns, host_ns``, largest GPU time first."""
    host_ops: pd.DataFrame
    """``name, self_ns, count``: the ``TOP`` CPU ops and annotations with most self time."""
    kernels: pd.DataFrame
    """``name, gpu_ns, count``: the ``TOP`` GPU activity names with most time."""


def _cut(names: np.ndarray) -> np.ndarray:
    return np.array([n if len(n) <= NAME_CHARS else n[: NAME_CHARS - 3] + "..." for n in
                     names.astype(str)], dtype=object)


def op_names(names) -> np.ndarray:
    """Host op names as ``host_ops`` lists them: digits replaced by ``#``, cut to
    ``NAME_CHARS``."""
    return _cut(np.array([_DIGITS.sub("#", n) for n in np.asarray(names).astype(str)],
                         dtype=object))


def _sums(keys: np.ndarray, values: np.ndarray, *, sort: bool
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct keys, int64 sum of ``values`` per key, count per key): the keys sorted
    (``sort``) or in the order they first appear; numpy, as a pandas group-by costs ~1 ms a call
    whatever the number of rows."""
    codes, uniq = fnp.factorize(np.asarray(keys), sort=sort)
    known = codes >= 0  # a missing key (None) is in no group, as a group-by drops it
    total = np.zeros(len(uniq), np.int64)
    np.add.at(total, codes[known], np.asarray(values, np.int64)[known])
    return (np.asarray(uniq, dtype=object), total,
            np.bincount(codes[known], minlength=len(uniq)).astype(np.int64))


def _spread_over(keys: np.ndarray, got: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """``got``'s sums (``_sums``) at ``keys`` (a sorted superset of its keys), 0 elsewhere."""
    out = np.zeros(len(keys), np.float64)
    if len(got[0]):
        out[np.searchsorted(keys, got[0])] = got[1]
    return out


def _self_times(tid: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's duration less its direct children's on the same thread."""
    own = (end - ts).astype(np.int64)
    out = own.copy()
    for t in np.unique(tid):
        sel = np.flatnonzero(tid == t)
        order = sel[np.lexsort((-end[sel], ts[sel]))]
        par = intervals.innermost_containers(ts[order], end[order])
        child = par >= 0
        np.subtract.at(out, order[par[child]], own[order[child]])
    return np.maximum(out, 0)


def op_counts(trace: Trace, rules: Rules) -> dict[str, float]:
    """Every host op's count per step on average (``host_ops``' names, every one, not the
    ``TOP``): what a job compares across its ranks without reading their traces again
    (``tracekit.analyses.skeleton``, ``tracekit.ranks.straggler.extra_op_shares``)."""
    st = steps_mod.compute(trace, rules)
    n = len(st.steps)
    ops, codes, cats = phases.host_ops(trace)
    if not len(ops):
        return {}
    if n:
        lo, hi = int(st.steps["cpu_start"].min()), int(st.steps["cpu_end"].max())
        ots = column(ops, "ts", np.int64)
        inside = (ots >= lo) & (ots < hi)
    else:
        inside = np.ones(len(ops), bool)
    c = codes[inside]
    c = c[c >= 0]
    per_code = np.bincount(c, minlength=len(cats))
    used = np.flatnonzero(per_code)
    names = _cut(np.array([_DIGITS.sub("#", n) for n in np.asarray(cats)[used].astype(str)],
                          dtype=object))
    out: dict[str, float] = {}
    for name, k in zip(names.tolist(), per_code[used].tolist()):
        out[name] = out.get(name, 0.0) + k / max(n, 1)
    return out


def compute(trace: Trace, rules: Rules, *, steps: steps_mod.StepsResult | None = None,
            top_ops: int | None = TOP) -> ProfileResult:
    """The rank's profile (see the module docstring); ``steps``: the steps result when the
    caller has it; ``top_ops``: the host ops kept (None: every one, as
    ``tracekit.ranks.whatif`` compares two ranks' ops)."""
    st = steps_mod.compute(trace, rules) if steps is None else steps
    n = len(st.steps)
    if n:
        lo = int(column(st.steps, "cpu_start", np.int64).min())
        hi = int(column(st.steps, "cpu_end", np.int64).max())
    else:
        lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    per = max(n, 1)

    # GPU: activities launched (else started) within the steps
    acts, index = phases.activities(trace, rules)
    at = np.where(column(acts, "launch_ts", np.int64) >= 0, column(acts, "launch_ts", np.int64),
                  column(acts, "ts", np.int64))
    within = (at >= lo) & (at < hi)  # the columns it reads, not a frame of those rows
    dur = (column(acts, "end", np.int64) - column(acts, "ts", np.int64))[within]
    gpu_phase = _sums(column(acts, "phase", object)[within], dur, sort=True)
    names, total, count = _sums(column(acts, "name", object)[within], dur, sort=False)
    top = np.argsort(-total, kind="stable")[:TOP]
    kernels = frame({"name": _cut(names[top]), "gpu_ns": total[top].astype(float) / per,
                            "count": count[top].astype(float) / per})

    # host: phase annotations' exclusive time
    ann = index.table
    if len(ann):
        ats, aend = column(ann, "ts", np.int64), column(ann, "end", np.int64)
        inside = (ats >= lo) & (ats < hi)
        ex = _self_times(column(ann, "tid", np.int64), ats, aend)
        host_phase = _sums(column(ann, "phase", object)[inside], ex[inside], sort=True)
    else:
        host_phase = _sums(np.zeros(0, object), np.zeros(0, np.int64), sort=True)
    # per phase of either (sorted by name), then by GPU and host time, largest first
    phase = np.union1d(gpu_phase[0], host_phase[0]).astype(object)
    gpu_ns = _spread_over(phase, gpu_phase) / per
    host_ns = _spread_over(phase, host_phase) / per
    order = np.lexsort((-host_ns, -gpu_ns))
    phase_table = frame({"phase": phase[order], "gpu_ns": gpu_ns[order],
                                "host_ns": host_ns[order]})

    # host ops: self time by name
    ops, codes, cats = phases.host_ops(trace)
    if len(ops):
        ots = column(ops, "ts", np.int64)
        oend = ots + column(ops, "dur", np.int64)
        self_ns = _self_times(column(ops, "tid", np.int64), ots, oend)
        inside = (ots >= lo) & (ots < hi)
        general = np.array([_DIGITS.sub("#", n) for n in cats.astype(str)], dtype=object)
        names, total, count = _sums(general[codes[inside]], self_ns[inside], sort=False)
        top = np.argsort(-total, kind="stable")[:top_ops]
        host_ops = frame({"name": _cut(names[top]),
                                 "self_ns": total[top].astype(float) / per,
                                 "count": count[top].astype(float) / per})
    else:
        host_ops = pd.DataFrame({"name": pd.Series(dtype=object),
                                 "self_ns": pd.Series(dtype=float),
                                 "count": pd.Series(dtype=float)})
    return ProfileResult(steps=n, phases=phase_table, host_ops=host_ops, kernels=kernels)
