"""The job of a hand-built 3-rank trace set whose answer is computed by hand below."""

from __future__ import annotations

import pytest

from tests.tracekit.ranks.jobhelp import Coll, write_job
from tracekit.ranks import JobConfig, analyze_job
from tracekit.ranks import job as job_mod
from tracekit.ranks.inputs import RankSet

US = 1000
# true-clock arrivals (us). A: skew 80, last rank 2, waited 80 + 50 + 0 = 130.
# B: skew 15 (< 20 us: not counted as "last"), last rank 2, waited 5 + 15 = 20.
# C: skew 150, last rank 1, waited 150 + 130 = 280.
COLLS = [
    Coll("0", "all_to_allv", 1, {0: 100, 1: 130, 2: 180}, 400,
         out_nelems={0: 10, 1: 10, 2: 40}, in_nelems={0: 20, 1: 20, 2: 20}),
    Coll("1", "allreduce", 1, {0: 300, 1: 290, 2: 305}, 450, dtype="Float"),
    Coll("0", "all_to_allv", 2, {0: 1100, 1: 1250, 2: 1120}, 1400,
         out_nelems={0: 10, 1: 10, 2: 40}, in_nelems={0: 20, 1: 20, 2: 20}),
]
OFFSETS = {1: 500.0, 2: -300.0}  # rank 1's clock is 500 us ahead of rank 0's, rank 2's 300 behind


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("job")
    write_job(d, COLLS, world=3, offsets_us=OFFSETS)
    return d


@pytest.fixture(scope="module")
def job(job_dir, tmp_path_factory):
    rep = analyze_job(job_dir, cache_dir=tmp_path_factory.mktemp("cache"), workers=1)
    assert not rep.problems
    return rep.job


def test_clock_offsets_are_found_from_collective_ends(job):
    offs = {o["rank"]: o["offset_ns"] for o in job["clock"]["offsets"]}
    assert offs == {0: 0, 1: 500 * US, 2: -300 * US}
    assert job["clock"]["reference_rank"] == 0 and job["clock"]["aligned"]


def test_instances_skew_wait_and_straggler(job):
    inst = {(i["group"], i["key"]): i for i in job["instances"]}
    assert set(inst) == {("0", "1:0"), ("0", "2:0"), ("1", "1:0")}
    a, b, c = inst[("0", "1:0")], inst[("1", "1:0")], inst[("0", "2:0")]
    assert (a["skew_ns"], a["straggler"], a["waited_ns"]) == (80 * US, 2, 130 * US)
    assert (b["skew_ns"], b["straggler"], b["waited_ns"]) == (15 * US, 2, 20 * US)
    assert (c["skew_ns"], c["straggler"], c["waited_ns"]) == (150 * US, 1, 280 * US)
    # transfer: the last to arrive waits least: end - its arrival
    assert (a["transfer_ns"], b["transfer_ns"], c["transfer_ns"]) == (220 * US, 145 * US, 150 * US)
    assert all(i["end_spread_ns"] == 0 for i in job["instances"])


def test_per_rank_totals_and_the_job_straggler(job):
    rows = {r["rank"]: r for r in job["ranks"]}
    # waits: rank 0: 80 + 5 + 150; rank 1: 50 + 15 + 0; rank 2: 0 + 0 + 130
    assert [rows[r]["wait_ns"] for r in (0, 1, 2)] == [235 * US, 65 * US, 130 * US]
    assert [rows[r]["caused_wait_ns"] for r in (0, 1, 2)] == [0, 280 * US, 150 * US]
    assert [rows[r]["last_count"] for r in (0, 1, 2)] == [0, 1, 1]  # B's 15 us skew is noise
    s = job["stragglers"]
    assert (s["rank"], s["caused_wait_ns"], s["waited_ns"], s["instances"]) == (1, 280 * US, 430 * US, 2)
    assert s["share"] == pytest.approx(280 / 430)
    per_step = {x["step"]: x for x in s["steps"]}
    assert (per_step[1]["straggler"], per_step[1]["caused_wait_ns"]) == (2, 150 * US)
    assert (per_step[2]["straggler"], per_step[2]["caused_wait_ns"]) == (1, 280 * US)


def test_ranks_by_steps_matrix(job):
    cell = {(x["rank"], x["step"]): x for x in job["steps"]}
    assert len(cell) == 6
    assert cell[(0, 1)]["wait_ns"] == 85 * US and cell[(0, 2)]["wait_ns"] == 150 * US
    assert cell[(2, 1)]["last_count"] == 1 and cell[(1, 2)]["last_count"] == 1
    assert cell[(1, 1)]["cpu_ns"] == 1000 * US


