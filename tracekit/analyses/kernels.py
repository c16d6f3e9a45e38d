"""Kernels: every GPU activity name (kernels, and memcpys and memsets by their names) with its
calls and time, the op that launched it and where it ran; what TensorBoard's profiler plugin
calls its kernel view and HTA its kernel breakdown, in tracekit's exact nanoseconds.

Per activity name:

- ``calls``, ``total_ns`` (sum of durations), ``mean_ns``, ``min_ns``, ``max_ns``;
- ``share``: of the GPU time of every activity;
- ``launched_by``: the host op that launched most of its calls (the innermost CPU op or
  annotation around the launching runtime call, ``tracekit.analyses.operators.host_tree``),
  ``launchers`` how many different ops launched it, ``unlaunched`` the calls no op is known to
  have launched;
- ``phase``: the phase (``tracekit.phases``) most of its GPU time has; ``streams``: the
  streams it ran on (``device:stream``);
- the launch configuration where the trace records it and the loader keeps it (``grid``,
  ``block``, ``registers``, ``shared_memory``, ``occupancy``): not kept by this loader yet,
  so these columns are absent; a renderer shows what is there.

Rows per name over all steps (``kernels``) and per step (``by_step``: the step whose CPU span
holds the launch, -1 outside steps or without a launch), largest total first. A pure function
of the parsed trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import phases, steps
from tracekit.analyses.operators import host_tree
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace

KERNEL_COLUMNS = ["name", "kind", "calls", "total_ns", "mean_ns", "min_ns", "max_ns", "share",
                  "launched_by", "launchers", "unlaunched", "phase", "streams"]
"""The columns of ``KernelsResult.kernels`` (``by_step``: ``step`` first)."""

KIND_NAMES = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset"}


@dataclass(frozen=True)
class KernelsResult:
    """Every GPU activity name of a trace, over all steps and per step."""

    kernels: pd.DataFrame
    """One row per activity name: ``KERNEL_COLUMNS`` (times in ns; ``share`` 0..1 of
    ``gpu_ns``), largest total first."""
    by_step: pd.DataFrame
    """The same per step: ``step`` first (``share`` of that step's GPU time)."""
    gpu_ns: int
    """GPU time of every activity."""
    steps: list
    """The steps found (``tracekit.steps``), in order."""


def _most(values: pd.Series, keys: list[pd.Series], weights: np.ndarray | None = None) -> pd.Series:
    """Per group of ``keys``: the value of ``values`` most frequent (or of the largest
    ``weights``), ties to the first seen."""
    w = np.ones(len(values), np.int64) if weights is None else weights
    frame = pd.DataFrame({**{f"k{i}": k for i, k in enumerate(keys)}, "v": values, "w": w}, copy=False)
    ks = [f"k{i}" for i in range(len(keys))]
    tot = frame.groupby([*ks, "v"], sort=False, observed=True)["w"].sum().reset_index()
    tot = tot.sort_values("w", ascending=False, kind="stable").drop_duplicates(ks)
    return tot.set_index(ks)["v"]


def _table(f: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grp = f.groupby(keys, sort=False, observed=True)
    out = grp.agg(kind=("kind", "first"), calls=("dur", "size"), total_ns=("dur", "sum"), min_ns=("dur", "min"),
                  max_ns=("dur", "max"), unlaunched=("unlaunched", "sum"))
    out["mean_ns"] = out["total_ns"] / out["calls"]
    launched = f[~f["unlaunched"]]
    pairs = launched.groupby([*keys, "op"], sort=False, observed=True).size()
    out["launchers"] = pairs.groupby(level=list(range(len(keys)))).size().reindex(out.index).fillna(0).astype(np.int64)
    by = _most(launched["op"], [launched[k] for k in keys])
    out["launched_by"] = by.reindex(out.index).astype(object).fillna("").astype(str).to_numpy(object) if len(by) else ""
    out["phase"] = _most(f["phase"], [f[k] for k in keys], f["dur"].to_numpy(np.int64)).reindex(out.index).astype(str).to_numpy(object)
    streams = f.groupby([*keys, "where"], sort=True, observed=True).size().reset_index()
    streams["where"] = streams["where"].astype(str)
    joined = streams.groupby(keys, sort=False, observed=True)["where"].agg(", ".join)
    out["streams"] = joined.reindex(out.index).to_numpy(object)
    return out.reset_index()


def _where(device: np.ndarray, stream: np.ndarray) -> pd.Categorical:
    """``device:stream`` per activity, as a categorical (one string per pair, not per row)."""
    pairs, inv = np.unique(np.stack([device, stream], axis=1), axis=0, return_inverse=True)
    return pd.Categorical.from_codes(inv.reshape(-1), categories=[f"{d}:{s}" for d, s in pairs])


def compute(trace: Trace, rules: Rules) -> KernelsResult:
    """Every GPU activity name of ``trace`` with its calls, time and launching op."""
    acts, _ = phases.activities(trace, rules)
    st = steps.compute(trace, rules)
    step_list = st.steps["step"].astype(int).tolist() if len(st.steps) else []
    cols = KERNEL_COLUMNS
    if acts.empty:
        return KernelsResult(pd.DataFrame({c: [] for c in cols}), pd.DataFrame({c: [] for c in ["step", *cols]}), 0,
                             step_list)
    dur = (acts["end"] - acts["ts"]).to_numpy(np.int64)
    gpu_ns = int(dur.sum())
    launch_ts = acts["launch_ts"].to_numpy(np.int64)
    launch_tid = acts["launch_tid"].to_numpy(np.int64)
    # the op that launched each activity: the innermost host op around its runtime call
    ops, codes, cats = phases.host_ops(trace)
    op_code = np.full(len(acts), -1, np.int64)
    linked = np.flatnonzero(launch_ts >= 0)
    if linked.size:
        tree = host_tree(trace)
        pos = tree.enclosing(launch_tid[linked], launch_ts[linked], launch_ts[linked])
        inside = pos >= 0
        op_code[linked[inside]] = codes[tree.order[pos[inside]]]
    op = pd.Categorical.from_codes(op_code, categories=cats) if len(cats) else pd.Categorical(np.full(len(acts), None))
    win = pd.DataFrame({"ts": st.steps["cpu_start"].to_numpy(np.int64), "end": st.steps["cpu_end"].to_numpy(np.int64),
                        "step": st.steps["step"].to_numpy(np.int64)}) if len(st.steps) else pd.DataFrame()
    step = np.where(launch_ts >= 0, phases.step_of(win, np.where(launch_ts >= 0, launch_ts, 0)), -1) if len(win) \
        else np.full(len(acts), -1, np.int64)
    kind = acts["kind"].to_numpy(np.int64)
    f = pd.DataFrame({
        "name": pd.Categorical(acts["name"].to_numpy(object)),
        "kind": np.array([KIND_NAMES.get(int(k), "other") for k in range(256)], dtype=object)[kind & 0xFF],
        "dur": dur, "op": op, "unlaunched": op_code < 0, "phase": pd.Categorical(acts["phase"].to_numpy(object)),
        "step": step, "where": _where(acts["device"].to_numpy(np.int64), acts["stream"].to_numpy(np.int64)),
    }, copy=False)
    total = _table(f, ["name"])
    total["share"] = total["total_ns"] / gpu_ns if gpu_ns else np.nan
    total["name"] = total["name"].astype(str)
    total = total.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)[cols]
    per = _table(f, ["step", "name"])
    step_gpu = f.groupby("step")["dur"].sum()
    per["share"] = per["total_ns"] / per["step"].map(step_gpu).replace(0, np.nan)
    per["name"] = per["name"].astype(str)
    per = per.sort_values(["step", "total_ns"], ascending=[True, False], kind="stable", ignore_index=True)[["step", *cols]]
    return KernelsResult(total, per, gpu_ns, step_list)


__all__ = ["KERNEL_COLUMNS", "KernelsResult", "compute"]
