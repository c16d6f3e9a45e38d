"""Stream overlap: busy time per stream, pairwise overlap, and the compute/communication/memcpy classes.

busy(S) is the union of the activity intervals (kernels, memcpys, memsets) on stream S of one
device. For every pair of streams of a device, |busy(A) ∩ busy(B)|.

Classes, per device: *communication* = kernels whose name matches ``Rules.communication``
(NCCL), *compute* = all other kernels, *memcpy* = memcpys and memsets. Then

- overlap ratio of communication = |comm ∩ compute| / |comm| (HTA's comm_comp_overlap),
- exposed communication = |comm \\ compute|,
- exposed memcpy = |memcpy \\ (compute ∪ comm)|.

Trace-wide figures sum the per-device lengths (the ratio is a ratio of those sums). All
interval work is vectorised (``tracekit.intervals``).

The pairwise table holds the pairs of a device's ``MAX_PAIR_STREAMS`` busiest streams (all of
them on any real trace: a few to a few dozen streams); a device with more says so in a warning,
so that a trace of thousands of streams costs pairs by the thousand, not by the million.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import intervals
from tracekit import phases
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace
from tracekit.frames import column, of_rows


@dataclass(frozen=True)
class OverlapResult:
    """Stream busy times, pairwise overlaps and class figures (ns)."""

    streams: pd.DataFrame
    """Per (device, stream): ``device, stream, activities, busy_ns, first_ts, last_end``."""
    pairs: pd.DataFrame
    """Per pair of streams of one device (stream_a < stream_b): ``device, stream_a, stream_b,
    overlap_ns``."""
    classes: pd.DataFrame
    """Per device: ``device, compute_ns, communication_ns, memcpy_ns, gpu_busy_ns,
    comm_compute_overlap_ns, exposed_comm_ns, exposed_memcpy_ns, comm_overlap_ratio`` (NaN
    without communication)."""
    compute_ns: int
    communication_ns: int
    memcpy_ns: int
    gpu_busy_ns: int
    """|union of all activities|, summed over devices."""
    comm_compute_overlap_ns: int
    exposed_comm_ns: int
    exposed_memcpy_ns: int
    comm_overlap_ratio: float | None
    """None when the trace has no communication kernels."""
    warnings: tuple[str, ...] = ()
    """A device with more than ``MAX_PAIR_STREAMS`` streams (its pairs are of the busiest)."""


MAX_PAIR_STREAMS = 64
"""The pairwise overlap is computed between the busiest this many streams of a device."""


def compute(trace: Trace, rules: Rules) -> OverlapResult:
    """Stream and class overlaps (see the module docstring)."""
    acts, _ = phases.activities(trace, rules)
    # the names as codes (a dict for a few: ``_fastnp.factorize``; no Series, no Index)
    inv, uniq = fnp.factorize(column(acts, "name", object))
    kernel = column(acts, "kind") == int(Kind.KERNEL)
    comm = kernel & phases.name_matches(inv, uniq, rules.communication)
    compute_ = kernel & ~comm
    mem = ~kernel

    stream_rows, pair_rows, class_rows, warnings = [], [], [], []
    # the activities sorted by (device, stream), each group's rows kept in the trace's order:
    # one numpy sort instead of a group-by per device and per stream (~1 ms of fixed cost each,
    # most of this section on a trace of a few events)
    ts, end = column(acts, "ts", np.int64), column(acts, "end", np.int64)
    device, stream = column(acts, "device", np.int64), column(acts, "stream", np.int64)
    order = np.lexsort((stream, device))
    dv, sv = device[order], stream[order]
    dev_cut = np.flatnonzero(fnp.r_(True, dv[1:] != dv[:-1])) if order.size else order
    for lo, hi in zip(dev_cut.tolist(), fnp.r_(dev_cut[1:], order.size).astype(int).tolist()):
        dev = int(dv[lo])
        rows = order[lo:hi]
        unions, busy_of = {}, {}
        st = sv[lo:hi]
        st_cut = np.flatnonzero(fnp.r_(True, st[1:] != st[:-1]))
        for a, b in zip(st_cut.tolist(), fnp.r_(st_cut[1:], st.size).astype(int).tolist()):
            g = rows[a:b]
            s_id = int(st[a])
            u = intervals.union(ts[g], end[g])
            unions[s_id] = u
            busy_of[s_id] = intervals.length(u)
            stream_rows.append((dev, s_id, int(g.size), busy_of[s_id], int(ts[g].min()),
                                int(end[g].max())))
        keys = sorted(unions)
        if len(keys) > MAX_PAIR_STREAMS:
            keys = sorted(sorted(keys, key=lambda k: -busy_of[k])[:MAX_PAIR_STREAMS])
            warnings.append(f"device {dev} has {len(unions):,} streams: the pairwise "
                            f"overlap is of its {MAX_PAIR_STREAMS} busiest")
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                pair_rows.append((dev, a, b, intervals.intersection_length(unions[a], unions[b])))
        cu = intervals.union(ts[rows[comm[rows]]], end[rows[comm[rows]]])  # communication
        pu = intervals.union(ts[rows[compute_[rows]]], end[rows[compute_[rows]]])  # compute
        mu = intervals.union(ts[rows[mem[rows]]], end[rows[mem[rows]]])  # memcpy + memset
        comm_ns, comp_ns, mem_ns = intervals.length(cu), intervals.length(pu), intervals.length(mu)
        both = intervals.intersection_length(cu, pu)
        busy = intervals.length(intervals.merge(cu, pu, mu))
        exposed_mem = intervals.difference_length(mu, intervals.merge(cu, pu))
        class_rows.append((dev, comp_ns, comm_ns, mem_ns, busy, both, comm_ns - both,
                           exposed_mem, both / comm_ns if comm_ns else np.nan))

    streams = of_rows(stream_rows, ["device", "stream", "activities", "busy_ns", "first_ts",
                                    "last_end"])
    pairs = of_rows(pair_rows, ["device", "stream_a", "stream_b", "overlap_ns"])
    classes = of_rows(class_rows, [
        "device", "compute_ns", "communication_ns", "memcpy_ns", "gpu_busy_ns",
        "comm_compute_overlap_ns", "exposed_comm_ns", "exposed_memcpy_ns", "comm_overlap_ratio"])
    # summed as Python ints: two devices busy 5e18 ns each are 1e19 ns, beyond int64 (from the
    # rows, not the table's columns: a column read costs more than these few sums)
    tot = {c: sum(int(r[i]) for r in class_rows)
           for i, c in enumerate(classes.columns[1:-1], start=1)}
    return OverlapResult(
        streams=streams, pairs=pairs, classes=classes,
        compute_ns=tot["compute_ns"], communication_ns=tot["communication_ns"],
        memcpy_ns=tot["memcpy_ns"], gpu_busy_ns=tot["gpu_busy_ns"],
        comm_compute_overlap_ns=tot["comm_compute_overlap_ns"],
        exposed_comm_ns=tot["exposed_comm_ns"], exposed_memcpy_ns=tot["exposed_memcpy_ns"],
        comm_overlap_ratio=(tot["comm_compute_overlap_ns"] / tot["communication_ns"]
                            if tot["communication_ns"] else None),
        warnings=tuple(warnings),
    )
