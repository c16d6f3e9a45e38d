"""Issue 26's points 1-7, each in headless Chromium: every view and table right at a glance.

Each test opens its own page on a link (``?trace=...&view=...``), so they do not depend on one
another; expected figures come from tracekit's results (the ``Analysis`` objects, the report
objects, the CLI's text), never from the dashboard's own tables.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest

from tests.dashboards.conftest import SIDE_STREAM, VIEWPORT, screenshot
from tests.dashboards.test_browser import TIMEOUT, expect_text, plot_data, result

pytestmark = pytest.mark.browser


@contextlib.contextmanager
def opened(browser, url: str):
    """A page of its own on ``url``; every console error, page error and 5xx answer fails the test."""
    ctx = browser.new_context(viewport=VIEWPORT)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    pg.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    try:
        pg.goto(url)
        yield pg
        assert errors == [], errors
    finally:
        ctx.close()


def link(dashboard, role: str, view: str, **more) -> str:
    url, catalog, roles = dashboard
    if role not in roles:
        pytest.skip(f"no {role} trace here")
    return f"{url}?{urllib.parse.urlencode({'trace': catalog.sources[roles[role]].label, 'view': view, **more})}"


# ---- 1. the timeline: each lane holds only its own marks ------------------------------------------

MARK_LANE = {"step": "steps", "critical path": "critical path", "optimizer → lookup gap": "optimizer → lookup gap",
             "sync stall": "sync stalls"}
"""The timeline's marks (by legend name) and the lane each must sit in."""


@pytest.mark.parametrize("role, step", [("sparse", 8), ("sample", None)])
def test_timeline_each_lane_holds_only_its_own_marks(browser, dashboard, role, step):
    trace, a = result(dashboard, role)
    more = {"step": step} if step is not None else {}
    with opened(browser, link(dashboard, role, "timeline", **more)) as pg:
        expect_text(pg, "#timeline-info", "window")
        if step is not None:
            expect_text(pg, "#timeline-step", f"step {step}")
        data = plot_data(pg, "timeline-graph")
        lanes = plot_data(pg, "timeline-graph", "layout")["yaxis"]["categoryarray"]
        assert set(MARK_LANE.values()) <= set(lanes)  # every lane of marks drawn, an empty one too
        marks = {d["name"]: d for d in data if d.get("legendgroup", "").startswith("mark-")
                 and d["y"] != [None]}  # (legend entries of the critical path's categories draw nothing)
        assert {"step", "critical path"} <= set(marks)
        for name, d in marks.items():
            assert set(d["y"]) == {MARK_LANE[name]}, (name, set(d["y"]))
        # and nothing else sits in those lanes (the threads' and streams' bars keep to theirs)
        others = [y for d in data if not d.get("legendgroup", "").startswith("mark-") and d.get("name") != "lanes"
                  for y in d["y"]]
        assert not set(others) & set(MARK_LANE.values())
        if role == "sample":  # the sample has stalls and positive gaps: they are where tracekit measured them
            origin = int(trace.events["ts"].min())
            assert np.allclose(sorted(marks["sync stall"]["base"]), np.sort((a.syncs.stalls["ts"].to_numpy() - origin) / 1e6))
            g = a.gaps.gaps[a.gaps.gaps["gap_ns"] > 0]
            assert np.allclose(marks["optimizer → lookup gap"]["x"], g["gap_ns"].to_numpy() / 1e6)
            screenshot(pg, "glance_timeline_lanes")


# ---- 2. the Gaps view: the chart and the table show the same figure ---------------------------------

