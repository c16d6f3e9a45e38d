"""Every view in headless Chromium: it loads without a console error, reacts to its controls and
shows the figures tracekit computes for the traces served (expected values are computed here
from the ``Analysis`` objects, not from the dashboard's own tables). A screenshot of each view
goes to ``artifacts/screenshots/``.

The tests share one page and run in file order (each leaves the page where the next expects it).
"""

from __future__ import annotations

import base64
import re
import urllib.parse

import numpy as np
import pytest

from tests.dashboards.conftest import SIDE_STREAM, VIEWPORT, screenshot
from tracekit.trace.model import GPU_ACTIVITY_KINDS

pytestmark = pytest.mark.browser

TIMEOUT = 15_000  # ms; a callback takes well under a second, the first page load a few


def expect_text(page, selector: str, text: str) -> None:
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_contain_text(text, timeout=TIMEOUT)


def choose(page, dropdown: str, label: str) -> None:
    """Pick ``label`` in the dcc.Dropdown ``dropdown`` as a person would."""
    page.click(f"#{dropdown}")
    page.get_by_role("dialog").get_by_role("option", name=label, exact=True).click()
    expect_text(page, f"#{dropdown}", label)


def source_label(dashboard, role: str) -> str:
    """The trace dropdown's text for a source (its variant name, and label where that differs)."""
    _, catalog, roles = dashboard
    s = catalog.sources[roles[role]]
    return s.name if s.name == s.label else f"{s.name} · {s.label}"


def choose_source(page, dashboard, role: str) -> None:
    choose(page, "source", source_label(dashboard, role))


def tab(page, name: str) -> None:
    page.click(f"#tab-{name}")


def ms(ns) -> str:
    return f"{ns / 1e6:,.3f}"


def result(dashboard, role: str, rank: int | None = None):
    _, catalog, roles = dashboard
    if role not in roles:
        pytest.skip(f"no {role} trace here")
    lt, analysis = catalog.sources[roles[role]].pick(rank)
    return lt.trace, analysis  # the parsed trace: what the tests count the dashboard's figures against


def _decode(v):
    """plotly sends numpy arrays as ``{"dtype", "bdata"}`` (base64): turn those back into lists."""
    if isinstance(v, dict) and set(v) >= {"dtype", "bdata"}:
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = [int(n) for n in str(v["shape"]).split(",")] if "shape" in v else [-1]
        return arr.reshape(shape).tolist()
    if isinstance(v, dict):
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


def plot_data(page, graph_id: str, what: str = "data"):
    """The traces (or the layout) a plotly graph in the page holds (what the browser received)."""
    page.wait_for_selector(f"#{graph_id} .js-plotly-plot", timeout=TIMEOUT)
    return _decode(page.evaluate(
        "([id, what]) => { const g = document.querySelector('#' + id + ' .js-plotly-plot'); "
        "return g && g[what] ? JSON.parse(JSON.stringify(g[what], "
        "(k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v)) : null; }",
        [graph_id, what],
    ))


def query(page) -> dict:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query).items()}


@pytest.fixture(autouse=True)
def no_console_errors(page):
    yield
    assert page.errors == [], page.errors


def test_overview_chosen_trace_first_then_every_trace(page, dashboard):
    _, catalog, roles = dashboard
    trace, a = result(dashboard, "sample")
    expect_text(page, "#overview-title", catalog.sources[roles["sample"]].name)
    expect_text(page, "#overview-tiles", ms(a.steps.gpu_p90_ns))  # the chosen trace's figures first
    expect_text(page, "#overview-tiles", ms(a.syncs.total_ns))
    assert "tk-chosen" in page.get_attribute(f"#card-{roles['sample']}", "class")
    for role, i in roles.items():
        s = catalog.sources[i]
        row = f"#card-{i}"
        if role == "broken":
            from tracekit.errors import TracekitError
            from tracekit.trace import load

            with pytest.raises(TracekitError) as exc:
                load(s.path, use_cache=False)
            expect_text(page, row, str(exc.value))
            continue
        _, an = s.pick(None)
        expect_text(page, row, f"{len(an.steps.steps)}")
        if an.steps.gpu_p90_ns is not None:
            expect_text(page, row, ms(an.steps.gpu_p90_ns))
        expect_text(page, row, ms(an.syncs.total_ns))
        expect_text(page, row, ms(an.overlap.exposed_memcpy_ns))
        if role != "sample":
            assert "tk-chosen" not in (page.get_attribute(row, "class") or "")
    # tracekit explain's answer for the chosen trace: its bound, its findings, where each step goes
    from dashboards.reports import bound_text, category_name

    ex = a.explain
    expect_text(page, "#overview-bound", bound_text(ex.bound, ex.bound_share))
    if ex.findings:
        expect_text(page, "#overview-findings", ex.findings[0]["title"])
    data = {d["name"]: d for d in plot_data(page, "overview-steps")}
    assert data, "a stacked bar per step"
    for cat in {c for bd in ex.steps["breakdown"] for c in bd}:
        per_step = [bd.get(cat, 0) / 1e6 for bd in ex.steps["breakdown"]]
        if any(per_step):
            assert data[category_name(cat)]["x"] == [str(s) for s in ex.steps["step"]]
            assert np.allclose(data[category_name(cat)]["y"], per_step)
    totals = np.sum([d["y"] for d in data.values()], axis=0)  # the categories tile each step's window
    assert np.allclose(totals, ex.steps["duration_ns"].to_numpy() / 1e6)
    screenshot(page, "overview")


