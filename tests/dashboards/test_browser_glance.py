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
        # every lane's name whole inside the picture (its margin is set for them: no automargin)
        names = pg.evaluate("""() => { const g = document.querySelector('#timeline-graph .js-plotly-plot .main-svg').getBoundingClientRect();
            return [...document.querySelectorAll('#timeline-graph .yaxislayer-above text')].map(e => [e.textContent, e.getBoundingClientRect().left - g.left]); }""")
        assert sorted(n for n, _ in names) == sorted(lanes) and min(x for _, x in names) >= 0, names
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

def _ask(url: str, got: dict, key: str) -> threading.Thread:
    def ask():
        with urllib.request.urlopen(url, timeout=30) as r:
            got[key] = r.status

    t = threading.Thread(target=ask)
    t.start()
    return t


def test_requests_wait_while_the_imports_run(dashboard):
    """The gate itself (``dashboards.imports.ImportGate``): while the imports run, the app's JSON
    requests are held and the page itself is served; then they are answered."""
    from dashboards.app import create_app
    from dashboards.imports import ImportGate
    from dashboards.server import Server

    _, catalog, _ = dashboard
    importing, release = threading.Event(), threading.Event()
    gate = ImportGate(lambda: (importing.set(), release.wait(30)))
    server = Server(create_app(catalog), port=0, gate=gate).start()
    try:
        got: dict = {}
        with urllib.request.urlopen(server.url + "_dash-layout", timeout=30) as r:  # before the imports: at once
            assert r.status == 200
        runner = threading.Thread(target=gate.ensure)
        runner.start()
        assert importing.wait(30)
        t = _ask(server.url + "_dash-layout", got, "layout")
        with urllib.request.urlopen(server.url, timeout=30) as r:  # the page itself is served at once
            assert r.status == 200
        t.join(0.5)
        assert t.is_alive() and not got, "answered while the imports ran"
        release.set()
        t.join(30)
        runner.join(30)
        assert got == {"layout": 200} and gate.done.is_set()
    finally:
        release.set()
        server.shutdown()


def test_the_imports_wait_for_the_requests_in_flight_and_a_request_may_run_them():
    """The imports start only when no request is in flight; a request that needs them (a view
    shown before they ran) runs them itself, stepping out of the count, so two such requests never
    wait for each other."""
    from dashboards.imports import ImportGate

    ran: list[str] = []
    gate = ImportGate(lambda: ran.append(threading.current_thread().name))
    in_request, leave = threading.Event(), threading.Event()

    def request():
        with gate.request():
            in_request.set()
            leave.wait(30)

    r = threading.Thread(target=request)
    r.start()
    assert in_request.wait(30)
    importer = threading.Thread(target=gate.ensure, name="importer")
    importer.start()
    importer.join(0.3)
    assert importer.is_alive() and not ran, "the imports ran beside a request"
    leave.set()
    importer.join(30)
    r.join(30)
    assert ran == ["importer"]

    gate = ImportGate(lambda: (ran.append(threading.current_thread().name), time.sleep(0.2)))
    both = threading.Barrier(2)

    def needs_them():
        with gate.request():
            both.wait(30)  # both requests in flight before either asks for the imports
            gate.ensure()

    ts = [threading.Thread(target=needs_them, name=f"request{i}") for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts), "two requests needing the imports waited for each other"
    assert len(ran) == 2 and ran[1] in ("request0", "request1") and gate.done.is_set()


