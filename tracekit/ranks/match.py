"""Collectives matched across ranks: which kernel of each rank is the n-th collective of a group.

Every rank runs the collectives of a process group in the same order (NCCL requires it), so an
*instance* (one collective call, seen on every member rank) is identified within its group by

- ``seq``, the sequence number torch writes, when every kernel of the group has one;
- else (step, n): the n-th kernel of the group launched in that step, when every member rank's
  kernels of the group lie in steps (``ProfilerStep#N`` numbers are the same on every rank, so a
  trace window that starts a few collectives earlier on one rank does not shift the match);
  kernels outside any step are then left out;
- else n: the n-th kernel of the group in the trace (``order``).

The members of a group are its ``Process Group Ranks`` (else every rank with a kernel of it),
restricted to the ranks read. An instance is *complete* when every member has a kernel for it
and all of them name the same collective; only complete instances enter the figures, the others
are counted per group (``partial``: a member lacks it, at the edges of the trace windows;
``inconsistent``: the collectives differ, which means the order-based match went wrong).

A match by order is then verified (``verify``): the kernels of one collective overlap in time
(each waits in the kernel for the last rank to arrive, then they move the data together), so
an instance whose kernels do not overlap on the ranks' clocks (aligned where the offsets are
applied, ``tracekit.ranks.clocks``) was matched wrongly: a trace that records only some events
(HTA's event-sampled traces) lacks some of a rank's kernels, and order pairs a kernel with
another's next one. Such a group is matched again by the kernels' ends (``by_ends``): kernels
of one collective end together, so each kernel of the group's first member is paired with the
kernel of every other member that names the same collective, overlaps it and ends nearest to
it, within ``end_tolerance``; pairs keep each rank's order. The instances a new match leaves
without a kernel on some member are partial.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BY_SEQ = "seq"
BY_STEP = "step and order"
BY_ORDER = "order"
BY_ENDS = "ends"

ARRIVAL_COLUMNS = ["instance", "rank", "ts", "end", "step", "in_bytes", "out_bytes", "kernel"]
"""``kernel``: the kernel's row in its rank's ``collectives.kernels`` list."""


@dataclass(frozen=True)
class Matched:
    """Complete instances and each member rank's kernel of them (ranks' own clocks)."""

    instances: pd.DataFrame
    """One row per complete instance, ordered by group then key: ``instance`` (0..n-1),
    ``group, collective, key`` (seq, or ``step:n``, or n, as text), ``members`` (count)."""
    arrivals: pd.DataFrame
    """One row per (instance, member rank): ``ARRIVAL_COLUMNS`` (``step``: the rank's step)."""
    groups: list[dict]
    """Per group: ``group, desc, ranks`` (the members read, ``[int]``), ``matched_by``,
    ``instances`` (complete), ``partial``, ``inconsistent``, ``outside_steps`` (kernels left
    out for lying outside any step), ``not_overlapping`` (instances of the first match whose
    kernels did not overlap in time: the group was matched again by its kernels' ends),
    ``first_matched_by`` (how the first match went: ``matched_by`` unless it was redone)."""
    kernels: pd.DataFrame | None = None
    """Every rank's collective kernels (``kernel_table``), for ``verify``."""


def kernel_table(ranks: list[dict]) -> tuple[pd.DataFrame, dict[str, dict]]:
    """All ranks' collective kernels in one table (``rank`` added) and the groups' metadata
    (``desc``, ``ranks``) merged over the ranks."""
    from tracekit.ranks.compact import KERNEL_COLUMNS, kernel_column

    have, owner, meta = [], [], {}
    for r in ranks:
        c = r.get("collectives") or {}
        got = c.get("kernels")
        if got is not None and len(got):
            have.append(got)
            owner.append(np.full(len(got), int(r["rank"]), np.int64))
        for g in c.get("groups") or []:
            m = meta.setdefault(g["group"], {"desc": g.get("desc") or "", "ranks": None})
            got = g.get("ranks")
            if m["ranks"] is None and got is not None and len(got):
                m["ranks"] = [int(x) for x in got]
    cols = list(KERNEL_COLUMNS)
    if not have:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("group", "collective")
                                          else np.int64) for c in ["rank", *cols, "kernel"]}), meta
    data = {"rank": np.concatenate(owner)}
    for c in cols:  # column by column (each rank's kernels are columns already)
        data[c] = np.concatenate([kernel_column(got, c) for got in have])
    data["kernel"] = np.concatenate([np.arange(o.size, dtype=np.int64) for o in owner])
    return pd.DataFrame(data), meta


