"""One dashboard server and one headless Chromium per test session, for the browser tests.

Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright for Python; never a
downloaded browser. Without it the browser tests skip, unless ``TRACEKIT_REQUIRE_BROWSER=1``
(CI) makes that a failure.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
from pathlib import Path

import pytest

from tests.conftest import PUBLIC_TRACES as PUBLIC
from tests.conftest import REPO, TEST_DATA

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
VIEWPORT = {"width": 1600, "height": 1000}
"""The window the browser tests, the benchmark and the screenshots in docs/ use."""


def _browser_or_skip():
    require = os.environ.get("TRACEKIT_REQUIRE_BROWSER") == "1"
    missing = None
    if not os.path.exists(CHROMIUM):
        missing = f"{CHROMIUM} is not installed (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[dev]')"
    if missing:
        if require:
            pytest.fail(f"TRACEKIT_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)


def write_snapshot(path: Path, segments: list[tuple[int, ...]]) -> None:
    """A memory-snapshot pickle as ``torch.cuda.memory._snapshot()`` writes it (builtins only):
    one segment per (stream, allocated bytes, free bytes[, bytes pending free])."""
    segs, addr = [], 1 << 30
    for stream, allocated, free, *rest in segments:
        pending = rest[0] if rest else 0
        blocks = [{"address": addr, "size": allocated, "requested_size": allocated, "state": "active_allocated", "frames": []}]
        if pending:
            blocks.append({"address": addr + allocated, "size": pending, "requested_size": pending,
                           "state": "active_pending_free", "frames": []})
        blocks.append({"address": addr + allocated + pending, "size": free, "requested_size": free, "state": "inactive", "frames": []})
        segs.append({"device": 0, "address": addr, "total_size": allocated + pending + free, "allocated_size": allocated,
                     "active_size": allocated + pending, "requested_size": allocated, "stream": stream, "segment_type": "large",
                     "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks})
        addr += 1 << 31
    path.write_bytes(pickle.dumps({"segments": segs, "device_traces": [[]], "allocator_settings": {}}))


SIDE_STREAM = 94_812_345_678_912
"""A cudaStream_t as the allocator writes it."""


@pytest.fixture(scope="session")
def dashboard_sources(tmp_path_factory) -> dict[str, str]:
    """The traces the test server serves, by role: the bundled sample, a two-rank directory, a
    modern trace with [memory] events and a snapshot beside it, a legacy-schema trace, two
    variants of one runtime run (FusedSparseDist and SparseDist, with their metrics.json), a
    truncated trace (repaired with a warning) and a broken file."""
    d = tmp_path_factory.mktemp("dash_sources")
    sources = {"sample": str(REPO / "sample_traces" / "public" / "hta_sampled_rank0.json.gz")}
    if (PUBLIC / "hta_sampled_rank1.json.gz").exists():
        ranks = d / "two_ranks"
        ranks.mkdir()
        for r in (0, 1):
            shutil.copy(PUBLIC / f"hta_sampled_rank{r}.json.gz", ranks / f"rank{r}.json.gz")
        sources["ranks"] = str(ranks)
    mem = d / "dlrm_2stream_small.json.gz"
    shutil.copy(TEST_DATA / "dlrm_2stream_small.json.gz", mem)
    write_snapshot(d / "dlrm_2stream_small.pickle", [(0, 300 << 20, 100 << 20), (SIDE_STREAM, 64 << 20, 512 << 20, 448 << 20)])
    sources["memory"] = str(mem)
    if (PUBLIC / "kineto_tbplugin_resnet50.json.gz").exists():
        sources["legacy"] = str(PUBLIC / "kineto_tbplugin_resnet50.json.gz")
    for variant in ("fused", "sparse"):  # two variants of one run, with the runtime's metrics.json
        sources[variant] = str(REPO / "sample_traces" / "pipelines_1gpu" / variant / "trace_rank0.json.gz")
    # the same pipeline in another run (another preset): its variant name is the first one's
    sources["fused_b4k"] = str(REPO / "sample_traces" / "pipelines_1gpu" / "multitask_b4k" / "fused" / "trace_rank0.json.gz")
    truncated = d / "crashed_job.json"  # a crashed job's trace: cut mid-event, repaired with a warning
    text = gzip.decompress((TEST_DATA / "dlrm_2stream_small.json.gz").read_bytes())
    truncated.write_bytes(text[: int(len(text) * 0.6)])
    sources["truncated"] = str(truncated)
    broken = d / "broken.json"
    broken.write_text('{"traceEvents": [ {"ph": "X", "name": ')
    inputs = {p: p.read_bytes() for p in (broken, truncated)}
    sources["broken"] = str(broken)
    yield sources
    for p, data in inputs.items():
        assert p.read_bytes() == data, "the dashboard modified an input file"


@pytest.fixture(scope="session")
def dashboard(dashboard_sources, tmp_path_factory):
    """A running server over ``dashboard_sources`` with a warm analysis cache; yields (url, catalog, roles)."""
    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    cache = str(tmp_path_factory.mktemp("dash_cache"))
    roles = list(dashboard_sources)
    catalog = Catalog([dashboard_sources[r] for r in roles], cache_dir=cache)
    for s in catalog.sources:  # analyse once, as a user's earlier `tracekit analyze` would have
        catalog.get(s.index)
    server = Server(create_app(catalog), host="127.0.0.1", port=0).start()
    yield server.url, catalog, {r: i for i, r in enumerate(roles)}
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    _browser_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def page(browser, dashboard):
    """One page on the dashboard, with every console error and page error collected in ``page.errors``."""
    url, _, _ = dashboard
    ctx = browser.new_context(viewport=VIEWPORT)
    pg = ctx.new_page()
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("console", lambda m: pg.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(f"pageerror: {e}"))
    pg.goto(url)
    yield pg
    ctx.close()


def screenshot(page, name: str, *, down_to: str | None = None) -> Path:
    """Save the page as ``artifacts/screenshots/<name>.png`` (a test artefact, gitignored): all
    of it, or from the top down to the bottom of the element ``down_to``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # drawn
    if down_to is None:
        page.screenshot(path=str(path), full_page=True)
    else:
        box = page.locator(down_to).bounding_box()
        page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": page.viewport_size["width"],
                                              "height": box["y"] + box["height"] + 12})
    return path


@pytest.fixture(scope="module")
def two_traces(tmp_path_factory):
    """A dashboard of the 1-GPU FusedSparseDist and SparseDist traces, every view computed before the
    first request (no "Loading" round): ``(url, catalog)``, one server per test module."""
    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    traces = [REPO / "sample_traces" / "pipelines_1gpu" / v / "trace_rank0.json.gz" for v in ("fused", "sparse")]
    catalog = Catalog([str(p) for p in traces], cache_dir=str(tmp_path_factory.mktemp("two_traces_cache")))
    app = create_app(catalog)
    catalog.prefetch(defer_s=0).join()
    server = Server(app, host="127.0.0.1", port=0).start()
    yield server.url, catalog
    server.shutdown()
