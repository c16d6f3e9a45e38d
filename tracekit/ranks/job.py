"""The job object: one analysis of a directory of rank traces, from the ranks' small results.

``build(rankset, config)`` takes the ranks of a job (``tracekit.ranks.inputs.RankSet``: rank
objects with their ``headline``, ``steps``, ``collectives``, ``identity`` and, when the explain
section exists, ``explain``) and returns the job object documented in ``tracekit.report.schema.Job``. It is
pure: no file is read, nothing is printed.

Definitions (every time is on the reference rank's clock once offsets are applied, see
``tracekit.ranks.clocks``; instances are those of ``tracekit.ranks.match``):

- a rank's *arrival* at an instance is the start of its collective kernel (the GPU reaching the
  collective); the instance's *arrival skew* is last arrival - first arrival; its *straggler*
  is the last rank to arrive (the lowest rank on a tie);
- each instance lists its ranks' ``arrivals`` (start, end, wait, sizes): every instance's when
  ranks x instances is at most ``JobConfig.arrivals_kept``, else only the worst instances';
- a rank's *wait* at an instance is last arrival - its arrival: the time its kernel spends
  waiting for the others before data can move; the instance's *waited* time is the sum over
  its ranks: what all ranks lose to the straggler;
- *transfer* is the shortest kernel of the instance (the last to arrive waits least): the time
  the collective itself takes (TraceLens's ``comm_latency``);
- a rank's ``last_count``: instances where it was the straggler with a skew of at least
  ``JobConfig.straggler_min_skew_ns``; ``caused_wait_ns``: the waited time of the instances
  where it was the straggler; the job's straggler is the rank with the largest
  ``caused_wait_ns``;
- all-to-all sizes: per rank the bytes it sent (``In msg nelems``) and received (``Out msg
  nelems``) over the complete all-to-all instances; the *imbalance* is the largest received
  total over the mean (1.0: balanced shards), per instance and over the job;
- the *spread* of step time over ranks: min, median and max of the ranks' P50 (and P90) GPU
  step time (CPU where some rank has no GPU steps), the slowest and fastest rank, max / median.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from tracekit.ranks import clocks, match, straggler
from tracekit.ranks.config import JobConfig
from tracekit.ranks.inputs import RankSet

ALL_TO_ALL = re.compile(r"(?i)all_?to_?all")
"""Collective names counted as all-to-all (``all_to_allv``, ``all_to_all``, ``alltoall_base``)."""


def _int(v) -> int | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def _explain_steps(rank: dict) -> dict[int, str]:
    ex = rank.get("explain") or {}
    return {int(s["step"]): s.get("bound") for s in ex.get("steps") or []
            if isinstance(s, dict) and s.get("step") is not None}


def _spread(ranks: list[dict]) -> dict:
    gpu = all(r["headline"].get("step_gpu_p50_ns") is not None for r in ranks)
    which = "gpu" if gpu else "cpu"
    out = {"figure": f"step_{which}"}
    for q in ("p50", "p90"):
        vals = [(r["headline"].get(f"step_{which}_{q}_ns"), r["rank"]) for r in ranks]
        vals = [(v, k) for v, k in vals if v is not None]
        if not vals:
            out[q] = None
            continue
        v = np.array([x for x, _ in vals], dtype=float)
        med = float(np.median(v))
        hi = max(vals, key=lambda x: (x[0], -x[1]))
        lo = min(vals, key=lambda x: (x[0], x[1]))
        out[q] = {"min_ns": float(v.min()), "median_ns": med, "max_ns": float(v.max()),
                  "spread_ns": float(v.max() - v.min()), "slowest_rank": hi[1],
                  "fastest_rank": lo[1], "max_over_median": float(v.max() / med) if med else None}
    return out


def step_limit_ns(ranks: list[dict]) -> float | None:
    """The longest step of the job: the largest P90 step time (CPU or GPU) of any rank; None
    when no rank has steps. No rank waits at a collective for longer than a step of the ranks
    it waits for (their step holds the wait), so arrivals further apart than this are the
    clocks', not the ranks'."""
    vals = [v for r in ranks for k in ("step_cpu_p90_ns", "step_gpu_p90_ns")
            for v in [(r.get("headline") or {}).get(k)] if v is not None and v > 0]
    return float(max(vals)) if vals else None


def clock_disagreements(arr: pd.DataFrame, ranks: list[dict]) -> list[dict]:
    """The ranks whose collectives start, on the clocks the job compares (offsets applied where
    they are), further from the others' than a step of the job could explain
    (``step_limit_ns``): per rank the median over its instances of its arrival minus the
    instance's median arrival (the other rank's, in an instance of two), when its size is
    above the limit. ``rank, source, median_ns`` (signed: after the others), largest first."""
    limit = step_limit_ns(ranks)
    if limit is None or not len(arr):
        return []
    inst = arr["instance"].to_numpy(np.int64)
    ts = arr["ts"].to_numpy(np.int64).astype(np.float64)
    center = pd.Series(ts).groupby(inst).median()
    count = pd.Series(ts).groupby(inst).size()
    total = pd.Series(ts).groupby(inst).sum()
    n = count.reindex(inst).to_numpy()
    # in an instance of two, the other rank's arrival; else the instance's median
    other = np.where(n == 2, total.reindex(inst).to_numpy() - ts, center.reindex(inst).to_numpy())
    dev = pd.Series(np.where(n >= 2, ts - other, np.nan)).groupby(
        arr["rank"].to_numpy(np.int64)).median().dropna()
    source = {int(r["rank"]): r.get("source") for r in ranks}
    out = [{"rank": int(k), "source": source.get(int(k)), "median_ns": float(v)}
           for k, v in dev.items() if abs(v) > limit]
    return sorted(out, key=lambda d: (-abs(d["median_ns"]), d["rank"]))


def _disagreement_warning(disagree: list[dict], limit_ns: float, offsets,
                          config: JobConfig) -> str:
    """One line for the ranks of ``clock_disagreements`` (the first three named)."""
    who = sorted(d["rank"] for d in disagree)
    more = f" and {len(who) - 3:,} more" if len(who) > 3 else ""
    ranks = ", ".join(str(r) for r in who[:3]) + more
    files = ", ".join(os.path.basename(str(d["source"])) for d in disagree[:3]) + (
        f" and {len(disagree) - 3:,} more" if len(disagree) > 3 else "")
    applied = set(offsets.table.loc[offsets.table["applied"], "rank"].tolist()) \
        if config.align_clocks else set()
    why = ("the clocks are compared as written (--no-align)" if not config.align_clocks else
           "the clock offsets fitted from collective ends, applied, leave it" if set(who) <= applied
           else "no clock offset fitted from collective ends aligns them")
    return (f"the clock{'s' if len(who) > 1 else ''} of rank{'s' if len(who) > 1 else ''} "
            f"{ranks} ({files}) disagree{'s' if len(who) == 1 else ''} with the others' by up "
            f"to {abs(disagree[0]['median_ns']) / 1e6:,.3f} ms (median over the collectives), "
            f"more than a step of this job ({limit_ns / 1e6:,.3f} ms, the longest P90) could "
            f"explain: {why}; the arrival skews, waits and stragglers that involve "
            f"{'them' if len(who) > 1 else 'it'} are the clocks', not the ranks'")


def build(rankset: RankSet, config: JobConfig | None = None) -> dict:
    """The job object of ``rankset`` (see the module docstring and ``tracekit.report.schema.Job``)."""
    return build_with_graph(rankset, config)[0]


def build_with_graph(rankset: RankSet, config: JobConfig | None = None) -> tuple[dict, object]:
    """``build``'s job object and the job's graph it read (``tracekit.ranks.jobgraph.Context``,
    None when fewer than two ranks have a skeleton): what-ifs that change ranks' own graphs
    replay it again (``tracekit.ranks.whatif``)."""
    config = JobConfig() if config is None else config
    ranks = rankset.ranks
    rank_ids = [int(r["rank"]) for r in ranks]
    m = match.match(ranks)
    notes: list[str] = []

    # clocks: offsets fitted on the first match; the match verified on them (and redone by
    # the kernels' ends where it fails), the offsets fitted again on the verified match
    zero = {r: 0 for r in rank_ids}
    offsets = clocks.estimate(m.arrivals, rank_ids)
    off = offsets.applied() if config.align_clocks else zero
    # (verified on the fitted offsets even with align_clocks False: that choice is how arrivals
    # are compared, not which kernels form an instance)
    verified = match.verify(m, offsets.applied(), slack_ns=config.overlap_slack_ns,
                            end_tolerance_ns=config.end_tolerance_ns,
                            end_tolerance_share=config.end_tolerance_share)
    if verified is not m:
        m = verified
        offsets = clocks.estimate(m.arrivals, rank_ids)
        off = offsets.applied() if config.align_clocks else zero
    for grp in m.groups:
        if grp.get("not_overlapping"):
            notes.append(f"group {grp['group']}: {grp['not_overlapping']} instance"
                         f"{'s' if grp['not_overlapping'] != 1 else ''} of the match by "
                         f"{grp['first_matched_by']} had kernels that never "
                         "overlapped in time: matched again by the kernels' ends")
    arr = m.arrivals.copy()
    # what is read of the match from here on; its every-kernel table and arrivals are freed
    matched_instances, matched_groups = m.instances, m.groups
    del m, verified
    aligned = set(offsets.table.loc[offsets.table["aligned"], "rank"].tolist())
    shift = arr["rank"].map(off).fillna(0).astype(np.int64).to_numpy()
    arr["ts"] = arr["ts"].to_numpy(np.int64) - shift
    arr["end"] = arr["end"].to_numpy(np.int64) - shift
    for row in offsets.table.itertuples():
        if row.rank == offsets.reference:
            continue
        if not row.aligned and len(arr):
            notes.append(f"rank {row.rank} shares no collective with the other ranks: its "
                         "clock is not aligned")
            continue
        if row.aligned and row.samples < config.min_alignment_samples:
            notes.append(f"rank {row.rank}'s clock offset comes from {row.samples} collective"
                         f"{'s' if row.samples != 1 else ''} only")
        if config.align_clocks and row.aligned and not row.applied and (
                np.isnan(row.spread_ns) or row.spread_ns >= config.offset_note_min_ns):
            spread = "unknown" if np.isnan(row.spread_ns) else f"±{row.spread_ns / 1e6:.3f} ms"
            notes.append(f"rank {row.rank}'s clock offset {row.offset_ns / 1e6:+.3f} ms "
                         f"(spread {spread}) is not applied: the fit's spread is not smaller "
                         "than the offset; its clock is taken as written")

    disagree = clock_disagreements(arr, ranks)
    clock_warnings = [_disagreement_warning(disagree, step_limit_ns(ranks), offsets, config)] \
        if disagree else []

    # per instance
    inst = matched_instances.set_index("instance")
    arr["dur"] = arr["end"] - arr["ts"]
    g = arr.groupby("instance", sort=True)
    last = g["ts"].max()
    first = g["ts"].min()
    arr["wait"] = last.reindex(arr["instance"]).to_numpy() - arr["ts"].to_numpy()
    strag = arr.loc[g["ts"].idxmax(), ["instance", "rank"]].set_index("instance")["rank"] \
        if len(arr) else pd.Series(dtype=np.int64)
    skew = last - first
    waited = g["wait"].sum()
    steps0 = g["step"].first()
    out_max, out_mean = g["out_bytes"].max(), g["out_bytes"].mean()
    table = pd.DataFrame({
        "instance": last.index.to_numpy(np.int64),
        "group": inst["group"].reindex(last.index).to_numpy(object),
        "collective": inst["collective"].reindex(last.index).to_numpy(object),
        "key": inst["key"].reindex(last.index).to_numpy(object),
        "step": steps0.to_numpy(np.int64),
        "ranks": g["rank"].size().to_numpy(np.int64),
        "first_arrival": first.to_numpy(np.int64),
        "last_arrival": last.to_numpy(np.int64),
        "skew_ns": skew.to_numpy(np.int64),
        "straggler": strag.reindex(last.index).to_numpy(np.int64),
        "waited_ns": waited.to_numpy(np.int64),
        "transfer_ns": g["dur"].min().to_numpy(np.int64),
        "end_spread_ns": (g["end"].max() - g["end"].min()).to_numpy(np.int64),
        "imbalance": np.where((g["out_bytes"].min() >= 0) & (out_mean > 0),
                              out_max / out_mean.where(out_mean > 0, 1), np.nan),
    })
    a2a = table["collective"].astype(str).str.contains(ALL_TO_ALL).to_numpy(bool)
    table.loc[~a2a, "imbalance"] = np.nan
    counted = table["skew_ns"] >= config.straggler_min_skew_ns

    # per rank
    wait_r = arr.groupby("rank")["wait"].sum().to_dict()
    last_r = table.loc[counted, "straggler"].value_counts().to_dict()
    caused = table.groupby("straggler")["waited_ns"].sum()
    caused_r = caused.to_dict()
    a2a_arr = arr[arr["instance"].isin(table.loc[a2a, "instance"])]
    sizes_known = (a2a_arr.groupby("rank")[["in_bytes", "out_bytes"]].min().min(axis=1)
                   >= 0).to_dict()
    sent = a2a_arr.groupby("rank")["in_bytes"].sum().to_dict()
    recv = a2a_arr.groupby("rank")["out_bytes"].sum().to_dict()
    rank_rows = []
    for r in ranks:
        k = int(r["rank"])
        h = r["headline"]
        c = r.get("collectives") or {}
        known = bool(sizes_known.get(k, False))
        rank_rows.append({
            "rank": k, "source": r["source"], "steps": h.get("steps"),
            "step_source": h.get("step_source"),
            "step_cpu_p50_ns": h.get("step_cpu_p50_ns"), "step_cpu_p90_ns": h.get("step_cpu_p90_ns"),
            "step_gpu_p50_ns": h.get("step_gpu_p50_ns"), "step_gpu_p90_ns": h.get("step_gpu_p90_ns"),
            "bound": h.get("bound"), "bound_share": h.get("bound_share"),
            "collectives": int(c.get("count") or 0), "collective_ns": int(c.get("kernel_ns") or 0),
            "wait_ns": int(wait_r.get(k, 0)), "last_count": int(last_r.get(k, 0)),
            "caused_wait_ns": int(caused_r.get(k, 0)),
            "clock_offset_ns": (offsets.of()[k] if config.align_clocks and k in aligned
                                else None),
            "clock_offset_applied": bool(off.get(k, 0) != 0),
            "sent_bytes": int(sent.get(k, 0)) if known else None,
            "received_bytes": int(recv.get(k, 0)) if known else None,
            "warnings": list(r.get("warnings") or []),
        })

    total_wait = int(table["waited_ns"].sum())
    by_type = []
    for coll, t in table.groupby("collective", sort=True):
        sk = t["skew_ns"].to_numpy(float)
        ia = arr[arr["instance"].isin(t["instance"])]
        by_type.append({
            "collective": coll, "instances": len(t),
            "transfer_ns": int(t["transfer_ns"].sum()), "waited_ns": int(t["waited_ns"].sum()),
            "skew_p50_ns": float(np.percentile(sk, 50)), "skew_p90_ns": float(np.percentile(sk, 90)),
            "skew_max_ns": int(sk.max()),
            "bytes": int(ia["in_bytes"].clip(lower=0).sum()),
        })

    # stragglers
    job_straggler = None
    if len(caused) and caused.max() > 0 and counted.any():
        job_straggler = int(caused[caused == caused.max()].index.min())
    bounds = {int(r["rank"]): _explain_steps(r) for r in ranks}
    per_step = []
    if len(table):
        cs = table.groupby(["step", "straggler"])["waited_ns"].sum().reset_index()
        for step, t in cs.groupby("step", sort=True):
            best = t.sort_values(["waited_ns", "straggler"], ascending=[False, True]).iloc[0]
            sr = int(best["straggler"])
            st = table[table["step"] == step]
            per_step.append({"step": int(step), "straggler": sr,
                             "caused_wait_ns": int(best["waited_ns"]),
                             "waited_ns": int(st["waited_ns"].sum()),
                             "skew_max_ns": int(st["skew_ns"].max()),
                             "bound": bounds.get(sr, {}).get(int(step))})
    srow = next((x for x in rank_rows if x["rank"] == job_straggler), None)
    stragglers = {
        "rank": job_straggler,
        "last_count": srow["last_count"] if srow else 0,
        "instances": int(counted.sum()),
        "caused_wait_ns": srow["caused_wait_ns"] if srow else 0,
        "waited_ns": total_wait,
        "share": (srow["caused_wait_ns"] / total_wait) if srow and total_wait else None,
        "bound": srow["bound"] if srow else None,
        "bound_share": srow["bound_share"] if srow else None,
        "min_skew_ns": config.straggler_min_skew_ns,
        "steps": per_step,
        "why": straggler.why(ranks, job_straggler, arr,
                             table.loc[a2a, ["instance", "key", "step", "collective"]]),
    }

    # all-to-all
    per_rank_a2a = [{"rank": x["rank"], "sent_bytes": x["sent_bytes"],
                     "received_bytes": x["received_bytes"]} for x in rank_rows
                    if x["received_bytes"] is not None]
    recv_vals = np.array([x["received_bytes"] for x in per_rank_a2a], dtype=float)
    mean_recv = float(recv_vals.mean()) if recv_vals.size else 0.0
    for x in per_rank_a2a:
        x["received_over_mean"] = x["received_bytes"] / mean_recv if mean_recv else None
    heaviest = max(per_rank_a2a, key=lambda x: (x["received_bytes"], -x["rank"]))["rank"] \
        if per_rank_a2a and mean_recv else None
    inst_imb = table.loc[a2a, "imbalance"].dropna().to_numpy(float)
    all_to_all = {
        "instances": int(a2a.sum()),
        "per_rank": per_rank_a2a,
        "imbalance": float(recv_vals.max() / mean_recv) if mean_recv else None,
        "heaviest_rank": heaviest,
        "instance_imbalance_p50": float(np.median(inst_imb)) if inst_imb.size else None,
        "instance_imbalance_max": float(inst_imb.max()) if inst_imb.size else None,
    }

    # ranks x steps
    wait_rs = arr.groupby(["rank", "step"])["wait"].sum().to_dict()
    s_arr = arr.merge(table.loc[counted, ["instance", "straggler"]], on="instance")
    last_rs = s_arr[s_arr["rank"] == s_arr["straggler"]].groupby(["rank", "step"]).size().to_dict()
    step_rows = []
    for r in ranks:
        k = int(r["rank"])
        for s in (r.get("steps") or {}).get("steps") or []:
            st = int(s["step"])
            gpu = s.get("gpu_ns")
            step_rows.append({"rank": k, "step": st, "cpu_ns": s.get("cpu_ns"),
                              "gpu_ns": gpu if gpu is not None and gpu >= 0 else None,
                              "wait_ns": int(wait_rs.get((k, st), 0)),
                              "last_count": int(last_rs.get((k, st), 0)),
                              "bound": bounds.get(k, {}).get(st)})

    rows = [{k: (_num(v) if k == "imbalance" else v) for k, v in rec.items()}
            for rec in table.to_dict(orient="records")]
    for rec in rows:
        for k in ("instance", "step", "ranks", "first_arrival", "last_arrival", "skew_ns",
                  "straggler", "waited_ns", "transfer_ns", "end_spread_ns"):
            rec[k] = int(rec[k])
    worst = sorted(rows, key=lambda x: (-x["skew_ns"], x["instance"]))[: config.worst_kept]
    # each rank's start, end, wait and sizes: for every instance when there are few enough
    # rows, else for the worst instances only
    every = len(arr) <= config.arrivals_kept
    keep = arr if every else arr[arr["instance"].isin([w["instance"] for w in worst])]
    per: dict[int, list] = {}
    for i, rk, a, z, w, ib, ob in zip(*(keep[c].to_numpy().tolist() for c in (
            "instance", "rank", "ts", "end", "wait", "in_bytes", "out_bytes"))):
        per.setdefault(i, []).append({"rank": rk, "start": a, "end": z, "wait_ns": w,
                                      "in_bytes": ib, "out_bytes": ob})
    for rec in (rows if every else worst):
        rec["arrivals"] = per.get(rec["instance"], [])
    offs = [{"rank": int(t.rank), "offset_ns": _int(round(t.offset_ns)) if t.aligned else None,
             "spread_ns": _num(t.spread_ns), "samples": int(t.samples), "aligned": bool(t.aligned),
             "applied": bool(config.align_clocks and t.applied)}
            for t in offsets.table.itertuples()]
    inputs = rank_inputs(ranks, arr, off) if config.job_graph else None
    # the arrivals, their copies and groupings are read no further: freed before the job's
    # graph is built (a million rows on 1,024 ranks)
    del arr, keep, s_arr, a2a_arr, g, per
    joined, ctx = (_joined(ranks, inputs, table, config) if config.job_graph
                   else (None, None))
    return {
        "source": rankset.source,
        "world_size": rankset.world_size,
        "ranks_read": len(ranks),
        "complete": rankset.complete,
        "problems": [p.to_dict() for p in rankset.problems],
        "ranks": rank_rows,
        "spread": _spread(ranks) if ranks else None,
        "clock": {"aligned": config.align_clocks and offsets.reference is not None,
                  "reference_rank": offsets.reference, "offsets": offs, "notes": notes,
                  "disagree": disagree, "warnings": clock_warnings},
        "matching": {"instances": len(table), "groups": matched_groups},
        "by_type": by_type,
        "stragglers": stragglers,
        "all_to_all": all_to_all,
        "steps": step_rows,
        "arrivals_everywhere": every,
        "instances": rows,
        "worst": worst,
        "graph": joined,
    }, ctx


def rank_inputs(ranks: list[dict], arr: pd.DataFrame, off: dict[int, int]) -> list:
    """The job graph's input of every rank with a skeleton (``tracekit.ranks.jobgraph``):
    its skeleton, applied clock offset, kernels' instances and transfers (each kernel's end less
    its instance's last arrival, on the aligned clocks ``arr``)."""
    from tracekit.ranks.compact import kernel_maps
    from tracekit.ranks.jobgraph import RankInput

    tr = (arr["end"] - arr["ts"] - arr["wait"]).clip(lower=0)
    maps = kernel_maps(arr["rank"].to_numpy(np.int64), arr["kernel"].to_numpy(np.int64),
                       instance=arr["instance"].to_numpy(np.int64), transfer=tr.to_numpy(),
                       received=arr["out_bytes"].to_numpy(np.int64))
    out = []
    for r in ranks:
        sk = r.get("skeleton")
        if not isinstance(sk, dict) or not len(sk.get("kernels", ())):
            continue
        k = int(r["rank"])
        m = maps.get(k, {})
        out.append(RankInput(rank=k, skeleton=sk, offset_ns=int(off.get(k, 0)),
                             instance=m.get("instance", {}), transfer=m.get("transfer", {}),
                             received=m.get("received", {})))
    return out


