"""Rendering: plotly figures (as plain dicts) from the tables ``dashboards.results`` extracts.

No data logic here. Figures are plain ``{"data", "layout"}`` dicts rather than
``plotly.graph_objects``: the validating objects cost ~0.5 s to import and ~0.1-0.4 s per
figure, which the 300 ms budget of a callback cannot afford; plotly.js draws the dicts alike.
Arrays are sent as lists with their figures rounded to what a chart can show.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dashboards.reports import category_name
from dashboards.timeline import MARK_LANES, Lanes

from dashboards.style import AXIS as _AXIS  # noqa: E402
from dashboards.style import CATEGORY_COLOURS, PHASE_COLOURS, PLAIN_LAYOUT, category_colour, fmt, is_number, phase_colour  # noqa: F401,E402
from dashboards.style import layout as _layout  # noqa: E402


def _nums(a, digits: int = 6) -> list:
    """A numeric column as a JSON list (NaN -> null), rounded."""
    arr = np.round(np.asarray(a, dtype=np.float64), digits)
    return [None if not math.isfinite(v) else v for v in arr.tolist()]


def empty(text: str) -> dict:
    return {"data": [], "layout": _layout(height=300, xaxis={"visible": False}, yaxis={"visible": False},
                                          annotations=[dict(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")])}


MARK_COLOURS = {"step": "#dfe3ea", "gap": "#b8860b", "stall": "#111111", "critical": "#6a1b9a"}
"""Marks in colours no phase has (sync stalls black, gaps dark gold)."""


def timeline(lanes: Lanes, marks: pd.DataFrame | None = None) -> dict:
    """Horizontal bars per lane: binned context (faded by busy fraction), then full-detail
    events; above them the lanes of ``marks`` (``dashboards.results.timeline_marks``: steps,
    gaps, stalls), and a dotted line at every step boundary.

    Built as a plain figure dict: plotly's validating ``go.Figure`` costs ~0.4 s for a few
    thousand bars, far more than the data work.
    """
    data: list[dict] = []
    shown: set[str] = set()

    def bars(grp: pd.DataFrame, phase: str, binned: bool) -> dict:
        bar = {
            "type": "bar", "orientation": "h", "y": grp["lane"].tolist(),
            "x": np.round(grp["dur_ms"].to_numpy(np.float64), 6).tolist(),
            "base": np.round(grp["start_ms"].to_numpy(np.float64), 6).tolist(),
            "name": str(phase), "legendgroup": str(phase), "showlegend": phase not in shown,
            "marker": {"color": phase_colour(phase), "line": {"width": 0}},
        }
        if binned:
            bar["marker"]["opacity"] = np.round(0.15 + 0.75 * grp["busy"].to_numpy(np.float64), 3).tolist()
            bar["customdata"] = np.round(grp["busy"].to_numpy(np.float64) * 100, 1).tolist()
            bar["hovertemplate"] = "%{y}<br>bin %{base:.3f} ms + %{x:.3f} ms<br>busy %{customdata}%<br>" + str(phase) + "<extra>binned</extra>"
        else:
            bar["customdata"] = grp["name"].str.slice(0, 120).tolist()
            bar["hovertemplate"] = "%{customdata}<br>%{base:.3f} ms + %{x:.4f} ms<br>" + str(phase) + "<extra>%{y}</extra>"
        shown.add(phase)
        return bar

    for phase, grp in lanes.bins.groupby("phase", sort=True):
        data.append(bars(grp, phase, True))
    for phase, grp in lanes.detail.groupby("phase", sort=True):
        data.append(bars(grp, phase, False))
    mark_lanes: list[str] = []
    shapes: list[dict] = []
    if marks is not None and len(marks):
        mark_lanes = list(MARK_LANES) + [x for x in dict.fromkeys(marks["lane"]) if x not in MARK_LANES]
        # every lane of marks drawn, an empty one too (plotly draws only the categories a trace has)
        data.append({"type": "bar", "orientation": "h", "y": mark_lanes, "x": [0] * len(mark_lanes), "name": "lanes",
                     "legendgroup": "lanes", "showlegend": False, "hoverinfo": "skip", "marker": {"color": "rgba(0,0,0,0)"}})
        for kind, grp in marks.groupby("kind", sort=False):
            bar = {"type": "bar", "orientation": "h", "y": grp["lane"].tolist(), "x": _nums(grp["dur_ms"]),
                   "base": _nums(grp["start_ms"]), "name": {"step": "step", "gap": "optimizer → lookup gap",
                                                             "stall": "sync stall", "critical": "critical path"}.get(kind, kind),
                   "legendgroup": f"mark-{kind}", "showlegend": kind not in ("step", "critical"),
                   "marker": {"color": [category_colour(c) for c in grp["category"]] if kind == "critical" else MARK_COLOURS.get(kind, "#888"),
                              "line": {"width": 1 if kind == "step" else 0, "color": "#9aa0b0"}},
                   "customdata": grp["label"].tolist(), "hovertemplate": "%{customdata}<extra></extra>"}
            if kind == "step":
                bar.update(text=grp["label"].tolist(), textposition="inside", insidetextanchor="middle",
                           textfont={"color": "#1d2330"}, constraintext="none")
                for x in sorted(set(grp["start_ms"].tolist()) | set((grp["start_ms"] + grp["dur_ms"]).tolist())):
                    shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                                   "line": {"color": "#59607a", "width": 1, "dash": "dot"}, "layer": "below"})
            data.append(bar)
            if kind == "critical":  # a legend entry for the categories no phase colour names
                for cat in dict.fromkeys(c for c in grp["category"] if not str(c).startswith("compute:")):
                    data.append({"type": "bar", "orientation": "h", "y": [None], "x": [None], "name": f"{category_name(cat)} (critical path)",
                                 "marker": {"color": category_colour(cat)}, "legendgroup": f"mark-critical-{cat}", "hoverinfo": "skip"})
    order = mark_lanes + list(lanes.lanes)
    # the lanes' names get a fixed margin (about 7 px a character of 12 px type), not plotly.js's
    # automargin: its extra layout pass redrew every bar of the figure at each draw
    # (bench/NOTES-dashboard.md)
    left_px = min(320, 20 + 7 * max((len(str(x)) for x in order), default=0))
    layout = {
        **PLAIN_LAYOUT, "barmode": "overlay", "bargap": 0.25, "height": max(320, 140 + 30 * len(order)),
        "margin": {"l": left_px, "r": 20, "t": 70, "b": 40},
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0}, "dragmode": "zoom", "hovermode": "closest",
        "yaxis": {"categoryorder": "array", "categoryarray": list(reversed(order)), "fixedrange": True, "automargin": False},
        "xaxis": {"range": list(lanes.window_ms), "title": {"text": "ms from trace start"}, "gridcolor": "#e5e8ee", "zeroline": False},
        "shapes": shapes,
    }
    return {"data": data, "layout": layout}


def overlap_heatmap(matrix: pd.DataFrame) -> dict:
    """Stream × stream overlap in ms: darker is more; a pair that never overlaps is blank
    with a grey 0, the diagonal (a stream with itself) is left out (busy time is its own chart)."""
    labels = [str(c) for c in matrix.columns]
    z = matrix.to_numpy(dtype=float)
    shown = np.where(z > 0, z, np.nan)
    text = [["" if not math.isfinite(v) else ("0" if v == 0 else f"{v:,.2f}" if v >= 0.005 else "<0.01") for v in row] for row in z]
    zmax = float(np.nanmax(shown)) if np.isfinite(shown).any() else 1.0
    return {
        "data": [{
            "type": "heatmap", "z": [_nums(row) for row in shown], "x": labels, "y": labels, "zmin": 0, "zmax": zmax,
            "colorscale": [[0, "#e3ecf7"], [0.5, "#6a9fd4"], [1, "#08306b"]], "colorbar": {"title": {"text": "ms"}},
            "text": text, "texttemplate": "%{text}", "hoverongaps": False, "xgap": 2, "ygap": 2,
            "hovertemplate": "%{y} ∩ %{x}: %{z:,.3f} ms<extra></extra>",
        }],
        "layout": _layout("Time two streams were busy at once (ms)", height=max(320, 140 + 50 * len(labels)),
                          yaxis={"autorange": "reversed"}, plot_bgcolor="#fafbfc", xaxis={"tickangle": -20}),
    }


def ranks_heatmap(cells: pd.DataFrame, value: str, title: str) -> dict:
    """Ranks × steps of one figure (ms), darker is more, the scale from 0 (steps 0.1% apart look
    alike, as they are); each step's straggler marked ▲."""
    steps = list(dict.fromkeys(cells["step"]))
    ranks = list(dict.fromkeys(cells["rank"]))
    z = np.full((len(ranks), len(steps)), np.nan)
    text = [["" for _ in steps] for _ in ranks]
    bound = [["" for _ in steps] for _ in ranks]
    for r in cells.itertuples(index=False):
        i, j = ranks.index(r.rank), steps.index(r.step)
        z[i, j] = getattr(r, value)
        text[i][j] = ("▲ " if r.straggler else "") + f"{getattr(r, value):,.2f}"
        bound[i][j] = r.bound
    return {
        "data": [{"type": "heatmap", "z": [_nums(row) for row in z], "x": steps, "y": [f"rank {r}" for r in ranks],
                  "zmin": 0, "zmax": float(np.nanmax(z)) if np.isfinite(z).any() and np.nanmax(z) > 0 else 1.0,
                  "colorscale": [[0, "#e3ecf7"], [0.5, "#6a9fd4"], [1, "#08306b"]], "text": text,
                  "texttemplate": "%{text}", "customdata": bound, "xgap": 2, "ygap": 2, "colorbar": {"title": {"text": "ms"}},
                  "hovertemplate": "%{y}, step %{x}: %{z:,.3f} ms<br>bound: %{customdata}<extra></extra>"}],
        "layout": _layout(title, x="step", height=max(260, 140 + 36 * len(ranks)), xaxis={"type": "category"},
                          yaxis={"type": "category", "autorange": "reversed"}),
    }


