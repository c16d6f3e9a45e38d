"""``tracekit diff A B``'s text: where the step's time moved first, then the tables, numbered as
printed; every time in ms per step; long tables keep their largest changes and fold the rest into
one ``others`` row. From the JSON document (``schema.DiffDocument``)."""

from __future__ import annotations

from tracekit.report.tables import table

ROWS = 15
"""Rows shown of a long table (ops, kernels, streams): the largest changes; the rest folded."""


def _ms(ns, signed: bool = False) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:+,.3f}" if signed else f"{ns / 1e6:,.3f}"


def _calls(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def _folded(rows: list[dict], limit: int, cells, others) -> list[list]:
    """The first ``limit`` rows as ``cells(row)``, the rest as one ``others(rest)`` row."""
    out = [cells(r) for r in rows[:limit]]
    if len(rows) > limit:
        out.append(others(rows[limit:]))
    return out


def _sum(rows: list[dict], key: str) -> float:
    return sum(r[key] or 0 for r in rows)


def render_diff(doc: dict, *, limit: int = ROWS) -> str:
    """The text of a ``schema.DiffDocument``."""
    d = doc["diff"]
    a, b = d["a"], d["b"]
    out = [f"== diff  A: {a['source']} (rank {a['rank']}, {a['steps']} steps)",
           f"        B: {b['source']} (rank {b['rank']}, {b['steps']} steps)",
           "   every figure per step (a trace's total over its steps / its steps), times in ms", "",
           "Where the step's time moved (B against A)"]
    out += [f"  {line}" for line in d["summary"]] or ["  nothing moved"]
    sections = []
    sections.append(("Step", table(["figure", "A ms", "B ms", "Δ ms"],
                                   [[{"step_gpu_ns": "step, GPU span", "step_cpu_ns": "step, CPU span"}.get(r["figure"], r["figure"]),
                                     _ms(r["a"]), _ms(r["b"]), _ms(r["delta"], True)] for r in d["step"]])))
    sections.append(("GPU time by phase", table(["phase", "A ms", "B ms", "Δ ms"],
                                                [[r["phase"], _ms(r["a_ns"]), _ms(r["b_ns"]), _ms(r["delta_ns"], True)]
                                                 for r in d["phases"]]) if d["phases"] else "  no GPU activity"))
    sections.append(("GPU time by stream and phase (main: the stream with the most forward/backward/optimizer time)",
                     table(["stream", "phase", "A ms", "B ms", "Δ ms", "A streams", "B streams"],
                           _folded(d["streams"], limit,
                                   lambda r: [r["stream"], r["phase"], _ms(r["a_ns"]), _ms(r["b_ns"]), _ms(r["delta_ns"], True),
                                              r["a_streams"] or "-", r["b_streams"] or "-"],
                                   lambda rest: [f"others ({len(rest)})", "", _ms(_sum(rest, "a_ns")), _ms(_sum(rest, "b_ns")),
                                                 _ms(_sum(rest, "delta_ns"), True), "", ""]))
                     if d["streams"] else "  no GPU activity"))
    sections.append(("Phases running at once on the GPU",
                     table(["phases", "A ms", "B ms", "Δ ms"],
                           [[f"{r['phase_a']} + {r['phase_b']}", _ms(r["a_ns"]), _ms(r["b_ns"]), _ms(r["delta_ns"], True)]
                            for r in d["overlaps"]]) if d["overlaps"] else "  none in either"))
    sections.append(("Critical path by category (tracekit explain)",
                     table(["category", "A ms", "B ms", "Δ ms"],
                           [[r["category"], _ms(r["a_ns"]), _ms(r["b_ns"]), _ms(r["delta_ns"], True)]
                            for r in d["critical_path"]]) if d["critical_path"] else "  not computed"))
    ops = d["ops"]
    sections.append((f"Ops ({len(ops)}; largest change of GPU, then CPU time first; added: only in B, removed: only in A)",
                     table(["op", "status", "A calls", "B calls", "A CPU ms", "B CPU ms", "A GPU ms", "B GPU ms", "Δ GPU ms"],
                           _folded(ops, limit,
                                   lambda r: [r["name"] + (f" {r['input_dims']}" if r["input_dims"] else ""), r["status"],
                                              _calls(r["a_calls"]), _calls(r["b_calls"]), _ms(r["a_cpu_ns"]), _ms(r["b_cpu_ns"]),
                                              _ms(r["a_gpu_ns"]), _ms(r["b_gpu_ns"]), _ms(r["delta_gpu_ns"], True)],
                                   lambda rest: [f"others ({len(rest)})", "", _calls(_sum(rest, "a_calls")),
                                                 _calls(_sum(rest, "b_calls")), _ms(_sum(rest, "a_cpu_ns")),
                                                 _ms(_sum(rest, "b_cpu_ns")), _ms(_sum(rest, "a_gpu_ns")),
                                                 _ms(_sum(rest, "b_gpu_ns")), _ms(_sum(rest, "delta_gpu_ns"), True)]))
                     if ops else "  no ops"))
    ks = d["kernels"]
    sections.append((f"Kernels, memcpys and memsets ({len(ks)}; largest change first)",
                     table(["status", "A calls", "B calls", "A ms", "B ms", "Δ ms", "kernel (whole name, last)"],
                           _folded(ks, limit,
                                   lambda r: [r["status"], _calls(r["a_calls"]), _calls(r["b_calls"]),
                                              _ms(r["a_ns"]), _ms(r["b_ns"]), _ms(r["delta_ns"], True), r["name"]],
                                   lambda rest: ["", _calls(_sum(rest, "a_calls")),
                                                 _calls(_sum(rest, "b_calls")), _ms(_sum(rest, "a_ns")),
                                                 _ms(_sum(rest, "b_ns")), _ms(_sum(rest, "delta_ns"), True),
                                                 f"others ({len(rest)})"]), left_last=True)
                     if ks else "  no GPU activity"))
    for i, (title, body) in enumerate(sections, 1):
        out += ["", f"{i}. {title}", body.rstrip("\n")]
    return "\n".join(out) + "\n"