def test_all_to_all_sizes_and_imbalance(job):
    a = job["all_to_all"]
    got = {r["rank"]: (r["sent_bytes"], r["received_bytes"]) for r in a["per_rank"]}
    assert got == {0: (320, 160), 1: (320, 160), 2: (320, 640)}  # Long: 8 bytes, 2 instances
    assert a["heaviest_rank"] == 2 and a["imbalance"] == pytest.approx(640 / 320)
    assert a["instance_imbalance_max"] == pytest.approx(40 / 20)
    assert a["instances"] == 2


def test_matching_by_step_and_order_and_the_summary(job):
    groups = {g["group"]: g for g in job["matching"]["groups"]}
    assert groups["0"]["matched_by"] == "step and order" and groups["0"]["instances"] == 2
    assert groups["1"]["instances"] == 1 and groups["1"]["ranks"] == [0, 1, 2]
    assert job["complete"] and job["world_size"] == 3 and job["ranks_read"] == 3
    assert {r["rank"]: r["steps"] for r in job["ranks"]} == {0: 2, 1: 2, 2: 2}


def test_without_alignment_the_offsets_distort_the_arrivals(job_dir, tmp_path):
    rep = analyze_job(job_dir, cache_dir=tmp_path, workers=1,
                      config=JobConfig(align_clocks=False))
    a = next(i for i in rep.job["instances"] if i["key"] == "1:0" and i["group"] == "0")
    # as written: 100, 130 + 500, 180 - 300 -> rank 1 last, 500 + 30 + 120 after the first
    assert (a["straggler"], a["skew_ns"]) == (1, 750 * US)
    assert all(r["clock_offset_ns"] is None for r in rep.job["ranks"])


def test_bound_comes_from_the_explain_section():
    """Until each rank's report carries ``explain`` the column reads null; with it, the job
    carries every rank's bound and the straggler's bound per step."""
    ranks = []
    for r, (bound, share) in enumerate([("compute", 0.6), ("host", 0.7)]):
        ranks.append({
            "rank": r, "source": f"r{r}.json", "warnings": [],
            "headline": {"steps": 1, "step_source": "ProfilerStep", "step_gpu_p50_ns": 10.0 + r,
                         "step_gpu_p90_ns": 12.0 + r, "bound": bound, "bound_share": share},
            "steps": {"steps": [{"step": 7, "cpu_ns": 20, "gpu_ns": 10}]},
            "explain": {"bound": bound, "bound_share": share,
                        "steps": [{"step": 7, "bound": bound}], "findings": []},
            "collectives": {"count": 1, "kernel_ns": 100, "groups": [
                {"group": "0", "desc": "", "size": 2, "ranks": [0, 1]}],
                "kernels": [{"group": "0", "collective": "allreduce", "seq": 4, "index": 0,
                             "step": 7, "stream": 3, "ts": 1000 + 90_000 * r, "end": 200_000,
                             "in_bytes": 8, "out_bytes": 8}]},
        })
    job = job_mod.build(RankSet(source="d", ranks=ranks, world_size=2))
    assert [(r["bound"], r["bound_share"]) for r in job["ranks"]] == [("compute", 0.6), ("host", 0.7)]
    assert job["stragglers"]["rank"] == 1 and job["stragglers"]["bound"] == "host"
    assert job["stragglers"]["steps"] == [{"step": 7, "straggler": 1, "caused_wait_ns": 90_000,
                                           "waited_ns": 90_000, "skew_max_ns": 90_000,
                                           "bound": "host"}]
    assert job["matching"]["groups"][0]["matched_by"] == "seq"
    assert {(c["rank"], c["bound"]) for c in job["steps"]} == {(0, "compute"), (1, "host")}


