"""Why the straggler is slow: its step against the median rank's, phase by phase and op by op.

From each rank's ``profile`` section (``tracekit.analyses.profile``: per step on average, GPU
and host time by phase, host ops by self time, kernels by time) the straggler's figure of every
phase and op is set against the median of the other ranks' (a rank that does not list an op has
0 of it); the differences where the straggler spends more come out largest first:

- ``phases``: GPU and host time per phase;
- ``ops``: host ops (self time) and kernels (GPU time).

Communication kernels and the ``communication`` phase are left out: their time is mostly the
wait for the last rank, which the straggler causes and does not suffer. With them, its
all-to-all sizes: the all-to-all instances where it received the most bytes, largest first,
against the median of the other ranks in the same instance (a rank that receives more moves
more data and has more rows to look up).

``extra_op_shares``: the host ops the straggler runs more often than the median rank (an op
the other lacks, or more instances of one), the share of each op's instances the median rank
lacks, from the two ranks' skeletons' counts of every op (``op_counts``: no trace read again):
the host work the straggler at the median rank's speed no longer does
(``tracekit.ranks.whatif.straggler_at_median``); an op both run as often is the same work,
however long it takes.

``host_speeds``: how many times slower than a reference rank (the straggler) each rank's host
ran the same ops: the traced ranks run one program, and their hosts run its ops at speeds that
differ by a condition of the traced run (1.0-1.35x in the 2- and 4-rank jobs), not by their work.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

COMMUNICATION_KERNEL = re.compile(r"(?i)nccl|rccl")
"""Kernel names left out of the comparison (NCCL/RCCL: their time is mostly waiting)."""
COMMUNICATION_PHASE = "communication"
KEPT = 10
"""Rows kept in each list."""
MIN_DIFF_NS = 5_000
"""A difference smaller than this (5 us per step) is not listed."""
ANNOTATION = re.compile(r"^ProfilerStep#|^## .* ##$|^Optimizer\.(step|zero_grad)#")
"""Annotation names as ``profile`` lists them (digits as ``#``; the trace model's legacy
annotation names): their self time holds the time their thread waited inside them (the main
thread blocked in ``## backward ##`` while the autograd thread works, a sync), not only work."""
SPEED_MIN_OPS = 5
"""A rank's host speed is read from at least this many ops both ranks run as often."""


def _table(ranks: list[dict], key: str, value: str) -> pd.DataFrame:
    """rank x name -> value (0 where a rank does not list the name)."""
    rows = []
    for r in ranks:
        p = r.get("profile") or {}
        for item in p.get(key) or []:
            rows.append((int(r["rank"]), str(item.get("name", item.get("phase"))),
                         float(item.get(value) or 0.0)))
    if not rows:
        return pd.DataFrame()
    t = pd.DataFrame(rows, columns=["rank", "name", "v"])
    return t.pivot_table(index="name", columns="rank", values="v", aggfunc="sum", fill_value=0.0)


def _diffs(t: pd.DataFrame, straggler: int, kind: str, skip) -> list[dict]:
    if t.empty or straggler not in t.columns or t.shape[1] < 2:
        return []
    mine = t[straggler]
    others = t.drop(columns=[straggler])
    med = others.median(axis=1)
    d = (mine - med)
    out = []
    for name in d.sort_values(ascending=False, kind="stable").index:
        if skip(name):
            continue
        diff = float(d[name])
        if diff < MIN_DIFF_NS:
            break
        out.append({"kind": kind, "name": name, "straggler_ns": float(mine[name]),
                    "median_ns": float(med[name]), "diff_ns": diff})
    return out


def why(ranks: list[dict], straggler: int | None, arrivals: pd.DataFrame | None = None,
        a2a_instances: pd.DataFrame | None = None) -> dict | None:
    """The straggler's differences from the median rank (module docstring); None without a
    straggler, another rank, or profiles. ``arrivals``: the matched arrivals (``instance,
    rank, in_bytes, out_bytes``); ``a2a_instances``: the all-to-all instances (``instance,
    key, step, collective``)."""
    if straggler is None or len(ranks) < 2 or not any(r.get("profile") for r in ranks):
        return None
    steps = {int(r["rank"]): (r.get("profile") or {}).get("steps") for r in ranks}
    comm_phase = lambda n: n == COMMUNICATION_PHASE  # noqa: E731
    phases = (_diffs(_table(ranks, "phases", "gpu_ns"), straggler, "GPU", comm_phase)
              + _diffs(_table(ranks, "phases", "host_ns"), straggler, "host", comm_phase))
    phases.sort(key=lambda x: -x["diff_ns"])
    ops = (_diffs(_table(ranks, "host_ops", "self_ns"), straggler, "host op", lambda n: False)
           + _diffs(_table(ranks, "kernels", "gpu_ns"), straggler, "kernel",
                    lambda n: COMMUNICATION_KERNEL.search(n) is not None))
    ops.sort(key=lambda x: -x["diff_ns"])
    sizes: list[dict] = []
    if arrivals is not None and a2a_instances is not None and len(a2a_instances):
        a = arrivals[arrivals["instance"].isin(a2a_instances["instance"])]
        a = a[a["out_bytes"] >= 0]
        if len(a):
            mine = a[a["rank"] == straggler].set_index("instance")
            med = a[a["rank"] != straggler].groupby("instance")[["out_bytes", "in_bytes"]].median()
            info = a2a_instances.set_index("instance")
            for i in mine["out_bytes"].sort_values(ascending=False, kind="stable").index[:KEPT]:
                sizes.append({"instance": int(i), "key": str(info.loc[i, "key"]),
                              "step": int(info.loc[i, "step"]),
                              "received_bytes": int(mine.loc[i, "out_bytes"]),
                              "sent_bytes": int(mine.loc[i, "in_bytes"]),
                              "median_received_bytes": float(med.loc[i, "out_bytes"])
                              if i in med.index else None,
                              "median_sent_bytes": float(med.loc[i, "in_bytes"])
                              if i in med.index else None})
    return {"rank": int(straggler), "against": len(ranks) - 1,
            "steps": steps.get(int(straggler)),
            "phases": phases[:KEPT], "ops": ops[:KEPT], "all_to_all": sizes}


def host_speeds(ranks: list[dict], reference: int) -> dict[int, float]:
    """Per rank other than ``reference``: how many times slower than ``reference``'s its host
    ran the same ops (module docstring): over the host ops both list (``profile``'s
    ``host_ops``, annotations left out: ``ANNOTATION``) with the same count per step, the median
    of the ratios of their self times, weighted by the reference's self time (an op whose self
    time holds a wait on one rank moves it little). A rank with fewer than ``SPEED_MIN_OPS`` such
    ops, or without a profile, has none."""
    tables = {}
    for r in ranks:
        ops = (r.get("profile") or {}).get("host_ops") or []
        tables[int(r["rank"])] = {str(o["name"]): (float(o.get("self_ns") or 0.0),
                                                   float(o.get("count") or 0.0)) for o in ops}
    ref = tables.get(int(reference))
    if not ref:
        return {}
    out = {}
    for k, table in tables.items():
        if k == int(reference):
            continue
        ratio, weight = [], []
        for name, (self_ns, count) in table.items():
            mine = ref.get(name)
            if (mine is None or ANNOTATION.search(name) or count <= 0 or mine[1] != count
                    or mine[0] <= 0 or self_ns <= 0):
                continue
            ratio.append(self_ns / mine[0])
            weight.append(mine[0])
        if len(ratio) < SPEED_MIN_OPS:
            continue
        ratio, weight = np.asarray(ratio), np.asarray(weight)
        o = np.argsort(ratio, kind="stable")
        cum = np.cumsum(weight[o])
        out[k] = float(ratio[o][int(np.searchsorted(cum, cum[-1] / 2.0))])
    return out


def extra_op_shares(ranks: list[dict], rank: int, median: int) -> dict[str, float] | None:
    """Per host op that rank ``rank`` runs more often per step than rank ``median``: ``1 - its
    count there / its count here``, where that share of its self time is at least
    ``MIN_DIFF_NS`` a step. The ops are those of ``rank``'s ``profile`` (its ``TOP`` by self
    time, with their self times); the counts, every op's, from both ranks' skeletons
    (``op_counts``: an op the median rank's skeleton does not count, it does not run). None
    where either rank has no skeleton with counts."""
    by = {int(r["rank"]): r for r in ranks}
    mine, theirs = by.get(int(rank)), by.get(int(median))
    if mine is None or theirs is None:
        return None
    counts = [(x.get("skeleton") or {}).get("op_counts") for x in (mine, theirs)]
    if any(c is None for c in counts):
        return None
    out = {}
    for o in (mine.get("profile") or {}).get("host_ops") or []:
        name, self_ns = str(o["name"]), float(o.get("self_ns") or 0.0)
        c = float(counts[0].get(name, o.get("count") or 0.0))
        m = float(counts[1].get(name, 0.0))
        if c > m and (1.0 - m / c) * self_ns >= MIN_DIFF_NS:
            out[name] = 1.0 - m / c
    return out