def test_the_first_page_is_answered_without_numpy_or_pandas(dashboard_sources, tmp_path):
    """The overview of a trace analysed before (report cache warm) needs neither numpy nor pandas:
    they are imported after it (``Catalog.prefetch``), not while the browser loads the page."""
    cache = tmp_path / "cache"
    cli = [sys.executable, "-c", "from tracekit.cli import main; main()"]
    warm = subprocess.run([*cli, "analyze", dashboard_sources["fused"], "--no-hta", "--cache-dir", str(cache)],
                          capture_output=True, text=True, timeout=120)
    assert warm.returncode == 0, warm.stderr
    code = f"""
import sys
from dashboards.app import create_app
from dashboards.catalog import Catalog
from dashboards.server import Server
import urllib.request, json
catalog = Catalog([{dashboard_sources["fused"]!r}], cache_dir={str(cache)!r})
server = Server(create_app(catalog), port=0).start()
layout = urllib.request.urlopen(server.url + "_dash-layout").read()
body = {{"output": "..url.search...source.value...rank.options...rank.value...rank.disabled...tabs.value...source-status.children...trace-info.children...view.children..",
        "outputs": [{{"id": i, "property": p}} for i, p in [("url", "search"), ("source", "value"), ("rank", "options"),
                    ("rank", "value"), ("rank", "disabled"), ("tabs", "value"), ("source-status", "children"),
                    ("trace-info", "children"), ("view", "children")]],
        "inputs": [{{"id": "url", "property": "search", "value": ""}}, {{"id": "source", "property": "value", "value": 0}},
                   {{"id": "rank", "property": "value", "value": None}}, {{"id": "tabs", "property": "value", "value": "overview"}},
                   [], []],
        "changedPropIds": [], "state": [{{"id": "rank", "property": "options"}}, {{"id": "rank", "property": "disabled"}}]}}
req = urllib.request.Request(server.url + "_dash-update-component", data=json.dumps(body).encode(),
                             headers={{"Content-Type": "application/json"}})
page = urllib.request.urlopen(req).read().decode()
server.shutdown()
print("overview-tiles" in page, "step time P90" in page, sorted({{m.split(".")[0] for m in sys.modules}} & {{"numpy", "pandas"}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "[]"], out.stdout


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


# ---- 11, 12. operators and kernels: every op / kernel, sortable, searchable, by step ----------------

def _table(pg, table_id: str) -> tuple[list[str], list[list[str]]]:
    """The heads and the rows of the page a DataTable shows."""
    t = pg.locator(f"#{table_id}")
    t.locator("tr td").first.wait_for(timeout=TIMEOUT)
    heads = [h.strip() for h in t.locator("th.dash-header span.column-header-name").all_inner_texts()]
    rows = [[c.strip() for c in r.locator("td").all_inner_texts()] for r in t.locator("tr:has(td.dash-cell)").all()]
    return heads, rows


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_operators_every_op_sortable_searchable_by_step(browser, dashboard):
    trace, a = result(dashboard, "sparse")
    _, catalog, roles = dashboard
    lt, _ = catalog.sources[roles["sparse"]].pick(None)
    from tracekit.analyses import operators

    ops = operators.compute(lt.trace, lt.rules)  # what tracekit says, computed here
    with opened(browser, link(dashboard, "sparse", "operators")) as pg:
        expect_text(pg, "#operators-summary", f"{len(ops.ops):,} ops over all steps")
        heads, rows = _table(pg, "operators-table")
        assert heads[:2] == ["op", "kind"] and "GPU total ms" in heads and "CPU self ms" in heads
        col = {h: i for i, h in enumerate(heads)}
        # sorted by GPU total, largest first: the first page is tracekit's largest
        top = ops.ops.sort_values("gpu_total_ns", ascending=False).head(len(rows))
        assert [r[col["op"]] for r in rows] == top["name"].tolist()
        for r, rec in zip(rows, top.itertuples(index=False)):
            assert _num(r[col["GPU total ms"]]) == pytest.approx(rec.gpu_total_ns / 1e6, abs=5e-4)
            assert _num(r[col["CPU self ms"]]) == pytest.approx(rec.cpu_self_ns / 1e6, abs=5e-4)
            assert int(_num(r[col["calls"]])) == rec.calls
        # sort by calls (a click on its heading: ascending first, then descending)
        pg.locator("#operators-table th.dash-header", has_text="calls").locator(".column-header--sort").click()
        pg.locator("#operators-table th.dash-header", has_text="calls").locator(".column-header--sort").click()
        pg.wait_for_function("() => true")
        _, rows = _table(pg, "operators-table")
        calls = [int(_num(r[col["calls"]])) for r in rows]
        assert calls == sorted(ops.ops["calls"], reverse=True)[:len(calls)]
        # search: the ops whose name holds "aten::mm"
        box = pg.locator("#operators-table th.dash-filter[data-dash-column='op'] input[type=text]")
        box.fill("aten::mm")
        box.press("Enter")
        pg.wait_for_function("() => document.querySelectorAll('#operators-table tr:has(td.dash-cell)').length === "
                             f"{int(ops.ops['name'].str.contains('aten::mm', regex=False).sum())}", timeout=TIMEOUT)
        # one step: that step's ops only
        step = ops.steps[-1]
        pg.click("#operators-step")
        pg.get_by_role("dialog").get_by_role("option", name=f"step {step}", exact=True).click()
        expect_text(pg, "#operators-summary", f"in step {step}")
        heads, rows = _table(pg, "operators-table")
        col = {h: i for i, h in enumerate(heads)}
        mine = ops.by_step[ops.by_step["step"] == step].sort_values("gpu_total_ns", ascending=False)
        assert rows[0][col["op"]] == mine["name"].iloc[0]
        assert _num(rows[0][col["GPU total ms"]]) == pytest.approx(mine["gpu_total_ns"].iloc[0] / 1e6, abs=5e-4)
        screenshot(pg, "glance_operators")


def test_kernels_every_kernel_with_its_launching_op(browser, dashboard):
    _, catalog, roles = dashboard
    lt, _ = catalog.sources[roles["sparse"]].pick(None)
    from tracekit.analyses import kernels

    k = kernels.compute(lt.trace, lt.rules)
    with opened(browser, link(dashboard, "sparse", "kernels")) as pg:
        names = k.kernels["name"].nunique()
        expect_text(pg, "#kernels-summary", f"{names:,} kernels, memcpys and memsets over all steps")
        expect_text(pg, "#kernels-summary", f"one row per launch configuration ({len(k.kernels):,} rows")
        assert len(k.kernels) > names  # the trace launches some kernels with several grids
        heads, rows = _table(pg, "kernels-table")
        col = {h: i for i, h in enumerate(heads)}
        assert {"kernel", "calls", "total ms", "mean ms", "max ms", "launched by", "phase", "streams", "grid", "block",
                "registers", "shared memory", "est. occupancy %", "launch configs"} <= set(heads)
        top = k.kernels.head(len(rows))  # largest total first
        assert [r[col["kernel"]] for r in rows] == top["name"].tolist()  # whole names, never cut
        for r, rec in zip(rows, top.itertuples(index=False)):
            assert _num(r[col["total ms"]]) == pytest.approx(rec.total_ns / 1e6, abs=5e-4)
            assert _num(r[col["max ms"]]) == pytest.approx(rec.max_ns / 1e6, abs=5e-4)
            assert r[col["launched by"]] == rec.launched_by
            # the launch configuration as the trace's args wrote it: "[512, 16, 1]" as 512x16x1
            assert r[col["grid"]] == rec.grid[1:-1].replace(", ", "x") and r[col["block"]] == rec.block[1:-1].replace(", ", "x")
            for head, v in (("registers", rec.registers), ("shared memory", rec.shared_memory),
                            ("est. occupancy %", rec.occupancy)):
                assert (r[col[head]] == "") if v != v else _num(r[col[head]]) == pytest.approx(v)
        assert any(r[col["grid"]] for r in rows) and any(r[col["grid"]] == "" for r in rows)  # copies: blank
        # sort by registers (two clicks: descending), then search a grid
        reg = pg.locator("#kernels-table th.dash-header", has_text="registers").locator(".column-header--sort")
        reg.click()
        reg.click()
        want = k.kernels["registers"].dropna().sort_values(ascending=False).head(3).tolist()
        pg.wait_for_function("w => { const t = document.querySelector('#kernels-table'); return t && "
                             "t.querySelectorAll('tr:has(td.dash-cell)').length > 0; }", arg=want, timeout=TIMEOUT)
        heads, rows = _table(pg, "kernels-table")
        assert [_num(r[col["registers"]]) for r in rows[:3]] == want
        grid = k.kernels.loc[k.kernels["grid"] != "", "grid"].iloc[0][1:-1].replace(", ", "x")
        box = pg.locator("#kernels-table th.dash-filter[data-dash-column='grid'] input[type=text]")
        box.fill(grid)
        box.press("Enter")
        n = int(k.kernels["grid"].map(lambda g: grid in g[1:-1].replace(", ", "x")).sum())
        pg.wait_for_function("n => document.querySelectorAll('#kernels-table tr:has(td.dash-cell)').length === n",
                             arg=min(n, 25), timeout=TIMEOUT)
        box.fill("")
        box.press("Enter")
        # the TBE kernels were launched by the embedding ops, the HtoD copies by aten::copy_
        copies = k.kernels[k.kernels["name"].str.startswith("Memcpy HtoD")]
        assert (copies["launched_by"] == "aten::copy_").all()
        box = pg.locator("#kernels-table th.dash-filter[data-dash-column='kernel'] input[type=text]")
        box.fill("tbe::")
        box.press("Enter")
        n = int(k.kernels["name"].str.contains("tbe::", regex=False).sum())
        assert n > 0
        pg.wait_for_function("n => document.querySelectorAll('#kernels-table tr:has(td.dash-cell)').length === n",
                             arg=min(n, 25), timeout=TIMEOUT)
        screenshot(pg, "glance_kernels")


# ---- 13. diff: the chosen trace against another, or against another rank of its job ---------------

def test_diff_view_sparse_against_fused(browser, dashboard):
    _, catalog, roles = dashboard
    fused, sparse = catalog.sources[roles["fused"]], catalog.sources[roles["sparse"]]
    lt_a, _ = sparse.pick(None)
    lt_b, _ = fused.pick(None)
    d = lt_a.diff(lt_b)  # tracekit's diff, computed here
    with opened(browser, link(dashboard, "fused", "diff")) as pg:
        expect_text(pg, "#diff-against", sparse.name)  # against the run's SparseDist by default
        expect_text(pg, "#diff-summary", "lookup moved from main to side")
        for line in d.summary:
            expect_text(pg, "#diff-summary", line)
        bars = {b["name"]: b for b in plot_data(pg, "diff-phases-graph")}
        assert bars["A"]["y"] == d.phases["phase"].tolist()
        assert np.allclose(bars["A"]["x"], d.phases["a_ns"] / 1e6) and np.allclose(bars["B"]["x"], d.phases["b_ns"] / 1e6)
        heads, rows = _table(pg, "diff-streams")
        col = {h: i for i, h in enumerate(heads)}
        main_lookup = next(r for r in rows if r[col["stream"]] == "main" and r[col["phase"]] == "lookup")
        assert _num(main_lookup[col["A ms"]]) > 0 and _num(main_lookup[col["B ms"]]) == 0
        expect_text(pg, "#diff-overlaps", "lookup")
        heads, rows = _table(pg, "diff-ops")
        assert "status" in heads
        screenshot(pg, "glance_diff")


def test_diff_view_two_ranks_of_one_job(browser, dashboard):
    url, catalog, roles = dashboard
    if "ranks" not in roles:
        pytest.skip("no two-rank trace here")
    s = catalog.sources[roles["ranks"]]
    lt0, _ = s.pick(0)
    lt1, _ = s.pick(1)
    d = lt0.diff(lt1)
    with opened(browser, f"{url}?{urllib.parse.urlencode({'trace': s.label, 'rank': 1, 'view': 'diff'})}") as pg:
        expect_text(pg, "#diff-against", f"{s.name} · rank 0")  # the job's other rank by default
        heads, rows = _table(pg, "diff-kernels")
        col = {h: i for i, h in enumerate(heads)}
        top = d.kernels.iloc[0]
        first = rows[0]
        assert first[col["kernel"]] == top["name"]
        assert _num(first[col["A ms"]]) == pytest.approx(top["a_ns"] / 1e6, abs=5e-4)
        assert _num(first[col["B ms"]]) == pytest.approx(top["b_ns"] / 1e6, abs=5e-4)
        expect_text(pg, "#diff-step", f"{d.step['a'].iloc[0] / 1e6:,.3f}")