def busy_bars(busy: pd.DataFrame) -> dict:
    """Busy time per stream (ms), as horizontal bars."""
    return {
        "data": [{"type": "bar", "orientation": "h", "y": busy["stream"].tolist(), "x": _nums(busy["busy_ms"]),
                  "marker": {"color": "#1f77b4"}, "text": [f"{v:,.2f} ms" for v in busy["busy_ms"]], "textposition": "auto",
                  "hovertemplate": "%{y}: %{x:,.3f} ms busy<extra></extra>"}],
        "layout": _layout("Busy time per stream (ms)", x="ms", height=max(220, 90 + 34 * len(busy)),
                          yaxis={"autorange": "reversed"}),
    }


def class_bars(classes: pd.DataFrame) -> dict:
    x = classes["class"].tolist()
    return {
        "data": [
            {"type": "bar", "x": x, "y": _nums(classes["busy_ms"]), "name": "busy (ms)", "marker": {"color": "#1f77b4"}},
            {"type": "bar", "x": x, "y": _nums(classes["exposed_ms"]), "name": "exposed (ms)", "marker": {"color": "#d62728"}},
        ],
        "layout": _layout("Compute / communication / memcpy (exposed: not hidden under compute)", y="ms", barmode="group"),
    }


GAP_COLOURS = {"idle_ms": "#d62728", "busy_ms": "#ff9f40", "early_ms": "#2ca02c", "ahead_gap_ms": "#7f7f7f"}
GAP_NAMES = {"idle_ms": "gap: GPU idle", "busy_ms": "gap: GPU busy with other work",
             "early_ms": "lookup started before the optimizer ended", "ahead_gap_ms": "lookup ran ahead of the optimizer"}