def test_a_truncated_trace_warns_on_its_row_in_a_banner_and_in_compare(page, dashboard):
    _, catalog, roles = dashboard
    trunc = catalog.sources[roles["truncated"]]
    trace, a = result(dashboard, "truncated")
    assert a.warnings and "truncated" in a.warnings[0]  # the loader repaired it and said so
    expect_text(page, f"#card-{roles['truncated']}", "⚠ " + a.warnings[0])  # on its row of the overview
    # the chosen (whole) trace's banner, if any, holds its own warnings (explain's on this
    # event-sampled trace), never the truncated one's
    banner = page.locator("#source-warnings")
    assert banner.count() == 0 or a.warnings[0] not in banner.inner_text()
    page.click(f"#card-{roles['truncated']} .tk-link")  # choose it by its row
    expect_text(page, "#source", trunc.name)
    expect_text(page, "#source-warnings", a.warnings[0])  # the banner above every view
    from dashboards.reports import warnings as report_warnings

    n = len(report_warnings(trunc.report(0)))  # the loader's, and explain's (the cut lost events)
    expect_text(page, "#trace-info", f"⚠ {n} warning")
    for view in ("timeline", "overlap", "memory", "overview"):
        tab(page, view)
        assert page.locator("#source-warnings").is_visible()
    # compare flags it next to whole traces
    tab(page, "compare")
    page.get_by_label(catalog.sources[roles["memory"]].name, exact=True).check()
    expect_text(page, "#compare-content", f"⚠ {trunc.name}: {a.warnings[0]}")
    bars = plot_data(page, "compare-bars")
    assert f"{trunc.name} ⚠" in bars[0]["x"]
    expect_text(page, "#compare-table thead", f"{trunc.name} ⚠")
    tab(page, "overview")
    choose_source(page, dashboard, "sample")
    from playwright.sync_api import expect

    _, sample = result(dashboard, "sample")
    if sample.warnings or sample.explain.warnings:  # explain: what this trace does not show
        expect(page.locator("#source-warnings")).not_to_contain_text(a.warnings[0],
                                                                    timeout=TIMEOUT)
    else:
        expect(page.locator("#source-warnings")).to_have_count(0, timeout=TIMEOUT)


def test_rank_selector(page, dashboard):
    _, catalog, roles = dashboard
    if "ranks" not in roles:
        pytest.skip("no two-rank trace here")
    i = roles["ranks"]
    choose_source(page, dashboard, "ranks")
    page.click("#rank")
    from playwright.sync_api import expect

    # the menu opens after the click: wait for its options (read at once, a loaded machine saw none)
    expect(page.get_by_role("dialog").get_by_role("option")).to_have_text(["0", "1"], timeout=TIMEOUT)
    page.get_by_role("dialog").get_by_role("option", name="1", exact=True).click()
    trace, a = result(dashboard, "ranks", 1)
    assert trace.rank == 1
    expect_text(page, f"#card-{i}", "rank 1 of 2")
    expect_text(page, f"#card-{i}", ms(a.steps.gpu_p90_ns))
    expect_text(page, "#overview-tiles", ms(a.steps.gpu_p90_ns))
    _, a0 = result(dashboard, "ranks", 0)
    assert ms(a.steps.gpu_p90_ns) != ms(a0.steps.gpu_p90_ns)  # the two ranks differ, so the check means something
    page.wait_for_function("() => location.search.includes('rank=1')", timeout=TIMEOUT)  # the link keeps the rank
    screenshot(page, "overview_rank1")
    choose_source(page, dashboard, "sample")