class CutNames:
    """(rank, cut) -> ``all_to_allv 11:2`` (the collective and its instance key), and
    ("i", instance) -> the same, for the job graph's paths; read with ``get`` (a label is made
    when asked: a job of a million cuts holds no million strings)."""

    def __init__(self, label: dict[int, str], cuts: dict[int, tuple]):
        self._label = label
        self._cuts = cuts  # rank -> (skeleton kernels, kernel -> instance, collectives.kernels)

    def get(self, key, default=None):
        a, b = key
        if a == "i":
            return self._label.get(int(b), default)
        got = self._cuts.get(int(a))
        if got is None or not 0 <= int(b) < len(got[0]):
            return default
        cut_kernels, instance, kern = got
        row = int(cut_kernels[int(b)])
        i = instance.get(row)
        name = self._label.get(int(i), "") if i is not None else None
        if not name:
            c = kern[row]["collective"] if row < len(kern) else "collective"
            name = f"{c} (unmatched kernel {row})"
        return name

    def __getitem__(self, key):
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got


def cut_names(ranks: list[dict], table: pd.DataFrame, arr: pd.DataFrame | None, *,
              instances: dict | None = None) -> CutNames:
    """The labels of the job graph's collectives (``CutNames``); ``instances``: rank -> its
    kernels' instances (``RankInput.instance``) when the caller has them (else read from the
    arrivals ``arr``)."""
    label = {int(i): f"{c} {k}" for i, c, k in zip(table["instance"], table["collective"],
                                                  table["key"])}
    if instances is None:
        from tracekit.ranks.compact import kernel_maps

        instances = {r: m["instance"] for r, m in kernel_maps(
            arr["rank"].to_numpy(np.int64), arr["kernel"].to_numpy(np.int64),
            instance=arr["instance"].to_numpy(np.int64)).items()}
    cuts = {}
    for r in ranks:
        sk = r.get("skeleton")
        if not isinstance(sk, dict):
            continue
        kern = (r.get("collectives") or {}).get("kernels")
        cuts[int(r["rank"])] = (sk.get("kernels", ()), instances.get(int(r["rank"]), {}),
                                [] if kern is None else kern)
    return CutNames(label, cuts)