def match(ranks: list[dict]) -> Matched:
    """Match the collective kernels of ``ranks`` (rank objects with ``collectives``)."""
    k, meta = kernel_table(ranks)
    read = {int(r["rank"]) for r in ranks}
    parts = []
    for g, kg in k.groupby("group", sort=True):
        have = set(kg["rank"].unique().tolist())
        declared = meta.get(g, {}).get("ranks")
        members = sorted((set(declared) & read) if declared else have)
        kg = kg[kg["rank"].isin(members)]
        has_step = kg.groupby("rank")["step"].max() >= 0
        steps_everywhere = bool(len(members)) and bool(
            has_step.reindex(members, fill_value=False).all())
        outside = 0
        if (kg["seq"] >= 0).all():
            by, key = BY_SEQ, kg["seq"].astype(str)
        elif steps_everywhere:
            by = BY_STEP
            outside = int((kg["step"] < 0).sum())
            kg = kg[kg["step"] >= 0]
            n = kg.groupby(["rank", "step"], sort=False).cumcount()
            key = kg["step"].astype(str) + ":" + n.astype(str)
        else:
            by, key = BY_ORDER, kg["index"].astype(str)
        kg = kg.assign(key=key.to_numpy()).drop_duplicates(["rank", "key"], keep="first")
        parts.append(_group_instances(g, kg, members, by, meta.get(g, {}).get("desc", ""),
                                      outside))
    return _combine(parts, k)


def _group_instances(g: str, kg: pd.DataFrame, members: list[int], by: str, desc: str,
                     outside: int) -> tuple:
    """The complete instances of one group from its kernels keyed (column ``key``): (instances,
    arrivals, group dict), instance ids from 0 in order of first start."""
    per = kg.groupby("key", sort=False).agg(n=("rank", "size"), kinds=("collective", "nunique"),
                                            first_ts=("ts", "min"))
    complete = per[(per["n"] == len(members)) & (per["kinds"] == 1)]
    partial = int((per["n"] < len(members)).sum())
    inconsistent = int(((per["n"] == len(members)) & (per["kinds"] > 1)).sum())
    complete = complete.sort_values("first_ts", kind="stable")
    ids = pd.Series(np.arange(len(complete), dtype=np.int64), index=complete.index)
    sel = kg[kg["key"].isin(complete.index)]
    arr = pd.DataFrame({
        "instance": ids.reindex(sel["key"]).to_numpy(np.int64),
        **{c: sel[c].to_numpy(np.int64) for c in ARRIVAL_COLUMNS[1:]},
    })
    coll = sel.drop_duplicates("key").set_index("key")["collective"]
    inst = pd.DataFrame({
        "instance": ids.to_numpy(np.int64),
        "group": g,
        "collective": coll.reindex(complete.index).to_numpy(object),
        "key": complete.index.to_numpy(object),
        "members": len(members),
    })
    info = {"group": g, "desc": desc, "ranks": members, "matched_by": by,
            "instances": len(complete), "partial": partial, "inconsistent": inconsistent,
            "outside_steps": outside, "not_overlapping": 0, "first_matched_by": by}
    return inst, arr, info


def _combine(parts: list[tuple], kernels: pd.DataFrame) -> Matched:
    """One ``Matched`` from the groups' parts, instance ids numbered on across groups."""
    inst_frames, arr_frames, groups = [], [], []
    next_id = 0
    for inst, arr, info in parts:
        inst_frames.append(inst.assign(instance=inst["instance"].to_numpy(np.int64) + next_id))
        arr_frames.append(arr.assign(instance=arr["instance"].to_numpy(np.int64) + next_id))
        next_id += len(inst)
        groups.append(info)
    if inst_frames:
        instances = pd.concat(inst_frames, ignore_index=True)
        arrivals = pd.concat(arr_frames, ignore_index=True).sort_values(
            ["instance", "rank"], kind="stable").reset_index(drop=True)
    else:
        instances = pd.DataFrame({"instance": pd.Series(dtype=np.int64),
                                  "group": pd.Series(dtype=object),
                                  "collective": pd.Series(dtype=object),
                                  "key": pd.Series(dtype=object),
                                  "members": pd.Series(dtype=np.int64)})
        arrivals = pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ARRIVAL_COLUMNS})
    return Matched(instances=instances, arrivals=arrivals, groups=groups, kernels=kernels)