def test_ranks_side_by_side_and_a_click_opens_that_ranks_timeline(page, dashboard):
    _, catalog, roles = dashboard
    if "ranks" not in roles:
        pytest.skip("no two-rank trace here")
    s = catalog.sources[roles["ranks"]]
    from tracekit.api import job_document

    job = job_document(s.path, cache_dir=catalog._cache_dir, workers=1)["jobs"][0]  # what tracekit says of the job
    choose_source(page, dashboard, "ranks")
    tab(page, "ranks")
    st = job["stragglers"]
    expect_text(page, "#ranks-summary", f"Straggler: rank {st['rank']}")
    expect_text(page, "#ranks-summary", f"{st['caused_wait_ns'] / 1e6:,.3f} ms")
    g = job["graph"]  # the job overview from the ranks' graphs joined at their collectives
    expect_text(page, "#ranks-graph", f"What bounds the job: rank {g['bound']['rank']}'s ")
    expect_text(page, "#ranks-graph", f"job step {g['step_ns'] / 1e6:,.3f} ms")
    if g["what_ifs"]:
        expect_text(page, "#ranks-graph", "What to do first: ")
    for r in g["ranks"]:
        expect_text(page, "#ranks-graph-table", f"{r['own_ns'] / 1e6:,.3f}")
    for p in job["problems"]:  # ranks the directory lacks are said, never dropped silently
        expect_text(page, "#view-ranks", p["message"])
    heat = plot_data(page, "ranks-step-time")[0]
    wait = plot_data(page, "ranks-wait")[0]
    for r in job["steps"]:
        i, j = heat["y"].index(f"rank {r['rank']}"), heat["x"].index(str(r["step"]))
        assert heat["z"][i][j] == pytest.approx((r["gpu_ns"] or r["cpu_ns"]) / 1e6)
        assert wait["z"][i][j] == pytest.approx(r["wait_ns"] / 1e6)
    for sst in st["steps"]:  # each step's straggler marked
        i, j = heat["y"].index(f"rank {sst['straggler']}"), heat["x"].index(str(sst["step"]))
        assert heat["text"][i][j].startswith("▲")
    screenshot(page, "ranks")
    # a click on a cell: that rank's timeline at that step
    target = job["steps"][-1]
    page.evaluate("([y, x]) => window.dash_clientside.set_props({type: 'ranks-heat', figure: 'step-time'},"
                  " {clickData: {points: [{x: x, y: y}]}})",
                  [f"rank {target['rank']}", str(target["step"])])
    expect_text(page, "#timeline-step", f"step {target['step']}")
    expect_text(page, "#rank", str(target["rank"]))
    expect_text(page, "#timeline-info", f"rank {target['rank']} · window")
    page.wait_for_function("() => location.search.includes('view=timeline')", timeout=TIMEOUT)
    tab(page, "overview")
    choose_source(page, dashboard, "sample")


def test_the_ranks_view_links_each_rank_to_its_own_critical_path(page, dashboard):
    """Issue 25 item 6: a link per rank, each opening that rank's timeline (its critical path
    lane) at the job's longest step on the job's graph."""
    _, catalog, roles = dashboard
    if "ranks" not in roles:
        pytest.skip("no two-rank trace here")
    s = catalog.sources[roles["ranks"]]
    from tracekit.api import job_document

    job = job_document(s.path, cache_dir=catalog._cache_dir, workers=1)["jobs"][0]
    longest = max(job["graph"]["steps"], key=lambda x: (x["ns"], -x["step"]))["step"]
    choose_source(page, dashboard, "ranks")
    tab(page, "ranks")
    expect_text(page, "#ranks-path-links", f"at step {longest}, the job's longest on its graph")
    links = page.locator("#ranks-path-links a")
    ranks = sorted(r["rank"] for r in job["ranks"])
    assert links.all_inner_texts() == [f"rank {r}" for r in ranks]
    for r, href in zip(ranks, [a.get_attribute("href") for a in links.all()]):
        q = {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(href).query).items()}
        assert q == {"trace": s.label, "rank": str(r), "view": "timeline", "step": str(longest)}
    target = ranks[-1]
    links.nth(len(ranks) - 1).click()
    expect_text(page, "#rank", str(target))
    expect_text(page, "#timeline-step", f"step {longest}")
    expect_text(page, "#timeline-info", f"rank {target} · window")
    page.wait_for_function("r => new URLSearchParams(location.search).get('rank') === r && "
                           "new URLSearchParams(location.search).get('view') === 'timeline'",
                           arg=str(target), timeout=TIMEOUT)
    # the lane of that rank's own critical path (tracekit explain's) in that step's window
    trace, a = result(dashboard, "ranks", target)
    st = a.steps.steps.set_index("step").loc[longest]
    lo = min(int(st["cpu_start"]), int(st["gpu_start"])) if st["gpu_start"] >= 0 else int(st["cpu_start"])
    hi = max(int(st["cpu_end"]), int(st["gpu_end"]))
    path = a.explain.path
    seg = path[(path["end"] > lo) & (path["start"] < hi)]
    origin = int(trace.events["ts"].min())
    crit = next(d for d in plot_data(page, "timeline-graph") if d.get("legendgroup") == "mark-critical")
    assert len(seg) and len(crit["base"]) == len(seg)
    assert np.allclose(sorted(crit["base"]), np.sort((seg["start"].to_numpy() - origin) / 1e6))
    tab(page, "overview")
    choose_source(page, dashboard, "sample")