"""The parts of a signed gap (``dashboards.results.GAP_PARTS``) as the gap charts stack them: a
bar's parts add up to the gap the table, the overview and compare write."""


def _gap_bars(g: pd.DataFrame, cat: list[str], axis: str) -> list[dict]:
    """A stacked bar per row of ``g`` (its ``GAP_PARTS`` columns), on the ``axis`` of categories."""
    data = []
    for col, name in GAP_NAMES.items():
        vals = g[col].to_numpy(np.float64)
        if not np.any(vals):
            continue
        bar = {"type": "bar", "name": name, "marker": {"color": GAP_COLOURS[col]},
               "hovertemplate": "%{" + ("x" if axis == "x" else "y") + "}: %{" + ("y" if axis == "x" else "x") + ":,.3f} ms<extra>" + name + "</extra>"}
        if axis == "x":
            bar.update(x=cat, y=_nums(vals))
        else:
            bar.update(orientation="h", y=cat, x=_nums(vals))
        data.append(bar)
    return data


def _gap_totals(total, axis: str) -> list[dict]:
    """The signed gap written at the end of each bar."""
    out = []
    for i, v in enumerate(total):  # a category axis places an annotation by the category's index
        pos = {"x": i, "y": v, "yanchor": "bottom" if v >= 0 else "top"} if axis == "x" else \
            {"y": i, "x": v, "xanchor": "left" if v >= 0 else "right"}
        out.append({**pos, "text": f"{v:+,.3f} ms", "showarrow": False, "font": {"size": 11, "color": "#333"}})
    return out


