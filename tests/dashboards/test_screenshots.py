"""The README's screenshots show the bundled traces' figures as tracekit computes them today.

``python -m bench.dashboard --screenshots docs`` writes ``docs/dashboard-*.png`` and, beside
them, ``docs/dashboard-figures.json``: per picture its SHA-256, its view, its trace and the text
of the elements that hold its figures. Here every picture the README shows must be there with
the SHA-256 recorded (the figures file belongs to these pictures), and every figure recorded is
recomputed from the bundled trace with tracekit: a picture left behind by a change to the
traces or to the analyses fails, until the screenshots are written again.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
FIGURES = DOCS / "dashboard-figures.json"


def shots() -> dict:
    return json.loads(FIGURES.read_text())["shots"]


def test_every_readme_picture_is_recorded_with_its_figures():
    pictures = set(re.findall(r"docs/(dashboard-[a-z]+\.png)", (REPO / "README.md").read_text()))
    recorded = {e["file"]: e for e in shots().values()}
    assert pictures and pictures <= set(recorded), sorted(pictures - set(recorded))
    for name, e in recorded.items():
        assert hashlib.sha256((DOCS / name).read_bytes()).hexdigest() == e["sha256"], \
            f"{name} is not the picture its figures were recorded with: run python -m bench.dashboard --screenshots docs"
        assert (REPO / e["trace"]).exists(), f"{name}: {e['trace']} is not a bundled trace"


@lru_cache(maxsize=None)
def _loaded(path: str, cache: str):
    from tracekit import api

    return api.load(REPO / path, cache_dir=cache)


def _trace(path: str, rank: int, cache: str):
    return next(lt for lt in _loaded(path, cache) if lt.rank == rank)


def _ms(ns) -> str:
    return f"{ns / 1e6:,.3f}"


def expected(e: dict, cache: str) -> dict[str, list[str]]:
    """What the picture's elements must say, computed from its bundled trace."""
    from dashboards.reports import bound_text
    from tracekit import api
    from tracekit.report import fmt_figure

    view, path, rank = e["view"], e["trace"], e["rank"]
    if view == "ranks":
        job = api.job_document(REPO / path, cache_dir=cache, workers=1)["jobs"][0]
        st = job.get("stragglers") or {}
        return {"#ranks-summary": [f"{job['ranks_read']} rank(s) read"]
                + ([f"Straggler: rank {st['rank']}", f"{_ms(st['caused_wait_ns'])} ms"] if st.get("rank") is not None else [])}
    lt = _trace(path, rank, cache)
    rep = lt.report(with_hta=False)
    h = rep["headline"]
    if view == "overview":
        ex = rep["explain"]
        return {"#overview-tiles": [fmt_figure(h[k], "ms") + " ms" for k in ("step_p90_ns", "step_gpu_p90_ns", "stall_total_ns")],
                "#overview-bound": [bound_text(ex["bound"], ex["bound_share"])],
                "#overview-findings": [f["title"] for f in ex["findings"]]}
    if view == "timeline":
        s = lt.steps().steps.iloc[0]
        lo = min(int(s["cpu_start"]), int(s["gpu_start"])) if s["gpu_start"] >= 0 else int(s["cpu_start"])
        hi = max(int(s["cpu_end"]), int(s["gpu_end"]))
        return {"#timeline-info": [f"window {(lo - lt.origin) / 1e6:.3f}–{(hi - lt.origin) / 1e6:.3f} ms"]}
    if view == "overlap":
        return {"#overlap-ratios": [f"{_ms(rep['overlap']['exposed_memcpy_ns'])} ms", f"{_ms(rep['overlap']['gpu_busy_ns'])} ms"]}
    if view == "gaps":
        gaps = [g["gap_ns"] for g in rep["gaps"]["gaps"]]
        return {"#gaps-summary": [f"Mean gap over {len(gaps)} step(s): {sum(gaps) / len(gaps) / 1e6:,.3f} ms"]}
    if view == "stalls":
        return {"#stalls-total": [f"{_ms(rep['syncs']['total_ns'])} ms"]}
    if view == "memory":
        peak = h["peak_reserved_bytes"]
        unit, scale = ("GiB", 2**30) if max(peak, h["peak_allocated_bytes"]) >= 2**30 else ("MiB", 2**20)
        return {"#memory-peaks": [f"{peak / scale:,.2f} {unit}"]}
    if view == "idle":
        t = lt.hta()["temporal"][0]
        return {"#idle-summary": [f"idle {t['idle_time_pctg']:.1f}%"]}
    if view == "operators":
        ops = lt.operators().ops
        top = ops[ops["gpu_total_ns"] == ops["gpu_total_ns"].max()]
        return {"#operators-summary": [f"{len(ops):,} ops over all steps"],
                "#operators-table tr:has(td.dash-cell)": [top["name"].iloc[0], _ms(top["gpu_total_ns"].iloc[0])]}
    if view == "kernels":
        k = lt.kernels().kernels.iloc[0]
        return {"#kernels-table tr:has(td.dash-cell)": [_ms(k["total_ns"])]}
    if view == "compare":
        heads = [_trace(p, 0, cache).report(with_hta=False)["headline"] for p in e["compared"]]
        return {"#compare-table": [fmt_figure(h[k], "ms") for h in heads for k in ("step_p90_ns", "step_gpu_p90_ns")]}
    if view == "diff":
        d = _trace(e["against"]["trace"], e["against"]["rank"], cache).diff(lt)
        return {"#diff-summary": d.summary[:3]}
    return {}


ORDERED = {"#overview-findings"}
"""Elements whose figures the picture must show in the order ``expected`` gives (the findings:
explain's one order)."""


@pytest.mark.parametrize("name", sorted(shots()) if FIGURES.exists() else [])
def test_a_picture_shows_the_bundled_traces_figures(name, tmp_path_factory):
    e = shots()[name]
    cache = str(tmp_path_factory.getbasetemp() / "screenshot-cache")
    for selector, texts in expected(e, cache).items():
        shown = e["shown"].get(selector)
        assert shown is not None, f"{e['file']}: {selector} was not on the page"
        at = 0
        for text in texts:
            assert text in shown[at:], (f"{e['file']} shows {shown[:300]!r} where tracekit now says {text!r}: "
                                   "run python -m bench.dashboard --screenshots docs")
            if selector in ORDERED:
                at = shown.index(text, at) + len(text)
