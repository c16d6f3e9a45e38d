"""Real multi-rank traces: our runtime's 2-GPU runs (one host: one clock) and HTA's sampled
ranks (an older schema, NCCL kernels without metadata)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.ranks import analyze_job

PIPELINES = ["sparse", "fused", "multitask_b4k/sparse"]


def _run(*args, cache):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *map(str, args),
                           "--cache-dir", str(cache)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("variant", PIPELINES)
def test_runtime_jobs_on_one_host(variant, cache):
    rep = analyze_job(SAMPLE_TRACES / "pipelines_2gpu" / variant, cache_dir=cache, whole=False)
    job = rep.job
    assert job["complete"] and job["world_size"] == 2 and not rep.problems
    # every kernel matched: 10 all-to-alls (group 0) and 14 allreduces (group 1, DDP) per rank
    assert {g["group"]: g["instances"] for g in job["matching"]["groups"]} == {"0": 10, "1": 14}
    assert all(g["partial"] == g["inconsistent"] == 0 for g in job["matching"]["groups"])
    # one host, one clock: the offset found from collective ends is the method's noise
    off = next(o for o in job["clock"]["offsets"] if o["rank"] == 1)
    assert abs(off["offset_ns"]) < 5_000 and off["samples"] == 24
    # table-wise sharding over two ranks: the all-to-all volumes are balanced
    assert job["all_to_all"]["imbalance"] == pytest.approx(1.0, abs=1e-3)
    # per instance: skew = |start_1 - start_0| on the aligned clock, the later rank the straggler
    for i in job["instances"]:
        assert i["skew_ns"] == i["last_arrival"] - i["first_arrival"] >= 0
        assert i["waited_ns"] == i["skew_ns"]  # two ranks: only the first waits
    # each rank's bound from its explain section, and the straggler's
    assert all(r["bound"] in ("host", "gpu", "communication", "sync") for r in job["ranks"])
    s = job["stragglers"]
    assert s["bound"] == job["ranks"][s["rank"]]["bound"]
    assert all(x["bound"] is not None for x in s["steps"])
    total = sum(r["caused_wait_ns"] for r in job["ranks"])
    assert total == job["stragglers"]["waited_ns"] == sum(r["wait_ns"] for r in job["ranks"])


def test_cli_job_summary_first_and_rank_detail(cache):
    d = SAMPLE_TRACES / "pipelines_2gpu" / "sparse"
    r = _run("analyze", d, cache=cache)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"== job {d}: 2 ranks read of world size 2 (complete)"
    assert lines.index("Ranks") < lines.index("Clocks") < lines.index("Stragglers")
    assert len(lines) < 90  # the summary, not 2 x 130 lines of per-rank detail
    one = _run("analyze", d, "--rank", "1", cache=cache)
    assert one.stdout.startswith(f"== {d}/trace_rank1.json.gz  (rank 1,")
    assert re.search(r"^\d+\. Collectives \(communication kernels\)$", one.stdout, re.M)
    j = json.loads(_run("analyze", d, "--format", "json", "--no-hta", cache=cache).stdout)
    assert [a["rank"] for a in j["analyses"]] == [0, 1] and j["analyses"][0]["allocator"]
    assert len(j["jobs"]) == 1 and j["jobs"][0]["source"] == str(d)
    assert j["jobs"][0]["ranks"][1]["collectives"] == 24


def test_cli_directory_of_one_trace_is_that_rank(cache):
    """A run's folder with one trace (1 GPU, metrics.json beside it) reads as that trace."""
    d = SAMPLE_TRACES / "pipelines_1gpu" / "fused"
    r = _run("analyze", d, "--no-hta", cache=cache)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"== {d}/trace_rank0.json.gz  (rank 0,")
    assert re.search(r"^\d+\. Stream overlap$", r.stdout, re.M) and "Traceback" not in r.stderr


def test_public_sampled_ranks_without_metadata(public_traces, tmp_path, cache):
    """Two of 128 ranks of an event-sampled TorchRec job (issue 25): no collective metadata,
    every NCCL kernel a SendRecv. Matched by stream, step and order, then verified: on stream 84
    four of the eight instances pair kernels that never overlapped (one rank's kernel ended
    before the other's began: each trace lacks kernels the other has), so the group is matched
    again by the kernels' ends: the three pairs that end together (all-to-all, all-reduce,
    all-reduce), the others partial. The waits are then those of kernels that ran together
    (31.865 ms, where the order-based match summed 512.6 ms); the clock offset fitted on them
    (0 +- 27.5 us) is not applied. The 126 other ranks are missing."""
    d = tmp_path / "sampled"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(public_traces / f"hta_sampled_rank{r}.json.gz", d)
    rep = analyze_job(d, cache_dir=cache, whole=False, workers=1)
    job = rep.job
    groups = {g["group"]: g for g in job["matching"]["groups"]}
    assert {g: (x["matched_by"], x["instances"], x["not_overlapping"])
            for g, x in groups.items()} == {
        "stream 203": ("step and order", 2, 0), "stream 84": ("ends", 3, 4)}
    assert groups["stream 84"]["first_matched_by"] == "step and order"
    assert sorted(i["collective"] for i in job["instances"]) == [
        "all_gather_base", "all_gather_base", "all_reduce", "all_reduce", "all_to_all"]
    for i in job["instances"]:  # every instance's kernels ran together
        a = i["arrivals"]
        assert max(x["start"] for x in a) <= min(x["end"] for x in a)
        assert i["end_spread_ns"] < 400_000
    assert job["stragglers"]["waited_ns"] == 31_865_000
    assert not any(o["applied"] for o in job["clock"]["offsets"])
    assert job["world_size"] == 128 and job["ranks_read"] == 2 and not job["complete"]
    assert sum(p["kind"] == "missing" for p in job["problems"]) == 126
    r = _run("analyze", d, cache=cache)
    assert r.returncode == 2
    assert "ranks without a trace file: 2-127" in r.stdout