def _gpu_detail_bars(data: list[dict]) -> int:
    return sum(
        sum(1 for y in d["y"] if " · stream " in y)
        for d in data
        if d.get("hovertemplate", "").endswith("<extra>%{y}</extra>")  # full-detail bars (bins say "binned")
    )


def _gpu_in_window(trace, lo_ns: int, hi_ns: int) -> int:
    ev = trace.events
    gpu = ev[ev["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS])]
    start = gpu["ts"].to_numpy()
    return int(((start + gpu["dur"].to_numpy() > lo_ns) & (start < hi_ns)).sum())


def test_timeline_step_and_zoom(page, dashboard):
    trace, a = result(dashboard, "sample")
    origin = int(trace.events["ts"].min())
    steps = a.steps.steps
    tab(page, "timeline")

    def window_of(k: int) -> tuple[int, int]:
        r = steps.iloc[k]
        lo = min(int(r["cpu_start"]), int(r["gpu_start"])) if r["gpu_start"] >= 0 else int(r["cpu_start"])
        hi = max(int(r["cpu_end"]), int(r["gpu_end"]))
        return lo, hi

    for k in (0, 1):
        if k:
            choose(page, "timeline-step", f"step {steps['step'].iloc[k]}")
        lo, hi = window_of(k)
        expect_text(page, "#timeline-step", f"step {steps['step'].iloc[k]}")
        expect_text(page, "#timeline-info", f"window {(lo - origin) / 1e6:.3f}–{(hi - origin) / 1e6:.3f} ms")
        expected = _gpu_in_window(trace, lo, hi)
        expect_text(page, "#timeline-info", "drawn in full")
        data = plot_data(page, "timeline-graph")
        assert _gpu_detail_bars(data) == expected
        total_gpu = len(trace.of_kind(*GPU_ACTIVITY_KINDS))
        assert expected < total_gpu  # the rest of the trace is not sent one event at a time
        assert any(d.get("hovertemplate", "").endswith("<extra>binned</extra>") for d in data)
    page.wait_for_function("s => new URLSearchParams(location.search).get('step') === s", arg=str(steps["step"].iloc[1]),
                           timeout=TIMEOUT)  # the step is in the link too
    # colours by phase: the legend names tracekit's phases of this step's activities
    names = {d["name"] for d in data}
    assert {"forward", "backward", "communication"} <= names
    # lanes by role: the NCCL streams are named so, the main thread runs the steps
    lanes = set(plot_data(page, "timeline-graph", "layout")["yaxis"]["categoryarray"])
    nccl = {f"NCCL · stream {s}" for s in a.overlap.streams["stream"] if s in (84, 203)}
    assert nccl and nccl <= lanes, lanes
    # the thread that runs the steps is marked "main" (its Kineto name after it: "main python3 629")
    assert any(lane.startswith("main ") and "· stream" not in lane for lane in lanes), lanes
    # marks: every step's span, the positive gaps and the stalls, each where tracekit measured it
    marks = {d["name"]: d for d in data if d.get("legendgroup", "").startswith("mark-")}
    assert [round(x, 3) for x in marks["step"]["base"]] == [round((lo - origin) / 1e6, 3) for lo, _ in map(window_of, range(len(steps)))]
    stalls = a.syncs.stalls
    assert np.allclose(sorted(marks["sync stall"]["base"]), np.sort((stalls["ts"].to_numpy() - origin) / 1e6), atol=1e-6)
    g = a.gaps.gaps[a.gaps.gaps["gap_ns"] > 0]
    assert np.allclose(marks["optimizer → lookup gap"]["x"], g["gap_ns"].to_numpy() / 1e6)
    # tracekit explain's critical path of the step shown: its segments, coloured by category
    path = a.explain.path
    lo, hi = window_of(1)
    seg = path[(path["end"] > lo) & (path["start"] < hi)]
    crit = marks["critical path"]
    assert len(crit["base"]) == len(seg) and np.allclose(sorted(crit["base"]), np.sort((seg["start"].to_numpy() - origin) / 1e6))
    from dashboards.style import category_colour

    assert set(crit["marker"]["color"]) == {category_colour(c) for c in seg["category"]}
    screenshot(page, "timeline")

    # zoom to a 20 ms window inside step 2: redrawn at full detail for exactly that window
    lo, _ = window_of(1)
    a_ms, b_ms = (lo - origin) / 1e6 + 10.0, (lo - origin) / 1e6 + 30.0
    page.evaluate(
        "([a, b]) => Plotly.relayout(document.querySelector('#timeline-graph .js-plotly-plot'),"
        " {'xaxis.range[0]': a, 'xaxis.range[1]': b})",
        [a_ms, b_ms],
    )
    expect_text(page, "#timeline-info", f"window {a_ms:.3f}–{b_ms:.3f} ms")
    data = plot_data(page, "timeline-graph")
    assert _gpu_detail_bars(data) == _gpu_in_window(trace, int(a_ms * 1e6) + origin, int(b_ms * 1e6) + origin)
    screenshot(page, "timeline_zoomed")


def test_overlap(page, dashboard):
    trace, a = result(dashboard, "sample")
    ov = a.overlap
    tab(page, "overlap")
    expect_text(page, "#overlap-ratios", f"{100 * ov.comm_overlap_ratio:.1f}%")  # a ratio is a % everywhere
    expect_text(page, "#overlap-ratios", ms(ov.exposed_comm_ns))
    expect_text(page, "#overlap-ratios", ms(ov.exposed_memcpy_ns))
    heat = plot_data(page, "overlap-heatmap")[0]
    z = np.array([[np.nan if v is None else v for v in row] for row in heat["z"]], dtype=float)
    assert z.shape == (len(ov.streams), len(ov.streams))
    assert np.isnan(np.diag(z)).all()  # the diagonal (a stream with itself) is not drawn
    assert heat["zmin"] == 0 and heat["colorscale"][-1][1] == "#08306b"  # the most overlap is the darkest
    top = ov.pairs.sort_values("overlap_ns").iloc[-1]
    assert np.isclose(np.nanmax(z), top["overlap_ns"] / 1e6)
    zero_pairs = (ov.pairs["overlap_ns"] == 0).sum()
    assert (np.array(heat["text"]) == "0").sum() == 2 * zero_pairs  # a pair that never overlaps reads 0, blank
    busy = plot_data(page, "overlap-busy")[0]
    assert np.allclose(busy["x"], ov.streams["busy_ns"].to_numpy() / 1e6)
    bars = plot_data(page, "overlap-classes")
    assert np.allclose(bars[0]["y"], np.array([ov.compute_ns, ov.communication_ns, ov.memcpy_ns]) / 1e6)
    screenshot(page, "overlap")


def test_gaps(page, dashboard):
    trace, a = result(dashboard, "sample")
    g = a.gaps.gaps
    assert len(g), "the sample has an optimizer -> lookup pair"
    tab(page, "gaps")
    for gap in g["gap_ns"]:
        expect_text(page, "#gaps-table", ms(gap))
    expect_text(page, "#gaps-summary", "waited for the optimizer")
    data = {d["name"]: d for d in plot_data(page, "gaps-graph")}
    positive = g["gap_ns"].to_numpy() >= 0
    idle = np.where(positive, g["idle_ns"].to_numpy(), 0) / 1e6
    assert np.allclose(data["gap: GPU idle"]["y"], idle)  # the idle part of each gap
    assert np.allclose(np.add(data["gap: GPU idle"]["y"], data["gap: GPU busy with other work"]["y"]),
                       np.where(positive, g["gap_ns"].to_numpy(), 0) / 1e6)
    screenshot(page, "gaps")


def test_sync_stalls_table_sorts(page, dashboard):
    trace, a = result(dashboard, "sample")
    sy = a.syncs
    tab(page, "stalls")
    expect_text(page, "#stalls-total", f"{ms(sy.total_ns)} ms")
    share = sy.stalls.loc[sy.stalls["step"] >= 0, "dur_ns"].sum() / a.steps.steps["cpu_ns"].sum()
    expect_text(page, "#stalls-total", f"{100 * share:.1f}% of the steps' CPU time")
    groups = sy.stalls.groupby(["call_site", "phase"])
    counts, totals = groups.size(), groups["dur_ns"].sum()
    rows = page.locator("#stalls-table tbody tr")
    rows.first.wait_for(timeout=TIMEOUT)
    assert rows.count() == len(groups)

    def column(name: str) -> list[str]:
        return page.locator(f"#stalls-table tbody td[data-col='{name}']").all_inner_texts()

    # largest total first, each total as tracekit measured it
    assert column("total ms") == [ms(v) for v in sorted(totals, reverse=True)]
    assert "other" not in column("phase")  # no bare "other": a stall outside phases says so
    page.get_by_role("button", name=re.compile("^count")).click()  # by count, largest first
    page.wait_for_function("() => document.querySelector('#stalls-table thead').innerText.includes('count ▼')", timeout=TIMEOUT)
    assert column("count") == [f"{v:,}" for v in sorted(counts, reverse=True)]
    page.get_by_role("button", name=re.compile("^count")).click()  # again: smallest first
    page.wait_for_function("() => document.querySelector('#stalls-table thead').innerText.includes('count ▲')", timeout=TIMEOUT)
    assert column("count") == [f"{v:,}" for v in sorted(counts)]
    per_step = plot_data(page, "stalls-per-step")[0]
    assert np.allclose(per_step["y"], sy.by_step["total_ns"].to_numpy() / 1e6)
    screenshot(page, "stalls")


def test_memory_peaks_and_snapshot(page, dashboard):
    _, catalog, roles = dashboard
    trace, a = result(dashboard, "memory")
    al = a.allocator
    assert al.peak_allocated and al.peak_reserved
    choose_source(page, dashboard, "memory")
    tab(page, "memory")
    unit, scale = ("GiB", 2**30) if max(al.peak_allocated, al.peak_reserved) >= 2**30 else ("MiB", 2**20)
    for b in (al.peak_allocated, al.peak_reserved, al.unused_at_peak_reserved):  # one unit in the table ...
        expect_text(page, "#memory-peaks", f"{b / scale:,.2f} {unit}")
    layout = plot_data(page, "memory-graph", "layout")
    assert layout["yaxis"]["title"]["text"] == unit and layout["yaxis"]["rangemode"] == "tozero"  # ... and on the chart, from 0
    data = plot_data(page, "memory-graph")
    lines = {d["name"]: d for d in data if d.get("mode") == "lines"}
    assert max(lines["allocated"]["y"]) == pytest.approx(al.peak_allocated / scale)
    assert max(lines["reserved"]["y"]) == pytest.approx(al.peak_reserved / scale)
    markers = {d["name"]: d for d in data if d.get("mode") == "markers+text"}
    assert markers["peak allocated"]["y"] == [pytest.approx(al.peak_allocated / scale)]  # both peaks marked
    assert markers["peak reserved"]["y"] == [pytest.approx(al.peak_reserved / scale)]
    # the snapshot beside the trace: reserved per stream (400 MiB main, 1 GiB side stream), in GiB,
    # the default stream named as on the timeline
    expect_text(page, "#memory-snapshot-table", f"side stream (handle {SIDE_STREAM})")  # decimal, as the CLI writes it
    expect_text(page, "#memory-snapshot-table", "1.000")
    expect_text(page, "#memory-snapshot-table", f"{400 / 1024:.3f}")
    from dashboards.results import stream_names

    names = stream_names(catalog.sources[roles["memory"]].pick(None)[0])
    if (0, 7) in names:
        expect_text(page, "#memory-snapshot-table", names[(0, 7)])
    # this snapshot has no history and no address the trace allocated: the side stream cannot be told
    expect_text(page, "#memory-snapshot-table", "cannot be told (too few votes)")
    expect_text(page, "#memory-snapshot-table", "no allocation matched")
    expect_text(page, "#memory-snapshot-note", "Each such allocation is a vote")
    screenshot(page, "memory")
    # the same trace's first step on the timeline: our runtime's labels, batch copy on a side stream
    tab(page, "timeline")
    expect_text(page, "#timeline-info", f"{catalog.sources[roles['memory']].name} · rank 0 · window")
    data = plot_data(page, "timeline-graph")
    assert {"batch_copy", "forward", "backward", "optimizer"} <= {d["name"] for d in data}
    lanes = plot_data(page, "timeline-graph", "layout")["yaxis"]["categoryarray"]
    assert any(lane.startswith("main · stream") for lane in lanes) and any(lane.startswith("memcpy · stream") for lane in lanes)
    screenshot(page, "timeline_dlrm", down_to="#timeline-graph")
    tab(page, "memory")


def test_idle_time_and_kernels_are_htas(page, dashboard):
    _, catalog, roles = dashboard
    trace, a = result(dashboard, "sample")
    from tracekit.analyses import hta

    h = hta.compute(trace, catalog.rules)
    if not h.available:
        pytest.skip(h.reason)
    choose_source(page, dashboard, "sample")
    tab(page, "idle")
    t = h.temporal.iloc[0]
    expect_text(page, "#idle-summary", f"idle {t['idle_time_pctg']:.1f}%")
    data = {d["name"].split(" (")[0]: d for d in plot_data(page, "idle-streams")}
    idle = h.idle_time[h.idle_time["rank"] == trace.rank]
    host = idle[idle["idle_category"] == "host_wait"].set_index("stream")["idle_time"] / 1e3
    drawn = [x for x in data["host wait"]["x"] if x]
    assert len(data["host wait"]["y"]) == idle["stream"].nunique()  # a bar per stream HTA measured
    assert np.allclose(sorted(drawn), sorted(host[host > 0].to_numpy()))
    top = h.top_kernels.sort_values("sum (us)", ascending=False).iloc[0]
    expect_text(page, "#idle-kernels", f"{top['sum (us)'] / 1e3:,.3f}")
    for r in h.kernel_types.itertuples(index=False):
        expect_text(page, "#idle-kernel-types", r.kernel_type)
    screenshot(page, "idle")


def test_compare_a_runs_variants_against_a_chosen_baseline(page, dashboard):
    _, catalog, roles = dashboard
    fused, sparse = catalog.sources[roles["fused"]], catalog.sources[roles["sparse"]]
    # from metrics.json; FusedSparseDist's name says its preset (another run's FusedSparseDist is served too)
    assert (fused.name, sparse.name) == ("FusedSparseDist · 1 GPU · multitask_b32k", "SparseDist · 1 GPU")
    choose_source(page, dashboard, "fused")
    tab(page, "compare")
    # by default: the chosen trace's run (its variants), SparseDist (TorchRec's default) the baseline
    from playwright.sync_api import expect

    expect(page.locator("#compare-sources input:checked")).to_have_count(2, timeout=TIMEOUT)
    expect_text(page, "#compare-baseline", sparse.name)
    expect_text(page, "#compare-table thead", fused.name)
    expect_text(page, "#compare-table thead", sparse.name)
    _, fa = fused.pick(None)
    _, sa = sparse.pick(None)
    p90 = next(d for d in plot_data(page, "compare-bars") if d["hovertemplate"].endswith("<extra>GPU span P90</extra>"))
    diff = (fa.steps.gpu_p90_ns - sa.steps.gpu_p90_ns) / sa.steps.gpu_p90_ns * 100
    assert fused.name in p90["x"], p90
    i_f = p90["x"].index(fused.name)
    assert p90["text"][i_f] == f"{diff:+.1f}%"
    assert p90["marker"]["color"][i_f] == ("#2e7d32" if diff < 0 else "#c62828")  # faster: green
    assert p90["marker"]["color"][p90["x"].index(sparse.name)] == "#9aa0b0"  # the baseline: grey
    expect_text(page, "#compare-table", f"{fa.steps.gpu_p90_ns / 1e6:,.3f} ({diff:+.1f}%)")
    # the traces' names: under the lowest chart of each column only, whole inside the picture (its
    # margins are set for them: no automargin)
    page.wait_for_selector("#compare-bars .js-plotly-plot .xaxislayer-above text", state="attached", timeout=TIMEOUT)
    box = page.evaluate("""() => { const g = document.querySelector('#compare-bars .js-plotly-plot .main-svg').getBoundingClientRect();
        const t = [...document.querySelectorAll('#compare-bars .xaxislayer-above text')].map(e => e.getBoundingClientRect());
        return {n: t.length, left: Math.min(...t.map(r => r.left - g.left)), right: Math.max(...t.map(r => g.right - r.right)),
                bottom: Math.min(...t.map(r => g.bottom - r.bottom))}; }""")
    charts = len(plot_data(page, "compare-bars"))
    assert box["n"] == min(3, charts) * 2  # two traces compared, under three charts (or fewer)
    assert min(box["left"], box["right"], box["bottom"]) >= 0, box
    screenshot(page, "compare")
    # another baseline: the differences turn round
    choose(page, "compare-baseline", fused.name)
    rdiff = (sa.steps.gpu_p90_ns - fa.steps.gpu_p90_ns) / fa.steps.gpu_p90_ns * 100
    expect_text(page, "#compare-table", f"{sa.steps.gpu_p90_ns / 1e6:,.3f} ({rdiff:+.1f}%)")
    # unticking a trace removes its column
    page.get_by_label(sparse.name, exact=True).uncheck()
    expect_text(page, "#compare-content", "Choose two or more traces")
    page.get_by_label(sparse.name, exact=True).check()
    expect_text(page, "#compare-table thead", sparse.name)


VIEW_CONTENT = {  # what each view shows for a trace, which must be gone when a failed trace is chosen
    "overview": "#overview-tiles",
    "timeline": "#timeline-graph .js-plotly-plot .bars",
    "overlap": "#overlap-heatmap",
    "gaps": "#gaps-table",
    "stalls": "#stalls-table",
    "memory": "#memory-peaks",
    "idle": "#idle-streams",
}


def test_a_failed_trace_clears_every_view_of_another(page, dashboard):
    _, catalog, roles = dashboard
    broken = catalog.sources[roles["broken"]]
    choose_source(page, dashboard, "memory")
    for view, sel in VIEW_CONTENT.items():  # every view drawn for a good trace
        tab(page, view)
        page.wait_for_selector(sel, timeout=TIMEOUT)
    tab(page, "overview")
    choose_source(page, dashboard, "broken")
    expect_text(page, "#source-status", broken.error)
    assert re.search(r"truncated|JSON", broken.error)
    from playwright.sync_api import expect

    for view, sel in VIEW_CONTENT.items():
        tab(page, view)
        expect(page.locator(f"#view-{view}")).to_be_visible(timeout=TIMEOUT)
        expect(page.locator(sel)).to_have_count(0, timeout=TIMEOUT)  # nothing of the other trace
        if view != "overview":
            expect_text(page, f"#view-{view}", "could not be loaded")
        if view == "timeline":  # no step, no window line of the other trace
            expect(page.locator("#timeline-info")).to_have_count(0, timeout=TIMEOUT)
            expect(page.locator("#timeline-step")).to_have_count(0, timeout=TIMEOUT)
    expect(page.locator("#trace-info")).to_have_text("", timeout=TIMEOUT)
    screenshot(page, "failed")
    tab(page, "overview")
    choose_source(page, dashboard, "sample")
    # no error of the broken trace left (the sample's own warnings, explain's, may stand)
    expect(page.locator("#source-status")).not_to_contain_text(broken.error, timeout=TIMEOUT)
    expect_text(page, "#overview-tiles", "step time P90")


def test_a_link_opens_the_same_trace_rank_and_view(browser, dashboard):
    url, catalog, roles = dashboard
    if "ranks" not in roles:
        pytest.skip("no two-rank trace here")
    s = catalog.sources[roles["ranks"]]
    ctx = browser.new_context(viewport=VIEWPORT)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        pg.goto(f"{url}?{urllib.parse.urlencode({'trace': s.label, 'rank': 1, 'view': 'stalls'})}")
        expect_text(pg, "#source", s.name)
        expect_text(pg, "#rank", "1")
        expect_text(pg, "#stalls-total", "Total stall time")
        _, a = s.pick(1)
        expect_text(pg, "#stalls-total", ms(a.syncs.total_ns))
        pg.click("#tab-overlap")  # the link follows what is shown
        pg.wait_for_function("() => location.search.includes('view=overlap')", timeout=TIMEOUT)
        assert query(pg) == {"trace": s.label, "rank": "1", "view": "overlap"}
        assert errors == []  # (a link naming no served trace: test_browser_glance)
    finally:
        ctx.close()


def test_overview_shows_the_findings_and_where_each_step_goes(page, dashboard):
    """With tracekit explain's section in a report (hand-made here, see test_names_results.EXPLAIN):
    the bound, the findings best saving first, a stacked bar per step."""
    from tests.dashboards.test_names_results import EXPLAIN

    _, catalog, roles = dashboard
    s = catalog.sources[roles["memory"]]
    saved = s.reports
    s.reports = tuple({**r, "explain": EXPLAIN} for r in saved)
    try:
        tab(page, "overview")
        choose_source(page, dashboard, "memory")
        expect_text(page, "#overview-bound", "host-bound (72.0% of the critical path)")
        findings = page.locator("#overview-findings .tk-finding")
        findings.first.wait_for(timeout=TIMEOUT)
        texts = findings.all_inner_texts()
        assert "the lookup waits for the optimizer" in texts[0] and "5.000 ms (50.0% of the step)" in texts[0]
        assert "fix: FusedSparseDist" in texts[0]
        data = {d["name"]: d for d in plot_data(page, "overview-steps")}
        assert data["host (dispatch, launch)"]["y"] == [7.0, 3.0]
        assert data["backward"]["y"] == [1.0, 5.0] and data["custom"]["y"] == [0.0, 1.0]
        assert "zero_grad" not in data  # a category no step has is not drawn
    finally:
        s.reports = saved
        choose_source(page, dashboard, "sample")


def test_embedding_bandwidth(page, dashboard):
    """The GPU-made DLRM trace (record_shapes): its torch embedding_bag lookups' GB/s against the
    H200's peak, the finding, a bar per kernel."""
    trace, a = result(dashboard, "memory")
    e = a.embedding_bw
    assert len(e.by_kernel) and e.findings
    choose_source(page, dashboard, "memory")
    tab(page, "embedding")
    expect_text(page, "#embedding-summary", "NVIDIA H200: peak 4,800 GB/s")
    expect_text(page, "#embedding-findings", e.findings[0].title)
    expect_text(page, "#embedding-table", "aten::_embedding_bag")
    data = plot_data(page, "embedding-kernels")
    assert [d["name"] for d in data] == ["forward"]
    assert np.allclose(data[0]["x"], e.by_kernel["gbps"].to_numpy(), rtol=1e-6)
