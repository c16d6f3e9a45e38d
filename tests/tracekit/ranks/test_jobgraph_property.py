"""The job graph's what-ifs never run backwards (issue 24's rule, for jobs too): a what-if that
only takes work out (the straggler at the median rank's speed; a phase of one rank N times
faster, N >= 1) never predicts a slower job step (beyond 0.1 %), contention-free or -aware.

Property-based over the committed NCCL jobs (``sample_traces/ranks_*``): any rank as the
straggler, any share of any of its host ops and of its idle host time taken out; a phase the
rank has, 1 <= N <= 1000. CI runs a fixed (derandomized) set of cases.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLE_TRACES
from tracekit.ranks import JobConfig, analyze_job, jobgraph, whatif

JOBS = ["ranks_2gpu_heavy_delay", "ranks_2gpu_lite_delay", "ranks_2gpu_mid_hot",
        "ranks_2gpu_straggler", "ranks_4gpu_delay", "ranks_4gpu_lite_hot"]
TOLERANCE = 0.001


@lru_cache(maxsize=None)
def _job(name: str):
    import tempfile

    cache = tempfile.mkdtemp(prefix="tracekit-jobprop-")
    return analyze_job(SAMPLE_TRACES / name, cache_dir=cache, whole=False,
                       config=JobConfig(balance_what_if=False)), cache


@lru_cache(maxsize=None)
def _loaded(path: str):
    from tracekit.loaded import load

    return load(path, cache_dir=_job(JOBS[0])[1], progress=False)[0]


@st.composite
def straggler_cases(draw):
    name = draw(st.sampled_from(JOBS[:4]))
    rep, _ = _job(name)
    s = draw(st.sampled_from(sorted(ri.rank for ri in rep.graph.inputs)))
    rank = next(x for x in rep.ranks if int(x["rank"]) == s)
    names = sorted(o["name"] for o in rank["profile"]["host_ops"])
    ops = draw(st.dictionaries(st.sampled_from(names), st.floats(0.0, 1.0), max_size=4))
    return name, s, ops, draw(st.floats(0.0, 1.0))


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(straggler_cases())
def test_the_straggler_without_host_work_never_ends_later(case):
    """``without_host_work`` only lowers lags and durations, whatever it takes out (any share of
    any host ops, any share of the idle host time): the rank's graph reduced again and the job's
    graph replayed with it predicts no slower step."""
    name, s, ops, asleep = case
    rep, _ = _job(name)
    ctx = rep.graph
    path = whatif.source_path(next(x for x in rep.ranks if int(x["rank"]) == s))
    lt = _loaded(path)
    from tracekit.analyses.explain import view_graph

    g0, g, _ = view_graph(lt.trace, lt.rules)
    change, _, _ = whatif.without_host_work(lt.trace, g0, g, ops, asleep)
    assert (change.lag <= g.lag).all() and (change.dur <= g.dur).all() and (change.dur >= 0).all()
    got = whatif.without_host_work_skeleton(lt.trace, lt.rules, ops, asleep)
    by = {ri.rank: ri for ri in ctx.inputs}
    sc, _ = jobgraph.predict(ctx.inputs, {s: jobgraph.with_skeleton(by[s], got["free"])})
    assert sc.step_ns <= ctx.schedule.step_ns * (1 + TOLERANCE), case
    row = whatif._row("x", "x", ctx, [s], sc, None, removes_only=True)
    assert row["saving_ns"] >= 0 and row["predicted_ns"] <= row["step_ns"], (case, row)


@pytest.mark.parametrize("name", JOBS)
def test_the_straggler_what_if_never_predicts_a_slower_step(name):
    """Every rank taken as the straggler (its median among the others): no negative saving.
    Before session 4, ``ranks_2gpu_heavy_delay`` predicted -1.036 ms: its graph's straggler
    (rank 1, whom rank 0 waits for) was given rank 0's work, the planted 4 ms sleep included."""
    rep, cache = _job(name)
    g = rep.job["graph"]
    task = whatif.StragglerTask(cache_dir=cache)
    for r in sorted(ri.rank for ri in rep.graph.inputs):
        row = whatif.straggler_at_median(rep.ranks, rep.graph, g, r, task=task)
        assert row is not None
        assert row["saving_ns"] >= 0 and row["saving_contention_ns"] >= 0, (name, r, row)
    w = {x["id"]: x for x in g["what_ifs"]}["straggler_at_median"]
    assert w["saving_ns"] >= 0