def overlapping(arrivals: pd.DataFrame, offsets: dict[int, int], slack_ns: int) -> pd.Series:
    """Per instance: whether its kernels overlap in time on the clocks shifted by ``offsets``
    (rank -> ns to subtract): the last start is no later than the first end + ``slack_ns``."""
    if arrivals.empty:
        return pd.Series(dtype=bool)
    shift = arrivals["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    a = pd.DataFrame({"instance": arrivals["instance"].to_numpy(),
                      "ts": arrivals["ts"].to_numpy(np.int64) - shift,
                      "end": arrivals["end"].to_numpy(np.int64) - shift})
    g = a.groupby("instance", sort=True)
    return g["ts"].max() <= g["end"].min() + slack_ns


def verify(m: Matched, offsets: dict[int, int], *, slack_ns: int, end_tolerance_ns: int,
           end_tolerance_share: float) -> Matched:
    """``m`` with every group matched by step or order whose instances do not all overlap in
    time (``overlapping``) matched again by its kernels' ends (``by_ends``); the groups matched
    by ``seq`` are taken as they are. ``offsets``: rank -> ns on the clocks the instances are
    compared on (the applied clock offsets)."""
    if m.kernels is None or m.arrivals.empty:
        return m
    ok = overlapping(m.arrivals, offsets, slack_ns)
    bad = set(ok.index[~ok.to_numpy(bool)].tolist())
    if not bad:
        return m
    parts = []
    for info in m.groups:
        mine = m.instances[m.instances["group"] == info["group"]]
        own = m.arrivals[m.arrivals["instance"].isin(mine["instance"])]
        n_bad = len(set(mine["instance"].tolist()) & bad)
        first = int(mine["instance"].min()) if len(mine) else 0
        if not n_bad or info["matched_by"] == BY_SEQ:
            parts.append((mine.assign(instance=mine["instance"] - first),
                          own.assign(instance=own["instance"] - first), info))
            continue
        kg = m.kernels[(m.kernels["group"] == info["group"])
                       & m.kernels["rank"].isin(info["ranks"])]
        kg = by_ends(kg, info["ranks"], offsets, end_tolerance_ns, end_tolerance_share)
        inst, arr, new = _group_instances(info["group"], kg, info["ranks"], BY_ENDS,
                                          info["desc"], info["outside_steps"])
        new["not_overlapping"] = n_bad
        new["first_matched_by"] = info["matched_by"]
        parts.append((inst, arr, new))
    return _combine(parts, m.kernels)


def by_ends(kg: pd.DataFrame, members: list[int], offsets: dict[int, int], tol_ns: int,
            tol_share: float) -> pd.DataFrame:
    """The kernels of one group keyed by the kernel of its first member they end with (column
    ``key``: ``e<n>``, the n-th kernel of that member); a kernel paired with none is keyed
    alone (a partial instance). Two kernels pair when they name the same collective, overlap
    in time and end within ``max(tol_ns, tol_share * the shorter one's duration)`` of each
    other, on the clocks shifted by ``offsets``; each rank's kernels pair in their order, each
    with the nearest end it can."""
    kg = kg.sort_values(["rank", "ts"], kind="stable")
    shift = kg["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    ts = kg["ts"].to_numpy(np.int64) - shift
    end = kg["end"].to_numpy(np.int64) - shift
    rank = kg["rank"].to_numpy(np.int64)
    coll = kg["collective"].to_numpy(object)
    key = np.array([f"u{i}" for i in range(len(kg))], dtype=object)  # unpaired: alone
    anchor = members[0]
    a = np.flatnonzero(rank == anchor)
    for i, j in enumerate(a.tolist()):
        key[j] = f"e{i}"
    for p in members[1:]:
        b = np.flatnonzero(rank == p)
        b = b[np.argsort(end[b], kind="stable")]
        eb = end[b]
        last = -1  # pairs keep the order: p's next pair lies after its previous one
        for j in a.tolist():
            reach = max(tol_ns, tol_share * (end[j] - ts[j]))
            lo, hi = np.searchsorted(eb, [end[j] - reach, end[j] + reach], side="left")
            cand = b[lo:hi + 1][eb[lo:hi + 1] <= end[j] + reach] if hi >= lo else b[:0]
            cand = cand[cand > last]
            if not cand.size:
                continue
            d = np.abs(end[cand] - end[j])
            tol = np.maximum(tol_ns, tol_share * np.minimum(end[cand] - ts[cand], end[j] - ts[j]))
            fit = (coll[cand] == coll[j]) & (d <= tol) & (ts[cand] <= end[j]) & (ts[j] <= end[cand])
            if not fit.any():
                continue
            k = cand[fit][np.argmin(d[fit])]
            key[k] = key[j]
            last = k
    return kg.assign(key=key)
