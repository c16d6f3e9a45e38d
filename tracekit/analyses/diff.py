"""Diff of two traces (two runs, or two ranks of one job): per op and per kernel, calls and time
in A and in B, what was added and removed, and where the step's time moved: by phase, by
stream, between phases that overlap, on the critical path. HTA's ``TraceDiff``, TraceLens's tree
diff and TensorBoard's diff view compare the same things.

Every figure is **per step**: a trace's total over its steps divided by its number of steps
(``tracekit.steps``), so two traces of different lengths compare; a trace without steps counts
as one step of its whole length. An op or kernel outside every step is left out of the per-step
figures (``OperatorsResult.by_step`` / ``KernelsResult.by_step`` with ``step >= 0``).

- **step**: mean CPU and GPU span of a step;
- **phases**: GPU time of each phase's activities (kernels, memcpys, memsets) per step;
- **streams**: per (stream, phase) GPU time per step; a stream is named by its role in its own
  trace (``stream_names``: ``main``, or ``side (<its largest phase>)``), since stream ids
  differ between runs; so a phase that moved from the main stream to a side stream shows as
  such;
- **overlaps**: per pair of phases, the GPU time per step when both ran at once (the union of
  one's activities intersected with the other's, per device): the optimizer overlapping the
  next lookup, say;
- **critical path**: explain's time per category per step (``tracekit.analyses.explain``:
  of the estimated untraced step, as ``tracekit analyze`` reports it);
- **ops** and **kernels**: per name (ops: and recorded input shapes), calls and time per step in
  A and B, ``status`` ``both``, ``added`` (only in B) or ``removed`` (only in A).

A pure function of the two traces' results (``side`` reads them off one trace).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import intervals, phases, steps
from tracekit.analyses import kernels as kernels_mod
from tracekit.analyses import operators as operators_mod
from tracekit.phases import Rules
from tracekit.trace.model import Trace
from tracekit.frames import column

MAIN_PHASES = ("forward", "backward", "optimizer", "zero_grad")
"""The dense model's phases: the stream that runs most of them is a device's main stream."""


@dataclass(frozen=True)
class Side:
    """What the diff reads of one trace: small per-step summaries of its results (``side``),
    so that a side computed in another process comes back quickly."""

    source: str
    rank: int
    steps: int
    """Steps found (``tracekit.steps``)."""
    step_ns: dict
    """``step_gpu_ns``, ``step_cpu_ns``: the mean span of a step (None without one)."""
    phases: pd.Series
    """GPU time per step by phase."""
    streams: pd.DataFrame
    """``stream, phase, ns, ids``: GPU time per step by stream (named by role) and phase."""
    overlaps: dict
    """(phase, phase) -> GPU time per step both ran at once."""
    critical: pd.Series
    """explain's critical path per step by category (empty without explain)."""
    ops: pd.DataFrame
    """Per (name, input_dims): ``calls, cpu, gpu`` per step."""
    kernels: pd.DataFrame
    """Per name: ``kind, calls, ns`` per step."""


def side(trace: Trace, rules: Rules, *, explain: object | None = None,
         operators: operators_mod.OperatorsResult | None = None,
         kernels: kernels_mod.KernelsResult | None = None) -> Side:
    """One trace's ``Side`` (the results given are used, the others computed; without
    ``explain`` the critical-path part is empty)."""
    acts, _ = phases.activities(trace, rules)
    st = steps.compute(trace, rules)
    ops = operators if operators is not None else operators_mod.compute(trace, rules)
    ker = kernels if kernels is not None else kernels_mod.compute(trace, rules)
    n = max(len(st.steps), 1)
    inside = _in_steps(acts, st.steps)

    def mean(col: str):
        v = st.steps[col][st.steps[col] >= 0] if len(st.steps) else []
        return float(np.mean(v)) if len(v) else None

    return Side(trace.source, int(trace.rank), len(st.steps), {"step_gpu_ns": mean("gpu_ns"), "step_cpu_ns": mean("cpu_ns")},
                _per_phase(inside, n), _per_stream(inside, acts, n), _overlaps(inside, n), _critical(explain),
                _ops_per_step(ops, len(st.steps)), _kernels_per_step(ker, len(st.steps)))