def gap_steps(g: pd.DataFrame, title: str) -> dict:
    """One trace's optimizer → next lookup pairs per step: the signed gap (as the table writes
    it), a positive one split into GPU idle and GPU busy with other work, a negative one drawn
    below 0 (the lookup started that long before the optimizer's end, or ran ahead of it)."""
    x = g["step"].astype(str).tolist()
    return {"data": _gap_bars(g, x, "x"),
            "layout": _layout(f"Optimizer → next lookup gap, per step (ms) · {title}", x="step", y="ms", height=340,
                              barmode="relative", xaxis={"type": "category"}, bargap=0.5,
                              legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0},
                              margin={"t": 70}, annotations=_gap_totals(g["gap_ms"].tolist(), "x"),
                              yaxis={"zeroline": True, "zerolinecolor": "#555", "zerolinewidth": 1})}


def gap_variants(rows: pd.DataFrame) -> dict:
    """Mean signed gap per trace (``name``, ``gap_ms`` and the mean of each ``GAP_PARTS``
    column, which add up to it), one stacked bar each."""
    y = rows["name"].tolist()
    return {"data": _gap_bars(rows, y, "y"),
            "layout": _layout("Mean optimizer → next lookup gap per step, across the traces of this run (ms)", x="ms",
                              height=max(220, 100 + 32 * len(y)), barmode="relative", yaxis={"autorange": "reversed"},
                              showlegend=False, bargap=0.35, annotations=_gap_totals(rows["gap_ms"].tolist(), "y"),
                              xaxis={"zeroline": True, "zerolinecolor": "#555"}, margin={"r": 90})}


IDLE_COLOURS = {"host_wait_ms": "#d62728", "kernel_wait_ms": "#ff9f40", "other_ms": "#9aa0b0"}
IDLE_NAMES = {"host_wait_ms": "host wait (the GPU waited for the CPU to launch)",
              "kernel_wait_ms": "kernel wait (short gaps between kernels, < 30 µs)", "other_ms": "other"}


