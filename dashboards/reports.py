"""What a rank's report object (``tracekit.report.to_dict``, from tracekit's report cache) says,
for the views that need nothing else: warnings, tracekit explain's findings and per-step
breakdown, the overview's charts. Plain Python (no numpy, no pandas), so the first page is
drawn while those are still being imported.
"""

from __future__ import annotations

from dashboards.style import category_colour, layout
from tracekit import report as tk_report

NS_PER_MS = 1e6


def pct(ratio: float | None) -> str:
    """A 0..1 ratio as the page writes every ratio: ``62.9%`` (``–`` when unknown)."""
    return "–" if ratio is None or ratio != ratio else f"{100 * ratio:.1f}%"


def warnings(report: dict) -> list[str]:
    """Everything tracekit warned about in one rank's report object: the loader's warnings and
    any section's own ``warnings`` (explain's, for one)."""
    out = list(report.get("warnings") or [])
    for key in dict.fromkeys((*tk_report.SECTION_KEYS, "explain")):
        sec = report.get(key)
        if isinstance(sec, dict) and isinstance(sec.get("warnings"), list):
            out += [str(w) for w in sec["warnings"] if str(w) not in out]
    return out


# ---- explain: what bounds each step, what each fix would save -----------------------------------

BREAKDOWN_ORDER = ("host", "compute:batch_copy", "compute:input_dist", "compute:lookup", "compute:forward",
                   "compute:backward", "compute:emb_backward", "compute:optimizer", "compute:zero_grad",
                   "communication", "memcpy", "sync", "idle", "unexplained")
"""The order of ``tracekit explain``'s critical-path categories in a stacked bar (bottom up);
categories not named here (other ``compute:<phase>``) go after the compute ones."""

CATEGORY_NAMES = {"host": "host (dispatch, launch)", "communication": "exposed communication", "memcpy": "exposed memcpy",
                  "sync": "sync stall", "idle": "GPU gap", "gpu": "GPU",
                  "unexplained": "unexplained (not in the model)"}


def category_name(cat: str) -> str:
    """``compute:backward`` -> ``backward``; the others as ``CATEGORY_NAMES`` says."""
    if cat.startswith("compute:"):
        return cat.split(":", 1)[1].replace("emb_backward", "embedding backward")
    return CATEGORY_NAMES.get(cat, cat)


def bound_text(bound: str | None, share: float | None) -> str:
    """``host-bound (72.0% of the critical path)``."""
    if not bound:
        return "bound: unknown"
    name = category_name(bound) if ":" in bound else bound
    return f"{name}-bound" + (f" ({pct(share)} of the critical path)" if share is not None else "")


def _saving(f: dict) -> str:
    if f.get("kind") == "memory":
        b = f.get("saving_bytes")
        return f"{tk_report.fmt_bytes(b)} less peak reserved" if b is not None else "memory saving not predicted (no snapshot)"
    ns = f.get("saving_ns")
    if ns is None:
        return "no time saving predicted"
    if ns < 0:  # never a saving: the replay predicts a slower step
        frac = f.get("saving_fraction")
        return f"would not help here: predicted {-ns / NS_PER_MS:,.3f} ms slower" + \
            (f" ({pct(-frac)} of the step)" if frac is not None else "")
    text = f"saves {ns / NS_PER_MS:,.3f} ms" + (f" ({pct(f['saving_fraction'])} of the step)" if f.get("saving_fraction") is not None else "")
    if f.get("saving_contention_ns") is not None and f["saving_contention_ns"] != ns:
        c = f["saving_contention_ns"]
        text += (f" · {c / NS_PER_MS:,.3f} ms with contention" if c >= 0 else
                 f" · {-c / NS_PER_MS:,.3f} ms slower with contention")
    if tk_report.would_not_help(f):
        text += ": would not help here"
    return text


