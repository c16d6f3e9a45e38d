"""The job's graph (``tracekit.ranks.jobgraph``) on real NCCL jobs: the per-rank graphs joined at
their collectives say who waits for whom, what bounds the job's step, and what the straggler at
the median rank's speed would save; ``tracekit explain DIR`` tells a waiting rank so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.report import schema
from tracekit.ranks import analyze_job

STRAGGLER = SAMPLE_TRACES / "ranks_2gpu_straggler"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def straggler_job(cache):
    return analyze_job(STRAGGLER, cache_dir=cache, whole=False)


def test_the_waiting_rank_and_the_one_it_waits_for(straggler_job):
    """Rank 1 sleeps 2 ms before its all-to-all (issue 25's seen case): on the job's graph rank
    0 waits about that per step, for rank 1, and rank 1's time the trace does not explain (the
    sleep) bounds the job's critical path."""
    g = straggler_job.job["graph"]
    assert g["ranks_joined"] == 2 and g["view"] == "untraced"
    r0, r1 = sorted(g["ranks"], key=lambda r: r["rank"])
    assert r0["waiting"] and not r1["waiting"]
    assert r0["waits_for"][0]["rank"] == 1
    assert 1_500_000 < r0["wait_ns"] < 2_500_000 and r1["wait_ns"] < 100_000
    assert r0["waits_at"][0]["at"].startswith("all_to_allv")
    assert g["bound"]["rank"] == 1 and g["bound"]["class"] == "unexplained"
    # a rank's step splits into its own work, its transfers and its wait
    for r in g["ranks"]:
        assert r["own_ns"] + r["transfer_ns"] + r["wait_ns"] == pytest.approx(r["step_ns"],
                                                                               rel=0.01)
    for s in g["steps"]:
        assert sum(p["ns"] for p in s["path"]) == s["ns"]
    assert schema.problems(json.loads(json.dumps(straggler_job.job)), schema.Job) == []


def test_straggler_at_the_median_speed(straggler_job):
    """Rank 1 doing rank 0's work between the same collectives: the sleep is gone from the job's
    path; the job step shrinks by most of the 2 ms."""
    w = {x["id"]: x for x in straggler_job.job["graph"]["what_ifs"]}["straggler_at_median"]
    assert w["ranks_changed"] == [1]
    assert 1_000_000 < w["saving_ns"] < 2_200_000
    assert w["predicted_ns"] == pytest.approx(w["step_ns"] - w["saving_ns"])