def test_each_ranks_arrival_per_instance(job, job_dir, tmp_path):
    a = next(i for i in job["instances"] if (i["group"], i["key"]) == ("0", "1:0"))
    got = [(x["rank"], x["wait_ns"], x["out_bytes"]) for x in a["arrivals"]]
    assert got == [(0, 80 * US, 80), (1, 50 * US, 80), (2, 0, 320)]
    assert [x["start"] for x in a["arrivals"]] == [a["first_arrival"], a["first_arrival"] + 30 * US,
                                                  a["last_arrival"]]
    assert job["arrivals_everywhere"]
    # beyond JobConfig.arrivals_kept (rank, instance) pairs only the worst instances list them
    few = analyze_job(job_dir, cache_dir=tmp_path, workers=1,
                      config=JobConfig(arrivals_kept=5, worst_kept=1)).job
    assert not few["arrivals_everywhere"] and all("arrivals" not in i for i in few["instances"]
                                                  if i["instance"] != few["worst"][0]["instance"])
    assert len(few["worst"][0]["arrivals"]) == 3 and few["worst"][0]["skew_ns"] == 150 * US


def test_clocks_that_disagree_beyond_a_step_are_named(tmp_path, capsys):
    """Rank 1's clock 5 ms ahead, steps of 1 ms: aligned, the offset takes it out and nothing is
    said; compared as written (--no-align), its collectives start 5 ms after the others', which
    no wait within a 1 ms step explains: one warning names it (stderr, text, JSON)."""
    import json

    from tracekit.cli import main

    d = tmp_path / "job"
    write_job(d, COLLS, world=3, offsets_us={1: 5000.0})
    aligned = analyze_job(d, cache_dir=tmp_path / "c", workers=1).job
    assert aligned["clock"]["disagree"] == [] and aligned["clock"]["warnings"] == []
    as_written = analyze_job(d, cache_dir=tmp_path / "c", workers=1,
                             config=JobConfig(align_clocks=False)).job
    (one,) = as_written["clock"]["disagree"]
    assert one["rank"] == 1 and one["source"].endswith("trace_rank1.json")
    assert one["median_ns"] == pytest.approx(5000 * US, abs=200 * US)
    (line,) = as_written["clock"]["warnings"]
    head = "the clock of rank 1 (trace_rank1.json) disagrees with the others' by up to "
    assert line.startswith(head)
    assert float(line[len(head):].split()[0]) == pytest.approx(one["median_ns"] / 1e6, abs=1e-3)
    assert "(1.000 ms, the longest P90)" in line and "--no-align" in line

    def cli(*args):
        with pytest.raises(SystemExit) as e:
            main(["analyze", str(d), "--no-cache", "--no-hta", "--workers", "1", *args])
        out, err = capsys.readouterr()
        return e.value.code, out, err.splitlines()

    code, out, err = cli("--no-align")
    assert code == 0 and err == [f"tracekit: warning: {d}: {line}"]
    assert f"warning: {line}" in out
    code, out, err = cli("--no-align", "--format", "json")
    assert json.loads(out)["jobs"][0]["clock"]["disagree"][0]["rank"] == 1
    code, out, err = cli()
    assert code == 0 and err == []


def test_no_steps_no_clock_judgement():
    arr = job_mod.pd.DataFrame({"instance": [0, 0], "rank": [0, 1], "ts": [0, 10**12]})
    assert job_mod.clock_disagreements(arr, [{"rank": 0, "headline": {}},
                                             {"rank": 1, "headline": {}}]) == []


def test_without_the_job_graph(job, job_dir, tmp_path):
    """``JobConfig(job_graph=False)`` (``analyze --no-job-graph``): no skeleton in the ranks'
    reports, no graph in the job, the rest of the job as with it; the reports without a
    skeleton are cached under a key of their own (a later run with the graph gets its graph)."""
    import subprocess
    import sys

    rep = analyze_job(job_dir, cache_dir=tmp_path, workers=1, whole=False,
                      config=JobConfig(job_graph=False))
    assert rep.graph is None and rep.job["graph"] is None
    assert all(r["skeleton"] is None for r in rep.ranks)
    for k in ("stragglers", "instances", "all_to_all", "clock"):
        assert rep.job[k] == job[k], k
    again = analyze_job(job_dir, cache_dir=tmp_path, workers=1, whole=False)
    assert again.job["graph"] is not None and all(r["skeleton"] for r in again.ranks)
    run = lambda *a: subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze",  # noqa: E731
                                     str(job_dir), "--cache-dir", str(tmp_path), *a],
                                    capture_output=True, text=True)
    with_it, without = run(), run("--no-job-graph")
    assert with_it.returncode == without.returncode == 0, without.stderr
    assert "What bounds the job" in with_it.stdout and "What bounds the job" not in without.stdout
    assert "arrived last at" in without.stdout
    from tracekit.ranks.config import JobConfigError

    with pytest.raises(JobConfigError):
        JobConfig(job_graph="no")
