"""A view that waits for its trace ("Loading", ``loading-poll``) is drawn even when answering the
poll takes longer than the poll's period (a loaded machine), and the page still answers clicks.

Its own server (its own catalog, nothing prepared) with ``Views.render`` slowed past
``LOADING_POLL_MS``: with a free-running interval every answer was superseded by the next tick's
request and dropped by Dash's renderer, so the timeline never drew and the next tab click sent
no request (the bench's callbacks part stuck at its timeline step under load)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import REPO
from tests.dashboards.conftest import VIEWPORT

pytestmark = pytest.mark.browser

TIMEOUT = 15_000


@pytest.fixture
def slow_dashboard(tmp_path, monkeypatch):
    from dashboards import views
    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    slow_s = 1.5 * views.LOADING_POLL_MS / 1e3
    render = views.Views.render

    def slow_render(self, *args, **kwargs):
        time.sleep(slow_s)
        return render(self, *args, **kwargs)

    monkeypatch.setattr(views.Views, "render", slow_render)
    catalog = Catalog([str(REPO / "sample_traces" / "public" / "hta_sampled_rank0.json.gz")], cache_dir=str(tmp_path))
    catalog.get(0)  # parsed and analysed; the timeline's lanes are not: that view starts "Loading"
    app = create_app(catalog)
    server = Server(app, host="127.0.0.1", port=0).start()
    yield server.url, app
    server.shutdown()


def test_a_loading_view_slower_than_its_poll_is_drawn_and_the_page_answers(browser, slow_dashboard):
    from playwright.sync_api import expect

    url, app = slow_dashboard
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        pg = ctx.new_page()
        pg.goto(url)
        expect(pg.locator("#overview-title")).to_be_visible(timeout=TIMEOUT)
        pg.click("#tab-timeline")
        expect(pg.locator("#view-loading")).to_be_visible(timeout=TIMEOUT)  # the poll's path is the one tested
        expect(pg.locator("#timeline-info")).to_contain_text("window", timeout=TIMEOUT)
        polls = app.tracekit_timings["loading-poll"]
        assert all(t > 1.0 * 0.4 for t in polls)  # every answer slower than the period
        pg.click("#tab-overview")  # the page callback is not left pending behind a poll
        expect(pg.locator("#overview-title")).to_be_visible(timeout=TIMEOUT)
        assert "view=overview" in pg.url
        pg.click("#tab-gaps")  # and the next one
        expect(pg.locator("#view-gaps > *").first).to_be_visible(timeout=TIMEOUT)
        assert "view=gaps" in pg.url
    finally:
        ctx.close()
