"""``tracekit check``'s text: one row per threshold and rank, then why a figure could not be
measured, then the count of checks passed."""

from __future__ import annotations

from tracekit.report.tables import fmt_figure, table, unit_of


def _figure(key: str, v: float | None) -> str:
    unit = unit_of(key)
    return fmt_figure(v, unit) + (" ms" if unit == "ms" and v is not None else "")


def render_check(doc: dict) -> str:
    """A ``schema.CheckDocument`` as text."""
    results = doc["checks"]
    failed = sum(1 for c in results if not c["passed"])
    rows = [[c["source"], "-", "all ranks read", f"== {c['bound']}", c["value"],
             "ok" if c["passed"] else "FAIL"] if c["key"] == "ranks_read" else
            [c["source"], c["rank"], c["key"], f"{c['op']} {_figure(c['key'], c['bound'])}",
             _figure(c["key"], c["value"]), "ok" if c["passed"] else "FAIL"] for c in results]
    why = [f"  {c['key']} of {c['source']} rank {c['rank']} cannot be measured: {c['reason']}"
           for c in results if c["reason"]]
    return (table(["trace", "rank", "figure", "threshold", "value", "result"], rows)
            + "".join(f"\n{w}" for w in why)
            + f"\n{len(results) - failed} of {len(results)} checks passed\n")
