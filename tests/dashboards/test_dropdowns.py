"""Choosing again the value a dropdown already shows closes its menu, as choosing any other does.

Dash 4's ``dcc.Dropdown`` draws a single choice's options as radio inputs and closes its menu from
their change event, which a click on the option already checked never fires: the menu stayed
open over the tabs (the trace dropdown's list covers the Timeline tab at 1600x1000), and the next
click meant for a tab landed on the menu. That was the timeline "that did not draw" under load in
``bench.dashboard``'s clicks (bench/NOTES-dashboard.md): its sequence chooses the trace already
shown, then clicks the Timeline tab, which Playwright found covered by the menu. The fix is
``dashboards/assets/dropdown_close.js``."""

from __future__ import annotations

import pytest

from tests.dashboards.conftest import VIEWPORT

pytestmark = pytest.mark.browser

TIMEOUT = 20_000


def _option(s) -> str:
    """A source's text in the trace dropdown (``dashboards.app._source_options``)."""
    return s.name if s.name == s.label else f"{s.name} · {s.label}"


def _choose(pg, dropdown: str, label: str) -> None:
    pg.click(f"#{dropdown}")
    pg.get_by_role("dialog").get_by_role("option", name=label, exact=True).click()


def test_choosing_the_shown_value_again_closes_the_menu(browser, two_traces):
    from playwright.sync_api import expect

    url, catalog = two_traces
    first, other = catalog.sources[0], catalog.sources[1]
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        pg = ctx.new_page()
        pg.goto(url)
        expect(pg.locator("#overview-title")).to_contain_text(first.name, timeout=TIMEOUT)

        _choose(pg, "source", _option(first))  # the trace already shown
        expect(pg.get_by_role("dialog")).to_have_count(0, timeout=3_000)
        tab = pg.locator("#tab-timeline").bounding_box()
        covering = pg.evaluate("([x, y]) => document.elementFromPoint(x, y).closest('#tab-timeline') !== null",
                               [tab["x"] + tab["width"] / 2, tab["y"] + tab["height"] / 2])
        assert covering, "something covers the Timeline tab"
        pg.click("#tab-timeline", timeout=5_000)
        expect(pg.locator("#timeline-info")).to_contain_text("window", timeout=TIMEOUT)
        assert "view=timeline" in pg.url and f"trace={first.label}" in pg.url.replace("%2F", "/")

        step = pg.locator("#timeline-step").inner_text().strip()  # the timeline's step dropdown: the same
        _choose(pg, "timeline-step", step)
        expect(pg.get_by_role("dialog")).to_have_count(0, timeout=3_000)

        _choose(pg, "source", _option(other))  # another value still closes it and is chosen
        expect(pg.get_by_role("dialog")).to_have_count(0, timeout=3_000)
        expect(pg.locator("#timeline-info")).to_contain_text("window", timeout=TIMEOUT)
        expect(pg.locator("#trace-info")).to_contain_text(other.label, timeout=TIMEOUT)

        _choose(pg, "source", _option(other))  # and the same again: closed, nothing else changes
        expect(pg.get_by_role("dialog")).to_have_count(0, timeout=3_000)
        assert "view=timeline" in pg.url
    finally:
        ctx.close()
