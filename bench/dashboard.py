"""Dashboard speed: time to an interactive first page, and the time of each callback.

    python -m bench.dashboard [PATH...] [--repeat 3]

PATHs default to the bundled ``sample_traces/`` (what ``tracekit dashboard`` serves with no
argument). Runs in three parts, each printed as a table:

1. warm the caches: analyse every path once, as an earlier ``tracekit analyze`` would have;
2. start: launch ``tracekit dashboard PATH... --port 0`` as a new process and, in headless
   Chromium (launched beforehand, not counted), time from the launch to the URL being printed,
   to the first content (the chosen trace's figures on the overview; with the server process's
   CPU seconds by then), to every trace's row of the overview, to the step chart drawn and to a
   first tab click answered; where the time goes: the frame that first showed the figures, read
   in the page (``painted``: from its navigation start, which Playwright's wait sees later), the
   server's CPU seconds when it printed the URL (its imports: Dash's, Flask's, tracekit's) and the
   CPU seconds Chromium's processes used from the launch to the first content;
3. callbacks: in-process server, after its background load of every trace (``Catalog.prefetch``,
   timed); for each control a person uses (tabs, trace, rank, step, zoom, sort, compare
   baseline), the server-side time of the callback it triggers (max over ``--repeat`` rounds)
   and the browser's time from the click to the view showing its new content.

``--baseline DIR``: only the start, each round run twice, with this checkout's code and with the
checkout DIR's (a ``git worktree`` of main, say), interleaved; printed: both tables and per round
the ratios of the first content and of the server process's CPU seconds by then (the figure a
loaded machine moves least). The issue's 20 traces: the 11 of ``sample_traces/issue5`` and the 9
of ``sample_traces/pipelines_1gpu``, named as PATHs.

``--screenshots DIR`` also writes every view at 1600x1000 (the README's pictures, ``docs/``),
reduced to 128 colours when Pillow is installed, and ``DIR/dashboard-figures.json``: what each
picture shows (its SHA-256, trace and the text of its figures), which
``tests/dashboards/test_screenshots.py`` recomputes from the bundled traces
(``--only-screenshots``: those alone, nothing timed). ``--tables TRACE``: only the operators and
kernels views' tables of one (large) trace, its parse cache warm (issue 26: at most 2 s for a
780 MB trace).
The machine's load average is printed before and after: on a shared machine the absolute times
move with it, so read the spread over the rounds.

Needs Debian's ``/usr/bin/chromium`` and Playwright for Python (as the browser tests).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.dashboards.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT  # launched as the browser tests launch it

CLI = [sys.executable, "-c", "from tracekit.cli import main; main()"]
TIMEOUT = 60_000


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(c) for c in r] for r in [headers, *rows]]
    w = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))  # noqa: E731
    return "\n".join([line(cells[0]), "  ".join("-" * x for x in w), *map(line, cells[1:])])


def warm(paths: list[str], cache: str) -> list[list]:
    rows = []
    for p in paths:
        t0 = time.perf_counter()
        r = subprocess.run([*CLI, "analyze", p, "--no-hta"], capture_output=True, text=True,
                           env={**os.environ, "TRACEKIT_CACHE_DIR": cache})
        rows.append([Path(p).name, f"{time.perf_counter() - t0:.2f}", "ok" if r.returncode == 0 else r.stderr.strip()[:60]])
    return rows


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux: /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PAINTED = """(() => { const seen = new MutationObserver(() => {
    if (!window.__tkContent && document.querySelector('#overview-tiles .tk-tile-v')) {
      window.__tkContent = performance.now(); seen.disconnect();
      requestAnimationFrame(() => { window.__tkPainted = performance.now(); });
    } });
  document.addEventListener('DOMContentLoaded', () => seen.observe(document.body, {childList: true, subtree: true})); })()"""
"""Put in the page before it loads: the time (ms from navigation) of the frame that first shows
the chosen trace's figures, read in the page itself (Playwright's wait sees it later, by its
polling and the round trip to this process: 0.1-0.6 s more on a loaded machine)."""


def _browser_cpu_s() -> float:
    """CPU seconds used so far by the Chromium processes this process started (Playwright's)."""
    import psutil

    total = 0.0
    for c in psutil.Process().children(recursive=True):
        try:
            if "chrom" in c.name():
                t = c.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


def start(browser, paths: list[str], cache: str, repeat: int, tree: str | None = None) -> list[list]:
    """``repeat`` starts of ``tracekit dashboard``; ``tree``: run another checkout's code (its
    directory: the process starts there, with it first on ``PYTHONPATH``)."""
    rows = []
    env = {**os.environ, "TRACEKIT_CACHE_DIR": cache}
    if tree is not None:
        env["PYTHONPATH"] = tree
        paths = [os.path.abspath(p) for p in paths]
    for _ in range(repeat):
        page = browser.new_page(viewport=VIEWPORT)
        page.add_init_script(PAINTED)
        browser_cpu = _browser_cpu_s()
        t0 = time.perf_counter()
        proc = subprocess.Popen([*CLI, "dashboard", *paths, "--port", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
        try:
            line = proc.stdout.readline()
            t_url = time.perf_counter() - t0
            cpu_url = _cpu_s(proc.pid)
            url = line[line.index("http://"):].split()[0]
            marks: dict[str, float] = {}

            def seen(resp) -> None:  # when the browser had the layout, and the first view's answer
                for key in ("_dash-layout", "_dash-update-component"):
                    if key in resp.url and key not in marks:
                        marks[key] = time.perf_counter() - t0

            page.on("response", seen)
            t_nav = time.perf_counter() - t0
            page.goto(url)
            page.wait_for_selector("#overview-tiles .tk-tile-v", timeout=TIMEOUT)
            t_first = time.perf_counter() - t0
            cpu_first = _cpu_s(proc.pid)
            browser_cpu = _browser_cpu_s() - browser_cpu
            t_painted = t_nav + page.evaluate("() => window.__tkPainted ?? NaN") / 1e3
            page.wait_for_function("n => document.querySelectorAll('#overview-traces tbody tr').length >= n",
                                   arg=len(paths), timeout=TIMEOUT)
            t_cards = time.perf_counter() - t0
            page.wait_for_selector("#overview-steps .js-plotly-plot .main-svg .bars", timeout=TIMEOUT)
            t_chart = time.perf_counter() - t0
            page.click("#tab-gaps")  # a control answers: the next view shows up
            page.wait_for_selector("#view-gaps > *", timeout=TIMEOUT)
            t_tab = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            page.close()
        rows.append([f"{t_url:.2f}", f"{marks.get('_dash-layout', float('nan')):.2f}",
                     f"{marks.get('_dash-update-component', float('nan')):.2f}", f"{t_first:.2f}", f"{cpu_first:.2f}",
                     f"{t_cards:.2f}", f"{t_chart:.2f}", f"{t_tab:.2f}", f"{t_painted:.2f}", f"{cpu_url:.2f}",
                     f"{browser_cpu:.2f}"])
    return rows


START_HEADERS = ["URL printed", "layout in", "1st answer in", "first content", "server CPU s", "every row", "chart drawn",
                 "tab answered", "painted", "server CPU at URL", "Chromium CPU s"]


def start_against(browser, paths: list[str], cache: str, repeat: int, baseline: str) -> tuple[list[list], list[list], list[list]]:
    """``repeat`` rounds, each one start of this checkout's code and one of ``baseline``'s (the
    order alternating); the rows of each, and per round the ratios this / baseline of the first
    content and of the server's CPU seconds by then."""
    here, base, ratios = [], [], []
    for i in range(repeat):
        order = [(None, here), (baseline, base)]
        for tree, rows in (order if i % 2 == 0 else order[::-1]):
            rows.extend(start(browser, paths, cache, 1, tree))
        ratios.append([str(i + 1), f"{float(here[-1][3]) / float(base[-1][3]):.2f}", f"{float(here[-1][4]) / float(base[-1][4]):.2f}"])
    return here, base, ratios


SCRIPT_KINDS = (("plotly.js", "plotly"), ("Dash's renderer", "dash_renderer"), ("React", "react"))
"""Where a click's JavaScript time is counted (``--profile``): by the script's URL."""


def _profile_split(profile: dict) -> dict[str, float]:
    """A V8 CPU profile (CDP ``Profiler.stop``) as ms per script kind (``SCRIPT_KINDS``, other
    scripts, and V8's own entries: ``(program)``, the browser's native work such as style, layout
    and paint; ``(garbage collector)``; ``(idle)``), plus the three plotly.js functions with the
    most self time."""
    nodes = {n["id"]: n["callFrame"] for n in profile["nodes"]}
    self_us: dict[int, float] = {}
    for node, dt in zip(profile.get("samples", []), profile.get("timeDeltas", [])):
        self_us[node] = self_us.get(node, 0.0) + dt
    kinds: dict[str, float] = {}
    plotly_fns: dict[str, float] = {}
    for node, us in self_us.items():
        frame = nodes[node]
        url, fn = frame.get("url", ""), frame.get("functionName", "")
        if not url and fn.startswith("("):
            kind = fn
        else:
            kind = next((k for k, key in SCRIPT_KINDS if key in url), "other scripts")
        kinds[kind] = kinds.get(kind, 0.0) + us / 1e3
        if kind == "plotly.js":
            plotly_fns[fn or "(anonymous)"] = plotly_fns.get(fn or "(anonymous)", 0.0) + us / 1e3
    top = sorted(plotly_fns.items(), key=lambda kv: -kv[1])[:3]
    kinds["top plotly.js"] = ", ".join(f"{f} {ms:.0f}" for f, ms in top)  # type: ignore[assignment]
    return kinds


def _figure_counts(answer) -> list[str]:
    """Each plotly figure in a callback's answer (any ``{"data": [...], "layout": {...}}``) as
    ``traces/points/shapes`` (points: the longest of x, y, z of each trace, summed)."""
    out: list[str] = []

    def walk(v) -> None:
        if isinstance(v, dict):
            if isinstance(v.get("data"), list) and isinstance(v.get("layout"), dict):
                pts = sum(max((len(t[k]) for k in ("x", "y", "z") if isinstance(t.get(k), list)), default=0)
                          for t in v["data"] if isinstance(t, dict))
                out.append(f"{len(v['data'])}/{pts}/{len(v['layout'].get('shapes') or [])}")
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(answer)
    return out


PROFILE_HEADERS = ["interaction", "browser ms", "answer KiB", "figures (traces/points/shapes)", "plotly.js",
                   "Dash's renderer", "React", "other scripts", "(program)", "(garbage collector)", "(idle)", "top plotly.js (ms)"]


def callbacks(browser, paths: list[str], cache: str, repeat: int, profile: bool = False):
    """Clicks timed (module docstring, part 3); with ``profile``, the last round's clicks also
    profiled: per click its answers' size, the figures in them and where the page's JavaScript
    time went (``_profile_split``), as rows of ``PROFILE_HEADERS`` (the third value returned)."""
    from playwright.sync_api import expect

    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    catalog = Catalog(paths, cache_dir=cache)
    app = create_app(catalog)
    server = Server(app, port=0).start()
    # as `tracekit dashboard` does: every trace loaded and analysed in the background; here waited
    # for, so that what follows times the callbacks, not the first load of a trace
    t0 = time.perf_counter()
    loading = catalog.prefetch(defer_s=0)
    loading.join()
    print(f"background load of every trace (parse cache warm; analyses, lanes, HTA's figures, the Diff view's default diffs): {time.perf_counter() - t0:.1f} s")
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(server.url)
    page.wait_for_selector("#overview-steps .js-plotly-plot", timeout=TIMEOUT)
    timings = app.tracekit_timings
    browser_ms: dict[str, list[float]] = {}
    server_ms: dict[str, list[float]] = {}

    containers = {"page": "#view", "timeline": "#view-timeline", "compare": "#compare-content", "stalls-sort": "#stalls-table-box",
                  "operators-step": "#operators-box", "diff": "#diff-content"}

    def settled(callback: str, before: int) -> None:
        """The callback ran and its part of the page is no longer loading (its answer is drawn)."""
        deadline = time.perf_counter() + TIMEOUT / 1e3
        while len(timings.get(callback, [])) <= before and time.perf_counter() < deadline:
            time.sleep(0.002)
        page.wait_for_function(
            "c => !document.querySelector(c + '[data-dash-is-loading=true], ' + c + ' [data-dash-is-loading=true]')",
            arg=containers[callback], timeout=TIMEOUT)
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")

    answers: list = []
    page.on("response", lambda r: answers.append(r) if "_dash-update-component" in r.url else None)
    cdp = None
    profiled: dict[str, list] = {}
    rounds_left = [repeat]

    def step(name: str, action, done, callback: str) -> None:
        before = len(timings.get(callback, []))
        nonlocal cdp
        on = profile and rounds_left[0] == 1
        if on and cdp is None:
            cdp = page.context.new_cdp_session(page)
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 250})
        answers.clear()
        if on:
            cdp.send("Profiler.start")
        t0 = time.perf_counter()
        action()
        done()
        settled(callback, before)
        browser_ms.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
        new = timings.get(callback, [])[before:]
        server_ms.setdefault(name, []).append(max(new, default=float("nan")) * 1e3)
        if on:
            split = _profile_split(cdp.send("Profiler.stop")["profile"])
            size, figs = 0, []
            for r in list(answers):
                try:
                    body = r.body()
                except Exception:  # an answer superseded or not finished: not counted
                    continue
                size += len(body)
                try:
                    figs += _figure_counts(json.loads(body))
                except ValueError:
                    pass
            profiled[name] = [name, f"{browser_ms[name][-1]:.0f}", f"{size / 1024:.0f}", " ".join(figs) or "-",
                              *[f"{split.get(k, 0.0):.0f}" for k in ("plotly.js", "Dash's renderer", "React", "other scripts",
                                                                      "(program)", "(garbage collector)", "(idle)")],
                              split["top plotly.js"]]

    def tab(name: str):
        return lambda: page.click(f"#tab-{name}")

    def visible(selector: str):
        return lambda: page.wait_for_selector(selector, state="visible", timeout=TIMEOUT)

    def choose(dropdown: str, label: str):
        def act():
            page.click(f"#{dropdown}")
            page.get_by_role("dialog").get_by_role("option", name=label, exact=True).click()
            # choosing the value already shown: Dash 4's dropdown left its menu open over the tabs
            # (dashboards/assets/dropdown_close.js closes it); with a checkout before that fix the
            # next tab click found the tab covered and waited until its timeout
            if page.get_by_role("dialog").count():
                page.wait_for_timeout(100)
                if page.get_by_role("dialog").count():
                    page.keyboard.press("Escape")
        return act

    def option(s) -> str:  # the trace dropdown's text for a source
        return s.name if s.name == s.label else f"{s.name} · {s.label}"

    multi = [s for s in catalog.sources if len(s.ranks) > 1]
    for round_ in range(repeat):
        rounds_left[0] = repeat - round_
        page.click("#tab-overview")
        for view, sel in [("timeline", "#timeline-graph .js-plotly-plot .main-svg"),
                          ("ranks", "#view-ranks > *"),
                          ("overlap", "#overlap-heatmap .js-plotly-plot"),
                          ("gaps", "#view-gaps > *"),
                          ("stalls", "#stalls-table-box > *"),
                          ("memory", "#view-memory > *"),
                          ("idle", "#view-idle > *"),
                          ("operators", "#operators-table td.dash-cell"),
                          ("kernels", "#kernels-table td.dash-cell"),
                          ("compare", "#compare-content > *"),
                          ("diff", "#diff-summary"),
                          ("overview", "#overview-steps .js-plotly-plot")]:
            step(f"tab {view}", tab(view), visible(sel), "page")
        # trace and rank on the overview
        first = catalog.sources[0]
        if len(catalog.sources) > 1:
            other = catalog.sources[1]
            step("choose trace (overview)", choose("source", option(other)),
                 lambda: expect(page.locator("#overview-title")).to_contain_text(other.name, timeout=TIMEOUT), "page")
            step("click a trace's row (overview)", lambda: page.click(f"#card-{first.index} .tk-link"),
                 lambda: expect(page.locator("#overview-title")).to_contain_text(first.name, timeout=TIMEOUT), "page")
        if multi:
            step("choose trace with ranks", choose("source", option(multi[0])),
                 lambda: expect(page.locator("#overview-title")).to_contain_text(multi[0].name, timeout=TIMEOUT), "page")
            step("choose rank 1 (overview)", choose("rank", str(multi[0].ranks[1])),
                 lambda: expect(page.locator(f"#card-{multi[0].index}")).to_contain_text(f"rank {multi[0].ranks[1]}", timeout=TIMEOUT),
                 "page")
        if len(catalog.sources) > 1:
            choose("source", option(first))()
            expect(page.locator("#overview-title")).to_contain_text(first.name, timeout=TIMEOUT)
        # timeline: step, zoom, whole trace
        page.click("#tab-timeline")
        expect(page.locator("#timeline-info")).to_contain_text("window", timeout=TIMEOUT)
        trace_an = catalog.sources[0].pick(None)
        steps = trace_an[1].steps.steps["step"].tolist()
        if len(steps) > 1:
            step("timeline: choose step", choose("timeline-step", f"step {steps[-1]}"),
                 lambda: expect(page.locator("#timeline-info")).to_contain_text("window", timeout=TIMEOUT), "timeline")
        info = page.inner_text("#timeline-info")
        lo = float(info.split("window ")[1].split("–")[0].replace(",", ""))
        step("timeline: zoom", lambda: page.evaluate(
            "a => Plotly.relayout(document.querySelector('#timeline-graph .js-plotly-plot'), {'xaxis.range[0]': a, 'xaxis.range[1]': a + 5})", lo),
             lambda: expect(page.locator("#timeline-info")).to_contain_text(f"window {lo:.3f}–{lo + 5:.3f}", timeout=TIMEOUT), "timeline")
        span = info.split("(trace: ")[1].split(" ms)")[0]
        step("timeline: whole trace", choose("timeline-step", "whole trace"),
             lambda: expect(page.locator("#timeline-info")).to_contain_text(f"window {span} ms (trace: {span} ms)", timeout=TIMEOUT),
             "timeline")
        # operators: one step's
        if len(steps) > 1:
            page.click("#tab-operators")
            page.wait_for_selector("#operators-table td.dash-cell", timeout=TIMEOUT)
            step("operators: choose step", choose("operators-step", f"step {steps[-1]}"),
                 lambda: expect(page.locator("#operators-summary")).to_contain_text(f"in step {steps[-1]}", timeout=TIMEOUT),
                 "operators-step")
        # stalls: sort
        page.click("#tab-stalls")
        page.wait_for_selector("#stalls-table-box > *", timeout=TIMEOUT)
        if page.locator("#stalls-table").count():
            step("stalls: sort by count", lambda: page.get_by_role("button", name="count").first.click(),
                 lambda: page.wait_for_function("() => /count [▲▼]/.test(document.querySelector('#stalls-table thead').innerText)",
                                                timeout=TIMEOUT), "stalls-sort")
            page.get_by_role("button", name=re.compile("^total ms")).first.click()  # back to the default order
        # compare: another baseline
        page.click("#tab-compare")
        page.wait_for_selector("#compare-content > *", timeout=TIMEOUT)
        page.wait_for_timeout(300)
        opts = page.locator("#compare-sources input:checked").count()
        if opts >= 2:
            page.click("#compare-baseline")
            names = page.get_by_role("dialog").get_by_role("option").all_inner_texts()
            current = page.inner_text("#compare-baseline").strip()
            other = next(n for n in names if n.strip() != current)
            page.keyboard.press("Escape")
            step("compare: choose baseline", choose("compare-baseline", other),
                 lambda: expect(page.locator("#compare-content")).to_contain_text(f"against {other}", timeout=TIMEOUT), "compare")
    page.close()
    server.shutdown()
    every = [[k, len(v), f"{statistics.median(v) * 1e3:.0f}", f"{max(v) * 1e3:.0f}"] for k, v in sorted(timings.items())]
    return [[k, f"{max(server_ms[k]):.0f}", f"{statistics.median(browser_ms[k]):.0f}", f"{max(browser_ms[k]):.0f}"]
            for k in browser_ms], every, list(profiled.values())


SHOTS = [  # (file, view, trace: the first source whose label ends so, else the first; what to wait for)
    ("overview", "overview", "pipelines_1gpu/fused", "#overview-steps .js-plotly-plot .bars"),
    ("timeline", "timeline", "pipelines_1gpu/fused", "#timeline-graph .js-plotly-plot .bars"),
    ("ranks", "ranks", "pipelines_2gpu/fused", "#ranks-wait .js-plotly-plot .hm"),
    ("overlap", "overlap", "public/hta_sampled_rank0", "#overlap-heatmap .js-plotly-plot .hm"),
    ("gaps", "gaps", "pipelines_1gpu/sparse", "#gaps-variants .js-plotly-plot .bars"),
    ("stalls", "stalls", "issue5_delta_blocking", "#stalls-per-step .js-plotly-plot .bars"),
    ("memory", "memory", "issue5_inplace_standard", "#memory-snapshot .js-plotly-plot .bars"),
    ("idle", "idle", "public/hta_sampled_rank0", "#idle-streams .js-plotly-plot .bars"),
    ("operators", "operators", "pipelines_1gpu/fused", "#operators-table td.dash-cell"),
    ("kernels", "kernels", "pipelines_1gpu/fused", "#kernels-table td.dash-cell"),
    ("compare", "compare", "pipelines_1gpu/fused", "#compare-bars .js-plotly-plot .bars"),
    ("diff", "diff", "pipelines_1gpu/fused", "#diff-phases-graph .js-plotly-plot .bars"),
]


def _shrink(path: str) -> None:
    """Rewrite a screenshot with at most 128 colours (about half the bytes, for the README) when
    Pillow is installed; left as Chromium wrote it otherwise."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=128, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def tables(path: str, cache: str, repeat: int) -> list[list]:
    """The operators and kernels views of one (large) trace, warm, as the dashboard gets them:
    in a new process each round, the trace loaded from the parse cache (a first load, not
    timed, put it there) and analysed (``Catalog._load``: every section but HTA's), then the
    two tables computed with what the analysis derived (the catalog does it while loading),
    then both views' tables built from them (``dashboards.results`` and
    ``dashboards.views.data_table``: what a click on the tab waits for)."""
    code = """
import json, sys, time
from dashboards import results
from dashboards.views import data_table
from tracekit import api
path, cache = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
lt = api.load(path, cache_dir=cache)[0]
t1 = time.perf_counter()
lt.analysis(with_hta=False)
t2 = time.perf_counter(); c2 = time.process_time()
lt.operators(); lt.kernels()
t3 = time.perf_counter(); c3 = time.process_time()
for what in ("operators", "kernels"):  # what the two views send: their tables, over all steps
    df, _, _ = getattr(results, what)(lt, "all")
    data_table(what, df).to_plotly_json()
t4 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "analysis": t2 - t1, "tables": t3 - t2, "tables_cpu": c3 - c2, "views": t4 - t3,
                  "ops": len(lt.operators().ops), "kernel_names": len(lt.kernels().kernels),
                  "events": len(lt.trace.events)}))
