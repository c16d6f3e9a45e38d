"""A fix's saving at the ends of the band of the job's estimated untraced step
(``tracekit.ranks.border``), on tiny host-bound jobs (``jobhelp.sleeper_job``): the host speeds
that bring the job step to a given one, faster or slower, the change replayed there, and the
warning where the saving there is outside the target's tolerance of the prediction."""

from __future__ import annotations

import pytest

from tests.tracekit.ranks.jobhelp import sleeper_job
from tracekit.graph import overhead as oh
from tracekit.ranks import JobConfig, analyze_job, border, jobgraph, whatif


def _job(tmp_path, **kw):
    d = tmp_path / "job"
    d.mkdir(parents=True)
    sleeper_job(d, **kw)
    return analyze_job(d, cache_dir=tmp_path / "cache", whole=False, workers=1,
                       config=JobConfig(balance_what_if=False))


def _speed_for(inputs, step_ns):
    """The host speed ``at_band`` searches a band's end with."""
    return jobgraph.host_speed_for_step(inputs, step_ns, speeds=border.SPEEDS,
                                        tolerance=border.TOLERANCE)


def _step(ctx, f):
    return jobgraph.schedule(jobgraph.build(jobgraph.at_host_speed(ctx.inputs, f))).step_ns


def test_host_speeds_that_give_a_step_either_way(tmp_path):
    """Two host-bound ranks: a step 20 % shorter needs faster hosts, one 30 % longer slower
    ones (a factor under 1), and the replay at each gives that step; a step under what a sleep
    of 3 ms holds is reached by no factor."""
    rep = _job(tmp_path, host_us={0: 1000, 1: 1500})
    ctx = rep.graph
    step = ctx.schedule.step_ns
    fast = _speed_for(ctx.inputs, 0.8 * step)
    slow = _speed_for(ctx.inputs, 1.3 * step)
    assert fast is not None and fast > 1.05
    assert slow is not None and slow < 0.95
    assert _step(ctx, fast) == pytest.approx(0.8 * step, rel=border.TOLERANCE)
    assert _step(ctx, slow) == pytest.approx(1.3 * step, rel=border.TOLERANCE)
    sleepy = _job(tmp_path / "s", host_us={0: 500, 1: 500}, sleep_us={1: 3000}).graph
    assert _speed_for(sleepy.inputs, 2_000_000) is None


def test_a_saving_that_follows_the_hosts_speed_warns(tmp_path):
    """Rank 0 (2 ms of host work a step) bounds the job, rank 1 has 1.5: rank 0's host 2x
    faster saves the job down to rank 1's chain, so the saving grows with slower hosts and
    shrinks with faster ones; at the ends of a band (the job step 25 % shorter, 30 % longer)
    it is outside the tolerance of the saving at the traced speed: the warning gives both
    ends. A change that saves nothing at every speed does not warn."""
    rep = _job(tmp_path, host_us={0: 2000, 1: 1500})
    ctx = rep.graph
    by = {ri.rank: ri for ri in ctx.inputs}
    faster = jobgraph.with_host_speed(by[0], 2.0).skeleton
    sk = {0: {"free": faster, "contention": faster}}
    row = whatif.with_skeletons(ctx, "x", "rank 0's host 2x faster", sk)
    step = row["step_ns"]
    band = (0.75 * step, 1.3 * step)
    at = border.at_band(ctx, band, lambda f: whatif.with_skeletons(ctx, "x", "t", sk,
                                                                   host_speed=f))
    assert [a["step_ns"] for a in at] == [pytest.approx(b, rel=border.TOLERANCE) for b in band]
    assert at[0]["host_speed"] > 1 > at[1]["host_speed"]
    assert at[0]["saving_ns"] < row["saving_ns"] < at[1]["saving_ns"]
    warning = border.border_warning(row, at)
    assert warning is not None
    assert f"{at[0]['saving_ns'] / 1e6:.3f} ms" in warning
    assert f"{at[1]['saving_ns'] / 1e6:.3f} ms" in warning
    assert "slower" in warning and "faster" in warning
    same = {0: {"free": by[0].skeleton, "contention": by[0].skeleton}}
    row0 = whatif.with_skeletons(ctx, "y", "the same", same)
    at0 = border.at_band(ctx, band, lambda f: whatif.with_skeletons(ctx, "y", "t", same,
                                                                    host_speed=f))
    assert len(at0) == 2 and all(a["saving_ns"] == 0 for a in at0)
    assert border.border_warning(row0, at0) is None


def test_the_band_is_the_estimate_the_profilers_cost_decides():
    """The job's band is ``overhead.untraced_range`` of its step against the longest traced
    step of the ranks the model estimated alone: none where the estimate is not well under the
    traced step (GPU-bound) or where a rank's untraced step was given."""
    ranks = [{"rank": 0, "explain": {"overhead": {"scale": "model", "traced_step_ns": 90e6}}},
             {"rank": 1, "explain": {"overhead": {"scale": "model", "traced_step_ns": 100e6}}}]
    assert border.job_band(ranks, 60e6) == pytest.approx(oh.untraced_range(100e6, 60e6))
    assert border.job_band(ranks, 95e6) is None
    given = [{"rank": 0, "explain": {"overhead": {"scale": "given", "traced_step_ns": 100e6}}}]
    assert border.job_band(given, 60e6) is None
    slow = [{"rank": 0, "explain": {"overhead": {"scale": "model", "traced_step_ns": 100e6,
                                                 "slow_host": True}}}]
    assert border.job_band(slow, 60e6) == pytest.approx(
        oh.untraced_range(100e6, 60e6, slow_host=True))
