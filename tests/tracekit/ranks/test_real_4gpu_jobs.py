"""The 4-GPU NCCL jobs of 2026-11-27 (``gpu/ranks_jobs.py`` on 4 x H200, every rank traced):
the straggler and the bound named, and the job graph's what-ifs from the "before" traces alone
against the saving measured untraced (``metrics.json`` beside the traces): within +-25 % of it
or +-2 % of the measured step (``bench.jobs_proof``'s target). The case the model misses is an
expected failure, strict: it fails the day it passes, to be moved here (none since session
13)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.ranks import analyze_job


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


_JOBS: dict = {}


def job(name: str, cache) -> dict:
    if name not in _JOBS:
        _JOBS[name] = analyze_job(SAMPLE_TRACES / name, cache_dir=cache, whole=False).job
    return _JOBS[name]


def measured(name: str) -> dict:
    return json.loads((SAMPLE_TRACES / name / "metrics.json").read_text())["measured_summary"]


def judged(name: str, what_if: str, cache) -> tuple[float, float, float]:
    """(predicted saving, measured saving, tolerance), ms."""
    w = {x["id"]: x for x in job(name, cache)["graph"]["what_ifs"]}[what_if]
    m = measured(name)
    meas = m["saving_ms"]
    return w["saving_ns"] / 1e6, meas, max(0.25 * abs(meas), 0.02 * m["job_step"]["median"])


def test_the_delayed_rank_is_the_straggler_and_the_bound(cache):
    """Rank 2 sleeps 3 ms on the host before its input distribution: it arrives last, bounds
    the job with host work, the others wait for it, and why it is slow names the delay."""
    j = job("ranks_4gpu_delay", cache)
    assert j["stragglers"]["rank"] == 2
    g = j["graph"]
    assert g["bound"]["rank"] == 2 and g["bound"]["class"] == "host"
    waiting = {r["rank"]: r for r in g["ranks"] if r["waiting"]}
    assert {0, 3} <= set(waiting) and 2 not in waiting
    assert all(r["waits_for"][0]["rank"] == 2 for r in waiting.values())
    top = j["stragglers"]["why"]["ops"][0]
    assert top["name"] == "## planted_host_delay ##" and 2.9e6 < top["diff_ns"] < 3.5e6


def test_the_hot_rank_bounds_the_heavy_job(cache):
    """Every hot table on rank 0 (batch 32768, hot pooling 200): rank 0 arrives last and its
    GPU work bounds the job; the other three wait for it most of their step."""
    j = job("ranks_4gpu_heavy_hot", cache)
    assert j["stragglers"]["rank"] == 0
    g = j["graph"]
    assert g["bound"]["rank"] == 0 and g["bound"]["class"] == "gpu"
    waits = {r["rank"]: r for r in g["ranks"]}
    for r in (1, 2, 3):
        assert waits[r]["waiting"] and waits[r]["waits_for"][0]["rank"] == 0


@pytest.mark.parametrize("name, what_if", [
    # balancing costs 0.044 ms measured; the balanced layout's permutation (0.15 ms a step of
    # GPU work a rank, ``whatif.permutation_change``) costs 0.099 on the host-bound job read on
    # the slowest rank's own period, the job's period's 0.215 the first counted step's edge
    # (session 12, ``whatif._row``'s ``rank_periods``; an expected failure in session 11)
    ("ranks_4gpu_hot", "all_to_all_balanced"),
    ("ranks_4gpu_heavy_hot", "all_to_all_balanced"),  # balancing saves 13.703 ms of 29.317
    ("ranks_4gpu_heavy_delay", "straggler_at_median"),  # the GPU-heavy steps absorb the delay
])
def test_the_prediction_holds(cache, name, what_if):
    pred, meas, tol = judged(name, what_if, cache)
    assert abs(pred - meas) <= tol, (pred, meas, tol)


def test_balancing_the_host_bound_job_is_predicted_slower_as_measured(cache):
    """The balanced job is slower (measured -0.044 ms a step), and the prediction is the
    balanced layout's permutation on every rank."""
    pred, meas, _ = judged("ranks_4gpu_hot", "all_to_all_balanced", cache)
    assert meas < 0 and pred < 0
    w = {x["id"]: x for x in job("ranks_4gpu_hot", cache)["graph"]["what_ifs"]}["all_to_all_balanced"]
    assert sorted(w["permutation_ns"]) == ["0", "1", "2", "3"]
    assert all(1.4e5 < v < 1.7e5 for v in w["permutation_ns"].values()), w["permutation_ns"]
    assert "the permutation the balanced layout adds" in w["warning"]


