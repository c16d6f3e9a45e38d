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
- the launch configuration where the trace records it (Kineto writes it in a kernel's args;
  ``Trace.events.launch``): ``grid`` and ``block`` (``[512, 16, 1]``), ``registers`` (per
  thread), ``shared_memory`` (bytes per block), ``occupancy`` (Kineto's "est. achieved
  occupancy %"); "" and NaN where the trace does not record them (memcpys, memsets, older
  traces).

One row per name and launch configuration: a kernel launched with two grids is two rows (its
time per configuration is what a user tunes; ``configs`` says how many a name has, and the
name's own total is the sum of its rows). Rows over all steps (``kernels``) and per step
(``by_step``: the step whose CPU span holds the launch, -1 outside steps or without a launch),
largest total first. A pure function of the parsed trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import json

from tracekit import phases, steps
from tracekit.analyses import _groups as g
from tracekit.analyses.operators import host_tree
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace
from tracekit.frames import column

KERNEL_COLUMNS = ["name", "kind", "calls", "total_ns", "mean_ns", "min_ns", "max_ns", "share",
                  "launched_by", "launchers", "unlaunched", "phase", "streams",
                  "grid", "block", "registers", "shared_memory", "occupancy", "configs"]
"""The columns of ``KernelsResult.kernels`` (``by_step``: ``step`` first)."""

KIND_NAMES = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset"}


@dataclass(frozen=True)
class KernelsResult:
    """Every GPU activity name of a trace, over all steps and per step."""

    kernels: pd.DataFrame
    """One row per activity name and launch configuration: ``KERNEL_COLUMNS`` (times in ns;
    ``share`` 0..1 of ``gpu_ns``), largest total first."""
    by_step: pd.DataFrame
    """The same per step: ``step`` first (``share`` of that step's GPU time)."""
    gpu_ns: int
    """GPU time of every activity."""
    steps: list
    """The steps found (``tracekit.steps``), in order."""


def _table(keys: list[np.ndarray], f: dict, names: dict) -> dict:
    """One row per group of equal ``keys``: the ``KERNEL_COLUMNS`` figures (``share`` left to
    the caller) and the keys' own columns (``key0``, ...) from their first row."""
    gid, first, n = g.groups(*keys)
    dur = f["dur"]
    calls = g.total(gid, n)
    tot = g.total(gid, n, dur)
    launcher = g.mode(gid, n, f["op"])
    phase = g.mode(gid, n, f["phase"], dur)
    return {
        **{f"key{i}": k[first] for i, k in enumerate(keys)},
        "name": names["name"][f["name"][first]], "kind": f["kind"][first], "calls": calls, "total_ns": tot,
        "mean_ns": tot / np.maximum(calls, 1), "min_ns": g.extreme(gid, n, dur, False),
        "max_ns": g.extreme(gid, n, dur, True),
        "launched_by": np.where(launcher >= 0, names["op"][np.maximum(launcher, 0)], ""),
        "launchers": g.distinct(gid, n, f["op"]), "unlaunched": g.total(gid, n, (f["op"] < 0).astype(np.int64)),
        "phase": names["phase"][np.maximum(phase, 0)],
        "streams": np.array(g.joined(gid, n, f["where"], list(names["where"])), dtype=object),
    }


def _where(device: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """``device:stream`` per activity as codes into the sorted list of pairs."""
    width = int(stream.max()) - int(stream.min()) + 1 if stream.size else 1
    key = (device - (int(device.min()) if device.size else 0)) * width + (stream - (int(stream.min()) if stream.size else 0))
    code, uniq = g.codes(key)
    rank = np.argsort(np.argsort(uniq, kind="stable"), kind="stable")  # the pairs sorted, a few dozen
    first = g.first_rows(code, len(uniq))
    names = [""] * len(uniq)
    for i, r in enumerate(rank.tolist()):
        names[r] = f"{int(device[first[i]])}:{int(stream[first[i]])}"
    return rank[code].astype(np.int64), names


LAUNCH_COLUMNS = ("grid", "block", "registers", "shared_memory", "occupancy")
"""The launch configuration's columns (``Trace.events.launch``'s fields)."""


def _dims(v) -> str:
    return "[" + ", ".join(map(str, v)) + "]" if isinstance(v, list) else ""


def _launch_fields(texts: list[str]) -> dict[str, np.ndarray]:
    """The ``LAUNCH_COLUMNS`` of each launch text (``Trace.events.launch``'s categories): grid
    and block as text, the others as floats, "" and NaN where not recorded."""
    rows = [json.loads(t) if t else {} for t in texts]
    return {
        "grid": np.array([_dims(r.get("grid")) for r in rows], dtype=object),
        "block": np.array([_dims(r.get("block")) for r in rows], dtype=object),
        **{c: np.array([float(r[c]) if c in r else np.nan for r in rows], dtype=np.float64)
           for c in ("registers", "shared_memory", "occupancy")},
    }


def _launch_codes(trace: Trace, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each GPU activity's launch configuration (in ``phases.activities``' order: the events',
    by ts) as a code, -1 where none, and the fields of each code (the last row: none)."""
    ev = trace.events
    if "launch" not in ev:  # a table built without the loader
        return np.full(n, -1, np.int64), _launch_fields([""])
    col = ev["launch"]
    mask = phases.of_kinds(column(ev, "kind"), tuple(KIND_NAMES))
    codes = col.cat.codes.to_numpy()[mask].astype(np.int64)
    if len(codes) != n:  # pragma: no cover - the activities are the events of these kinds
        raise AssertionError("activities and events disagree")
    cats = [str(c) for c in col.cat.categories]
    return np.where(codes < 0, len(cats), codes), _launch_fields([*cats, ""])


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
    launch_ts = column(acts, "launch_ts", np.int64)
    launch_tid = column(acts, "launch_tid", np.int64)
    # the op that launched each activity: the innermost host op around its runtime call
    _, op_codes, op_cats = phases.host_ops(trace)
    op = np.full(len(acts), -1, np.int64)
    linked = np.flatnonzero(launch_ts >= 0)
    if linked.size:
        tree = host_tree(trace)
        pos = tree.enclosing(launch_tid[linked], launch_ts[linked], launch_ts[linked])
        inside = pos >= 0
        op[linked[inside]] = op_codes[tree.order[pos[inside]]]
    win = pd.DataFrame({"ts": column(st.steps, "cpu_start", np.int64), "end": column(st.steps, "cpu_end", np.int64),
                        "step": column(st.steps, "step", np.int64)}) if len(st.steps) else pd.DataFrame()
    step = np.where(launch_ts >= 0, phases.step_of(win, np.where(launch_ts >= 0, launch_ts, 0)), -1) if len(win) \
        else np.full(len(acts), -1, np.int64)
    kind = column(acts, "kind", np.int64)
    name_code, name_vals = g.codes(column(acts, "name", object))
    phase_code, phase_vals = g.codes(column(acts, "phase", object))
    where, where_names = _where(column(acts, "device", np.int64), column(acts, "stream", np.int64))
    f = {"name": name_code, "dur": dur, "op": op, "phase": phase_code, "where": where,
         "kind": np.array([KIND_NAMES.get(int(k), "other") for k in range(256)], dtype=object)[kind & 0xFF]}
    names = {"name": np.asarray(name_vals, dtype=object).astype(str).astype(object),
             "op": np.asarray(op_cats.astype(str), dtype=object), "phase": np.asarray(phase_vals, dtype=object),
             "where": where_names}
    launch, fields = _launch_codes(trace, len(acts))

    def with_launch(t: dict, key: int) -> dict:
        code = t[f"key{key}"]
        return {**t, **{c: fields[c][code] for c in LAUNCH_COLUMNS}}

    t = with_launch(_table([name_code, launch], f, names), 1)
    total = pd.DataFrame({c: t[c] for c in cols if c not in ("share", "configs")})
    total["share"] = total["total_ns"] / gpu_ns if gpu_ns else np.nan
    configs = pd.Series(t["key0"]).value_counts()
    total["configs"] = pd.Series(t["key0"]).map(configs).to_numpy(np.int64)
    total = total.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)[cols]
    step_code = step - int(step.min()) if step.size else step
    t = with_launch(_table([step_code, name_code, launch], f, names), 2)
    per = pd.DataFrame({"step": t["key0"] + (int(step.min()) if step.size else 0),
                        **{c: t[c] for c in cols if c not in ("share", "configs")}})
    per["configs"] = pd.DataFrame({"s": t["key0"], "n": t["key1"]}).groupby(["s", "n"])["n"].transform("size").to_numpy(np.int64)
    step_gpu = pd.Series(dur).groupby(step).sum()
    per["share"] = per["total_ns"] / per["step"].map(step_gpu).replace(0, np.nan)
    per = per.sort_values(["step", "total_ns"], ascending=[True, False], kind="stable", ignore_index=True)[["step", *cols]]
    return KernelsResult(total, per, gpu_ns, step_list)


__all__ = ["KERNEL_COLUMNS", "LAUNCH_COLUMNS", "KernelsResult", "compute"]
