"""A generated 8-rank job (``tests.jobgen``: real traces, a planted straggler, all-to-all
imbalance and clock offsets): the analysis finds all three."""

from __future__ import annotations

import pytest

from tracekit.ranks import JobConfig, analyze_job


@pytest.fixture(scope="module")
def analysed(job8, tmp_path_factory):
    d, plan = job8
    return analyze_job(d, cache_dir=tmp_path_factory.mktemp("cache"), whole=False), plan


def test_finds_the_planted_straggler(analysed):
    rep, plan = analysed
    s = rep.job["stragglers"]
    assert s["rank"] == plan.straggler
    # late by 0.5 ms at every collective: last at every one, the cause of nearly all the wait
    assert s["last_count"] == s["instances"] == rep.job["matching"]["instances"] == 24
    assert s["share"] > 0.95
    assert all(x["straggler"] == plan.straggler for x in s["steps"])


def test_finds_the_planted_all_to_all_imbalance(analysed):
    rep, plan = analysed
    a = rep.job["all_to_all"]
    n, f = plan.n_ranks, plan.heavy_factor
    assert a["heaviest_rank"] == plan.heavy_rank
    assert a["imbalance"] == pytest.approx(f / ((n - 1 + f) / n), rel=1e-6)


def test_finds_the_planted_clock_offsets(analysed):
    rep, plan = analysed
    for o in rep.job["clock"]["offsets"]:
        planted_ns = (plan.offset_us(o["rank"]) - plan.offset_us(0)) * 1000
        assert o["offset_ns"] == pytest.approx(planted_ns, abs=2_000)  # within 2 us


def test_without_alignment_the_clocks_mislead(job8, tmp_path):
    """Tens of ms of clock offset dwarf a 0.5 ms straggler: the host whose clock runs furthest
    ahead arrives "last", and every skew is the spread of the clocks."""
    d, plan = job8
    rep = analyze_job(d, cache_dir=tmp_path, whole=False, config=JobConfig(align_clocks=False))
    offsets = [plan.offset_us(r) for r in range(plan.n_ranks)]
    assert rep.job["stragglers"]["rank"] // plan.per_host == offsets.index(max(offsets)) // plan.per_host
    clock_spread_ns = (max(offsets) - min(offsets)) * 1000
    for t in rep.job["by_type"]:
        assert t["skew_p50_ns"] > 0.9 * clock_spread_ns