def _count_warnings(ranks: list[dict]) -> list[str]:
    """A line when the ranks disagree on the number of collective kernels they traced: the
    ranks with fewer than the most, named (the instances they miss are partial: in the job's
    graph a kernel of no complete instance runs its own replayed time, waiting for no rank)."""
    n = {int(r["rank"]): len((r.get("collectives") or {}).get("kernels") or []) for r in ranks}
    if len(set(n.values())) < 2:
        return []
    top = max(n.values())
    fewer = sorted((k, v) for k, v in n.items() if v < top)
    shown = ", ".join(f"rank {k} has {v}" for k, v in fewer[:5]) + (
        f" and {len(fewer) - 5} more" if len(fewer) > 5 else "")
    return [f"the ranks disagree on the number of collectives: {shown}, against {top} on "
            f"{sum(v == top for v in n.values())} rank(s); the instances they miss are partial, "
            "their kernels joined to no other rank's"]


def _joined(ranks: list[dict], inputs: list, table: pd.DataFrame,
            config: JobConfig) -> tuple[dict | None, object]:
    """The job graph's answer (``tracekit.ranks.jobgraph.summarise``) over the ranks' inputs
    (``rank_inputs``), and the graph; (None, None) when fewer than two ranks have a skeleton.
    Its what-ifs read ranks' traces again: ``tracekit.ranks.analyze_job`` adds them."""
    from tracekit.ranks import jobgraph

    if len(inputs) < 2:
        return None, None
    jg = jobgraph.build(inputs)
    sc = jobgraph.schedule(jg)
    names = cut_names(ranks, table, None, instances={ri.rank: ri.instance for ri in inputs})
    out = jobgraph.summarise(jg, sc, names, kept_steps=config.worst_kept)
    views = sorted({i.skeleton.get("view", "") for i in inputs})
    out["view"] = views[0] if len(views) == 1 else "mixed"
    out["ranks_joined"] = len(inputs)
    out["warnings"] = list(jg.warnings) + _count_warnings(ranks)
    ctx = jobgraph.Context(inputs=inputs, names=names, graph=jg, schedule=sc)
    out["what_ifs"] = []  # (the straggler's and the balanced: ``tracekit.ranks.analyze_job``)
    return out, ctx