def idle_streams(per_stream: pd.DataFrame) -> dict:
    """HTA's idle time per stream by category (ms), stacked horizontal bars."""
    y = per_stream["stream"].tolist()
    data = [{"type": "bar", "orientation": "h", "y": y, "x": _nums(per_stream[c]), "name": IDLE_NAMES[c],
             "marker": {"color": IDLE_COLOURS[c]}, "hovertemplate": "%{y}: %{x:,.3f} ms<extra>" + IDLE_NAMES[c] + "</extra>"}
            for c in IDLE_COLOURS]
    return {"data": data, "layout": _layout("GPU idle time per stream, by cause (HTA, ms)", x="ms", barmode="stack",
                                            height=max(240, 130 + 36 * len(y)), yaxis={"autorange": "reversed"},
                                            legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "traceorder": "normal"}, margin={"t": 80})}


def stall_steps(per_step: pd.DataFrame) -> dict:
    return {
        "data": [{"type": "bar", "x": per_step["step"].astype(str).tolist(), "y": _nums(per_step["stall_ms"]),
                  "marker": {"color": "#d62728"}, "name": "stall"}],
        "layout": _layout("Sync stall time per step (CPU ms)", x="step", y="ms", height=300, xaxis={"type": "category"}, bargap=0.5),
    }


def decimate(t: np.ndarray, ys: list[np.ndarray], n: int = 1500) -> tuple[np.ndarray, list[np.ndarray]]:
    """At most ~2n points keeping each bin's min and max of every series (peaks survive)."""
    if len(t) <= 2 * n:
        return t, ys
    edges = np.linspace(0, len(t), n + 1).astype(np.int64)
    keep = set()
    for y in ys:
        for a, b in zip(edges[:-1], edges[1:]):
            if b > a:
                seg = y[a:b]
                keep.add(a + int(np.argmin(seg)))
                keep.add(a + int(np.argmax(seg)))
    idx = np.array(sorted(keep | {0, len(t) - 1}))
    return t[idx], [y[idx] for y in ys]


def memory_lines(series: pd.DataFrame, marks: list[tuple[str, float, float]], unit: str) -> dict:
    """Allocated and reserved (in ``unit``) over time from 0, both peaks marked."""
    t, (alloc, res) = decimate(series["t_ms"].to_numpy(), [series["allocated"].to_numpy(), series["reserved"].to_numpy()])
    data = [{"type": "scatter", "x": _nums(t), "y": _nums(alloc), "name": "allocated", "mode": "lines",
             "line": {"shape": "hv", "color": "#1f77b4"}, "hovertemplate": "%{x:,.3f} ms: %{y:,.3f} " + unit + "<extra>allocated</extra>"}]
    if np.isfinite(res).any():
        data.append({"type": "scatter", "x": _nums(t), "y": _nums(res), "name": "reserved", "mode": "lines",
                     "line": {"shape": "hv", "color": "#ff7f0e"}, "hovertemplate": "%{x:,.3f} ms: %{y:,.3f} " + unit + "<extra>reserved</extra>"})
    for name, at, v in marks:
        data.append({"type": "scatter", "x": [float(at)], "y": [float(v)], "mode": "markers+text",
                     "marker": {"size": 11, "symbol": "diamond", "color": "#d62728"},
                     "text": [f"{name} {v:,.2f} {unit}"], "textposition": "top right", "name": name, "showlegend": False})
    return {"data": data, "layout": _layout("Caching allocator: allocated and reserved", x="ms from trace start", y=unit,
                                            height=420, yaxis={"rangemode": "tozero"})}


def snapshot_streams(per_stream: pd.DataFrame, unit: str) -> dict:
    col = f"reserved {unit}"
    return {
        "data": [{"type": "bar", "orientation": "h", "y": per_stream["stream"].astype(str).tolist(), "x": _nums(per_stream[col]),
                  "marker": {"color": "#ff7f0e"}, "text": [f"{v:,.2f} {unit}" for v in per_stream[col]], "textposition": "auto",
                  "hovertemplate": "%{y}: %{x:,.3f} " + unit + " reserved<extra></extra>"}],
        "layout": _layout(f"Memory snapshot: reserved per stream ({unit})", x=unit, height=max(200, 100 + 40 * len(per_stream)),
                          yaxis={"autorange": "reversed"}, xaxis={"rangemode": "tozero"}),
    }