def test_gaps_chart_and_table_show_the_same_figure(browser, dashboard):
    _, catalog, roles = dashboard
    with opened(browser, link(dashboard, "fused", "gaps")) as pg:
        fused, sparse = catalog.sources[roles["fused"]], catalog.sources[roles["sparse"]]
        rep = fused.report(None)
        gaps = [g["gap_ns"] / 1e6 for g in rep["gaps"]["gaps"]]
        assert any(g < 0 for g in gaps), "FusedSparseDist's lookup starts before the optimizer ends"
        # the table: each step's signed gap
        pg.wait_for_selector("#gaps-table tbody tr", timeout=TIMEOUT)
        for g in gaps:
            expect_text(pg, "#gaps-table", f"{g:,.3f}")
        # the per-step chart: its stacked parts add up to the table's figure, and say it
        per_step = plot_data(pg, "gaps-graph")
        assert np.allclose(np.sum([d["y"] for d in per_step], axis=0), gaps)
        notes = [a["text"] for a in plot_data(pg, "gaps-graph", "layout")["annotations"]]
        assert notes == [f"{g:+,.3f} ms" for g in gaps]
        # the run's chart: per trace, the mean gap the overview and compare write (the headline's)
        variants = plot_data(pg, "gaps-variants")
        names = variants[0]["y"]
        totals = dict(zip(names, np.sum([d["x"] for d in variants], axis=0)))
        for s in (fused, sparse):
            mean = s.report(None)["headline"]["mean_gap_ns"] / 1e6
            assert totals[s.name] == pytest.approx(mean, abs=1e-6), s.name
            texts = [a["text"] for a in plot_data(pg, "gaps-variants", "layout")["annotations"]]
            assert f"{mean:+,.3f} ms" in texts
        expect_text(pg, "#gaps-summary", f"Mean gap over {len(gaps)} step(s): {np.mean(gaps):,.3f} ms")
        screenshot(pg, "glance_gaps")


# ---- 3. the CLI and the dashboard give the findings in one order ------------------------------------

@pytest.mark.parametrize("role", ["sparse", "sample"])
def test_findings_in_the_clis_order(browser, dashboard, role):
    from tracekit.report import render_rank

    _, catalog, roles = dashboard
    if role not in roles:
        pytest.skip(f"no {role} trace here")
    rep = catalog.sources[roles[role]].report(None)
    findings = rep["explain"]["findings"]
    assert len(findings) >= 2
    cli = re.findall(r"^  \d+\. (.+?): (?:saves|memory|predicted|no prediction)", render_rank(rep), re.M)
    assert cli[:len(findings)] == [f["title"] for f in findings]
    helps = [f.get("helps", True) for f in findings]
    assert helps == sorted(helps, reverse=True)  # what would not help comes last
    with opened(browser, link(dashboard, role, "overview")) as pg:
        heads = pg.locator("#overview-findings .tk-finding-head b")
        heads.first.wait_for(timeout=TIMEOUT)
        assert heads.all_inner_texts() == [f["title"] for f in findings]


# ---- 4. a link names a trace by what the page shows; a wrong one says so; names are unique ----------

def test_a_link_to_a_trace_not_served_says_so(browser, dashboard):
    url, catalog, roles = dashboard
    with opened(browser, f"{url}?trace=%2Fetc%2Fpasswd&view=memory") as pg:
        expect_text(pg, "#unknown-trace", "No trace '/etc/passwd' is served here")
        from playwright.sync_api import expect

        expect(pg.locator("#memory-peaks")).to_have_count(0)  # nothing of another trace
        expect(pg.locator("#trace-info")).to_have_text("")
        items = pg.locator("#served-traces li")
        expect(items).to_have_count(len(catalog.sources), timeout=TIMEOUT)
        # each a link to the same view of that trace
        items.nth(roles["memory"]).locator("a").click()
        expect_text(pg, "#source", catalog.sources[roles["memory"]].name)
        pg.wait_for_selector("#memory-peaks", timeout=TIMEOUT)
        assert pg.locator("#unknown-trace").count() == 0
    # a source's name (as the page shows it) works as well as its label; a path is never one
    s = catalog.sources[roles["fused"]]
    for name in (s.name,):
        with opened(browser, f"{url}?{urllib.parse.urlencode({'trace': name, 'view': 'gaps'})}") as pg:
            expect_text(pg, "#source", s.name)
            pg.wait_for_selector("#gaps-table", timeout=TIMEOUT)