OFF_PATH_SHARE = 0.1
"""A rank that does not wait but holds less than this share of the job's critical path is
offered the fixes of the rank that bounds the job (``rank_context``'s ``job_bound``) before its
own: its own findings shorten a path the job's step does not follow."""


def rank_context(job: dict, rank: int, ranks: list[dict]) -> dict | None:
    """What a rank's explain says in its job (``tracekit explain DIR``), from the job object and
    the ranks' objects: its step on the job's graph (own work, transfers, wait), whether it
    waits more than it works (``waiting``) and for whom, its share of the job's critical path
    and, for a waiting rank, the rank it waits for most (``waited``: its fixes are those that
    shorten this rank's step, ``job_findings``); for a rank that does not wait but is almost off
    the job's critical path (under ``OFF_PATH_SHARE``), the rank that bounds the job
    (``job_bound``). None without the job's graph or the rank in it."""
    g = job.get("graph")
    if not g:
        return None
    mine = next((x for x in g["ranks"] if x["rank"] == rank), None)
    if mine is None:
        return None
    on_path = total = 0
    for s in g["steps"]:
        for p in s["path"]:
            total += p["ns"]
            on_path += p["ns"] if p["rank"] == rank else 0
    top = mine["waits_for"][0] if mine["waits_for"] else None
    waited = top["rank"] if top else None
    share = on_path / total if total else None
    bound = (g.get("bound") or {}).get("rank")

    def own(k: int) -> dict | None:
        w = next((x for x in g["ranks"] if x["rank"] == k), None)
        if w is None:
            return None
        cls = max(w["own_classes"].items(), key=lambda kv: kv[1])[0] \
            if w["own_classes"] else None
        return {"rank": k, "class": cls, "own_ns": w["own_ns"]}

    untraced = joined_estimate(g, rank, ranks)
    waited_bound = own(waited) if mine["waiting"] and waited is not None else None
    # a rank that does not wait but is (almost) off the job's critical path: the rank that
    # bounds the job paces it too
    off_path = (not mine["waiting"] and bound is not None and bound != rank
                and share is not None and share < OFF_PATH_SHARE)
    pacing = own(bound) if off_path else None
    return {"job": job["source"], "ranks": job["ranks_read"], "job_step_ns": g["step_ns"],
            "step_ns": mine["step_ns"], "own_ns": mine["own_ns"],
            "transfer_ns": mine["transfer_ns"], "wait_ns": mine["wait_ns"],
            "wait_share": mine["wait_share"], "waiting": mine["waiting"],
            "waits_for": mine["waits_for"][:3], "waits_at": mine["waits_at"][:3],
            "path_share": share, "waited": waited_bound, "job_bound": pacing,
            "untraced": untraced, "findings": [], "what_ifs": g["what_ifs"]}


