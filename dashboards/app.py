"""The Dash app: layout and callbacks. Figures come from ``dashboards.figures``, data from tracekit.

The browser chooses a trace by its index in the server-side ``Catalog`` (or, in a link, by its
label) and a rank; nothing it sends is ever used as a path. Every view is rendered by one
callback that runs only while its tab is shown, so a page load costs one view's rendering, not
nine; a view that is hidden when the trace or rank changes is emptied, so that no view ever
shows another trace's figures.

Navigation is one callback (``navigate``): the trace, rank and view chosen, kept in the URL
(``?trace=<label>&rank=<r>&view=<tab>[&step=<s>]``) so a link opens the same page; it also
writes the banner (a trace that failed, and every warning tracekit gave about it).
"""

from __future__ import annotations

import os
import time
import urllib.parse
from typing import Any

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html

from dashboards.catalog import Catalog, Source


class _Lazy:
    """A module imported on first use. figures/results/timeline pull in numpy and pandas (about
    a second); importing them while the browser loads the page, not before the server starts,
    keeps the first page quick (``Catalog.prefetch`` imports them in the background)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name), attr)


figures = _Lazy("dashboards.figures")
results = _Lazy("dashboards.results")
timeline_lanes = _Lazy("dashboards.timeline")

TABS = [
    ("overview", "Overview"),
    ("timeline", "Timeline"),
    ("overlap", "Overlap"),
    ("gaps", "Gaps"),
    ("stalls", "Sync stalls"),
    ("memory", "Memory"),
    ("idle", "GPU idle & kernels"),
    ("compare", "Compare"),
]
VIEWS = [t for t, _ in TABS]

GRAPH_CONFIG = {"displaylogo": False, "responsive": True}
TAB_STYLE = {"padding": "6px 10px", "lineHeight": "20px"}


def _error(text: str, **kw: Any) -> html.Div:
    return html.Div(text, className="tk-error", **kw)


def _warning(text: str | list, **kw: Any) -> html.Div:
    return html.Div(text, className="tk-warning", **kw)


def _note(text: Any, **kw: Any) -> html.Div:
    return html.Div(text, className="tk-note", **kw)


def _td(v: Any, *, right: bool = False, **kw: Any) -> html.Td:
    """A table cell written as ``figures.fmt`` writes it; numbers (and, with ``right``, text) right-aligned."""
    return html.Td(figures.fmt(v), className="tk-num" if right or figures.is_number(v) else None, **kw)


def _html_table(df, *, id: str | None = None, text_right: bool = False) -> html.Table:
    """A small static table (the figures' text is in the page, so tests and people can read it).
    Numbers are right-aligned; with ``text_right`` so is every text cell after the first column
    (tables of figures already written as text)."""
    head = html.Tr([html.Th(str(c)) for c in df.columns])
    rows = [html.Tr([_td(v, right=text_right and i > 0) for i, v in enumerate(rec)]) for rec in df.itertuples(index=False)]
    kw = {"id": id} if id else {}
    return html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table", **kw)


DEFAULT_STALL_SORT = {"col": "total ms", "ascending": False}
STALL_ROWS = 200
"""Rows of the stall table sent to the browser (a trace can have thousands of call sites)."""
CALL_SITE_SHOWN = 3
"""Innermost elements of a call site written in the stall table (all of it on hover)."""


def _call_site(text: str) -> html.Span:
    parts = str(text).split(" > ")
    short = (" > ".join(parts[-CALL_SITE_SHOWN:]) if len(parts) > CALL_SITE_SHOWN else str(text))
    return html.Span(("… > " if len(parts) > CALL_SITE_SHOWN else "") + short, title=str(text))


def _stall_table(by_site, sort: dict) -> html.Table:
    """Stalls by call site and phase, sorted as ``sort`` says; each header is a sort button."""
    col, asc = sort["col"], bool(sort["ascending"])
    if col in by_site.columns:
        by_site = by_site.sort_values(col, ascending=asc, kind="stable", na_position="last")
    head = html.Tr([
        html.Th(html.Button(c + (" ▲" if c == col and asc else " ▼" if c == col else ""),
                            id={"type": "stalls-sort", "col": c}, className="tk-sort", n_clicks=0))
        for c in by_site.columns
    ])
    rows = [
        html.Tr([html.Td(_call_site(v), **{"data-col": c}) if c == "call site" else _td(v, right=c.startswith("%"), **{"data-col": c})
                 for c, v in zip(by_site.columns, rec)])
        for rec in by_site.head(STALL_ROWS).itertuples(index=False)
    ]
    table = html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table", id="stalls-table")
    if len(by_site) <= STALL_ROWS:
        return table
    return html.Div([table, _note(f"{STALL_ROWS} of {len(by_site)} rows shown (sort to see others first).")])


def _source_options(catalog: Catalog) -> list[dict]:
    """The traces served, by variant name (and label where that differs); the value the browser
    sends back is the index."""
    return [{"label": s.name if s.name == s.label else f"{s.name} · {s.label}", "value": s.index} for s in catalog.sources]


def _view(tab: str, catalog: Catalog) -> html.Div:
    """The static part of each view: its own controls and the container its callback fills."""
    if tab == "timeline":
        controls = html.Div(
            [
                html.Label("Step"),
                dcc.Dropdown(id="timeline-step", className="tk-control", clearable=False),
                _note("Drag on the chart to zoom: the zoomed window is redrawn at full detail; "
                      "outside it, bars are time bins (opacity = busy fraction).", id="timeline-help"),
            ],
            className="tk-row",
        )
        body = [controls, dcc.Store(id="timeline-window"), dcc.Store(id="step-link"), html.Div(id="timeline-info", className="tk-note"),
                html.Div(dcc.Graph(id="timeline-graph", config={**GRAPH_CONFIG, "responsive": False}), id="timeline-box")]
    elif tab == "compare":
        body = [
            html.Div([html.Label("Traces"),
                      dcc.Checklist(id="compare-sources", inline=True, options=_compare_options(catalog), value=[])],
                     className="tk-row tk-checks"),
            html.Div([html.Label("Baseline"), dcc.Dropdown(id="compare-baseline", className="tk-control", clearable=False)],
                     className="tk-row"),
            html.Div(id="compare-content"),
        ]
    elif tab == "stalls":
        body = [dcc.Store(id="stalls-sort", data=DEFAULT_STALL_SORT), html.Div(id="stalls-total", className="tk-lead"),
                html.Div(id="stalls-table-box", className="tk-section"), html.Div(id="stalls-content")]
    else:
        body = [html.Div(id=f"{tab}-content")]
    return html.Div(body, id=f"view-{tab}", className="tk-view")


def _compare_options(catalog: Catalog) -> list[dict]:
    return [{"label": s.name, "value": s.index} for s in catalog.sources]


def build_layout(catalog: Catalog) -> html.Div:
    header = html.Div(
        [
            html.H1("tracekit"),
            html.Label("Trace", htmlFor="source"),
            dcc.Dropdown(
                id="source",
                options=_source_options(catalog),
                value=0 if len(catalog) else None,
                clearable=False,
                className="tk-control-wide",
            ),
            html.Label("Rank", htmlFor="rank"),
            dcc.Dropdown(id="rank", clearable=False, className="tk-control-small"),
            html.Div(id="trace-info", className="tk-trace-info"),
        ],
        className="tk-header",
    )
    tabs = dcc.Tabs(
        id="tabs",
        value="overview",
        children=[dcc.Tab(label=label, value=value, id=f"tab-{value}", children=_view(value, catalog),
                          style=TAB_STYLE, selected_style={**TAB_STYLE, "fontWeight": 600}) for value, label in TABS],
    )
    return html.Div([dcc.Location(id="url", refresh=False), header,
                     html.Div([html.Div(id="source-status"), tabs], className="tk-body")])


def _source_error(source: Source | None) -> html.Div | None:
    if source is None:
        return _error("No such trace.")
    if source.error is not None:
        return _error(f"{source.label} could not be loaded: {source.error}")
    return None


def _rank_label(source: Source, report: dict) -> str:
    return f"{source.name} · rank {report['rank']}"


def parse_link(search: str | None, catalog: Catalog) -> dict:
    """What a link's query string asks for: ``index`` (of ``trace=<label>``), ``rank``,
    ``view`` and ``step``, each only when present and valid (the label must be one served)."""
    q = urllib.parse.parse_qs((search or "").lstrip("?"))
    out: dict = {}
    label = (q.get("trace") or [None])[0]
    if label in catalog.by_label:
        out["index"] = catalog.by_label[label]
    rank = (q.get("rank") or [None])[0]
    if rank is not None and rank.lstrip("-").isdigit():
        out["rank"] = int(rank)
    view = (q.get("view") or [None])[0]
    if view in VIEWS:
        out["view"] = view
    step = (q.get("step") or [None])[0]
    if step:
        out["step"] = step
    return out


def make_link(catalog: Catalog, index: Any, rank: Any, view: Any, step: Any = None) -> str:
    """The query string ``parse_link`` reads back."""
    source = catalog.summary(index)
    q = {}
    if source is not None:
        q["trace"] = source.label
    if rank is not None:
        q["rank"] = str(rank)
    if view in VIEWS:
        q["view"] = view
    if step not in (None, "") and view == "timeline":
        q["step"] = str(step)
    return "?" + urllib.parse.urlencode(q)


def create_app(catalog: Catalog) -> dash.Dash:
    """The Dash app serving ``catalog``'s traces."""
    app = dash.Dash(
        __name__,
        title="tracekit dashboard",
        assets_folder=os.path.join(os.path.dirname(__file__), "assets"),
        update_title=None,
        serve_locally=True,
        suppress_callback_exceptions=False,
    )
    app.layout = build_layout(catalog)
    from dashboards.server import answer_not_found

    answer_not_found(app)
    timings: dict[str, list[float]] = {}
    app.tracekit_catalog = catalog  # type: ignore[attr-defined]
    app.tracekit_timings = timings  # type: ignore[attr-defined]

    def timed(name: str):
        """Record each callback's server-side time (the benchmark reads ``app.tracekit_timings``)."""

        def wrap(fn):
            def inner(*args):
                t0 = time.perf_counter()
                try:
                    return fn(*args)
                finally:
                    timings.setdefault(name, []).append(time.perf_counter() - t0)

            inner.__name__ = fn.__name__
            return inner

        return wrap

    # ---- navigation: trace, rank, view, the URL and the banner ---------------------------------
    @app.callback(
        Output("url", "search"),
        Output("source", "value"),
        Output("rank", "options"),
        Output("rank", "value"),
        Output("rank", "disabled"),
        Output("tabs", "value"),
        Output("source-status", "children"),
        Output("trace-info", "children"),
        Input("url", "search"),
        Input("source", "value"),
        Input("rank", "value"),
        Input("tabs", "value"),
        Input({"type": "pick-trace", "index": ALL}, "n_clicks"),
    )
    @timed("navigate")
    def navigate(search, index, rank, tab, picks):
        trig = ctx.triggered_id
        if trig == "url" or trig is None:  # a link (or the first page): it decides what is shown
            want = parse_link(search, catalog)
            index = want.get("index", index)
            rank = want.get("rank", rank if trig == "url" else None)
            tab = want.get("view", tab)
        elif isinstance(trig, dict) and trig.get("type") == "pick-trace":
            clicked = [t for t in ctx.triggered if t.get("value")]
            if not clicked:
                raise dash.exceptions.PreventUpdate
            index, rank = trig["index"], None
        source = catalog.summary(index)
        err = _source_error(source)
        if err is not None:
            return make_link(catalog, index, None, tab), index, [], None, True, tab, err, None
        ranks = source.ranks
        rank = rank if rank in ranks else ranks[0]
        banner = None
        warns = source.warnings(rank)
        if warns:
            banner = _warning([html.B(f"⚠ tracekit warned about {source.name} (rank {rank}): figures may be incomplete. "),
                               *[html.Div(w) for w in warns]], id="source-warnings")
        rep = source.report(rank)
        h = rep["headline"]
        info = [html.Span(f"{source.label} · rank {rank} of {len(ranks)} · {h['steps']} steps ({h['step_source']}) · "
                          f"{rep['schema']} · {rep['platform']}")]
        if warns:
            info.append(html.Span(f" · ⚠ {len(warns)} warning" + ("s" if len(warns) > 1 else ""), className="tk-flag"))
        link = make_link(catalog, index, rank, tab, parse_link(search, catalog).get("step") if trig in ("url", None) else None)
        return (link if link != search else dash.no_update), index, [{"label": str(r), "value": r} for r in ranks], rank, \
            len(ranks) < 2, tab, banner, info

    def _picked(index, rank):
        source = catalog.get(index)
        err = _source_error(source)
        if err is not None:
            return None, None, None, err
        trace, analysis = source.pick(rank)
        return source, trace, analysis, None

    def hidden(tab: str, view: str) -> bool:
        """The view is not shown: a change of trace or rank empties it (nothing of another trace
        stays behind), anything else leaves it as it is."""
        return tab != view

    def cleared_or_skip(n: int = 1, empty: Any = None):
        """What a hidden view answers: ``empty`` when the trace or rank changed, else untouched."""
        changed = ctx.triggered_id in ("source", "rank")
        value = empty if changed else dash.no_update
        return value if n == 1 else tuple([value] * n)

    # ---- overview ------------------------------------------------------------------------------
    @app.callback(Output("overview-content", "children"), Input("tabs", "value"), Input("source", "value"), Input("rank", "value"))
    @timed("overview")
    def overview(tab, index, rank):
        if hidden(tab, "overview"):
            return cleared_or_skip()
        chosen = catalog.summary(index)
        top: list = []
        if chosen is not None and chosen.error is None:
            top = _overview_chosen(chosen, chosen.report(rank))
        rows = []
        for s in catalog.sources:
            s = catalog.summary(s.index)
            rows.append(_overview_row(s, index, rank))
        head = html.Tr([html.Th(h) for h in ("trace", "steps", "step P90 GPU ms", "step P90 CPU ms", "gap mean ms",
                                             "exposed comm ms", "exposed memcpy ms", "sync stalls ms", "peak reserved", "warnings")])
        table = html.Div([html.H3("All traces (click one to choose it)"),
                          html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table tk-traces", id="overview-traces")],
                         className="tk-section")
        catalog.first_page.set()
        return [*top, table]

    def _overview_chosen(s: Source, rep: dict) -> list:
        h = rep["headline"]
        from tracekit.report import fmt_figure

        tiles = [
            ("step time P90 (GPU)", fmt_figure(h.get("step_gpu_p90_ns"), "ms") + " ms"),
            ("step time P90 (CPU)", fmt_figure(h.get("step_cpu_p90_ns"), "ms") + " ms"),
            ("optimizer → lookup gap", fmt_figure(h.get("mean_gap_ns"), "ms") + " ms"),
            ("exposed communication", fmt_figure(h.get("exposed_comm_ns"), "ms") + " ms"),
            ("exposed memcpy", fmt_figure(h.get("exposed_memcpy_ns"), "ms") + " ms"),
            ("sync stalls (CPU)", f"{fmt_figure(h.get('stall_total_ns'), 'ms')} ms · {h.get('stall_count', 0)}×"),
            ("peak reserved", fmt_figure(h.get("peak_reserved_bytes"), "bytes")),
        ]
        out: list = [html.H2([s.name, html.Span(f"  {s.label} · rank {rep['rank']}", className="tk-sub")], id="overview-title"),
                     html.Div([html.Div([html.Div(k, className="tk-tile-k"), html.Div(v, className="tk-tile-v")], className="tk-tile")
                               for k, v in tiles], className="tk-tiles", id="overview-tiles")]
        ex = results.explain(rep)
        if ex is None:  # a report without tracekit explain's section: step time per step
            out.append(dcc.Graph(id="overview-steps", config=GRAPH_CONFIG,
                                 figure=figures.step_times(results.step_times(rep), _rank_label(s, rep))))
            return out
        out.append(html.Div([html.Span("What bounds the step: ", className="tk-sub"), html.B(ex["bound"])],
                            className="tk-lead tk-bound", id="overview-bound"))
        f = ex["findings"]
        if len(f):
            out.append(html.Div([html.Div([html.Div([html.B(r.title), html.Span(r.saving, className="tk-saving")], className="tk-finding-head"),
                                           html.Div(["fix: ", r.fix], className="tk-finding-fix") if r.fix else None,
                                           html.Div(r.evidence, className="tk-note") if r.evidence else None],
                                          className="tk-finding")
                                 for r in f.itertuples(index=False)], id="overview-findings", className="tk-findings"))
        else:
            out.append(_note("No finding: none of the known fixes applies to this trace.", id="overview-findings"))
        if len(ex["steps"]):
            out.append(dcc.Graph(id="overview-steps", config=GRAPH_CONFIG, figure=figures.step_breakdown(ex["steps"], _rank_label(s, rep))))
        return out

    def _overview_row(s: Source, index, rank) -> html.Tr:
        chosen = s.index == index
        name = html.Button([s.name, html.Span(f" {s.label}" if s.name != s.label else "", className="tk-sub")],
                           id={"type": "pick-trace", "index": s.index}, className="tk-link", n_clicks=0)
        cls = "tk-chosen" if chosen else None
        if s.error is not None:
            return html.Tr([html.Td(name), html.Td(_error(s.error), colSpan=9)], id=f"card-{s.index}", className=cls)
        rep = s.report(rank if chosen else None)
        h = rep["headline"]
        from tracekit.report import fmt_figure

        warns = results.warnings(rep)
        rank_note = f" · rank {rep['rank']} of {len(s.ranks)}" if len(s.ranks) > 1 else ""
        cells = [html.Td([name, html.Span(rank_note, className="tk-sub")]), _td(h["steps"]),
                 *[html.Td(fmt_figure(h.get(k), "ms"), className="tk-num") for k in
                   ("step_gpu_p90_ns", "step_cpu_p90_ns", "mean_gap_ns", "exposed_comm_ns", "exposed_memcpy_ns", "stall_total_ns")],
                 html.Td(fmt_figure(h.get("peak_reserved_bytes"), "bytes"), className="tk-num"),
                 html.Td([html.Div("⚠ " + w, className="tk-flag") for w in warns] or "none", className="tk-warn-cell")]
        return html.Tr(cells, id=f"card-{s.index}", className=cls)

    # ---- timeline ------------------------------------------------------------------------------
    @app.callback(
        Output("timeline-step", "options"),
        Output("timeline-step", "value"),
        Input("tabs", "value"),
        Input("source", "value"),
        Input("rank", "value"),
        State("timeline-step", "value"),
        State("url", "search"),
    )
    @timed("timeline-steps")
    def timeline_steps(tab, index, rank, current, search):
        if hidden(tab, "timeline"):
            return cleared_or_skip(1, []), cleared_or_skip()
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return [], None
        steps = results.steps(trace, analysis)
        options = [{"label": "whole trace", "value": "all"}] + [
            {"label": f"step {s}", "value": str(s)} for s in steps["step"]
        ]
        values = [o["value"] for o in options]
        if current in values and ctx.triggered_id == "tabs":
            return options, current
        linked = parse_link(search, catalog).get("step")
        if linked in values:
            return options, linked
        return options, values[1] if len(values) > 1 else "all"

    @app.callback(
        Output("timeline-graph", "figure"),
        Output("timeline-info", "children"),
        Output("timeline-window", "data"),
        Output("timeline-box", "style"),
        Input("tabs", "value"),
        Input("source", "value"),
        Input("rank", "value"),
        Input("timeline-step", "value"),
        Input("timeline-graph", "relayoutData"),
        State("timeline-window", "data"),
    )
    @timed("timeline")
    def timeline(tab, index, rank, step, relayout, stored):
        # Always answers with a figure, even for a relayout that changes nothing (autosize): Dash
        # drops a pending answer when a newer request for the same output starts, so a "no
        # update" here could swallow the step's drawing.
        hide = {"display": "none"}
        if hidden(tab, "timeline"):
            if ctx.triggered_id in ("source", "rank"):
                return figures.empty(""), None, None, hide
            return dash.no_update, dash.no_update, dash.no_update, dash.no_update
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return figures.empty(""), err, None, hide
        if step is None:
            return dash.no_update, dash.no_update, dash.no_update, dash.no_update
        events, origin = results.lane_events(trace, catalog.rules)
        key = [index, trace.rank, step]
        window = None
        if step != "all":
            steps = results.steps(trace, analysis)
            row = steps[steps["step"].astype(str) == str(step)]
            if len(row):
                window = (int(row["start_ns"].iloc[0]) - origin, int(row["end_ns"].iloc[0]) - origin)
        if ctx.triggered_id == "timeline-graph" and relayout:
            if "xaxis.range[0]" in relayout:
                window = (float(relayout["xaxis.range[0]"]) * 1e6, float(relayout["xaxis.range[1]"]) * 1e6)
            elif "xaxis.range" in relayout:
                window = (float(relayout["xaxis.range"][0]) * 1e6, float(relayout["xaxis.range"][1]) * 1e6)
            elif relayout.get("xaxis.autorange"):
                window = None
            elif stored and stored.get("key") == key:
                window = tuple(stored["window"]) if stored.get("window") else None
        lanes = timeline_lanes.build_lanes(events, window)
        marks = results.timeline_marks(trace, analysis, origin)
        info = (
            f"{source.name} · rank {trace.rank} · window {lanes.window_ms[0]:.3f}–{lanes.window_ms[1]:.3f} ms "
            f"(trace: {lanes.span_ms[0]:.3f}–{lanes.span_ms[1]:.3f} ms) · {lanes.events_in_window} events in window"
            + (" (too many to draw one by one: binned)" if lanes.aggregated_in_window else f", {len(lanes.detail)} drawn in full")
            + f" · {len(lanes.bins)} aggregated bins"
        )
        return figures.timeline(lanes, marks), info, {"key": key, "window": list(window) if window else None}, None

    # the chosen step goes into the address bar (not through dcc.Location: the step's own
    # callbacks depend on the trace, which navigation sets, and Dash allows no such cycle)
    app.clientside_callback(
        """function(step) {
            if (step === null || step === undefined) { return window.dash_clientside.no_update; }
            const u = new URL(window.location.href);
            if (u.searchParams.get('view') === 'timeline' && u.searchParams.get('step') !== String(step)) {
                u.searchParams.set('step', String(step));
                window.history.replaceState(window.history.state, '', u.toString());
            }
            return window.dash_clientside.no_update;
        }""",
        Output("step-link", "data"),
        Input("timeline-step", "value"),
        prevent_initial_call=True,
    )

    # ---- overlap -------------------------------------------------------------------------------
    @app.callback(Output("overlap-content", "children"), Input("tabs", "value"), Input("source", "value"), Input("rank", "value"))
    @timed("overlap")
    def overlap(tab, index, rank):
        if hidden(tab, "overlap"):
            return cleared_or_skip()
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return err
        ov = results.overlap(trace, analysis, results.stream_names(trace, catalog.rules))
        if ov is None:
            return _note("No GPU activity in this trace: nothing overlaps.")
        matrix, busy, classes, ratios = ov
        return [
            html.Div([
                html.Div(_html_table(ratios, id="overlap-ratios", text_right=True), className="tk-section tk-col"),
                html.Div(dcc.Graph(id="overlap-classes", figure=figures.class_bars(classes), config=GRAPH_CONFIG), className="tk-col-wide"),
            ], className="tk-cols"),
            html.Div([
                html.Div(dcc.Graph(id="overlap-heatmap", figure=figures.overlap_heatmap(matrix), config=GRAPH_CONFIG), className="tk-col-wide"),
                html.Div(dcc.Graph(id="overlap-busy", figure=figures.busy_bars(busy), config=GRAPH_CONFIG), className="tk-col"),
            ], className="tk-cols"),
        ]

    # ---- gaps ----------------------------------------------------------------------------------
    @app.callback(Output("gaps-content", "children"), Input("tabs", "value"), Input("source", "value"), Input("rank", "value"))
    @timed("gaps")
    def gaps(tab, index, rank):
        if hidden(tab, "gaps"):
            return cleared_or_skip()
        source = catalog.summary(index)
        err = _source_error(source)
        if err is not None:
            return err
        rep = source.report(rank)
        g = results.gaps(rep)
        out: list = []
        if g is None:
            out.append(_note(f"{_rank_label(source, rep)}: no optimizer → lookup pair found. {rep['gaps']['note']}", id="gaps-summary"))
        else:
            out.append(html.Div(results.gap_summary(g), className="tk-lead", id="gaps-summary"))
            if (g["kind"] != "ahead").any():  # nothing to draw for a lookup that ran ahead
                out.append(dcc.Graph(id="gaps-graph", figure=figures.gap_steps(g, _rank_label(source, rep)), config=GRAPH_CONFIG))
        group = [s for s in _group(source) if s.index != source.index] if source.variant else []
        rows = []
        for s in [source, *group]:
            s = catalog.summary(s.index)
            if s is None or s.error is not None:
                continue
            r = s.report(rank)
            gg = results.gaps(r)
            if gg is not None:
                rows.append({"name": s.name, **{c: float(gg[c].mean()) for c in ("idle_ms", "busy_ms", "overlap_ms", "ahead_ms")}})
        if len(rows) > 1:
            import pandas as pd

            out.append(dcc.Graph(id="gaps-variants", figure=figures.gap_variants(pd.DataFrame(rows)), config=GRAPH_CONFIG))
        if g is not None:
            table = g.drop(columns=["kind"]).rename(columns={"gap_ms": "signed gap ms", "idle_ms": "GPU idle ms", "busy_ms": "GPU busy ms",
                                                          "overlap_ms": "overlap ms", "ahead_ms": "ran ahead ms"})
            out.append(html.Div([html.H4(_rank_label(source, rep)), _html_table(table, id="gaps-table")], className="tk-section"))
        return out

    def _group(source: Source) -> list[Source]:
        """The sources of ``source``'s run (its variants), in catalog order."""
        return [s for s in catalog.sources if s.variant is not None and source.variant is not None
                and s.variant.group == source.variant.group]

    # ---- sync stalls ---------------------------------------------------------------------------
    @app.callback(
        Output("stalls-total", "children"),
        Output("stalls-table-box", "children"),
        Output("stalls-content", "children"),
        Input("tabs", "value"),
        Input("source", "value"),
        Input("rank", "value"),
        State("stalls-sort", "data"),
    )
    @timed("stalls")
    def stalls(tab, index, rank, sort):
        if hidden(tab, "stalls"):
            return cleared_or_skip(3)
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return None, None, err
        by_site, per_step, total, share = results.stalls(trace, analysis)
        total_text = (f"Total stall time: {figures.fmt(total)} ms of CPU time in {analysis.syncs.count} blocking calls"
                      + (f", {100 * share:.1f}% of the steps' CPU time" if share is not None else "")
                      + f"; the GPU sat idle {figures.fmt(analysis.syncs.idle_after_ns / 1e6)} ms after them.")
        if by_site.empty:
            table = _note("No blocking host-device synchronisation found in this trace.")
        else:
            table = _stall_table(by_site, sort or DEFAULT_STALL_SORT)
        graph = [dcc.Graph(id="stalls-per-step", figure=figures.stall_steps(per_step), config=GRAPH_CONFIG)] if not per_step.empty else []
        return total_text, table, graph

    @app.callback(
        Output("stalls-table-box", "children", allow_duplicate=True),
        Output("stalls-sort", "data"),
        Input({"type": "stalls-sort", "col": ALL}, "n_clicks"),
        State("stalls-sort", "data"),
        State("source", "value"),
        State("rank", "value"),
        prevent_initial_call=True,
    )
    @timed("stalls-sort")
    def sort_stalls(clicks, sort, index, rank):
        clicked = ctx.triggered_id
        if not isinstance(clicked, dict) or not any(clicks):
            return dash.no_update, dash.no_update
        col = clicked["col"]
        sort = sort or DEFAULT_STALL_SORT
        if sort["col"] == col:
            sort = {"col": col, "ascending": not sort["ascending"]}
        else:  # first click: largest first for figures, A-Z for names
            sort = {"col": col, "ascending": col in ("call site", "phase")}
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return err, sort
        by_site = results.stalls(trace, analysis)[0]
        return _stall_table(by_site, sort), sort

    # ---- memory --------------------------------------------------------------------------------
    @app.callback(Output("memory-content", "children"), Input("tabs", "value"), Input("source", "value"), Input("rank", "value"))
    @timed("memory")
    def memory(tab, index, rank):
        if hidden(tab, "memory"):
            return cleared_or_skip()
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return err
        mem = results.memory(trace, analysis)
        out: list = []
        if mem is None:
            out.append(_note("No [memory] events in this trace (profile with profile_memory=True)."))
        else:
            out.append(html.Div(_html_table(mem["peaks"], id="memory-peaks", text_right=True), className="tk-section"))
            out.append(dcc.Graph(id="memory-graph", figure=figures.memory_lines(mem["series"], mem["marks"], mem["unit"]), config=GRAPH_CONFIG))
        snap = results.snapshot(trace, analysis, results.stream_names(trace, catalog.rules))
        if snap is not None:
            unit, table = snap
            out.append(html.Div([html.H4("Memory snapshot: reserved per stream"),
                                 _html_table(table, id="memory-snapshot-table", text_right=True),
                                 _note("The snapshot names streams by their cudaStream_t handle, the trace by CUPTI's stream id: "
                                       "the default stream (handle 0) is CUPTI's stream 7; the files do not say which CUPTI id "
                                       "another handle has.")],
                                className="tk-section"))
            out.append(dcc.Graph(id="memory-snapshot", figure=figures.snapshot_streams(table, unit), config=GRAPH_CONFIG))
        else:
            out.append(_note("No memory snapshot for this trace: reserved bytes per stream need one."))
        return out

    # ---- GPU idle time and kernels (HTA's figures) ---------------------------------------------
    @app.callback(Output("idle-content", "children"), Input("tabs", "value"), Input("source", "value"), Input("rank", "value"))
    @timed("idle")
    def idle(tab, index, rank):
        if hidden(tab, "idle"):
            return cleared_or_skip()
        source, trace, analysis, err = _picked(index, rank)
        if err is not None:
            return err
        h = catalog.hta(source, trace.rank)
        if not h or not h.get("available"):
            return _note(f"HTA's figures are not available for this trace: {(h or {}).get('reason') or 'not computed'}.")
        return _idle_view(h, trace, results.stream_names(trace, catalog.rules))

    def _idle_view(h: dict, trace, names: dict) -> list:
        out: list = []
        idle = results.hta_idle(h, trace.rank, names)
        if idle is not None:
            temporal, per_stream = idle
            out.append(html.Div(temporal, className="tk-lead", id="idle-summary"))
            out.append(dcc.Graph(id="idle-streams", figure=figures.idle_streams(per_stream), config=GRAPH_CONFIG))
        kt, top = results.hta_kernels(h, trace.rank)
        if kt is not None:
            out.append(html.Div([html.H4("GPU time by kernel type (HTA)"), _html_table(kt, id="idle-kernel-types")], className="tk-section"))
        if top is not None:
            out.append(html.Div([html.H4("Top kernels by total time (HTA)"), _html_table(top, id="idle-kernels")], className="tk-section"))
        for n in h.get("notes") or []:
            out.append(_note(f"HTA note: {n}"))
        return out

    # ---- compare -------------------------------------------------------------------------------
    @app.callback(Output("compare-sources", "value"), Input("source", "value"))
    @timed("compare-default")
    def compare_default(index):
        source = catalog.summary(index)
        if source is None:
            return []
        return [s.index for s in _group(source)] or [source.index]

    @app.callback(Output("compare-baseline", "options"), Output("compare-baseline", "value"),
                  Input("compare-sources", "value"), State("compare-baseline", "value"))
    @timed("compare-baseline")
    def compare_baseline(chosen, current):
        chosen = [i for i in (chosen or []) if catalog.summary(i) is not None]
        options = [{"label": catalog.sources[i].name, "value": i} for i in chosen]
        if current in chosen:
            return options, current
        sparse = [i for i in chosen if catalog.sources[i].variant and catalog.sources[i].variant.pipeline == "sparse"]
        return options, (sparse or chosen or [None])[0]

    @app.callback(Output("compare-content", "children"), Input("tabs", "value"), Input("compare-sources", "value"),
                  Input("compare-baseline", "value"), Input("rank", "value"))
    @timed("compare")
    def compare(tab, chosen, baseline, rank):
        if hidden(tab, "compare"):  # emptied when the selection changes while hidden: drawn afresh when shown
            return None if ctx.triggered_id not in ("tabs", None) else dash.no_update
        if chosen is None:
            return dash.no_update
        picked, notes, flagged = [], [], []
        for i in chosen:
            s = catalog.summary(i)
            if s is None:
                continue
            if s.error is not None:
                notes.append(_error(f"{s.name}: {s.error}"))
                continue
            rep = s.report(rank)
            if rank is not None and rep["rank"] != rank:
                notes.append(_note(f"{s.name} has no rank {rank}: its rank {rep['rank']} is shown."))
            warns = results.warnings(rep)
            name = s.name + (" ⚠" if warns else "")
            if warns:
                flagged.append(_warning([html.B(f"⚠ {s.name}: "), "; ".join(warns)]))
            picked.append((name, rep, i))
        if len(picked) < 2:
            return [_note("Choose two or more traces that loaded.")] + notes
        base = next((k for k, (_, _, i) in enumerate(picked) if i == baseline), 0)
        picked.insert(0, picked.pop(base))  # the baseline first
        table = results.compare([(n, r) for n, r, _ in picked], 0)
        out = [html.Div(f"Each figure of {len(picked)} traces against {picked[0][0]} (rank {rank if rank is not None else 'lowest'}): "
                        "green is better, red worse, grey within 1% or too small to matter (under 0.05 ms, 0.01 GiB or "
                        "1 point).", className="tk-lead"),
               *flagged,
               dcc.Graph(id="compare-bars", figure=figures.compare_bars(table), config=GRAPH_CONFIG),
               html.Div(_compare_table(table, [n for n, _, _ in picked]), className="tk-section")]
        return out + notes

    def _compare_table(table, names: list[str]) -> html.Table:
        head = html.Tr([html.Th("figure")] + [html.Th(n) for n in names])
        rows = []
        for fig, t in table.groupby("figure", sort=False):
            cells = [html.Td(f"{fig} ({t['unit'].iloc[0]})")]
            for rec in t.itertuples(index=False):
                diff = "" if rec.verdict in ("baseline", "–") else f" ({rec.diff_pct:+.1f}%)"
                cells.append(html.Td(figures.fmt(rec.value) + diff, className=f"tk-num tk-{rec.verdict if rec.verdict != '–' else 'na'}"))
            rows.append(html.Tr(cells))
        return html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table", id="compare-table")

    return app