def explain(report: dict) -> dict | None:
    """tracekit explain's section of one rank's report object, ready to draw: ``bound`` (text),
    ``findings`` (dicts ``title, fix, evidence, saving, predicted`` (False also for a saving that
    "would not help here"), in the order tracekit gives them, which the CLI prints too),
    ``categories`` (in ``BREAKDOWN_ORDER``) and ``steps``
    (dicts ``step, bound`` and ms per category). None when the report has no such section."""
    ex = report.get("explain")
    if not isinstance(ex, dict):
        return None
    findings = ex.get("findings") or []  # in tracekit's one order (the CLI's): never re-sorted here
    cats: list[str] = []
    for st in ex.get("steps") or []:
        cats += [c for c in (st.get("breakdown") or {}) if c not in cats]
    known = [c for c in BREAKDOWN_ORDER if c in cats]
    extra = [c for c in cats if c not in BREAKDOWN_ORDER]
    at = max([i + 1 for i, c in enumerate(known) if c == "host" or c.startswith("compute:")], default=0)
    cats = known[:at] + extra + known[at:]  # other phases after the known compute ones
    steps = [{"step": str(st.get("step")), "bound": bound_text(st.get("bound"), st.get("bound_share")),
              **{c: float((st.get("breakdown") or {}).get(c, 0)) / NS_PER_MS for c in cats}}
             for st in ex.get("steps") or []]
    return {"bound": bound_text(ex.get("bound"), ex.get("bound_share")), "categories": cats, "steps": steps,
            "findings": [{"title": f.get("title", ""), "fix": f.get("fix", ""), "evidence": f.get("evidence", ""),
                          "saving": _saving(f),
                          "predicted": f.get("saving_bytes" if f.get("kind") == "memory" else "saving_ns") is not None and not tk_report.would_not_help(f)}
                         for f in findings]}


def step_breakdown_figure(ex: dict, title: str) -> dict:
    """Where each step's time went on its critical path (``explain``'s ``steps``): a stacked bar
    per step, in ms; a category no step has is left out."""
    x = [s["step"] for s in ex["steps"]]
    data = [{"type": "bar", "x": x, "y": [round(s[c], 6) for s in ex["steps"]], "name": category_name(c),
             "marker": {"color": category_colour(c)}, "customdata": [s["bound"] for s in ex["steps"]],
             "hovertemplate": "step %{x}: %{y:,.3f} ms<br>%{customdata}<extra>" + category_name(c) + "</extra>"}
            for c in ex["categories"] if any(s[c] > 0 for s in ex["steps"])]
    return {"data": data, "layout": layout(f"Where each step goes (its critical path, ms) · {title}", x="step", y="ms",
                                           height=380, barmode="stack", xaxis={"type": "category"}, bargap=0.35,
                                           legend={"traceorder": "normal"})}


def step_times_figure(report: dict, title: str) -> dict:
    """GPU and CPU span per step (from the report's ``steps``), for a report without explain."""
    rows = report["steps"]["steps"]
    if not rows:
        return {"data": [], "layout": layout(height=300, xaxis={"visible": False}, yaxis={"visible": False},
                                             annotations=[dict(text="no steps found", showarrow=False, x=0.5, y=0.5,
                                                               xref="paper", yref="paper")])}
    x = [str(r["step"]) for r in rows]
    gpu = [r["gpu_ns"] / NS_PER_MS if r["gpu_start"] is not None and r["gpu_start"] >= 0 else None for r in rows]
    return {
        "data": [
            {"type": "bar", "x": x, "y": gpu, "name": "GPU span (ms)", "marker": {"color": "#1f77b4"}},
            {"type": "bar", "x": x, "y": [r["cpu_ns"] / NS_PER_MS for r in rows], "name": "CPU span (ms)", "marker": {"color": "#9aa0b0"}},
        ],
        "layout": layout(f"Step time per step · {title}", x="step", y="ms", barmode="group", xaxis={"type": "category"}),
    }