def path_unexplained_share(graph: dict) -> float:
    """The share of the job's critical path (its counted steps' paths, ``graph["steps"]``) that
    is time the ranks' models do not explain (class ``unexplained``), 0.0 without a path."""
    total = kept = 0
    for s in graph.get("steps") or []:
        for p in s["path"]:
            total += p["ns"]
            kept += (p.get("classes") or {}).get("unexplained", 0)
    return kept / total if total > 0 else 0.0


def joined_estimate(graph: dict, rank: int, ranks: list[dict]) -> dict | None:
    """How far a rank's step on the job's graph (its estimated untraced step with every rank's
    profiler overhead out) can be trusted, as explain judges one rank's estimate
    (``tracekit.graph.overhead``): ``traced_step_ns`` and ``taken_ns`` (host time a step taken
    out) of the rank's own estimate, ``step_ns`` on the job's graph, ``unexplained_share`` of the
    job's critical path, ``range_ns`` (``overhead.untraced_range``: where the profiler's cost
    decides the step) and ``kept`` (``overhead.unexplained_kept``: why the step rests on time
    the model does not explain, or on its replay, rather than on the host time taken out).
    None where the rank has no estimate of the model's own (no runtime calls, or a given
    untraced step)."""
    from tracekit.graph import overhead as oh

    mine = next((x for x in graph.get("ranks") or [] if x["rank"] == rank), None)
    obj = next((r for r in ranks if int(r.get("rank", -1)) == rank), None)
    est = ((obj or {}).get("explain") or {}).get("overhead") or {}
    if mine is None or est.get("scale") != "model" or not est.get("traced_step_ns"):
        return None
    traced = float(est["traced_step_ns"])
    taken = float(sum((est.get("host_ns_per_step") or {}).values()))
    step = float(mine["step_ns"])
    share = path_unexplained_share(graph)
    rng = oh.untraced_range(traced, step, slow_host=bool(est.get("slow_host")))
    return {"traced_step_ns": traced, "step_ns": step, "taken_ns": taken,
            "unexplained_share": share, "range_ns": None if rng is None else list(rng),
            "kept": oh.unexplained_kept(traced, step, taken, share)}