def test_every_trace_has_a_name_of_its_own(browser, dashboard):
    _, catalog, roles = dashboard
    names = [s.name for s in catalog.sources]
    assert len(set(names)) == len(names), names
    fused, other = catalog.sources[roles["fused"]], catalog.sources[roles["fused_b4k"]]
    assert fused.name.startswith("FusedSparseDist · 1 GPU") and other.name.startswith("FusedSparseDist · 1 GPU")
    assert other.name.endswith("multitask_b4k") and fused.name.endswith("multitask_b32k")  # the runs' presets
    with opened(browser, link(dashboard, "fused", "compare")) as pg:
        pg.wait_for_selector("#compare-sources label", timeout=TIMEOUT)
        shown = pg.locator("#compare-sources label").all_inner_texts()
        assert sorted(t.strip() for t in shown) == sorted(names)
        pg.click("#source")
        options = pg.get_by_role("dialog").get_by_role("option").all_inner_texts()
        assert len(options) == len(set(options)) == len(catalog.sources)


# ---- 6. the memory snapshot's table adds up; a stream handle is written one way everywhere -----------

def test_memory_snapshot_table_adds_up(browser, dashboard):
    _, catalog, roles = dashboard
    trace, a = result(dashboard, "memory")
    st = a.snapshot.streams
    assert st["pending_free"].sum() > 0, "the fixture's side stream has bytes pending free"
    with opened(browser, link(dashboard, "memory", "memory")) as pg:
        table = pg.locator("#memory-snapshot-table")
        table.locator("tbody tr").first.wait_for(timeout=TIMEOUT)
        head = table.locator("thead th").all_inner_texts()
        rows = [r.locator("td").all_inner_texts() for r in table.locator("tbody tr").all()]
        col = {h: i for i, h in enumerate(head)}
        unit = next(h.split()[-1] for h in head if h.startswith("reserved "))
        parts = [f"{p} {unit}" for p in ("allocated", "pending free", "free")]
        assert set(parts) <= set(col), head
        scale = 2**30 if unit == "GiB" else 2**20
        for row, rec in zip(rows, st.itertuples(index=False)):
            reserved = float(row[col[f"reserved {unit}"]].replace(",", ""))
            assert reserved == pytest.approx(sum(float(row[col[p]].replace(",", "")) for p in parts), abs=2e-3)
            assert reserved == pytest.approx(rec.reserved / scale, abs=1e-3)
        # the handle as `tracekit analyze` prints it (decimal) and not in hex
        from tracekit.report import render_rank

        assert f" {SIDE_STREAM} " in render_rank(catalog.sources[roles["memory"]].report(None))
        expect_text(pg, "#memory-snapshot-table", f"side stream (handle {SIDE_STREAM})")
        assert hex(SIDE_STREAM) not in table.inner_text()
        screenshot(pg, "glance_memory")


# ---- 7. the first page never fails: no answer before the app can serve it ---------------------------

def test_requests_wait_until_the_app_is_ready(dashboard):
    """The gate itself: while the app's imports run, its JSON requests are held, then answered."""
    from dashboards.app import create_app
    from dashboards.server import Server

    _, catalog, _ = dashboard
    ready = threading.Event()
    server = Server(create_app(catalog), port=0, ready=ready).start()
    try:
        got: dict = {}

        def ask():
            with urllib.request.urlopen(server.url + "_dash-layout", timeout=30) as r:
                got["status"] = r.status

        t = threading.Thread(target=ask)
        t.start()
        with urllib.request.urlopen(server.url, timeout=30) as r:  # the page itself is served at once
            assert r.status == 200
        t.join(0.5)
        assert t.is_alive() and not got, "answered before the app was ready"
        ready.set()
        t.join(30)
        assert got == {"status": 200}
    finally:
        server.shutdown()


def test_a_page_opened_as_soon_as_the_dashboard_answers_is_drawn(browser, dashboard_sources, tmp_path):
    """``tracekit dashboard`` in a process of its own (its imports cold), the page opened the moment
    the URL is printed, three times: the overview is drawn, no request fails."""
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", "from tracekit.cli import main; main()", "dashboard",
                                 dashboard_sources["fused"], "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            line = proc.stdout.readline()
            url = line[line.index("http://"):].split()[0]
            t0 = time.perf_counter()
            with opened(browser, url) as pg:
                expect_text(pg, "#overview-tiles", "step time P90")
                pg.wait_for_selector("#overview-steps .js-plotly-plot", timeout=TIMEOUT)
            assert time.perf_counter() - t0 < TIMEOUT / 1e3
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=20)
        assert "Traceback" not in err and "Exception" not in err, err