@dataclass(frozen=True)
class DiffResult:
    """Where B differs from A, per step (ns per step unless named otherwise)."""

    a: dict
    """``source, rank, steps`` of A."""
    b: dict
    step: pd.DataFrame
    """``figure`` (``step_gpu_ns``, ``step_cpu_ns``: mean span of a step), ``a, b, delta``."""
    phases: pd.DataFrame
    """``phase, a_ns, b_ns, delta_ns``: GPU time per step, largest change first."""
    streams: pd.DataFrame
    """``stream`` (``main`` or ``side <device>:<id>``, per trace), ``phase, a_ns, b_ns,
    delta_ns``, ``a_streams``/``b_streams`` (the ``device:stream`` ids it stands for in each)."""
    overlaps: pd.DataFrame
    """``phase_a, phase_b, a_ns, b_ns, delta_ns``: per step, GPU time both phases ran at once;
    pairs that overlap in either trace."""
    critical_path: pd.DataFrame
    """``category, a_ns, b_ns, delta_ns``: explain's critical path per step by category
    (empty without explain)."""
    ops: pd.DataFrame
    """``name, input_dims, status, a_calls, b_calls, a_cpu_ns, b_cpu_ns, a_gpu_ns, b_gpu_ns,
    delta_gpu_ns, delta_cpu_ns``: calls per step, CPU total and GPU total (own and
    children's) per step; largest |GPU change| then |CPU change| first."""
    kernels: pd.DataFrame
    """``name, kind, status, a_calls, b_calls, a_ns, b_ns, delta_ns``: per step; largest |change|
    first."""
    summary: list
    """Sentences: where the step's time moved (the largest changes of each table)."""


def _step_rows(a: Side, b: Side) -> pd.DataFrame:
    rows = []
    for fig in ("step_gpu_ns", "step_cpu_ns"):
        va, vb = a.step_ns.get(fig), b.step_ns.get(fig)
        rows.append((fig, va, vb, None if va is None or vb is None else vb - va))
    return pd.DataFrame(rows, columns=["figure", "a", "b", "delta"])


def _in_steps(acts: pd.DataFrame, st: pd.DataFrame) -> pd.DataFrame:
    """The activities launched inside a step (all of them for a trace without steps)."""
    if not len(st):
        return acts
    win = pd.DataFrame({"ts": column(st, "cpu_start", np.int64), "end": column(st, "cpu_end", np.int64),
                        "step": column(st, "step", np.int64)})
    lt = column(acts, "launch_ts", np.int64)
    inside = (lt >= 0) & (phases.step_of(win, np.where(lt >= 0, lt, 0)) >= 0)
    return acts[inside]


def _per_phase(acts: pd.DataFrame, n: int) -> pd.Series:
    dur = (acts["end"] - acts["ts"]).to_numpy(np.int64)
    return pd.Series(dur, index=column(acts, "phase", object)).groupby(level=0).sum() / n