"""
    import subprocess as sp

    sp.run([*CLI, "analyze", path, "--no-hta", "--format", "json"], stdout=sp.DEVNULL, check=True,
           env={**os.environ, "TRACEKIT_CACHE_DIR": cache})  # the parse cache filled (not timed)
    rows = []
    for _ in range(repeat):
        out = sp.run([sys.executable, "-c", code, path, cache], capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append([f"{r['events']:,}", f"{r['load']:.2f}", f"{r['analysis']:.2f}", f"{r['tables']:.2f}",
                     f"{r['tables_cpu']:.2f}", f"{r['views']:.3f}", f"{r['ops']:,} / {r['kernel_names']:,}", f"{os.getloadavg()[0]:.1f}"])
    return rows


SHOWN = {  # what each screenshot shows, read off the page and written beside the pictures
    "overview": ("#overview-tiles", "#overview-bound", "#overview-findings"),
    "timeline": ("#timeline-info",),
    "ranks": ("#ranks-summary",),
    "overlap": ("#overlap-ratios",),
    "gaps": ("#gaps-summary",),
    "stalls": ("#stalls-total",),
    "memory": ("#memory-peaks", "#memory-snapshot-table"),
    "idle": ("#idle-summary",),
    "operators": ("#operators-summary", "#operators-table tr:has(td.dash-cell)"),
    "kernels": ("#kernels-summary", "#kernels-table tr:has(td.dash-cell)"),
    "compare": ("#compare-table",),
    "diff": ("#diff-against", "#diff-summary"),
}
"""Per view, the page's elements whose text a screenshot's figures file records (the first
matching element's), so that tests/dashboards/test_screenshots.py can recompute them from the
bundled traces: a picture that no longer shows tracekit's figures fails it."""
FIGURES_FILE = "dashboard-figures.json"


def _relative(path: str) -> str:
    """A path as the figures file names it: relative to the repository when inside it."""
    root = Path(__file__).resolve().parents[1]
    p = Path(path).resolve()
    return p.relative_to(root).as_posix() if p.is_relative_to(root) else p.as_posix()


def screenshots(browser, paths: list[str], cache: str, out: str) -> list[list]:
    """Every view at 1600x1000 as PNG in ``out`` (what the README shows), and ``out``'s
    ``dashboard-figures.json``: per picture its file's SHA-256, the view, the trace (and the
    one compared or diffed against) and the text of the elements ``SHOWN`` names."""
    import hashlib
    import urllib.parse

    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    catalog = Catalog(paths, cache_dir=cache)
    server = Server(create_app(catalog), port=0).start()
    page = browser.new_page(viewport=VIEWPORT)
    rows, figures = [], {}
    os.makedirs(out, exist_ok=True)
    try:
        for name, view, want, sel in SHOTS:
            src = next((s for s in catalog.sources if os.path.abspath(s.path).replace(os.sep, "/").removesuffix(".json.gz")
                        .removesuffix("/trace_rank0").endswith(want)), catalog.sources[0])
            page.goto(server.url + "?" + urllib.parse.urlencode({"trace": src.label, "view": view}))
            page.wait_for_selector(sel, timeout=TIMEOUT)
            page.wait_for_timeout(500)  # plotly's transitions
            shown = {css: page.locator(css).first.inner_text() for css in SHOWN.get(view, ()) if page.locator(css).count()}
            path = os.path.join(out, f"dashboard-{name}.png")
            page.screenshot(path=path)
            _shrink(path)
            entry = {"file": os.path.basename(path), "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
                     "view": view, "trace": _relative(src.path), "name": src.name, "rank": src.ranks[0], "shown": shown}
            if view == "compare":
                entry["compared"] = [_relative(catalog.sources[int(v)].path) for v in
                                     page.locator("#compare-sources input:checked").evaluate_all("e => e.map(x => x.value)")]
            if view == "diff":
                _, default = _diff_default(catalog, src)
                ia, ra = (int(x) for x in default.split(":"))
                entry["against"] = {"trace": _relative(catalog.sources[ia].path), "rank": ra}
            figures[name] = entry
            rows.append([path, src.label, f"{os.path.getsize(path) / 1024:.0f} KiB"])
    finally:
        page.close()
        server.shutdown()
    Path(out, FIGURES_FILE).write_text(json.dumps({
        "written_by": "python -m bench.dashboard --screenshots " + out, "viewport": VIEWPORT,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shots": figures}, indent=1, ensure_ascii=False) + "\n")
    rows.append([os.path.join(out, FIGURES_FILE), "", ""])
    return rows


def _diff_default(catalog, src):
    """The trace the diff view diffs ``src`` against by default (``dashboards.views.Views``)."""
    from dashboards.views import Views

    return Views(catalog).diff_options(src.index, src.ranks[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--screenshots", metavar="DIR", help="also write every view at 1600x1000 into DIR (docs/)")
    ap.add_argument("--cache-dir", help="the caches to warm and use (default: a new temporary directory)")
    ap.add_argument("--only-screenshots", action="store_true", help="with --screenshots: write them, time nothing")
    ap.add_argument("--clicks", action="store_true", help="only the callbacks (part 3), the caches warmed first")
    ap.add_argument("--profile", action="store_true", help="also profile the last round's clicks in Chromium: where the "
                    "page's time went by script, the answers' size, the figures' traces, points and shapes")
    ap.add_argument("--baseline", metavar="DIR", help="only the start, each round also with the code of the checkout DIR "
                    "(a git worktree of main), interleaved: the ratios of the first content and of the server's CPU time")
    ap.add_argument("--tables", metavar="TRACE", help="only time the operators and kernels tables of TRACE (warm parse cache)")
    args = ap.parse_args()
    from tracekit.commands.dashboard import default_paths

    if args.tables:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"operators and kernels views of {args.tables} ({os.path.getsize(args.tables) / 1e6:.1f} MB gz), "
                  f"warm parse cache, a new process per round, seconds: loaded, analysed, both tables computed "
                  f"(the catalog's load; and the CPU seconds that took: what a loaded machine moves least), "
                  f"both views built from them (a click)")
            print(table(["events", "load (cache)", "analysis", "tables (at load)", "their CPU s", "views (click)",
                         "ops / kernel names", "load avg"], tables(args.tables, args.cache_dir or tmp, args.repeat)))
        return
    paths = args.paths or default_paths()
    if not os.path.exists(CHROMIUM):
        sys.exit(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    import platform

    print(f"{len(paths)} trace(s): {', '.join(Path(p).name for p in paths)}")
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, python {platform.python_version()}\n")
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or tmp
        print("1. warm the caches (tracekit analyze, once per trace)")
        print(table(["trace", "s", "status"], warm(paths, cache)), "\n")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            if args.only_screenshots and args.screenshots:
                print(table(["file", "trace", "size"], screenshots(browser, paths, cache, args.screenshots)))
                browser.close()
                return
            if not args.clicks:
                print("2. start: seconds from launching `tracekit dashboard` to: the URL printed; the browser having the"
                      " layout (its scripts loaded) and the first callback's answer; the chosen trace's figures shown"
                      " (first content), and the server's CPU seconds by then; every trace's row; the step chart drawn; a first tab click answered;"
                      " the frame that first showed the figures, read in the page (painted); the server's CPU seconds at the URL; Chromium's"
                      " CPU seconds from the launch to the first content")
            print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            if args.baseline:
                here, base, ratios = start_against(browser, paths, cache, args.repeat, args.baseline)
                print(f"this checkout ({os.getcwd()}):")
                print(table(START_HEADERS, here))
                print(f"baseline ({args.baseline}), the same rounds interleaved:")
                print(table(START_HEADERS, base))
                med = [statistics.median(float(r[k]) for r in ratios) for k in (1, 2)]
                print(table(["round", "first content, this / baseline", "server CPU s, this / baseline"],
                            [*ratios, ["median", f"{med[0]:.2f}", f"{med[1]:.2f}"]]))
                print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
                browser.close()
                return
            if not args.clicks:
                print(table(START_HEADERS, start(browser, paths, cache, args.repeat)), "\n")
            print(f"load average before the callbacks: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(f"3. callbacks ({args.repeat} rounds): server-side time (max) and click-to-drawn in the browser (ms)")
            by_action, every, profiled = callbacks(browser, paths, cache, args.repeat, args.profile)
            print(table(["interaction", "server max", "browser median", "browser max"], by_action))
            print("\nevery callback that ran, server-side (ms)")
            print(table(["callback", "calls", "median", "max"], every))
            if profiled:
                print("\nthe last round's clicks profiled (Chromium's CPU profile of the page, ms of its main thread by "
                      "script; the answers' size; each figure sent: traces/points/shapes)")
                print(table(PROFILE_HEADERS, profiled))
            print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            if args.screenshots:
                print("\n4. screenshots")
                print(table(["file", "trace", "size"], screenshots(browser, paths, cache, args.screenshots)))
            browser.close()


if __name__ == "__main__":
    main()