def test_the_delay_prediction(cache):
    """The delayed rank at the median's speed: 2.811 ms predicted, 2.724 measured. Before session
    7 it saved 1.305 in the replay: rank 1's host, traced 1.25x slower than rank 2's on the same
    ops, bounded the job once rank 2's delay was gone; the other ranks are now replayed at the
    straggler's host speed where theirs ran slower (``straggler.host_speeds``)."""
    pred, meas, tol = judged("ranks_4gpu_delay", "straggler_at_median", cache)
    assert abs(pred - meas) <= tol, (pred, meas, tol)
    w = {x["id"]: x for x in job("ranks_4gpu_delay", cache)["graph"]["what_ifs"]}
    speeds = w["straggler_at_median"]["taken_out"]["others_host_speed"]
    assert list(speeds) == ["1"] and 1.2 < speeds["1"] < 1.3, speeds


def test_the_what_if_changes_the_straggler_of_the_counted_steps(cache):
    """In the GPU-heavy job rank 2's delay makes it the job's straggler only through the pinned
    step and the collectives before the first step; over the counted steps the others wait for
    rank 1 (step 11) most: the what-if changes that rank and says so."""
    j = job("ranks_4gpu_heavy_delay", cache)
    assert j["stragglers"]["rank"] == 2
    counted = {s["step"]: s["straggler"] for s in j["stragglers"]["steps"]}
    assert counted[11] == 1
    w = {x["id"]: x for x in j["graph"]["what_ifs"]}["straggler_at_median"]
    assert w["ranks_changed"] == [1] and w["title"].startswith("rank 1 at the median")
    assert "the job's straggler over every instance is rank 2" in w["note"]
    d = {x["id"]: x for x in job("ranks_4gpu_delay", cache)["graph"]["what_ifs"]}
    assert d["straggler_at_median"]["ranks_changed"] == [2]


def test_the_delay_prediction_has_the_sign_measured(cache):
    """What the miss still gets right: removing the delay saves time in the host-bound job
    (the model's saving positive, at least 5 % of its step)."""
    pred, meas, _ = judged("ranks_4gpu_delay", "straggler_at_median", cache)
    step = job("ranks_4gpu_delay", cache)["graph"]["step_ns"] / 1e6
    assert meas > 0 and pred > 0.05 * step


def test_analyze_dir_first_screen(cache):
    """``tracekit analyze DIR`` opens with what bounds the job, what to do first and who waits
    for whom."""
    run = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze",
                          str(SAMPLE_TRACES / "ranks_4gpu_heavy_hot"), "--cache-dir", str(cache)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    head = run.stdout.splitlines()
    assert head[2].startswith("What bounds the job: rank 0's GPU work, ")
    assert head[3].startswith("What to do first: the all-to-all balanced") and " saves " in head[3]
    # rank 0 is slow by its hot tables' GPU work, no host work the others lack: balancing's
    assert not any("the straggler's extra host work" in x for x in head[:8])
    assert any(x.startswith("  rank 1 waits ") and "for rank 0" in x for x in head[4:8])


def _copy(dst, ranks):
    import shutil

    dst.mkdir()
    for r in ranks:
        shutil.copy(SAMPLE_TRACES / "ranks_4gpu_delay" / f"trace_rank{r}.json.gz", dst)
    return dst


def test_a_missing_rank_is_named_and_the_rest_analysed(tmp_path, cache):
    d = _copy(tmp_path / "three", [0, 1, 2])
    rep = analyze_job(d, cache_dir=cache, whole=False)
    assert [(p.kind, p.rank) for p in rep.problems] == [("missing", 3)]
    assert rep.job["stragglers"]["rank"] == 2 and rep.job["graph"]["ranks_joined"] == 3
    run = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(d),
                          "--cache-dir", str(cache)], capture_output=True, text=True)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "ranks without a trace file: 3" in run.stdout
    assert "What bounds the job: rank 2's host work" in run.stdout


def test_ranks_disagreeing_on_the_number_of_collectives(tmp_path, cache):
    """Rank 1's last five collective kernels cut out of its trace: the warning names it, the
    instances it misses are partial, the delayed rank is still the straggler and the bound."""
    import gzip

    d = _copy(tmp_path / "cut", [0, 2, 3])
    doc = json.loads(gzip.open(SAMPLE_TRACES / "ranks_4gpu_delay" / "trace_rank1.json.gz").read())
    nccl = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                   and "nccl" in str(e.get("name", "")).lower()), key=lambda e: e["ts"])
    assert len(nccl) == 24
    drop = {id(e) for e in nccl[-5:]}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in drop]
    with gzip.open(d / "trace_rank1.json.gz", "wt") as f:
        json.dump(doc, f)
    job = analyze_job(d, cache_dir=cache, whole=False).job
    assert sum(g["partial"] for g in job["matching"]["groups"]) == 5
    warn = [w for w in job["graph"]["warnings"] if "disagree on the number of collectives" in w]
    assert warn and "rank 1 has 19, against 24 on 3 rank(s)" in warn[0]
    assert job["stragglers"]["rank"] == 2 and job["graph"]["bound"]["rank"] == 2