STRAGGLER_JOB = SAMPLE_TRACES / "ranks_2gpu_straggler"


@pytest.mark.skipif(not STRAGGLER_JOB.is_dir(), reason="gpu/run_all.sh ranks2's traces not committed")
def test_planted_straggler_on_real_nccl(cache):
    """gpu/ranks_straggler.py on 2 GPUs (2026-11-24, 2 x H200): rank 1 sleeps 2 ms before its
    all-to-all, rank 0 receives 4x the all-to-all data (its defaults). The all-reduce that follows
    on each rank's stream starts when its all-to-all ends, so there rank 1 is last by ~0.1 ms
    only: the 2 ms are waited once, in the all-to-all."""
    job = analyze_job(STRAGGLER_JOB, cache_dir=cache, whole=False).job
    assert job["complete"]
    s = job["stragglers"]
    assert s["rank"] == 1 and s["last_count"] == s["instances"] == job["matching"]["instances"] == 8
    skews = {}
    for i in job["instances"]:
        skews.setdefault(i["collective"], []).append(i["skew_ns"])
    assert sorted(skews) == ["all_to_allv", "allreduce"]
    assert min(skews["all_to_allv"]) > 1_500_000  # ~2 ms on the host, less what the launches overlap
    assert max(skews["allreduce"]) < 500_000
    a = job["all_to_all"]
    assert a["heaviest_rank"] == 0 and a["imbalance"] == pytest.approx(4 * 2 / (2 - 1 + 4))
    off = next(o for o in job["clock"]["offsets"] if o["rank"] == 1)
    assert abs(off["offset_ns"]) < 20_000  # one host, one clock


def test_fused_job_waits_hide_under_each_ranks_compute(cache):
    """2-GPU FusedSparseDist (2026-11-27): the arrivals name rank 1 the straggler, but of its
    42.5 ms of caused waits 36.9 ms lie in the pinned first step; in the counted step the
    waits (5.6 ms) are rank 0's collective kernels on their own streams, under its compute: no
    activity of either rank's main stream starts right after a collective's end having sat
    idle (in the pinned step two of rank 0's do, 1.2-1.3 us after an all-reduce ends), and the
    graph has no edge from a counted collective into the main stream or the main thread. So the
    job's graph rightly finds no rank waiting and no change across ranks that helps."""
    from tracekit.analyses import collectives
    from tracekit.analyses.skeleton import cut_nodes
    from tracekit.graph.build import build_graph
    from tracekit.graph.model import EdgeKind, NodeKind, main_lanes
    from tracekit.loaded import loading

    d = SAMPLE_TRACES / "pipelines_2gpu" / "fused"
    job = analyze_job(d, cache_dir=cache, whole=False).job
    per_step = {s["step"]: s for s in job["stragglers"]["steps"]}
    assert job["stragglers"]["rank"] == 1 and set(per_step) == {8, 9}
    assert per_step[8]["caused_wait_ns"] > 6 * per_step[9]["caused_wait_ns"] > 0
    g = job["graph"]
    assert g["counted_steps"] == [9] and not any(r["waiting"] or r["wait_ns"] for r in g["ranks"])
    assert not any(w["helps"] for w in g["what_ifs"])
    resumed = {}
    for r in (0, 1):
        with loading(d / f"trace_rank{r}.json.gz", cache_dir=cache, progress=False) as tr:
            gr = build_graph(tr[0].trace, tr[0].rules)
            cuts, _ = cut_nodes(gr, collectives.kernel_events(tr[0].trace, tr[0].rules))
        main = (gr.kind == NodeKind.GPU) & main_lanes(gr)[gr.lane]
        on = np.flatnonzero(main)
        on = on[np.argsort(gr.start[on])]
        idle = gr.start[on[1:]] - gr.end[on[:-1]]
        woke = on[1:][idle >= 20_000]
        after = gr.start[woke][:, None] - gr.end[cuts][None, :]
        hit = ((after >= 0) & (after <= 10_000)).any(axis=1)
        for st in (8, 9):
            resumed[(r, st)] = int((hit & (gr.step[woke] == st)).sum())
        waits = np.isin(gr.src, cuts[gr.step[cuts] == 9]) & np.isin(gr.edge_kind, [
            int(EdgeKind.WAIT_RECORDED), int(EdgeKind.WAIT_INFERRED), int(EdgeKind.HOST_WAIT)])
        into = gr.dst[waits]
        assert not (main[into] | (gr.lane[into] == gr.main_lane)).any()
    assert resumed == {(0, 8): 2, (0, 9): 0, (1, 8): 0, (1, 9): 0}