VERDICT_COLOURS = {"baseline": "#9aa0b0", "better": "#2e7d32", "worse": "#c62828", "same": "#7f8fa6", "–": "#c7c7c7"}


def compare_bars(table: pd.DataFrame) -> dict:
    """Small multiples: one bar chart per figure, a bar per trace (the traces' names under the
    lowest chart of each column), coloured by verdict against the baseline (green better, red
    worse, grey baseline or within 1%), labelled with the difference in %."""
    figs = list(dict.fromkeys(table["figure"]))
    cols = 3
    rows = -(-len(figs) // cols)
    # the names, under the lowest chart of each column only and at a fixed angle, get fixed
    # margins (at 30°, 10 px type: about 3 px a character below, 5 px to the right of the last
    # bar): no axis needs plotly.js's automargin, whose extra layout pass took a good part of the
    # time the view took to draw (bench/NOTES-dashboard.md)
    names = int(table["trace"].astype(str).str.len().max()) if len(table) else 0
    bottom_px, right_px = min(220, 20 + 3 * names), min(220, 20 + 4 * names)
    data, layout = [], {**PLAIN_LAYOUT, "height": 260 * rows + 20 + bottom_px, "showlegend": False,
                        "margin": {"l": 50, "r": right_px, "t": 40, "b": bottom_px}, "annotations": []}
    gap_x, gap_y = 0.06, 0.22 / max(rows, 1)
    for k, fig in enumerate(figs):
        t = table[table["figure"] == fig]
        r, c = divmod(k, cols)
        ax = "" if k == 0 else str(k + 1)
        x0 = c / cols + (gap_x / 2 if c else 0)
        x1 = (c + 1) / cols - (gap_x / 2 if c < cols - 1 else 0)
        y1 = 1 - r / rows - gap_y
        y0 = 1 - (r + 1) / rows + gap_y / 2
        unit = t["unit"].iloc[0]
        text = [("baseline" if v == "baseline" else ("–" if not math.isfinite(d) else f"{d:+.1f}%"))
                for v, d in zip(t["verdict"], t["diff_pct"])]
        data.append({"type": "bar", "x": t["trace"].tolist(), "y": _nums(t["value"]), "xaxis": f"x{ax}", "yaxis": f"y{ax}",
                     "marker": {"color": [VERDICT_COLOURS[v] for v in t["verdict"]]}, "text": text, "textposition": "outside",
                     "cliponaxis": False, "customdata": text,
                     "hovertemplate": "%{x}: %{y:,.3f} " + unit + " (%{customdata})<extra>" + fig + "</extra>"})
        # every chart has the traces in the same order: their names under the lowest chart of each
        # column only (under every row they overlapped the titles of the row below)
        lowest = k + cols >= len(figs)
        layout[f"xaxis{ax}"] = {"domain": [x0, x1], "anchor": f"y{ax}", "showticklabels": lowest, "tickfont": {"size": 10},
                                "tickangle": 30, **_AXIS, "automargin": False}
        finite = t["value"][np.isfinite(t["value"])]
        top = float(finite.max()) * 1.25 if len(finite) and finite.max() > 0 else 1.0
        bottom = min(0.0, float(finite.min()) * 1.25) if len(finite) else 0.0
        layout[f"yaxis{ax}"] = {"domain": [y0, y1], "anchor": f"x{ax}", "range": [bottom, top], **_AXIS, "automargin": False}
        layout["annotations"].append({"text": f"<b>{fig}</b> ({unit})", "x": (x0 + x1) / 2, "y": y1 + 0.01, "xref": "paper", "yref": "paper",
                                      "showarrow": False, "xanchor": "center", "yanchor": "bottom", "font": {"size": 12}})
    return {"data": data, "layout": layout}


EMBEDDING_COLOURS = {"forward": "#1f77b4", "backward": "#d62728"}


def embedding_kernels(kernels: pd.DataFrame, peak_gbps: float | None) -> dict:
    """GB/s of each embedding op's kernels (``dashboards.results.embedding``), horizontal bars
    coloured by direction, with the device's peak as a line (a backward's bar is an upper
    bound: its hover says so)."""
    labels = [f"{d} · {o.split('::')[-1]}" for d, o in zip(kernels["direction"], kernels["op"])]
    data = []
    for direction, colour in EMBEDDING_COLOURS.items():
        sel = (kernels["direction"] == direction).to_numpy()
        if not sel.any():
            continue
        k = kernels[sel]
        data.append({"type": "bar", "orientation": "h", "y": [l for l, s in zip(labels, sel) if s],
                     "x": _nums(k["GB/s"]), "name": direction, "marker": {"color": colour},
                     "customdata": [[b, p if p is not None else float("nan")] for b, p in zip(k["bytes"], k["% of peak"])],
                     "hovertemplate": "%{y}: %{x:,.0f} GB/s (%{customdata[1]:.0f} % of peak), bytes: %{customdata[0]}<extra></extra>"})
    layout = _layout("Achieved memory bandwidth of the embedding kernels (GB/s)", x="GB/s",
                     height=max(240, 110 + 40 * len(labels)), yaxis={"autorange": "reversed"})
    if peak_gbps:
        layout["shapes"] = [{"type": "line", "x0": peak_gbps, "x1": peak_gbps, "y0": 0, "y1": 1, "yref": "paper",
                             "line": {"color": "#555", "dash": "dot"}}]
        layout["annotations"] = [{"x": peak_gbps, "y": 1, "yref": "paper", "text": f"peak {peak_gbps:,.0f} GB/s",
                                  "showarrow": False, "yanchor": "bottom"}]
    return {"data": data, "layout": layout}


def embedding_steps(steps: pd.DataFrame, peak_gbps: float | None) -> dict:
    """GB/s per step and direction, grouped bars."""
    data = []
    for direction, colour in EMBEDDING_COLOURS.items():
        k = steps[steps["direction"] == direction]
        if k.empty:
            continue
        data.append({"type": "bar", "x": k["step"].astype(str).tolist(), "y": _nums(k["GB/s"]), "name": direction,
                     "marker": {"color": colour}, "hovertemplate": "step %{x}: %{y:,.0f} GB/s<extra>" + direction + "</extra>"})
    layout = _layout("Embedding bandwidth per step (GB/s)", x="step", y="GB/s", height=300, barmode="group",
                     xaxis={"type": "category"})
    if peak_gbps:
        layout["shapes"] = [{"type": "line", "x0": 0, "x1": 1, "xref": "paper", "y0": peak_gbps, "y1": peak_gbps,
                             "line": {"color": "#555", "dash": "dot"}}]
    return {"data": data, "layout": layout}


def diff_bars(table: pd.DataFrame, key: str, title: str) -> dict:
    """A against B per row of a diff table (``key``, ``A ms``, ``B ms``), grouped bars."""
    y = table[key].astype(str).tolist()
    data = [{"type": "bar", "orientation": "h", "y": y, "x": _nums(table[col]), "name": name,
             "marker": {"color": colour}, "hovertemplate": "%{y}: %{x:,.3f} ms<extra>" + name + "</extra>"}
            for col, name, colour in (("A ms", "A", "#9aa0b0"), ("B ms", "B", "#1a4f9c"))]
    return {"data": data, "layout": _layout(title, x="ms per step", barmode="group", height=max(220, 100 + 44 * len(y)),
                                            yaxis={"autorange": "reversed"},
                                            legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})}
