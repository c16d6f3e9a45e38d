"""The Dash app: the page and its callbacks. The views themselves are ``dashboards.views``.

The browser chooses a trace by its index in the server-side ``Catalog`` (or, in a link, by its
label) and a rank; nothing it sends is ever used as a path.

One callback (``page``) answers every change of trace, rank or view: it writes the URL
(``?trace=<label>&rank=<r>&view=<tab>[&step=<s>]``, so a link opens the same page), the
banner (a trace that failed, every warning tracekit gave about the chosen one) and the one view
shown, rebuilt from scratch. So a click costs one request, and no view can keep another trace's
figures. Controls inside a view (timeline step and zoom, stall sort, compare selection and
baseline) have callbacks of their own that redraw their part of it.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, State, ctx, dcc, html

from dashboards.catalog import Catalog
from dashboards.views import GRAPH_CONFIG, TABS, VIEWS, Views, error, make_link, source_error, warning

TAB_STYLE = {"padding": "6px 10px", "lineHeight": "20px"}


def _source_options(catalog: Catalog) -> list[dict]:
    """The traces served, by variant name (and label where that differs); the value the browser
    sends back is the index."""
    return [{"label": s.name if s.name == s.label else f"{s.name} · {s.label}", "value": s.index} for s in catalog.sources]


def build_layout(catalog: Catalog) -> html.Div:
    header = html.Div(
        [
            html.H1("tracekit"),
            html.Label("Trace", htmlFor="source"),
            dcc.Dropdown(id="source", options=_source_options(catalog), value=0 if len(catalog) else None,
                         clearable=False, className="tk-control-wide"),
            html.Label("Rank", htmlFor="rank"),
            dcc.Dropdown(id="rank", clearable=False, className="tk-control-small"),
            html.Div(id="trace-info", className="tk-trace-info"),
        ],
        className="tk-header",
    )
    tabs = dcc.Tabs(id="tabs", value="overview",
                    children=[dcc.Tab(label=label, value=value, id=f"tab-{value}", style=TAB_STYLE,
                                      selected_style={**TAB_STYLE, "fontWeight": 600}) for value, label in TABS])
    return html.Div([dcc.Location(id="url", refresh=False), header,
                     html.Div([html.Div(id="source-status"), tabs, html.Div(id="view")], className="tk-body")])


def _validation_layout(layout: html.Div) -> html.Div:
    """The page with every view's controls in it, so Dash can check the callbacks of components
    that only exist while their view is shown."""
    return html.Div([layout, dcc.Dropdown(id="timeline-step"), dcc.Store(id="timeline-window"), dcc.Store(id="step-link"),
                     html.Div(id="timeline-info"), dcc.Graph(id="timeline-graph"), dcc.Store(id="stalls-sort"),
                     html.Div(id="stalls-table-box"), dcc.Checklist(id="compare-sources"), dcc.Dropdown(id="compare-baseline"),
                     html.Div(id="compare-content"), dcc.Interval(id="loading-poll"),
                     dcc.Dropdown(id="operators-step"), html.Div(id="operators-box"),
                     dcc.Dropdown(id="kernels-step"), html.Div(id="kernels-box"),
                     dcc.Dropdown(id="diff-against"), html.Div(id="diff-content")])


def parse_link(search: str | None, catalog: Catalog) -> dict:
    """What a link's query string asks for: ``index`` (of ``trace=``: a source's label or
    name, ``Catalog.by_link``; never a path), ``rank``, ``view`` and ``step``, each only when
    present and valid; ``unknown``: a ``trace=`` that names no trace served."""
    q = urllib.parse.parse_qs((search or "").lstrip("?"))
    out: dict = {}
    label = (q.get("trace") or [None])[0]
    if label in catalog.by_link:
        out["index"] = catalog.by_link[label]
    elif label is not None:
        out["unknown"] = label
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


def unknown_trace(name: str, catalog: Catalog) -> html.Div:
    """The banner of a link whose ``trace=`` names no trace served."""
    return error(f"No trace {name!r} is served here: the link names a trace this dashboard was not started with "
                 f"(it serves {len(catalog)}; choose one above or below).", id="unknown-trace")


def served_list(catalog: Catalog, view: str) -> list:
    """Every trace served, each a link to ``view`` of it (under an unknown trace's banner)."""
    return [html.H3("Traces served"),
            html.Ul([html.Li(dcc.Link(s.name, href=make_link(catalog, s.index, None, view))) for s in catalog.sources],
                    id="served-traces")]


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
    app.validation_layout = _validation_layout(app.layout)
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

    views = Views(catalog)
    catalog.after_loads.append(views.prepare_diffs)  # the Diff view's first answer, ready when clicked

    # ---- the page: trace, rank, view, the URL, the banner and the view shown -------------------
    @app.callback(
        Output("url", "search"),
        Output("source", "value"),
        Output("rank", "options"),
        Output("rank", "value"),
        Output("rank", "disabled"),
        Output("tabs", "value"),
        Output("source-status", "children"),
        Output("trace-info", "children"),
        Output("view", "children"),
        Input("url", "search"),
        Input("source", "value"),
        Input("rank", "value"),
        Input("tabs", "value"),
        Input({"type": "pick-trace", "index": ALL}, "n_clicks"),
        Input({"type": "ranks-heat", "figure": ALL}, "clickData"),
        State("rank", "options"),
        State("rank", "disabled"),
    )
    @timed("page")
    def page(search, index, rank, tab, picks, clicks, rank_options, rank_disabled):
        trig = ctx.triggered_id
        shown = (index, rank, tab)  # what the trace, rank and tab controls show now
        want = parse_link(search, catalog)
        cell = isinstance(trig, dict) and trig.get("type") == "ranks-heat"
        if cell:  # a cell of the ranks view: that rank's timeline at that step
            point = ((ctx.triggered[0].get("value") if ctx.triggered else None) or {}).get("points") or [{}]
            y, x = str(point[0].get("y", "")), point[0].get("x")
            if not y.startswith("rank ") or x is None:
                raise dash.exceptions.PreventUpdate
            rank, tab, step = int(y.split()[1]), "timeline", str(x)
        elif trig == "url" or trig is None:  # a link (or the first page): it decides what is shown
            index = want.get("index", index)
            rank = want.get("rank", rank if trig == "url" else None)
            tab = want.get("view", tab)
        elif isinstance(trig, dict) and trig.get("type") == "pick-trace":
            if not any(t.get("value") for t in ctx.triggered):  # rows drawn anew, not clicked
                raise dash.exceptions.PreventUpdate
            index, rank = trig["index"], None
        if not cell:
            step = want.get("step") if trig in ("url", None) else None
        if trig in ("url", None) and "unknown" in want:  # a link to a trace not served: say so, show none
            catalog.first_page.set()
            return dash.no_update, None, [], None, True, tab, unknown_trace(want["unknown"], catalog), None, \
                html.Div(served_list(catalog, tab), id=f"view-{tab}", className="tk-view")
        source = catalog.summary(index)
        err = source_error(source)
        if err is not None:
            catalog.first_page.set()  # answered: the background loads may start (Catalog.prefetch)
            return make_link(catalog, index, None, tab), index, [], None, True, tab, err, None, views.render(tab, index, None)
        ranks = source.ranks
        rank = rank if rank in ranks else ranks[0]
        banner = None
        warns = source.warnings(rank)
        if warns:
            banner = warning([html.B(f"⚠ tracekit warned about {source.name} (rank {rank}): figures may be incomplete. "),
                              *[html.Div(w) for w in warns]], id="source-warnings")
        rep = source.report(rank)
        h = rep["headline"]
        info = [html.Span(f"{source.label} · rank {rank} of {len(ranks)} · {h['steps']} steps ({h['step_source']}) · "
                          f"{rep['schema']} · {rep['platform']}")]
        if warns:
            info.append(html.Span(f" · ⚠ {len(warns)} warning" + ("s" if len(warns) > 1 else ""), className="tk-flag"))
        view = views.render(tab, index, rank, step)
        catalog.first_page.set()
        link = make_link(catalog, index, rank, tab, step)
        # a control whose value does not change is not sent again: Dash's renderer would redraw it
        # (the tabs, both dropdowns) for nothing at every click (bench/NOTES-dashboard.md)
        same = lambda new, old: dash.no_update if new == old else new  # noqa: E731
        return (link if link != search else dash.no_update), same(index, shown[0]), \
            same([{"label": str(r), "value": r} for r in ranks], rank_options), same(rank, shown[1]), \
            same(len(ranks) < 2, rank_disabled), same(tab, shown[2]), banner, info, view

    # ---- a view waiting for its trace to load (views.Views.render) -----------------------------
    # One poll at a time: the interval ticks once (max_intervals=1) and an answer that finds the
    # view still loading allows the next tick. A free-running interval sent a new poll every
    # LOADING_POLL_MS even while the last was unanswered; Dash's renderer drops the answer of a
    # callback superseded by a newer request of it, so once one answer took longer than the period
    # (a loaded machine: the answer that draws the view is the slow one) no answer was ever applied
    # and the page callback, waiting behind the pending poll, never ran: a click on a tab sent no
    # request and the view stayed "Loading" (tests/dashboards/test_loading_poll.py).
    @app.callback(Output("view", "children", allow_duplicate=True),
                  Output("loading-poll", "max_intervals"),
                  Input("loading-poll", "n_intervals"),
                  State("tabs", "value"), State("source", "value"), State("rank", "value"), State("url", "search"),
                  prevent_initial_call=True)
    @timed("loading-poll")
    def loading_poll(n, tab, index, rank, search):
        view = views.render(tab, index, rank, parse_link(search, catalog).get("step"))
        if view.children and getattr(view.children[0], "id", None) == "view-loading":
            return dash.no_update, (n or 0) + 1  # still loading: one more tick
        return view, dash.no_update

    # ---- a chart drawn after the text of its view (views.deferred_graph) ------------------------
    @app.callback(Output({"type": "deferred-box", "graph": MATCH}, "children"),
                  Input({"type": "deferred-figure", "graph": MATCH}, "data"))
    @timed("deferred-graph")
    def deferred_graph(figure):
        return dcc.Graph(id=ctx.outputs_list["id"]["graph"], figure=figure, config=GRAPH_CONFIG)

    # ---- timeline: step and zoom ---------------------------------------------------------------
    @app.callback(
        Output("timeline-graph", "figure"),
        Output("timeline-info", "children"),
        Output("timeline-window", "data"),
        Input("timeline-step", "value"),
        Input("timeline-graph", "relayoutData"),
        State("timeline-window", "data"),
        State("source", "value"),
        State("rank", "value"),
        prevent_initial_call=True,
    )
    @timed("timeline")
    def timeline(step, relayout, stored, index, rank):
        # Always answers with a figure, even for a relayout that changes nothing (autosize): Dash
        # drops a pending answer when a newer request for the same output starts, so a "no
        # update" here could swallow the step's drawing.
        window = None
        key = (stored or {}).get("key") or [None] * 3
        if ctx.triggered_id == "timeline-graph" and relayout == {"autosize": True} and key[0] == index and key[2] == step \
                and (rank is None or key[1] == rank):
            # plotly.js's first drawing of a figure reports an autosize: the figure shown is already
            # this window's (the store says so), and drawing it again cost a second request and a
            # whole redraw of every bar after each opening of the view (bench/NOTES-dashboard.md).
            # A step chosen meanwhile is not swallowed: the store then names another step.
            raise dash.exceptions.PreventUpdate
        if ctx.triggered_id == "timeline-graph" and relayout:
            if "xaxis.range[0]" in relayout:
                window = (float(relayout["xaxis.range[0]"]) * 1e6, float(relayout["xaxis.range[1]"]) * 1e6)
            elif "xaxis.range" in relayout:
                window = (float(relayout["xaxis.range"][0]) * 1e6, float(relayout["xaxis.range"][1]) * 1e6)
            elif relayout.get("xaxis.autorange"):
                step = "all"
            elif stored and stored.get("window") and stored.get("key", [None] * 3)[2] == step:
                window = tuple(stored["window"])
        return views.timeline_figure(index, rank, step, window)

    # the chosen step goes into the address bar (replaceState: dcc.Location would make the
    # page callback redraw the view)
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
    )

    # ---- sync stalls: sort ---------------------------------------------------------------------
    @app.callback(
        Output("stalls-table-box", "children"),
        Output("stalls-sort", "data"),
        Input({"type": "stalls-sort", "col": ALL}, "n_clicks"),
        State("stalls-sort", "data"),
        State("source", "value"),
        State("rank", "value"),
        prevent_initial_call=True,
    )
    @timed("stalls-sort")
    def sort_stalls(clicks, sort, index, rank):
        from dashboards import results
        from dashboards.views import DEFAULT_STALL_SORT, stall_table

        clicked = ctx.triggered_id
        if not isinstance(clicked, dict) or not any(clicks):
            return dash.no_update, dash.no_update
        col = clicked["col"]
        sort = sort or DEFAULT_STALL_SORT
        if sort["col"] == col:
            sort = {"col": col, "ascending": not sort["ascending"]}
        else:  # first click: largest first for figures, A-Z for names
            sort = {"col": col, "ascending": col in ("call site", "phase")}
        source, trace, analysis, err = views.picked(index, rank)
        if err is not None:
            return err, sort
        return stall_table(results.stalls(trace, analysis)[0], sort), sort

    # ---- operators and kernels: the step shown ----------------------------------------------------
    for what in ("operators", "kernels"):
        def table_step(step, index, rank, what=what):
            return views.table_content(what, index, rank, step)

        app.callback(Output(f"{what}-box", "children"), Input(f"{what}-step", "value"),
                     State("source", "value"), State("rank", "value"),
                     prevent_initial_call=True)(timed(f"{what}-step")(table_step))

    # ---- diff: against which trace --------------------------------------------------------------
    @app.callback(Output("diff-content", "children"), Input("diff-against", "value"),
                  State("source", "value"), State("rank", "value"), prevent_initial_call=True)
    @timed("diff")
    def diff_against(against, index, rank):
        source = catalog.summary(index)
        if source is None or source.error is not None:
            raise dash.exceptions.PreventUpdate
        return views.diff_content(index, rank if rank in source.ranks else source.ranks[0], against)

    # ---- compare: which traces, against which ---------------------------------------------------
    @app.callback(
        Output("compare-baseline", "options"),
        Output("compare-baseline", "value"),
        Output("compare-content", "children"),
        Input("compare-sources", "value"),
        Input("compare-baseline", "value"),
        State("rank", "value"),
        prevent_initial_call=True,
    )
    @timed("compare")
    def compare(chosen, baseline, rank):
        options, baseline = views.baseline_options(chosen, baseline)
        return options, baseline, views.compare_content(chosen, baseline, rank)

    return app
