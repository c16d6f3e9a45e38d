"""A click redraws only what it changes (bench/NOTES-dashboard.md, "Clicks").

Its own server over two bundled traces, every view prepared; the Dash answers the browser gets are
read as they arrive: the page callback leaves out a control whose value stays (Dash's renderer
redrew the tabs and both dropdowns at every click), and the timeline's figure is not sent a second
time for the autosize plotly.js reports after its first drawing (a second request and a redraw of
every bar at each opening of the view), while a step chosen after it is still drawn."""

from __future__ import annotations

import json

import pytest

from tests.dashboards.conftest import VIEWPORT

pytestmark = pytest.mark.browser

TIMEOUT = 20_000


class Answers:
    """The page's Dash callback answers: (what the request changed, the outputs named, HTTP status, body)."""

    def __init__(self, pg) -> None:
        self.seen: list[tuple[list, str, int, dict | None]] = []
        pg.on("requestfinished", self._done)

    def _done(self, req) -> None:
        if "_dash-update-component" not in req.url:
            return
        resp = req.response()
        body = resp.body() if resp.status == 200 else b""
        self.seen.append((json.loads(req.post_data).get("changedPropIds") or [], json.loads(req.post_data)["output"],
                          resp.status, json.loads(body) if body else None))

    def of(self, changed: str) -> list[tuple[int, dict | None]]:
        return [(status, body) for ids, _, status, body in self.seen if changed in ids]


def test_a_click_sends_only_the_controls_it_changes(browser, two_traces):
    from playwright.sync_api import expect

    url, catalog = two_traces
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        pg = ctx.new_page()
        answers = Answers(pg)
        pg.goto(url)
        expect(pg.locator("#overview-title")).to_contain_text(catalog.sources[0].name, timeout=TIMEOUT)
        pg.wait_for_timeout(300)
        first = answers.of("url.search")[0][1]["response"]
        assert {"rank", "view"} <= set(first)  # the first page gives the rank dropdown its options and value
        assert first["rank"]["options"] == [{"label": "0", "value": 0}] and first["rank"]["value"] == 0

        pg.click("#tab-gaps")
        expect(pg.locator("#view-gaps")).to_be_visible(timeout=TIMEOUT)
        pg.wait_for_timeout(300)
        (status, body), = answers.of("tabs.value")
        assert status == 200 and "view" in body["response"]
        assert not {"source", "rank", "tabs"} & set(body["response"])  # none of them changed: not sent

        pg.click("#tab-overview")
        expect(pg.locator(f"#card-{catalog.sources[1].index}")).to_be_visible(timeout=TIMEOUT)
        pg.click(f"#card-{catalog.sources[1].index} .tk-link")  # a row chooses another trace: the dropdown follows
        expect(pg.locator("#overview-title")).to_contain_text(catalog.sources[1].name, timeout=TIMEOUT)
        pg.wait_for_timeout(300)
        status, body = [a for a in answers.of('{"index":1,"type":"pick-trace"}.n_clicks') if a[0] == 200][-1]
        assert body["response"]["source"] == {"value": 1}
        assert "tabs" not in body["response"] and "rank" not in body["response"]  # one rank, as before
        expect(pg.locator("#source")).to_contain_text(catalog.sources[1].name, timeout=TIMEOUT)
    finally:
        ctx.close()


def test_the_timeline_is_drawn_once_and_a_step_chosen_after_it_is_drawn(browser, two_traces):
    from playwright.sync_api import expect

    url, catalog = two_traces
    trace, analysis = catalog.sources[0].pick(None)
    steps = [str(s) for s in analysis.steps.steps["step"]]
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        pg = ctx.new_page()
        answers = Answers(pg)
        pg.goto(url + "?view=timeline")
        expect(pg.locator("#timeline-info")).to_contain_text("window", timeout=TIMEOUT)
        pg.wait_for_function("() => document.querySelector('#timeline-graph .js-plotly-plot .main-svg .bars')", timeout=TIMEOUT)
        for _ in range(100):  # plotly.js reports the autosize of its first drawing
            if answers.of("timeline-graph.relayoutData"):
                break
            pg.wait_for_timeout(100)
        relayouts = answers.of("timeline-graph.relayoutData")
        assert relayouts and all(status == 204 for status, _ in relayouts)  # answered with nothing to draw
        info = pg.inner_text("#timeline-info")

        pg.click("#timeline-step")
        pg.get_by_role("dialog").get_by_role("option", name=f"step {steps[-1]}", exact=True).click()
        expect(pg.locator("#timeline-info")).not_to_have_text(info, timeout=TIMEOUT)
        for _ in range(50):
            if answers.of("timeline-step.value"):
                break
            pg.wait_for_timeout(100)
        (status, body), = answers.of("timeline-step.value")
        assert status == 200 and body["response"]["timeline-graph"]["figure"]["data"]
        # the window drawn is the step's
        from dashboards import results

        spans = results.steps(trace, analysis)
        row = spans[spans["step"].astype(str) == steps[-1]].iloc[0]
        _, origin = results.lane_events(trace)
        lo = (int(row["start_ns"]) - origin) / 1e6
        expect(pg.locator("#timeline-info")).to_contain_text(f"window {lo:.3f}", timeout=TIMEOUT)
    finally:
        ctx.close()
