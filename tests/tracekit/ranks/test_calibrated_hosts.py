"""The job's hosts calibrated on a given untraced step (``jobgraph.host_speed_for_step``) and a
what-if replayed at that host speed (``whatif.with_skeletons(host_speed=...)``), on tiny
host-bound jobs (``jobhelp.sleeper_job``): the job's analogue of explain's calibrated column,
which ``bench.jobs_proof`` reports beside the raw prediction of a fix on every rank."""

from __future__ import annotations

import pytest

from tests.tracekit.ranks.jobhelp import sleeper_job
from tracekit.ranks import JobConfig, analyze_job, jobgraph, whatif


def _job(tmp_path, **kw):
    d = tmp_path / "job"
    d.mkdir()
    sleeper_job(d, **kw)
    return analyze_job(d, cache_dir=tmp_path / "cache", whole=False, workers=1,
                       config=JobConfig(balance_what_if=False))


def test_the_host_speed_that_gives_a_step(tmp_path):
    """Two host-bound ranks (1.0 and 1.5 ms of host work a step): the factor that brings the
    job step to 80 % of the model's makes every rank's host that much faster, and the replay at
    it gives that step; a step the model is already within needs none (1.0)."""
    rep = _job(tmp_path, host_us={0: 1000, 1: 1500})
    ctx = rep.graph
    step = ctx.schedule.step_ns
    f = jobgraph.host_speed_for_step(ctx.inputs, 0.8 * step)
    assert f is not None and 1.05 < f < 2.0
    got = jobgraph.schedule(jobgraph.build(jobgraph.at_host_speed(ctx.inputs, f))).step_ns
    assert got == pytest.approx(0.8 * step, rel=0.002)
    assert jobgraph.host_speed_for_step(ctx.inputs, 1.1 * step) == 1.0
    assert jobgraph.at_host_speed(ctx.inputs, 1.0) == list(ctx.inputs)


def test_a_range_from_below_one_reaches_longer_steps(tmp_path):
    """The range decides what is searched: from 1 (the default) a step 30 % longer than the
    model's needs no faster hosts (1.0); from 0.25 it is reached with hosts slower (a factor
    under 1) and the replay there gives it; a step longer than even 4x slower hosts give is out
    of that range (None), as a step shorter than 4x faster ones give is out of both."""
    rep = _job(tmp_path, host_us={0: 1000, 1: 1500})
    ctx = rep.graph
    step = ctx.schedule.step_ns

    def at(f):
        return jobgraph.schedule(jobgraph.build(jobgraph.at_host_speed(ctx.inputs, f))).step_ns

    assert jobgraph.host_speed_for_step(ctx.inputs, 1.3 * step) == 1.0
    slow = jobgraph.host_speed_for_step(ctx.inputs, 1.3 * step, speeds=(0.25, 4.0))
    assert slow is not None and 0.25 < slow < 0.95
    assert at(slow) == pytest.approx(1.3 * step, rel=0.002)
    fast = jobgraph.host_speed_for_step(ctx.inputs, 0.8 * step, speeds=(0.25, 4.0))
    assert fast is not None and fast > 1.05
    assert at(fast) == pytest.approx(0.8 * step, rel=0.002)
    assert jobgraph.host_speed_for_step(ctx.inputs, 1.1 * at(0.25), speeds=(0.25, 4.0)) is None
    assert jobgraph.host_speed_for_step(ctx.inputs, 0.9 * at(4.0)) is None
    assert jobgraph.host_speed_for_step(ctx.inputs, 0.9 * at(4.0), speeds=(0.25, 4.0)) is None


def test_no_host_speed_reaches_a_step_below_the_sleep(tmp_path):
    """A rank that sleeps 3 ms a step beside 0.5 ms of host work: no host speed brings the job
    step under the sleep (time the host does nothing is not host work): None."""
    rep = _job(tmp_path, host_us={0: 500, 1: 500}, sleep_us={1: 3000})
    ctx = rep.graph
    assert ctx.schedule.step_ns > 3_000_000
    assert jobgraph.host_speed_for_step(ctx.inputs, 2_000_000) is None


def test_a_what_if_at_a_host_speed(tmp_path):
    """``with_skeletons(host_speed=F)``: the job before and after the change both at F (the
    row's step is the job's at F): an unchanged skeleton saves exactly nothing there (the changed
    rank at F as the others, not twice nor not at all), and rank 1's host work made 1.25x
    faster saves the job what it saves rank 1's chain at F."""
    rep = _job(tmp_path, host_us={0: 1000, 1: 1500})
    ctx = rep.graph
    by = {ri.rank: ri for ri in ctx.inputs}
    f = 1.2
    at_f = jobgraph.schedule(jobgraph.build(jobgraph.at_host_speed(ctx.inputs, f))).step_ns
    same = {1: {"free": by[1].skeleton, "contention": by[1].skeleton}}
    row = whatif.with_skeletons(ctx, "same", "the same", same, host_speed=f)
    assert row["host_speed"] == f and row["step_ns"] == pytest.approx(at_f)
    assert row["saving_ns"] == 0
    faster = jobgraph.with_host_speed(by[1], 1.25).skeleton
    row = whatif.with_skeletons(ctx, "faster", "rank 1's host 1.25x faster",
                                {1: {"free": faster, "contention": faster}}, host_speed=f)
    both = jobgraph.schedule(jobgraph.build(
        jobgraph.at_host_speed([by[0], jobgraph.with_host_speed(by[1], 1.25)], f))).step_ns
    assert row["saving_ns"] == pytest.approx(at_f - both, abs=1.0) and row["saving_ns"] > 0
    # at the traced speed (host_speed 1) the row is the one it always was
    plain = whatif.with_skeletons(ctx, "faster", "t", {1: {"free": faster, "contention": faster}})
    assert "host_speed" not in plain and plain["step_ns"] == ctx.schedule.step_ns
