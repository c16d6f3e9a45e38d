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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BY_SEQ = "seq"
BY_STEP = "step and order"
BY_ORDER = "order"

ARRIVAL_COLUMNS = ["instance", "rank", "ts", "end", "step", "in_bytes", "out_bytes"]


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
    out for lying outside any step)."""


def kernel_table(ranks: list[dict]) -> tuple[pd.DataFrame, dict[str, dict]]:
    """All ranks' collective kernels in one table (``rank`` added) and the groups' metadata
    (``desc``, ``ranks``) merged over the ranks."""
    rows, owner, meta = [], [], {}
    for r in ranks:
        c = r.get("collectives") or {}
        got = c.get("kernels") or []
        rows += got
        owner.append(np.full(len(got), int(r["rank"]), np.int64))
        for g in c.get("groups") or []:
            m = meta.setdefault(g["group"], {"desc": g.get("desc") or "", "ranks": None})
            if m["ranks"] is None and g.get("ranks"):
                m["ranks"] = list(g["ranks"])
    cols = ["group", "collective", "seq", "index", "step", "stream", "ts", "end", "in_bytes",
            "out_bytes"]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("group", "collective")
                                          else np.int64) for c in ["rank", *cols]}), meta
    data = {"rank": np.concatenate(owner)}
    for c in cols:  # column by column: much quicker than from_records on a million rows
        data[c] = ([row[c] for row in rows] if c in ("group", "collective")
                   else np.fromiter((row[c] for row in rows), np.int64, len(rows)))
    return pd.DataFrame(data), meta


def match(ranks: list[dict]) -> Matched:
    """Match the collective kernels of ``ranks`` (rank objects with ``collectives``)."""
    k, meta = kernel_table(ranks)
    read = {int(r["rank"]) for r in ranks}
    inst_frames, arr_frames, groups = [], [], []
    next_id = 0
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
        per = kg.groupby("key", sort=False).agg(n=("rank", "size"),
                                                kinds=("collective", "nunique"),
                                                first_ts=("ts", "min"))
        complete = per[(per["n"] == len(members)) & (per["kinds"] == 1)]
        partial = int((per["n"] < len(members)).sum())
        inconsistent = int(((per["n"] == len(members)) & (per["kinds"] > 1)).sum())
        complete = complete.sort_values("first_ts", kind="stable")
        ids = pd.Series(np.arange(next_id, next_id + len(complete), dtype=np.int64),
                        index=complete.index)
        next_id += len(complete)
        sel = kg[kg["key"].isin(complete.index)]
        arr = pd.DataFrame({
            "instance": ids.reindex(sel["key"]).to_numpy(np.int64),
            "rank": sel["rank"].to_numpy(np.int64),
            "ts": sel["ts"].to_numpy(np.int64),
            "end": sel["end"].to_numpy(np.int64),
            "step": sel["step"].to_numpy(np.int64),
            "in_bytes": sel["in_bytes"].to_numpy(np.int64),
            "out_bytes": sel["out_bytes"].to_numpy(np.int64),
        })
        coll = sel.drop_duplicates("key").set_index("key")["collective"]
        inst_frames.append(pd.DataFrame({
            "instance": ids.to_numpy(np.int64),
            "group": g,
            "collective": coll.reindex(complete.index).to_numpy(object),
            "key": complete.index.to_numpy(object),
            "members": len(members),
        }))
        arr_frames.append(arr)
        groups.append({"group": g, "desc": meta.get(g, {}).get("desc", ""), "ranks": members,
                       "matched_by": by, "instances": len(complete), "partial": partial,
                       "inconsistent": inconsistent, "outside_steps": outside})
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
    return Matched(instances=instances, arrivals=arrivals, groups=groups)
