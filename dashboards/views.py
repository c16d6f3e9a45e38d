"""The views: each a function of the catalog, the chosen source and rank that returns its whole
HTML (``Views.render``). The page draws exactly one view at a time, rebuilt on every change
of trace, rank or view, so nothing of another trace can stay on screen; the few controls inside
a view (timeline step and zoom, stall sort, compare selection) have their own callbacks in
``dashboards.app``, which call the pieces here again.

Data comes from ``dashboards.results`` (tracekit's results as tables), figures from
``dashboards.figures``. Views that tracekit's report objects answer (overview, gaps, compare)
never load a trace; the others use the parsed trace and its ``Analysis``.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from dash import dcc, html

from dashboards import reports
from dashboards.catalog import Catalog, Source
from dashboards.style import fmt, is_number


class _Lazy:
    """A module imported on first use. figures/results/timeline pull in numpy and pandas (about
    0.7 s): imported after the first page (``Catalog.prefetch``), or here when a view needs them
    sooner, through ``dashboards.imports`` (no request answered meanwhile)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        from dashboards import imports

        return getattr(imports.module(self._name), attr)


figures = _Lazy("dashboards.figures")
results = _Lazy("dashboards.results")
timeline_lanes = _Lazy("dashboards.timeline")

TABS = [
    ("overview", "Overview"),
    ("timeline", "Timeline"),
    ("ranks", "Ranks"),
    ("overlap", "Overlap"),
    ("gaps", "Gaps"),
    ("stalls", "Sync stalls"),
    ("memory", "Memory"),
    ("idle", "GPU idle"),
    ("embedding", "Embedding bandwidth"),
    ("operators", "Operators"),
    ("kernels", "Kernels"),
    ("compare", "Compare"),
    ("diff", "Diff"),
]
VIEWS = [t for t, _ in TABS]
TRACE_VIEWS = ("timeline", "overlap", "stalls", "memory", "idle", "operators", "kernels", "diff")
"""Views drawn from the parsed trace and its ``Analysis`` (the others need only report objects)."""
LOADING_POLL_MS = 400
"""How often a view waiting for its trace asks again."""

GRAPH_CONFIG = {"displaylogo": False, "responsive": True}


def error(text: str, **kw: Any) -> html.Div:
    return html.Div(text, className="tk-error", **kw)


def warning(text: str | list, **kw: Any) -> html.Div:
    return html.Div(text, className="tk-warning", **kw)


def note(text: Any, **kw: Any) -> html.Div:
    return html.Div(text, className="tk-note", **kw)


def td(v: Any, *, right: bool = False, **kw: Any) -> html.Td:
    """A table cell written as ``dashboards.style.fmt`` writes it; numbers (and, with ``right``, text) right-aligned."""
    return html.Td(fmt(v), className="tk-num" if right or is_number(v) else None, **kw)


def html_table(df, *, id: str | None = None, text_right: bool = False) -> html.Table:
    """A small static table (the figures' text is in the page, so tests and people can read it).
    Numbers are right-aligned; with ``text_right`` so is every text cell after the first column
    (tables of figures already written as text)."""
    head = html.Tr([html.Th(str(c)) for c in df.columns])
    rows = [html.Tr([td(v, right=text_right and i > 0) for i, v in enumerate(rec)]) for rec in df.itertuples(index=False)]
    kw = {"id": id} if id else {}
    return html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table", **kw)


TABLE_PAGE = 25
"""Rows per page of a sortable table."""


def data_table(table_id: str, df, sort_col: str | None = None):
    """A sortable, searchable table (Dash's DataTable: sorting, filtering and paging in the
    browser): numbers right-aligned with thousands separators, ms to 3 decimals."""
    import warnings

    import numpy as np
    from dash import dash_table
    from dash.dash_table.Format import Format, Group, Scheme

    # Dash 4 announces DataTable's removal "in a future major version": pyproject pins what runs
    # here, and a warning per table drawn would only fill the server's log
    warnings.filterwarnings("ignore", message=r"\s*The dash_table.DataTable will be removed", category=DeprecationWarning)

    columns = []
    for c in df.columns:
        numeric = df[c].dtype.kind in "iuf"
        col = {"name": c, "id": c, "type": "numeric" if numeric else "text"}
        if numeric:
            v = df[c].to_numpy()
            # counts held as floats to leave blanks (NaN: registers where a trace does not record
            # them) are drawn as integers
            whole = df[c].dtype.kind != "f" or (not str(c).endswith("ms") and not str(c).startswith("% ")
                                                and bool(np.all(np.isnan(v) | (v == np.round(v)))))
            col["format"] = Format(group=Group.yes, precision=0 if whole else 3, scheme=Scheme.fixed)
        columns.append(col)
    return dash_table.DataTable(
        id=table_id, columns=columns, data=df.to_dict("records"), sort_action="native", filter_action="native",
        filter_options={"case": "insensitive"}, page_action="native", page_size=TABLE_PAGE,
        sort_by=[{"column_id": sort_col, "direction": "desc"}] if sort_col in df.columns else [],
        style_table={"overflowX": "auto"}, style_as_list_view=False,
        style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": "13px", "padding": "3px 8px", "maxWidth": "560px",
                    "whiteSpace": "normal", "textAlign": "left"},
        style_cell_conditional=[{"if": {"column_type": "numeric"}, "textAlign": "right"}],
        style_header={"backgroundColor": "#f0f2f6", "fontWeight": 600},
    )