def finding_change(finding: dict) -> str | None:
    """The change that replays a rank's finding on the job's graph (``whatif.on_ranks``): a
    known fix with a time saving by id (``fix:ID``), a generic finding by its what-if
    (``tracekit.analyses.explain.finding_spec``); None for any other (a memory finding,
    ``allocator_polls``: explain's own what-if, which a rank's skeleton cannot take)."""
    from tracekit.analyses.explain import finding_spec
    from tracekit.ranks.whatif import TIME_FIXES

    fid = str(finding.get("id") or "")
    return f"fix:{fid}" if fid in TIME_FIXES else finding_spec(fid)


def own_time_findings(rank: dict, kept: int) -> list[dict]:
    """A rank's first ``kept`` time findings that its own explain predicts to help (a saving of
    ``NO_HELP_FRACTION`` of its step or more), in the order explain shows them."""
    ex = rank.get("explain") or {}
    return [f for f in ex.get("findings") or [] if f.get("kind") != "memory"
            and (f.get("saving_ns") or 0) > 0 and f.get("helps", True)][:kept]


def job_findings(ranks: list[dict], ctx, contexts: dict[int, dict], *, task,
                 kept: int = 3, workers: int | None = None) -> dict[int, list[dict]]:
    """Per rank of ``contexts`` (rank -> ``rank_context``): its findings in its job, each
    (``schema.JobFinding``) the rank's own time finding replayed on the job's graph (the change
    applied to the rank that found it, the others as they are: ``whatif.on_ranks``), its job
    saving beside its saving on that rank alone. A rank that waits (``waiting``) gets first the
    findings of the rank it waits for (``waited``): those shorten its step; then its own. So
    does a rank almost off the job's critical path, the job's bound rank's (``job_bound``). At
    most ``kept`` findings of each rank, each list by job saving, largest first. In a job of
    more than ``JOB_FIXES_MAX_RANKS`` ranks explained at once nothing is replayed (the
    findings are listed with ``replayed`` False)."""
    from tracekit.ranks import whatif

    by = {int(r["rank"]): r for r in ranks}
    lists: dict[int, list[tuple[int, dict]]] = {}
    for k, c in contexts.items():
        got = []
        wd = c.get("waited") or c.get("job_bound")
        if wd and wd["rank"] in by and wd["rank"] != k:
            got += [(wd["rank"], f) for f in own_time_findings(by[wd["rank"]], kept)]
        if k in by:
            got += [(k, f) for f in own_time_findings(by[k], kept)]
        lists[k] = got
    wanted: dict[int, list[str]] = {}
    for got in lists.values():
        for j, f in got:
            ch = finding_change(f)
            if ch is not None and ch not in wanted.setdefault(j, []):
                wanted[j].append(ch)
    replay = ctx is not None and len(contexts) <= JOB_FIXES_MAX_RANKS
    rows = whatif.on_ranks(ranks, ctx, wanted, task=task, workers=workers) if replay else {}
    out = {}
    for k, got in lists.items():
        entries = [_job_finding(j, f, rows.get((j, finding_change(f) or "")), replay)
                   for j, f in got]
        waited = [e for e in entries if e["rank"] != k]
        own = [e for e in entries if e["rank"] == k]
        out[k] = sorted(waited, key=_by_job_saving) + sorted(own, key=_by_job_saving)
    return out