def stream_names(acts: pd.DataFrame) -> dict[tuple[int, int], str]:
    """(device, stream) -> its name by role, which two runs share though their stream ids
    differ: ``main`` (the stream with the most forward/backward/optimizer time on its device),
    else ``side (<phase>)`` after the phase with the most GPU time on it (with its id when two
    side streams of a device share that phase); ``GPU d · `` first when there are several."""
    dur = (acts["end"] - acts["ts"]).to_numpy(np.int64)
    f = pd.DataFrame({"device": column(acts, "device", np.int64), "stream": column(acts, "stream", np.int64),
                      "phase": column(acts, "phase", object), "dur": dur})
    by = f.groupby(["device", "stream", "phase"], sort=True)["dur"].sum()
    main: dict[int, tuple[int, int]] = {}
    top: dict[tuple[int, int], str] = {}
    for (d, st, ph), ns in by.items():
        key = (int(d), int(st))
        if ph in MAIN_PHASES:
            dense = int(by.loc[(d, st)].reindex(list(MAIN_PHASES)).fillna(0).sum())
            if dense > main.get(int(d), (-1, -1))[0]:
                main[int(d)] = (dense, int(st))
    for (d, st), grp in by.groupby(level=[0, 1]):
        top[(int(d), int(st))] = str(grp.droplevel([0, 1]).idxmax())
    n_dev = f["device"].nunique()
    names = {}
    for key, ph in top.items():
        d, st = key
        names[key] = "main" if main.get(d, (0, None))[1] == st else f"side ({ph})"
    seen: dict[tuple[int, str], int] = {}
    for (d, _), n in names.items():
        seen[(d, n)] = seen.get((d, n), 0) + 1
    out = {}
    for (d, st), n in names.items():
        if n != "main" and seen[(d, n)] > 1:
            n = f"{n} {st}"
        out[(d, st)] = n if n_dev <= 1 else f"GPU {d} · {n}"
    return out


def _per_stream(acts: pd.DataFrame, every: pd.DataFrame, n: int) -> pd.DataFrame:
    """GPU time per step by (stream named by role among ``every`` activity, phase)."""
    names = stream_names(every)
    key = [names[(int(d), int(st))] for d, st in zip(acts["device"], acts["stream"])]
    ids = [f"{int(d)}:{int(st)}" for d, st in zip(acts["device"], acts["stream"])]
    f = pd.DataFrame({"stream": key, "phase": column(acts, "phase", object), "ids": ids,
                      "ns": (acts["end"] - acts["ts"]).to_numpy(np.int64)})
    if f.empty:
        return pd.DataFrame(columns=["stream", "phase", "ns", "ids"])
    grp = f.groupby(["stream", "phase"], sort=False)
    return pd.DataFrame({"ns": grp["ns"].sum() / n,
                         "ids": grp["ids"].agg(lambda v: ", ".join(sorted(set(v))))}).reset_index()


def _overlaps(acts: pd.DataFrame, n: int) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for _, dev in acts.groupby("device"):
        unions = {ph: intervals.union(column(grp, "ts", np.int64), column(grp, "end", np.int64))
                  for ph, grp in dev.groupby("phase")}
        names = sorted(unions)
        for i, pa in enumerate(names):
            for pb in names[i + 1:]:
                ns = intervals.intersection_length(unions[pa], unions[pb])
                if ns:
                    out[(pa, pb)] = out.get((pa, pb), 0.0) + ns / n
    return out


def _critical(ex: object | None) -> pd.Series:
    if ex is None or not len(getattr(ex, "steps", [])):
        return pd.Series(dtype=float)
    total: dict[str, float] = {}
    for bd in ex.steps["breakdown"]:
        for k, v in (bd or {}).items():
            total[k] = total.get(k, 0.0) + float(v)
    return pd.Series(total, dtype=float) / max(len(ex.steps), 1)


def _ops_per_step(ops: operators_mod.OperatorsResult, nsteps: int) -> pd.DataFrame:
    t = ops.by_step
    t = t[t["step"] >= 0] if nsteps else t
    grp = t.groupby(["name", "input_dims"], sort=False)
    n = max(nsteps, 1)
    return pd.DataFrame({"calls": grp["calls"].sum() / n, "cpu": grp["cpu_total_ns"].sum() / n,
                         "gpu": grp["gpu_total_ns"].sum() / n})


def _kernels_per_step(ker: kernels_mod.KernelsResult, nsteps: int) -> pd.DataFrame:
    t = ker.by_step
    t = t[t["step"] >= 0] if nsteps else t
    grp = t.groupby("name", sort=False)
    n = max(nsteps, 1)
    return pd.DataFrame({"kind": grp["kind"].first(), "calls": grp["calls"].sum() / n, "ns": grp["total_ns"].sum() / n})