def deferred_graph(graph_id: str, figure: dict) -> list:
    """A chart drawn after the text around it: its figure in a store, the graph put in its box by
    a callback of its own (``dashboards.app``). The browser renders nothing of an answer that
    holds a graph until plotly.js (4.6 MB) is loaded and parsed, seconds on a loaded machine;
    the first page's figures need not wait for it."""
    return [dcc.Store(id={"type": "deferred-figure", "graph": graph_id}, data=figure),
            html.Div(id={"type": "deferred-box", "graph": graph_id}, className="tk-deferred")]


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


def source_error(source: Source | None) -> html.Div | None:
    if source is None:
        return error("No such trace.")
    if source.error is not None:
        return error(f"{source.label} could not be loaded: {source.error}")
    return None


def rank_label(source: Source, report: dict) -> str:
    return f"{source.name} · rank {report['rank']}"


DEFAULT_STALL_SORT = {"col": "total ms", "ascending": False}
STALL_ROWS = 200
"""Rows of the stall table sent to the browser (a trace can have thousands of call sites)."""
CALL_SITE_SHOWN = 3
"""Innermost elements of a call site written in the stall table (all of it on hover)."""


def _call_site(text: str) -> html.Span:
    parts = str(text).split(" > ")
    short = " > ".join(parts[-CALL_SITE_SHOWN:]) if len(parts) > CALL_SITE_SHOWN else str(text)
    return html.Span(("… > " if len(parts) > CALL_SITE_SHOWN else "") + short, title=str(text))


def stall_table(by_site, sort: dict) -> html.Table | html.Div:
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
        html.Tr([html.Td(_call_site(v), **{"data-col": c}) if c == "call site" else td(v, right=c.startswith("%"), **{"data-col": c})
                 for c, v in zip(by_site.columns, rec)])
        for rec in by_site.head(STALL_ROWS).itertuples(index=False)
    ]
    table = html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table", id="stalls-table")
    if len(by_site) <= STALL_ROWS:
        return table
    return html.Div([table, note(f"{STALL_ROWS} of {len(by_site)} rows shown (sort to see others first).")])