def _by_job_saving(e: dict) -> tuple:
    return (not e["replayed"], -(e["saving_ns"] or 0.0), -(e["alone_saving_ns"] or 0.0))


def _job_finding(rank: int, f: dict, row: dict | None, replay: bool) -> dict:
    """A ``schema.JobFinding``: the finding ``f`` of rank ``rank`` with its replay on the job's
    graph (``row``, None when it was not replayed)."""
    change = finding_change(f)
    note = ("" if row is not None else
            "not replayed on the job's graph: " + (
                "the job has more ranks than are replayed at once" if not replay else
                "explain's own what-if, which a rank's skeleton does not take" if change is None else
                "the rank's trace could not be read again"))
    if row is not None and not row.get("applies", True):
        note = "does not apply to the rank's graph reduced to its collectives"
    return {"rank": rank, "id": f.get("id"), "title": f.get("title"), "fix": f.get("fix"),
            "change": change, "replayed": row is not None,
            "step_ns": row["step_ns"] if row else None,
            "predicted_ns": row["predicted_ns"] if row else None,
            "saving_ns": row["saving_ns"] if row else None,
            "saving_fraction": row["saving_fraction"] if row else None,
            "saving_contention_ns": row["saving_contention_ns"] if row else None,
            "helps": bool(row["helps"]) if row else False,
            "alone_saving_ns": f.get("saving_ns"),
            "alone_saving_fraction": f.get("saving_fraction"),
            "alone_saving_contention_ns": f.get("saving_contention_ns"),
            "alone_helps": bool(f.get("helps", True)), "note": (row or {}).get("note") or note}