def _joined(a: pd.Series, b: pd.Series, key: str) -> pd.DataFrame:
    idx = list(dict.fromkeys([*a.index, *b.index]))
    va = a.reindex(idx).fillna(0.0).to_numpy(np.float64)
    vb = b.reindex(idx).fillna(0.0).to_numpy(np.float64)
    out = pd.DataFrame({key: idx, "a_ns": va, "b_ns": vb, "delta_ns": vb - va})
    return out.reindex(out["delta_ns"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)


def _status(in_a: np.ndarray, in_b: np.ndarray) -> np.ndarray:
    return np.where(in_a & in_b, "both", np.where(in_b, "added", "removed"))


def _ops(a: Side, b: Side) -> pd.DataFrame:
    j = a.ops.add_suffix("_a").join(b.ops.add_suffix("_b"), how="outer")
    in_a, in_b = j["calls_a"].notna().to_numpy(), j["calls_b"].notna().to_numpy()
    j = j.fillna(0.0)
    out = pd.DataFrame({
        "name": [k[0] for k in j.index], "input_dims": [k[1] for k in j.index], "status": _status(in_a, in_b),
        "a_calls": column(j, "calls_a"), "b_calls": column(j, "calls_b"),
        "a_cpu_ns": column(j, "cpu_a"), "b_cpu_ns": column(j, "cpu_b"),
        "a_gpu_ns": column(j, "gpu_a"), "b_gpu_ns": column(j, "gpu_b"),
    })
    out["delta_gpu_ns"] = out["b_gpu_ns"] - out["a_gpu_ns"]
    out["delta_cpu_ns"] = out["b_cpu_ns"] - out["a_cpu_ns"]
    order = np.lexsort((-out["delta_cpu_ns"].abs().to_numpy(), -out["delta_gpu_ns"].abs().to_numpy()))
    return out.iloc[order].reset_index(drop=True)


def _kernels(a: Side, b: Side) -> pd.DataFrame:
    j = a.kernels.add_suffix("_a").join(b.kernels.add_suffix("_b"), how="outer")
    in_a, in_b = j["calls_a"].notna().to_numpy(), j["calls_b"].notna().to_numpy()
    kind = j["kind_a"].where(j["kind_a"].notna(), j["kind_b"])
    j = j.drop(columns=["kind_a", "kind_b"]).fillna(0.0)
    out = pd.DataFrame({"name": j.index.astype(str), "kind": kind.to_numpy(object), "status": _status(in_a, in_b),
                        "a_calls": column(j, "calls_a"), "b_calls": column(j, "calls_b"),
                        "a_ns": column(j, "ns_a"), "b_ns": column(j, "ns_b")})
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
    return out.reindex(out["delta_ns"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:+,.3f} ms" if ns else "0.000 ms"


def _summary(step: pd.DataFrame, ph: pd.DataFrame, streams: pd.DataFrame, overlaps: pd.DataFrame,
             crit: pd.DataFrame, ops: pd.DataFrame, kernels: pd.DataFrame) -> list[str]:
    out = []
    g = step.set_index("figure")
    for fig, what in (("step_gpu_ns", "GPU"), ("step_cpu_ns", "CPU")):
        va, vb = g.loc[fig, "a"], g.loc[fig, "b"]
        if va is not None and vb is not None and np.isfinite(va) and np.isfinite(vb):
            out.append(f"step ({what} span): {va / 1e6:,.3f} → {vb / 1e6:,.3f} ms ({_ms(vb - va)}"
                       + (f", {100 * (vb - va) / va:+.1f}%" if va else "") + ")")
    for table, key, what in ((ph, "phase", "phase"), (crit, "category", "critical path")):
        top = table[table["delta_ns"].abs() >= 1e3].head(3)
        if len(top):
            out.append(f"{what}: " + "; ".join(f"{r[key]} {r['a_ns'] / 1e6:,.3f} → {r['b_ns'] / 1e6:,.3f} ms"
                                              for _, r in top.iterrows()))
    moved = streams[streams["delta_ns"].abs() >= 1e3]
    for phase, grp in moved.groupby("phase", sort=False):
        gone, came = grp[grp["delta_ns"] < 0], grp[grp["delta_ns"] > 0]
        if not len(gone) or not len(came):
            continue
        if (gone["b_ns"] == 0).all() and (came["a_ns"] == 0).all():  # all of it moved
            out.append(f"{phase} moved from {', '.join(gone['stream'])} to {', '.join(came['stream'])} "
                       f"({gone['a_ns'].sum() / 1e6:,.3f} → {came['b_ns'].sum() / 1e6:,.3f} ms)")
        else:
            out.append(f"{phase} shifted between streams: " + ", ".join(
                f"{r['stream']} {r['delta_ns'] / 1e6:+,.3f} ms" for _, r in grp.iterrows()))
    ov = overlaps[overlaps["delta_ns"].abs() >= 1e3].head(2)
    for _, r in ov.iterrows():
        out.append(f"{r['phase_a']} and {r['phase_b']} ran at once {r['a_ns'] / 1e6:,.3f} → {r['b_ns'] / 1e6:,.3f} ms per step")
    for table, what in ((ops, "ops"), (kernels, "kernels")):
        added = int((table["status"] == "added").sum())
        removed = int((table["status"] == "removed").sum())
        if added or removed:
            out.append(f"{what}: {added} only in B, {removed} only in A")
    return out


def compute(a: Side, b: Side) -> DiffResult:
    """Where ``b`` differs from ``a``, per step."""
    step = _step_rows(a, b)
    ph = _joined(a.phases, b.phases, "phase")
    sa, sb = a.streams, b.streams
    keys = list(dict.fromkeys([*zip(sa["stream"], sa["phase"]), *zip(sb["stream"], sb["phase"])]))
    ia = {k: (ns, ids) for k, ns, ids in zip(zip(sa["stream"], sa["phase"]), sa["ns"], sa["ids"])}
    ib = {k: (ns, ids) for k, ns, ids in zip(zip(sb["stream"], sb["phase"]), sb["ns"], sb["ids"])}
    streams = pd.DataFrame({
        "stream": [k[0] for k in keys], "phase": [k[1] for k in keys],
        "a_ns": [float(ia.get(k, (0.0, ""))[0]) for k in keys], "b_ns": [float(ib.get(k, (0.0, ""))[0]) for k in keys],
        "a_streams": [ia.get(k, (0.0, ""))[1] for k in keys], "b_streams": [ib.get(k, (0.0, ""))[1] for k in keys],
    }, columns=["stream", "phase", "a_ns", "b_ns", "a_streams", "b_streams"])
    streams.insert(4, "delta_ns", streams["b_ns"] - streams["a_ns"])
    streams = streams.reindex(streams["delta_ns"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)
    oa, ob = a.overlaps, b.overlaps
    pairs = list(dict.fromkeys([*oa, *ob]))
    overlaps = pd.DataFrame({"phase_a": [p[0] for p in pairs], "phase_b": [p[1] for p in pairs],
                             "a_ns": [oa.get(p, 0.0) for p in pairs], "b_ns": [ob.get(p, 0.0) for p in pairs]},
                            columns=["phase_a", "phase_b", "a_ns", "b_ns"])
    overlaps["delta_ns"] = overlaps["b_ns"] - overlaps["a_ns"]
    overlaps = overlaps.reindex(overlaps["delta_ns"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)
    crit = _joined(a.critical, b.critical, "category")
    ops = _ops(a, b)
    kern = _kernels(a, b)
    return DiffResult(
        a={"source": a.source, "rank": a.rank, "steps": a.steps},
        b={"source": b.source, "rank": b.rank, "steps": b.steps},
        step=step, phases=ph, streams=streams, overlaps=overlaps, critical_path=crit, ops=ops, kernels=kern,
        summary=_summary(step, ph, streams, overlaps, crit, ops, kern))


__all__ = ["DiffResult", "MAIN_PHASES", "Side", "compute", "side", "stream_names"]