class Views:
    """The views of one catalog's traces."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._diffs: dict[tuple, Any] = {}
        """(A's index, rank, B's index, rank) -> ``tracekit.analyses.diff.DiffResult``."""

    def render(self, tab: str, index: Any, rank: Any, step: str | None = None) -> html.Div:
        """The whole of view ``tab`` for the source at ``index`` and ``rank`` (``step``: the
        timeline's step asked for by a link). A view that needs the parsed trace and finds it not
        yet loaded (or its lanes, HTA's figures not yet built) says so and polls
        (``LOADING_POLL_MS``) while that runs in the background: no callback waits for a load. The
        interval ticks once; each answer of ``loading-poll`` that still finds it loading allows one
        more tick, so a poll is never sent while the last one is unanswered."""
        if tab not in VIEWS:
            return html.Div([error(f"No such view: {tab}")], id=f"view-{tab}", className="tk-view")
        if (tab in TRACE_VIEWS and not self._prepared(tab, index, rank)) or (tab == "ranks" and not self._job_ready(index)):
            source = self.catalog.summary(index)
            return html.Div([html.Div(f"Loading {source.name if source else 'the trace'}: parsing and analysing it (first time "
                                      "this session), then this view is drawn.", id="view-loading", className="tk-lead"),
                             dcc.Interval(id="loading-poll", interval=LOADING_POLL_MS, max_intervals=1)],
                            id=f"view-{tab}", className="tk-view")
        return html.Div(getattr(self, tab)(index, rank, step), id=f"view-{tab}", className="tk-view")

    def _job_ready(self, index: Any) -> bool:
        source = self.catalog.summary(index)
        if source is None or source.error is not None or len(source.ranks) < 2 or source.job is not None:
            return True
        return self.catalog.ready((index, "job"), lambda: self.catalog.job(source))

    def _prepared(self, tab: str, index: Any, rank: Any) -> bool:
        """Whether what view ``tab`` needs of the source is in memory (started if not)."""
        source = self.catalog.summary(index)
        if source is None or source.error is not None:
            return True  # the view shows the error
        if source.results is not None and tab not in ("timeline", "overlap", "memory", "idle", "operators", "kernels", "diff"):
            return True
        if tab == "diff" and source.results is not None:  # its default diff computed (prepare_diffs)?
            mine = rank if rank in source.ranks else source.ranks[0]
            _, against = self.diff_options(index, mine)
            if against is None or self._diff_key(index, mine, against) in self._diffs:
                return True

        def work() -> None:
            s = self.catalog.get(index)
            if s.error is not None:
                return
            trace, _ = s.pick(rank)
            if tab == "operators":
                trace.operators()
            elif tab == "kernels":
                trace.kernels()
            elif tab == "diff":
                _, against = self.diff_options(index, trace.rank)
                if against is not None:
                    self.diff_result(index, trace.rank, against)
            else:
                results.lane_events(trace)  # the timeline's lanes, the streams' names
            if tab == "idle":
                self.catalog.hta(s, trace.rank)

        what = tab if tab in ("idle", "operators", "kernels", "diff") else "trace"
        return self.catalog.ready((index, rank, what), work)

    def picked(self, index: Any, rank: Any):
        """(source, trace, analysis, None) of a loaded source, or (None, None, None, error)."""
        source = self.catalog.get(index)
        err = source_error(source)
        if err is not None:
            return None, None, None, err
        trace, analysis = source.pick(rank)
        return source, trace, analysis, None

    def group(self, source: Source) -> list[Source]:
        """The sources of ``source``'s run (its variants), in catalog order."""
        return [s for s in self.catalog.sources if s.variant is not None and source.variant is not None
                and s.variant.group == source.variant.group]

    # ---- overview: the chosen trace first, then every trace ------------------------------------
    def overview(self, index, rank, _step=None) -> list:
        chosen = self.catalog.summary(index)
        top: list = []
        if chosen is not None and chosen.error is None:
            top = self._overview_chosen(chosen, chosen.report(rank))
        rows = [self._overview_row(self.catalog.summary(s.index), index, rank) for s in self.catalog.sources]
        head = html.Tr([html.Th(h) for h in ("trace", "steps", "step time P90 ms", "step P90 GPU span ms", "gap mean ms",
                                             "exposed comm ms", "exposed memcpy ms", "sync stalls ms", "peak reserved", "warnings")])
        table = html.Div([html.H3("All traces (click one to choose it)"),
                          html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table tk-traces", id="overview-traces")],
                         className="tk-section")
        return [*top, table]

    def _overview_chosen(self, s: Source, rep: dict) -> list:
        from tracekit.report import fmt_figure

        h = rep["headline"]
        tiles = [
            ("step time P90", fmt_figure(h.get("step_p90_ns"), "ms") + " ms"),
            ("GPU span P90", fmt_figure(h.get("step_gpu_p90_ns"), "ms") + " ms"),
            ("CPU span P90", fmt_figure(h.get("step_cpu_p90_ns"), "ms") + " ms"),
            ("optimizer → lookup gap", fmt_figure(h.get("mean_gap_ns"), "ms") + " ms"),
            ("exposed communication", fmt_figure(h.get("exposed_comm_ns"), "ms") + " ms"),
            ("exposed memcpy", fmt_figure(h.get("exposed_memcpy_ns"), "ms") + " ms"),
            ("sync stalls (CPU)", f"{fmt_figure(h.get('stall_total_ns'), 'ms')} ms · {h.get('stall_count', 0)}×"),
            ("peak reserved", fmt_figure(h.get("peak_reserved_bytes"), "bytes")),
        ]
        out: list = [html.H2([s.name, html.Span(f"  {s.label} · rank {rep['rank']}", className="tk-sub")], id="overview-title"),
                     html.Div([html.Div([html.Div(k, className="tk-tile-k"), html.Div(v, className="tk-tile-v")], className="tk-tile")
                               for k, v in tiles], className="tk-tiles", id="overview-tiles")]
        ex = reports.explain(rep)
        if ex is None:  # a report without tracekit explain's section: step time per step
            out += deferred_graph("overview-steps", reports.step_times_figure(rep, rank_label(s, rep)))
            return out
        out.append(html.Div([html.Span("What bounds the step: ", className="tk-sub"), html.B(ex["bound"])],
                            className="tk-lead tk-bound", id="overview-bound"))
        if ex["findings"]:
            out.append(html.Div([html.Div([html.Div([html.B(f["title"]), html.Span(f["saving"], className="tk-saving" if f["predicted"] else "tk-saving-none")],
                                                    className="tk-finding-head"),
                                           html.Div(["fix: ", f["fix"]], className="tk-finding-fix") if f["fix"] else None,
                                           html.Div(f["evidence"], className="tk-note") if f["evidence"] else None],
                                          className="tk-finding")
                                 for f in ex["findings"]], id="overview-findings", className="tk-findings"))
        else:
            out.append(note("No finding: none of the known fixes applies to this trace.", id="overview-findings"))
        if ex["steps"]:
            out += deferred_graph("overview-steps", reports.step_breakdown_figure(ex, rank_label(s, rep)))
        return out

    def _overview_row(self, s: Source, index, rank) -> html.Tr:
        from tracekit.report import fmt_figure

        chosen = s.index == index
        name = html.Button([s.name, html.Span(f" {s.label}" if s.name != s.label else "", className="tk-sub")],
                           id={"type": "pick-trace", "index": s.index}, className="tk-link", n_clicks=0)
        cls = "tk-chosen" if chosen else None
        if s.error is not None:
            return html.Tr([html.Td(name), html.Td(error(s.error), colSpan=9)], id=f"card-{s.index}", className=cls)
        rep = s.report(rank if chosen else None)
        h = rep["headline"]
        warns = reports.warnings(rep)
        rank_note = f" · rank {rep['rank']} of {len(s.ranks)}" if len(s.ranks) > 1 else ""
        cells = [html.Td([name, html.Span(rank_note, className="tk-sub")]), td(h["steps"]),
                 *[html.Td(fmt_figure(h.get(k), "ms"), className="tk-num") for k in
                   ("step_p90_ns", "step_gpu_p90_ns", "mean_gap_ns", "exposed_comm_ns", "exposed_memcpy_ns", "stall_total_ns")],
                 html.Td(fmt_figure(h.get("peak_reserved_bytes"), "bytes"), className="tk-num"),
                 html.Td([html.Div("⚠ " + w, className="tk-flag") for w in warns] or "none", className="tk-warn-cell")]
        return html.Tr(cells, id=f"card-{s.index}", className=cls)

    # ---- timeline ------------------------------------------------------------------------------
    def timeline(self, index, rank, step=None) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        steps = results.steps(trace, analysis)
        options = [{"label": "whole trace", "value": "all"}] + [{"label": f"step {s}", "value": str(s)} for s in steps["step"]]
        values = [o["value"] for o in options]
        step = step if step in values else (values[1] if len(values) > 1 else "all")
        figure, info, stored = self.timeline_figure(index, rank, step, None)
        controls = html.Div(
            [
                html.Label("Step"),
                dcc.Dropdown(id="timeline-step", className="tk-control", clearable=False, options=options, value=step),
                note("Drag on the chart to zoom: the zoomed window is redrawn at full detail; "
                     "outside it, bars are time bins (opacity = busy fraction).", id="timeline-help"),
            ],
            className="tk-row",
        )
        return [controls, dcc.Store(id="timeline-window", data=stored), dcc.Store(id="step-link"),
                html.Div(info, id="timeline-info", className="tk-note"),
                dcc.Graph(id="timeline-graph", figure=figure, config={**GRAPH_CONFIG, "responsive": False})]

    def timeline_figure(self, index, rank, step, window_ns) -> tuple[dict, Any, dict | None]:
        """(figure, info line, what the window store keeps) for ``step`` ("all" for the whole
        trace) or, when given, the window ``(lo, hi)`` in ns from the trace's origin."""
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return figures.empty(""), err, None
        events, origin = results.lane_events(trace)
        window = window_ns
        if window is None and step not in (None, "all"):
            steps = results.steps(trace, analysis)
            row = steps[steps["step"].astype(str) == str(step)]
            if len(row):
                window = (int(row["start_ns"].iloc[0]) - origin, int(row["end_ns"].iloc[0]) - origin)
        lanes = timeline_lanes.build_lanes(events, window)
        marks = results.timeline_marks(trace, analysis, origin, lanes.window_ms)
        info = (
            f"{source.name} · rank {trace.rank} · window {lanes.window_ms[0]:.3f}–{lanes.window_ms[1]:.3f} ms "
            f"(trace: {lanes.span_ms[0]:.3f}–{lanes.span_ms[1]:.3f} ms) · {lanes.events_in_window} events in window"
            + (" (too many to draw one by one: binned)" if lanes.aggregated_in_window else f", {len(lanes.detail)} drawn in full")
            + f" · {len(lanes.bins)} aggregated bins"
        )
        stored = {"key": [index, trace.rank, step], "window": list(window) if window else None}
        return figures.timeline(lanes, marks), info, stored

    # ---- ranks: one job's ranks side by side -------------------------------------------------------
    def ranks(self, index, rank, _step=None) -> list:
        source = self.catalog.summary(index)
        err = source_error(source)
        if err is not None:
            return [err]
        if len(source.ranks) < 2:
            return [note(f"{source.name} is one rank: give a directory of a job's rank traces to see them side by side.",
                         id="ranks-summary")]
        job = self.catalog.job(source)
        from tracekit.report import job_headline  # lazily, as results (the first page stays quick)

        head = job_headline(job)
        out: list = ([html.Div([html.Div(x) for x in head], className="tk-lead", id="ranks-graph")] if head else [])
        out.append(html.Div(results.job_summary(job), className="tk-lead", id="ranks-summary"))
        for p in job.get("problems") or []:
            out.append(warning(f"⚠ {p['message']}" + (f" ({p['source']})" if p.get("source") else "")))
        for w in (job.get("graph") or {}).get("warnings") or []:
            out.append(warning(f"⚠ {w}"))
        split = results.job_graph_ranks(job)
        if split is not None:
            out.append(html.Div([html.H4("Each rank's step on the job's graph: its own work, transfers, wait for the others"),
                                 html_table(split, id="ranks-graph-table", text_right=True)], className="tk-section"))
            from tracekit.report.job_text import window_note

            if (why := window_note(job["graph"])):
                out.append(note(why[0].upper() + why[1:] + "."))
        out.append(self._rank_path_links(index, job, source))
        cells = results.job_cells(job)
        if cells is not None:
            out.append(note("Click a cell to open that rank's timeline at that step. ▲ marks the step's straggler "
                            "(the rank the others waited for most)."))
            out.append(html.Div([
                html.Div(dcc.Graph(id={"type": "ranks-heat", "figure": "step-time"}, config=GRAPH_CONFIG,
                                   figure=figures.ranks_heatmap(cells, "step_ms", "Step time per rank and step (ms)")),
                         id="ranks-step-time", className="tk-col"),
                html.Div(dcc.Graph(id={"type": "ranks-heat", "figure": "wait"}, config=GRAPH_CONFIG,
                                   figure=figures.ranks_heatmap(cells, "wait_ms", "Wait at collectives per rank and step (ms)")),
                         id="ranks-wait", className="tk-col"),
            ], className="tk-cols"))
        out.append(html.Div([html.H4("Per rank"), html_table(results.job_ranks(job), id="ranks-table", text_right=True)],
                            className="tk-section"))
        return out

    def _rank_path_links(self, index, job: dict, source: Source) -> html.Div:
        """A link per rank to its own critical path: its timeline (the critical path lane) at
        the job's longest step on the job's graph (without a graph: the timeline's first step)."""
        step = results.job_path_step(job)
        ranks = sorted({int(r["rank"]) for r in job.get("ranks") or []} or set(source.ranks))
        where = f"at step {step}, the job's longest on its graph" if step is not None else "at its first step"
        links: list = []
        for r in ranks:
            links += [" · " if links else "",
                      dcc.Link(f"rank {r}", href=make_link(self.catalog, index, r, "timeline", step),
                               id={"type": "rank-path", "rank": r})]
        return html.Div([html.Span(f"Each rank's own critical path (its timeline {where}): "), *links],
                        id="ranks-path-links", className="tk-lead")

    # ---- overlap -------------------------------------------------------------------------------
    def overlap(self, index, rank, _step=None) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        ov = results.overlap(trace, analysis, results.stream_names(trace))
        if ov is None:
            return [note("No GPU activity in this trace: nothing overlaps.")]
        matrix, busy, classes, ratios = ov
        return [
            html.Div([
                html.Div(html_table(ratios, id="overlap-ratios", text_right=True), className="tk-section tk-col"),
                html.Div(dcc.Graph(id="overlap-classes", figure=figures.class_bars(classes), config=GRAPH_CONFIG), className="tk-col-wide"),
            ], className="tk-cols"),
            html.Div([
                html.Div(dcc.Graph(id="overlap-heatmap", figure=figures.overlap_heatmap(matrix), config=GRAPH_CONFIG), className="tk-col-wide"),
                html.Div(dcc.Graph(id="overlap-busy", figure=figures.busy_bars(busy), config=GRAPH_CONFIG), className="tk-col"),
            ], className="tk-cols"),
        ]

    # ---- gaps ----------------------------------------------------------------------------------
    def gaps(self, index, rank, _step=None) -> list:
        source = self.catalog.summary(index)
        err = source_error(source)
        if err is not None:
            return [err]
        rep = source.report(rank)
        g = results.gaps(rep)
        out: list = []
        if g is None:
            out.append(note(f"{rank_label(source, rep)}: no optimizer → lookup pair found. {rep['gaps']['note']}", id="gaps-summary"))
        else:
            out.append(html.Div(results.gap_summary(g), className="tk-lead", id="gaps-summary"))
            out.append(dcc.Graph(id="gaps-graph", figure=figures.gap_steps(g, rank_label(source, rep)), config=GRAPH_CONFIG))
        rows = []
        for s in [source, *[s for s in self.group(source) if s.index != source.index]]:
            s = self.catalog.summary(s.index)
            if s is None or s.error is not None:
                continue
            gg = results.gaps(s.report(rank))
            if gg is not None:
                rows.append({"name": s.name, **{c: float(gg[c].mean()) for c in ("gap_ms", *results.GAP_PARTS)}})
        if len(rows) > 1:
            import pandas as pd

            out.append(dcc.Graph(id="gaps-variants", figure=figures.gap_variants(pd.DataFrame(rows)), config=GRAPH_CONFIG))
        if g is not None:
            table = g.drop(columns=["kind", "early_ms", "ahead_gap_ms"]).rename(columns={
                "gap_ms": "signed gap ms", "idle_ms": "GPU idle ms", "busy_ms": "GPU busy ms", "overlap_ms": "overlap ms",
                "ahead_ms": "ran ahead ms"})
            out.append(html.Div([html.H4(rank_label(source, rep)), html_table(table, id="gaps-table")], className="tk-section"))
        return out

    # ---- embedding bandwidth -------------------------------------------------------------------
    def embedding(self, index, rank, _step=None) -> list:
        source = self.catalog.summary(index)
        err = source_error(source)
        if err is not None:
            return [err]
        rep = source.report(rank)
        e = results.embedding(rep)
        if e is None:
            return [note(f"{rank_label(source, rep)}: this report predates the embedding bandwidth section.",
                         id="embedding-summary")]
        peak = (f"{e['device']}: peak {e['peak_gbps']:,.0f} GB/s ({e['peak_source']})" if e["peak_gbps"]
                else f"{e['device'] or 'GPU not named'}: {e['peak_source']}")
        out: list = [html.Div(peak, className="tk-lead", id="embedding-summary")]
        if e["findings"]:
            out.append(html.Div([html.Div([html.B(f["title"]), html.Div(f["evidence"], className="tk-note")],
                                          className="tk-finding") for f in e["findings"]],
                                id="embedding-findings", className="tk-findings"))
        if e["kernels"].empty:
            out.append(note("No embedding call with its inputs recorded and GPU time: nothing to measure "
                            "(profile with record_shapes=True; the table below says what is missing).",
                            id="embedding-none"))
        else:
            out.append(dcc.Graph(id="embedding-kernels", figure=figures.embedding_kernels(e["kernels"], e["peak_gbps"]),
                                 config=GRAPH_CONFIG))
            if e["steps"]["step"].nunique() > 1:
                out.append(dcc.Graph(id="embedding-steps", figure=figures.embedding_steps(e["steps"], e["peak_gbps"]),
                                     config=GRAPH_CONFIG))
            out.append(html.Div([html.H4("Per kernel"), html_table(e["kernels"], id="embedding-table")],
                                className="tk-section"))
            out.append(html.Div([html.H4("Per phase"), html_table(e["phases"], id="embedding-phases")],
                                className="tk-section"))
        if not e["missing"].empty:
            out.append(html.Div([html.H4("Without an estimate"), html_table(e["missing"], id="embedding-missing")],
                                className="tk-section"))
        out += [note(n) for n in e["notes"]]
        return out

    # ---- sync stalls ---------------------------------------------------------------------------
    def stalls(self, index, rank, _step=None) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        by_site, per_step, total, share = results.stalls(trace, analysis)
        total_text = (f"Total stall time: {fmt(total)} ms of CPU time in {analysis.syncs.count} blocking calls"
                      + (f", {100 * share:.1f}% of the steps' CPU time" if share is not None else "")
                      + f"; the GPU sat idle {fmt(analysis.syncs.idle_after_ns / 1e6)} ms after them.")
        table = note("No blocking host-device synchronisation found in this trace.") if by_site.empty \
            else stall_table(by_site, DEFAULT_STALL_SORT)
        graph = [dcc.Graph(id="stalls-per-step", figure=figures.stall_steps(per_step), config=GRAPH_CONFIG)] if not per_step.empty else []
        y = analysis.syncs
        polls = []
        if getattr(y, "poll_count", 0):
            text = (f"Not counted as stalls: {y.poll_count} polls (cudaEventQuery / cudaStreamQuery return at once), "
                    f"{fmt(y.poll_total_ns / 1e6)} ms of CPU time")
            if y.allocator_known:
                text += (f"; {y.allocator_poll_count} of them ({fmt(y.allocator_poll_total_ns / 1e6)} ms) the caching allocator's, "
                         "querying the events of blocks record_stream tied to other streams before reusing them.")
            polls = [html.Div(text + ("" if y.allocator_known else "."), id="stalls-polls", className="tk-note")]
        return [dcc.Store(id="stalls-sort", data=DEFAULT_STALL_SORT), html.Div(total_text, id="stalls-total", className="tk-lead"),
                *polls, html.Div(table, id="stalls-table-box", className="tk-section"), *graph]

    # ---- memory --------------------------------------------------------------------------------
    def memory(self, index, rank, _step=None) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        mem = results.memory(trace, analysis)
        out: list = []
        if mem is None:
            out.append(note("No [memory] events in this trace (profile with profile_memory=True)."))
        else:
            out.append(html.Div(html_table(mem["peaks"], id="memory-peaks", text_right=True), className="tk-section"))
            out.append(dcc.Graph(id="memory-graph", figure=figures.memory_lines(mem["series"], mem["marks"], mem["unit"]), config=GRAPH_CONFIG))
        snap = results.snapshot(trace, analysis, results.stream_names(trace))
        if snap is not None:
            unit, table = snap
            out.append(html.Div([html.H4("Memory snapshot: reserved per stream"),
                                 html_table(table, id="memory-snapshot-table", text_right=True),
                                 note(results.snapshot_note(analysis), id="memory-snapshot-note")],
                                className="tk-section"))
            out.append(dcc.Graph(id="memory-snapshot", figure=figures.snapshot_streams(table, unit), config=GRAPH_CONFIG))
        else:
            out.append(note("No memory snapshot for this trace: reserved bytes per stream need one."))
        return out

    # ---- GPU idle time and kernels (HTA's figures) ---------------------------------------------
    def idle(self, index, rank, _step=None) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        h = self.catalog.hta(source, trace.rank)
        if not h or not h.get("available"):
            return [note(f"HTA's figures are not available for this trace: {(h or {}).get('reason') or 'not computed'}.")]
        out: list = []
        idle = results.hta_idle(h, trace.rank, results.stream_names(trace))
        if idle is not None:
            temporal, per_stream = idle
            out.append(html.Div(temporal, className="tk-lead", id="idle-summary"))
            out.append(dcc.Graph(id="idle-streams", figure=figures.idle_streams(per_stream), config=GRAPH_CONFIG))
        kt, top = results.hta_kernels(h, trace.rank)
        if kt is not None:
            out.append(html.Div([html.H4("GPU time by kernel type (HTA)"), html_table(kt, id="idle-kernel-types")], className="tk-section"))
        if top is not None:
            out.append(html.Div([html.H4("Top kernels by total time (HTA)"), html_table(top, id="idle-kernels")], className="tk-section"))
        for n in h.get("notes") or []:
            out.append(note(f"HTA note: {n}"))
        return out

    # ---- operators and kernels: sortable, searchable tables ----------------------------------
    def operators(self, index, rank, _step=None) -> list:
        return self._table_view("operators", index, rank)

    def kernels(self, index, rank, _step=None) -> list:
        return self._table_view("kernels", index, rank)

    def _table_view(self, what: str, index, rank) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        _, step_list, _ = getattr(results, what)(trace, "all")
        options = [{"label": "all steps", "value": "all"}] + [{"label": f"step {s}", "value": str(s)} for s in step_list]
        help_text = ("Click a heading to sort, type in the row under the headings to search (text: contains; "
                     "numbers: =, >, < as in '> 1').")
        return [html.Div([html.Label("Steps"),
                          dcc.Dropdown(id=f"{what}-step", className="tk-control", clearable=False, options=options, value="all"),
                          note(help_text)], className="tk-row"),
                html.Div(self.table_content(what, index, rank, "all"), id=f"{what}-box")]

    def table_content(self, what: str, index, rank, step) -> list:
        """The operators' or kernels' table of ``step`` ("all": every step) and the line above it."""
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        table, _, info = getattr(results, what)(trace, step)
        where = "over all steps" if step in (None, "all") else f"in step {step}"
        if what == "operators":
            lead = (f"{len(table):,} ops {where} (CPU ops and annotations; a step or batch number left out of a name: "
                    f"{{step}}, {{i}}); GPU self: the activities an op launched itself, GPU total: with its children's. "
                    f"GPU time {fmt(info['gpu_ms'])} ms over the whole trace, {fmt(info['unlaunched_ms'])} ms of it "
                    "launched by no op.")
            sort = "GPU total ms"
        else:
            lead = (f"{info['names']:,} kernels, memcpys and memsets {where}, {fmt(info['gpu_ms'])} ms of GPU time; one row "
                    f"per launch configuration ({len(table):,} rows; grid, block, registers per thread, shared memory per "
                    "block and Kineto's estimated achieved occupancy, blank where the trace does not record them); "
                    "launched by: the op around the launching call for most of its calls.")
            sort = "total ms"
        return [html.Div(lead, id=f"{what}-summary", className="tk-lead"), data_table(f"{what}-table", table, sort)]

    # ---- diff: the chosen trace (B) against another (A) ------------------------------------------
    def diff_options(self, index, rank) -> tuple[list[dict], str | None]:
        """The traces (and ranks) the chosen one can be diffed against, as ``"index:rank"``, and
        the default: another rank of the same job, else the run's SparseDist (TorchRec's default
        pipeline), else the run's first other trace, else the first other trace."""
        me = self.catalog.summary(index)
        opts, default = [], None
        for s in self.catalog.sources:
            s = self.catalog.summary(s.index)
            if s is None or s.error is not None:
                continue
            for r in s.ranks:
                if s.index == index and (rank if rank is not None else s.ranks[0]) == r:
                    continue
                label = s.name + (f" · rank {r}" if len(s.ranks) > 1 else "")
                opts.append({"label": label, "value": f"{s.index}:{r}"})
        if me is None or not opts:
            return opts, None
        same = [o["value"] for o in opts if o["value"].startswith(f"{index}:")]
        group = [s.index for s in self.group(me) if s.index != index]
        sparse = [i for i in group if self.catalog.sources[i].variant and self.catalog.sources[i].variant.pipeline == "sparse"]
        pick = same or [o["value"] for i in sparse + group for o in opts if o["value"].startswith(f"{i}:")]
        default = (pick or [opts[0]["value"]])[0]
        return opts, default

    def diff(self, index, rank, _step=None) -> list:
        source, trace, analysis, err = self.picked(index, rank)
        if err is not None:
            return [err]
        opts, default = self.diff_options(index, trace.rank)
        if default is None:
            return [note("Diff needs another trace (or another rank) that loaded: start the dashboard with two or more.",
                         id="diff-content")]
        return [html.Div([html.Label("A (against)"),
                          dcc.Dropdown(id="diff-against", className="tk-control-wide", clearable=False, options=opts, value=default),
                          html.Span(f"B: {source.name}" + (f" · rank {trace.rank}" if len(source.ranks) > 1 else ""),
                                    className="tk-sub")], className="tk-row"),
                html.Div(self.diff_content(index, trace.rank, default), id="diff-content")]

    def prepare_diffs(self) -> None:
        """Each loaded source's diff against its default (``diff_options``: what the Diff view
        shows first), computed once (``Catalog.after_loads``)."""
        for s in self.catalog.sources:
            if not s.results:
                continue
            rank = s.ranks[0]
            _, against = self.diff_options(s.index, rank)
            if against is not None:
                self.diff_result(s.index, rank, against)

    @staticmethod
    def _diff_key(index, rank, against: str) -> tuple:
        """(A's index, rank, B's index, rank): a diff's key in ``_diffs``."""
        ia, ra = (int(x) for x in str(against).split(":"))
        return ia, ra, index, rank

    def diff_result(self, index, rank, against: str):
        """The diff of the chosen trace (B: ``index``, ``rank``) against ``against``
        (``"index:rank"``), computed once."""
        key = self._diff_key(index, rank, against)
        ia, ra = key[:2]
        if key not in self._diffs:
            a = self.catalog.get(ia)
            err = source_error(a)
            if err is not None:
                return None, err
            lt_a, _ = a.pick(ra)
            _, lt_b, _, err = self.picked(index, rank)
            if err is not None:
                return None, err
            self._diffs[key] = lt_a.diff(lt_b)
        return self._diffs[key], None

    def diff_content(self, index, rank, against) -> list:
        """Where the chosen trace's step time moved against ``against``: what moved in words,
        then the tables (ms per step)."""
        if against is None:
            return [note("Choose a trace to diff against.")]
        d, err = self.diff_result(index, rank, against)
        if err is not None:
            return [err]
        t = results.diff_tables(d)
        lines = d.summary or ["nothing moved"]
        def section(title: str, *body, id: str | None = None) -> html.Div:
            return html.Div([html.H4(title), *body], className="tk-section", **({"id": id} if id else {}))

        return [
            html.Div([html.Div("Where the step's time moved (B against A), per step:", className="tk-sub"),
                      html.Ul([html.Li(x) for x in lines])], className="tk-lead", id="diff-summary"),
            html.Div([html.Div(section("Step", html_table(t["step"], id="diff-step", text_right=True)), className="tk-col"),
                      html.Div(dcc.Graph(id="diff-phases-graph", config=GRAPH_CONFIG,
                                         figure=figures.diff_bars(t["phases"], "phase", "GPU time by phase (ms per step)")),
                               className="tk-col-wide")], className="tk-cols"),
            section("GPU time by stream and phase (main: the stream with the most forward/backward/optimizer time; "
                    "a side stream by its largest phase)", data_table("diff-streams", t["streams"]), id="diff-streams-box"),
            html.Div([html.Div(section("Phases running at once on the GPU", html_table(t["overlaps"], id="diff-overlaps")),
                               className="tk-col"),
                      html.Div(section("Critical path by category (tracekit explain)",
                                       html_table(t["critical_path"], id="diff-critical")), className="tk-col")],
                     className="tk-cols"),
            section("Ops (added: only in B; removed: only in A)", data_table("diff-ops", t["ops"])),
            section("Kernels, memcpys and memsets", data_table("diff-kernels", t["kernels"])),
        ]

    # ---- compare -------------------------------------------------------------------------------
    def compare(self, index, rank, _step=None) -> list:
        source = self.catalog.summary(index)
        chosen = ([s.index for s in self.group(source)] or [source.index]) if source is not None else []
        options, baseline = self.baseline_options(chosen, None)
        return [
            html.Div([html.Label("Traces"),
                      dcc.Checklist(id="compare-sources", inline=True, value=chosen,
                                    options=[{"label": s.name, "value": s.index} for s in self.catalog.sources])],
                     className="tk-row tk-checks"),
            html.Div([html.Label("Baseline"), dcc.Dropdown(id="compare-baseline", className="tk-control", clearable=False,
                                                           options=options, value=baseline)], className="tk-row"),
            html.Div(self.compare_content(chosen, baseline, rank), id="compare-content"),
        ]

    def baseline_options(self, chosen, current) -> tuple[list[dict], Any]:
        """The baseline's choices (the traces compared) and its value: ``current`` when still
        compared, else SparseDist (TorchRec's default pipeline) when compared, else the first."""
        chosen = [i for i in (chosen or []) if self.catalog.summary(i) is not None]
        options = [{"label": self.catalog.sources[i].name, "value": i} for i in chosen]
        if current in chosen:
            return options, current
        sparse = [i for i in chosen if self.catalog.sources[i].variant and self.catalog.sources[i].variant.pipeline == "sparse"]
        return options, (sparse or chosen or [None])[0]

    def compare_content(self, chosen, baseline, rank) -> list:
        picked, notes, flagged = [], [], []
        for i in chosen or []:
            s = self.catalog.summary(i)
            if s is None:
                continue
            if s.error is not None:
                notes.append(error(f"{s.name}: {s.error}"))
                continue
            rep = s.report(rank)
            if rank is not None and rep["rank"] != rank:
                notes.append(note(f"{s.name} has no rank {rank}: its rank {rep['rank']} is shown."))
            warns = reports.warnings(rep)
            if warns:
                flagged.append(warning([html.B(f"⚠ {s.name}: "), "; ".join(warns)]))
            picked.append((s.name + (" ⚠" if warns else ""), rep, i))
        if len(picked) < 2:
            return [note("Choose two or more traces that loaded.")] + notes
        base = next((k for k, (_, _, i) in enumerate(picked) if i == baseline), 0)
        picked.insert(0, picked.pop(base))  # the baseline first
        table = results.compare([(n, r) for n, r, _ in picked], 0)
        out = [html.Div(f"Each figure of {len(picked)} traces against {picked[0][0]} (rank {rank if rank is not None else 'lowest'}): "
                        "green is better, red worse, grey within 1% or too small to matter (under 0.05 ms, 0.01 GiB or "
                        "1 point).", className="tk-lead"),
               *flagged,
               dcc.Graph(id="compare-bars", figure=figures.compare_bars(table), config=GRAPH_CONFIG),
               html.Div(self._compare_table(table, [n for n, _, _ in picked]), className="tk-section")]
        return out + notes

    @staticmethod
    def _compare_table(table, names: list[str]) -> html.Table:
        head = html.Tr([html.Th("figure")] + [html.Th(n) for n in names])
        rows = []
        for fig, t in table.groupby("figure", sort=False):
            cells = [html.Td(f"{fig} ({t['unit'].iloc[0]})")]
            for rec in t.itertuples(index=False):
                diff = "" if rec.verdict in ("baseline", "–") else f" ({rec.diff_pct:+.1f}%)"
                cells.append(html.Td(fmt(rec.value) + diff, className=f"tk-num tk-{rec.verdict if rec.verdict != '–' else 'na'}"))
            rows.append(html.Tr(cells))
        return html.Table([html.Thead(head), html.Tbody(rows)], className="tk-table", id="compare-table")