JOB_FIXES_MAX_RANKS = 16
"""``job_fixes`` reads every rank again per fix: a job of more ranks gets no fix replayed on its
graph (each rank's own findings only)."""


def job_fixes(ranks: list[dict], ctx, *, task, kept: int = 2) -> list[dict]:
    """The known fixes that some rank's own explain predicts to save time, each applied to every
    rank and the job's graph replayed (``tracekit.ranks.whatif.with_fix``): what the fix saves the
    job, which one rank's trace cannot say where another rank paces the collectives (a rank's
    collectives keep, as their durations, the time they waited for the others). At most ``kept``
    fixes, largest own saving first; none for a job of more than ``JOB_FIXES_MAX_RANKS`` ranks."""
    from tracekit.ranks import whatif
    from tracekit.ranks.whatif import TIME_FIXES

    if ctx is None or len(ranks) > JOB_FIXES_MAX_RANKS:
        return []
    best: dict[str, float] = {}
    for r in ranks:
        for f in ((r.get("explain") or {}).get("findings") or []):
            if f.get("id") in TIME_FIXES and (f.get("saving_ns") or 0) > 0:
                best[f["id"]] = max(best.get(f["id"], 0.0), float(f["saving_ns"]))
    rows = []
    for fid in sorted(best, key=lambda k: -best[k])[:kept]:
        row = whatif.with_fix(ranks, ctx, fid, task=task, workers=1)
        if row is not None:
            rows.append(row)
    return rows