@st.composite
def phase_cases(draw):
    name = draw(st.sampled_from(JOBS[:4]))
    rep, _ = _job(name)
    r = draw(st.sampled_from(sorted(ri.rank for ri in rep.graph.inputs)))
    rank = next(x for x in rep.ranks if int(x["rank"]) == r)
    phases = sorted(p["phase"] for p in (rank.get("profile") or {}).get("phases") or []
                    if (p.get("gpu_ns") or 0) > 0) or ["other"]
    ph = draw(st.sampled_from(phases))
    n = draw(st.floats(1.0, 1000.0, allow_nan=False))
    return name, r, ph, n


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(phase_cases())
def test_a_phase_of_one_rank_faster_never_predicts_a_slower_job_step(case):
    name, r, ph, n = case
    rep, cache = _job(name)
    row = whatif.phase_faster(rep.ranks, rep.graph, r, ph, n,
                              task=whatif.RankSkeletonTask(cache_dir=cache), workers=1)
    assert row is not None and row["ranks_changed"] == [r]
    base = row["step_ns"]
    assert row["saving_ns"] >= -TOLERANCE * base, (case, row)
    assert row["saving_contention_ns"] >= -TOLERANCE * base, (case, row)
    assert np.isfinite(row["predicted_ns"])


def test_a_two_rank_jobs_other_ranks_sleep_is_not_the_stragglers():
    """In a 2-rank job the straggler's "median" is the other rank. In
    ``ranks_2gpu_heavy_delay`` the graph's straggler is rank 1 while the planted 4 ms sleep is
    rank 0's: rank 1 runs no op rank 0 lacks and sleeps no more, so nothing of it is taken out
    (before session 4 rank 1 was given rank 0's work, the sleep included: -1.036 ms)."""
    rep, cache = _job("ranks_2gpu_heavy_delay")
    row = whatif.straggler_at_median(rep.ranks, rep.graph, rep.job["graph"], 1,
                                     task=whatif.StragglerTask(cache_dir=cache))
    assert "## planted_host_delay ##" not in (row.get("taken_out") or {}).get("ops", {})
    assert row["saving_ns"] >= 0
    other = whatif.straggler_at_median(rep.ranks, rep.graph, rep.job["graph"], 0,
                                       task=whatif.StragglerTask(cache_dir=cache))
    assert other["taken_out"]["ops"].get("## planted_host_delay ##") == 1.0


def test_on_a_tiny_job_a_late_kernel_is_no_host_work(tmp_path):
    """A hand-built 2-rank job (``jobhelp.write_job``: rank 1's all-to-all kernel starts 30-50
    us after rank 0's, its host no different): nothing to take out, no saving, said so."""
    from tests.tracekit.ranks.jobhelp import Coll, write_job

    colls = [Coll("0", "all_to_allv", s, {0: (s - 1) * 1000.0 + 100,
                                          1: (s - 1) * 1000.0 + 120 + 10 * s},
                  (s - 1) * 1000.0 + 300) for s in (1, 2, 3)]
    write_job(tmp_path / "job", colls, world=2, steps=3)
    rep = analyze_job(tmp_path / "job", cache_dir=tmp_path / "cache", whole=False, workers=1,
                      config=JobConfig(balance_what_if=False))
    row = whatif.straggler_at_median(rep.ranks, rep.graph, rep.job["graph"], 1,
                                     task=whatif.StragglerTask(cache_dir=str(tmp_path / "cache")))
    assert row["saving_ns"] == 0 and "nothing to take out" in row["note"]