def test_explain_tells_a_waiting_rank_whom_it_waits_for(cache):
    run = subprocess.run([sys.executable, "-m", "tracekit.cli", "explain", str(STRAGGLER),
                          "--rank", "0", "--cache-dir", str(cache)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[2] == "In its job"
    assert any(x.startswith("  bound: waiting for rank 1 (") for x in lines)
    # rank 1's findings first, each replayed on the job's graph, its saving on rank 1 alone apart
    found = [x for x in lines if x.startswith("    ") and x[4:5].isdigit()]
    assert found[0].startswith("    1. rank 1: GPU compute in phase 'forward'")
    assert ": saves the job " in found[0] and "; rank 1 alone: saves " in found[0]
    own = [x for x in found if ". rank 0: " in x]
    assert own and all("would not help the job" in x for x in own)
    assert ("Findings (of this rank alone: in its job it waits 2.0" in run.stdout
            or "Findings (of this rank alone: in its job it waits 1.9" in run.stdout)
    doc = json.loads(subprocess.run(
        [sys.executable, "-m", "tracekit.cli", "explain", str(STRAGGLER), "--format", "json",
         "--cache-dir", str(cache)], capture_output=True, text=True).stdout)
    assert schema.problems(doc, schema.ExplainDocument) == []
    by = {e["rank"]: e for e in doc["explain"]}
    assert by[0]["job"]["waiting"] and by[0]["job"]["waited"]["rank"] == 1
    assert not by[1]["job"]["waiting"] and by[1]["job"]["path_share"] > 0.5
    # rank 1's forward 2x faster saves the job about what it saves rank 1 alone (rank 1 bounds
    # the job); rank 0's own saves it nothing (rank 0 waits)
    f0 = by[0]["job"]["findings"]
    assert [f["rank"] for f in f0][:2] == [1, 1] and {f["rank"] for f in f0[2:]} == {0}
    fwd = next(f for f in f0 if f["rank"] == 1 and f["id"] == "phase:forward")
    assert fwd["replayed"] and fwd["change"] == "phase:forward=2" and fwd["helps"]
    assert fwd["saving_ns"] == pytest.approx(fwd["alone_saving_ns"], rel=0.1)
    assert all(abs(f["saving_ns"]) < 10_000 and not f["helps"] and f["alone_helps"]
               for f in f0 if f["rank"] == 0)
    # rank 1 bounds the job: its own findings only, the same replays
    assert [f["rank"] for f in by[1]["job"]["findings"]] == [1, 1]
    assert by[1]["job"]["findings"][0]["saving_ns"] == fwd["saving_ns"]


def test_analyze_opens_with_the_job(cache):
    run = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(STRAGGLER),
                          "--cache-dir", str(cache)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    head = run.stdout.splitlines()[:12]
    assert head[2].startswith("What bounds the job: rank 1's ") and "joined at their collectives" in head[2]
    assert head[3].startswith("What to do first: rank 1 at the median rank's speed") and " saves " in head[3]
    assert head[4].startswith("  rank 0 waits ") and "for rank 1" in head[4]
    assert head[5].startswith("  straggler: rank 1, last to arrive at 8 of 8 collectives")


def test_a_runtime_job_without_a_straggler(cache):
    """SparseDist on 2 GPUs (2026-11-27): the ranks run the same model; neither waits more than
    it works and the job's path crosses between them at the all-to-alls. In the one counted
    step rank 0 did more of its own work than rank 1 (59.0 against 55.1 ms, each rank's profiler
    cost out at its own host's speed): the same ops as often, slower, which the straggler at the
    median rank's speed leaves (it takes out only the host work rank 1 lacks: a little idle
    time of rank 0's main thread, off the job's path); never more than that difference."""
    job = analyze_job(SAMPLE_TRACES / "pipelines_2gpu" / "sparse", cache_dir=cache,
                      whole=False).job
    g = job["graph"]
    assert not any(r["waiting"] for r in g["ranks"])
    assert {p["rank"] for s in g["steps"] for p in s["path"]} == {0, 1}
    own = {r["rank"]: r["own_ns"] for r in g["ranks"]}
    assert job["stragglers"]["rank"] == 0 and own[0] - own[1] > 3_000_000
    # the job step: the largest own cycle (own work and transfers) of the one counted step
    assert g["step_ns"] == pytest.approx(max(r["own_ns"] + r["transfer_ns"] for r in g["ranks"]))
    assert g["step_ns"] <= max(r["step_ns"] for r in g["ranks"])
    w = {x["id"]: x for x in g["what_ifs"]}["straggler_at_median"]
    assert 0 <= w["saving_ns"] <= own[0] - own[1]
    assert w["taken_out"]["ops"] == {} and w["taken_out"]["asleep_ns"] < 1_000_000


def test_ranks_ending_the_pinned_step_apart_leave_the_one_counted_step(tmp_path):
    """Two profiled steps, the first pinned: rank 1 (1.5 ms of host work a step, rank 0 1.0)
    bounds the job. When rank 1 ends the pinned step 1 ms late (more host work after it) and
    starts the counted one as late, rank 0, which ended it on time, waits that 1 ms more in the
    counted step: its window grows to ~2.4 ms, the job's step does not (the largest own cycle,
    ``jobgraph.own_cycle``; the largest window gave 2.383 ms against 1.470)."""
    from tests.tracekit.ranks.jobhelp import sleeper_job
    from tracekit.ranks import JobConfig

    got = {}
    for late in (0.0, 1000.0):
        d = tmp_path / f"late{int(late)}"
        d.mkdir()
        sleeper_job(d, host_us={0: 1000, 1: 1500}, steps=2, late_us={1: late})
        g = analyze_job(d, cache_dir=tmp_path / "cache", whole=False, workers=1,
                        config=JobConfig(balance_what_if=False)).job["graph"]
        got[late] = g
    on_time, late = got[0.0], got[1000.0]
    wins = {r["rank"]: r["step_ns"] for r in late["ranks"]}
    assert wins[0] > wins[1] + 800_000  # rank 0 waits for the skew
    assert late["step_ns"] == pytest.approx(on_time["step_ns"], rel=0.02)
    assert 1_400_000 < late["step_ns"] < 1_600_000


def test_the_what_if_straggler_is_the_one_the_graph_waits_for():
    """``graph_straggler``: the rank the others wait for most over the counted steps (summed
    over the waiting ranks), the lower rank on a tie; the job's straggler where none waits."""
    from tracekit.ranks.whatif import graph_straggler

    summary = {"ranks": [
        {"rank": 0, "waits_for": [{"rank": 1, "ns": 300.0}, {"rank": 2, "ns": 20.0}]},
        {"rank": 1, "waits_for": [{"rank": 2, "ns": 60.0}]},
        {"rank": 2, "waits_for": [{"rank": 1, "ns": 270.0}]},
        {"rank": 3, "waits_for": [{"rank": 2, "ns": 45.0}, {"rank": 1, "ns": 10.0}]}]}
    assert graph_straggler(summary, 2) == 1
    tie = {"ranks": [{"rank": 0, "waits_for": [{"rank": 2, "ns": 5.0}]},
                     {"rank": 2, "waits_for": [{"rank": 1, "ns": 5.0}]}]}
    assert graph_straggler(tie, 0) == 1
    none = {"ranks": [{"rank": 0, "waits_for": []}, {"rank": 1, "waits_for": []}]}
    assert graph_straggler(none, 1) == 1 and graph_straggler({}, None) is None
