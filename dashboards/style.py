"""The look shared by every chart and table, in plain Python (no numpy, no pandas): the first
page (``dashboards.reports``) is drawn before those are imported."""

from __future__ import annotations

import math
from numbers import Integral, Number

PHASE_COLOURS = {  # tracekit's phase names (tracekit/default_rules.toml)
    "batch_copy": "#8c564b",
    "input_dist": "#9467bd",
    "lookup": "#2ca02c",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "emb_backward": "#ffbb78",
    "optimizer": "#d62728",
    "zero_grad": "#ff9896",
    "communication": "#17becf",
    "annotation": "#9aa0b0",
    "other": "#c7c7c7",
}
_EXTRA = ["#bcbd22", "#e377c2", "#7f7f7f", "#aec7e8", "#98df8a", "#c5b0d5"]

AXIS = {"gridcolor": "#e5e8ee", "zerolinecolor": "#c9ced8", "automargin": True}
PLAIN_LAYOUT = dict(margin=dict(l=60, r=20, t=40, b=40), font=dict(size=12), plot_bgcolor="white", paper_bgcolor="white")
"""Shared layout (plotly.js does not know template names, so the look is spelled out)."""


def layout(title: str | None = None, *, x: str | None = None, y: str | None = None, height: int = 340, **kw) -> dict:
    out = {**PLAIN_LAYOUT, "height": height,
           "xaxis": {**AXIS, **({"title": {"text": x}} if x else {})},
           "yaxis": {**AXIS, **({"title": {"text": y}} if y else {})}}
    if title:
        out["title"] = {"text": title, "x": 0.01, "xanchor": "left"}
    for k, v in kw.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def phase_colour(phase: str) -> str:
    if phase in PHASE_COLOURS:
        return PHASE_COLOURS[phase]
    return _EXTRA[sum(map(ord, str(phase))) % len(_EXTRA)]


CATEGORY_COLOURS = {"host": "#5c6370", "communication": "#17becf", "memcpy": "#8c564b", "sync": "#111111", "idle": "#d9dce3",
                    "unexplained": "#f0b3b3"}
"""Colours of tracekit explain's critical-path categories other than ``compute:<phase>``."""


def category_colour(cat: str) -> str:
    """A critical-path category's colour: a compute phase keeps its phase colour."""
    return phase_colour(cat.split(":", 1)[1]) if cat.startswith("compute:") else CATEGORY_COLOURS.get(cat, "#bcbd22")


def is_number(v) -> bool:
    return isinstance(v, Number) and not isinstance(v, bool)


def fmt(v) -> str:
    """How a figure is written in the page: floats with 3 decimals, ints whole; both with thousands separators."""
    if v is None:
        return "–"
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return "yes" if v else "no"
    if isinstance(v, Integral):
        return f"{int(v):,}"
    if isinstance(v, Number):
        return "–" if math.isnan(float(v)) else f"{float(v):,.3f}"
    return str(v)
