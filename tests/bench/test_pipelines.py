"""bench/pipelines.py runs end to end on the CPU (a smoke test of the script: gloo, the
reference TBE), and what it writes holds together: rounds in the method's orders, figures from
the timed rounds only, the commit folder with its traces and the explain proof's manifest."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import proof_manifest
from bench.pipelines_compare import main as compare_main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, "-m", "bench.pipelines", "--device", "cpu", "--plan", "tiny:fused+semi",
           "--rounds", "4", "--min-rounds", "2", "--passes", "2", "--warmup-steps", "1", "--steps", "2", "--profile-steps", "1",
           "--date", "20000101", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_rounds_and_figures(bench_out):
    doc = json.loads((bench_out / "results.json").read_text())
    assert doc["device"] and doc["date_utc"] and doc["versions"]["torch"]
    (p,) = doc["presets"]
    assert p["preset"] == "tiny" and p["variants"] == ["sparse", "fused", "semi"]  # the reference is added
    rounds = p["rounds"]
    # two passes over the plan, each a warm-up round and half the timed rounds; the timed rounds
    # go on with the sequence of mirrored orders across the passes
    assert [r["warmup"] for r in rounds] == [True, False, False, True, False, False]
    assert [r["round"] for r in rounds] == [0, 1, 2, 0, 3, 4]
    assert [r["order"] for r in rounds] == [["sparse", "fused", "semi"], ["sparse", "fused", "semi"], ["semi", "fused", "sparse"],
                                            ["sparse", "fused", "semi"], ["fused", "semi", "sparse"], ["sparse", "semi", "fused"]]
    for r in rounds:
        for run in r["runs"].values():
            assert len(run["step_ms"]) == 2 and len(run["warmup_step_ms"]) == 1
            assert run["step_ms_median"] == pytest.approx(sum(run["step_ms"]) / 2, abs=1e-3)
    # the figures come from the timed rounds only: fused's ratio is the median of its two
    # within-round ratios
    ratios = sorted(r["runs"]["fused"]["step_ms_median"] / r["runs"]["sparse"]["step_ms_median"] for r in rounds if not r["warmup"])
    f = p["summary"]["fused"]
    assert f["ratio"]["n"] == 4 and f["ratio"]["median"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert ratios[0] <= f["ratio"]["lo"] <= f["ratio"]["median"] <= f["ratio"]["hi"] <= ratios[3]
    # FusedSparseDist is numerically SparseDist: the same final loss in every run
    assert f["final_loss_equals_sparse"] and f["final_loss_same_every_round"]
    assert set(p["targets"]) == {"fused: median <= 0.95 and upper end <= 0.97", "semi: median <= 0.92 and upper end <= 0.95",
                                 "fused: upper end <= 1.02"}
    md = (bench_out / "results.md").read_text()
    assert "Per round" in md and "Host over the 12 timed runs" in md
    # every run: the host probe right before it and the main thread's counters over it
    for r in rounds:
        for run in r["runs"].values():
            assert run["host_probe_us"] > 0 and run["host"]["involuntary_switches"] >= 0
    assert p["run_shape"] == {"warmup_steps": 1, "timed_steps": 2, "rounds_planned": 4}
    assert doc["process"]["pin"] == "off: a CPU smoke run" and p["host"]["runs"] == 12
    # each pass in a process of its own, the second continuing the first's document
    assert [q["pass"] for q in doc["processes"]] == [0, 1] and len({q["pid"] for q in doc["processes"]}) == 2
    assert "--pass-index" not in doc["command"] and doc["tag"].endswith("-20000101")
    t = [r["t"][0] for r in rounds]
    assert t == sorted(t)  # the second process's clock runs on from the first's start


def test_commit_folder_traces_and_proof_manifest(bench_out):
    c = bench_out / "commit"
    assert (c / "bench/results/pipelines-1gpu-cpu-20000101.json").is_file()
    assert (c / "bench/results/pipelines-1gpu-cpu-20000101.md").is_file()
    assert "preset tiny (headline)" in (c / "README-rows.md").read_text()
    for v in ("sparse", "fused", "semi"):
        trace = json.loads(gzip.open(c / f"sample_traces/pipelines_1gpu/{v}/trace_rank0.json.gz").read())
        names = {e.get("name") for e in trace["traceEvents"]}
        assert "[memory]" in names and any(n and n.startswith("ProfilerStep#") for n in names)
        metrics = json.loads((c / f"sample_traces/pipelines_1gpu/{v}/metrics.json").read_text())
        assert metrics["variant"] == v and len(metrics["trace_run"]["traced_step_ms"]) == 1
        assert metrics["pipeline"] == v and metrics["config"]["pipeline"] == v  # what the dashboard names it by
        summary = json.loads((c / "bench/results/pipelines-1gpu-cpu-20000101.json").read_text())["presets"][0]["summary"][v]
        assert metrics["step_ms_p50"] == summary["step"]["median"]  # bench/explain_samples.json reads this key
        counts = metrics["trace_run"]["trace_counts"]
        assert counts["memory"] == sum(e.get("name") == "[memory]" for e in trace["traceEvents"]) > 0
    manifest = c / "bench/results/proof-pipelines-1gpu-cpu-20000101.json"
    doc = proof_manifest.load(manifest)
    (pair,) = doc["pairs"]
    assert pair["fix"] == "fused_sparse_dist" and pair["before"]["label"] == "sparse" and pair["after"]["label"] == "fused"
    # paths relative to the manifest's folder, as bench/explain_proof.py reads them
    assert pair["before"]["trace"] == "../../sample_traces/pipelines_1gpu/sparse/trace_rank0.json.gz"
    assert (manifest.parent / pair["after"]["trace"]).is_file() and (manifest.parent / pair["source"]).is_file()
    assert pair["measured"]["step_ratio"]["n"] == 4 and doc["device"] and doc["date"]
    assert pair["before"]["step_ms"] == pair["before"]["step_ms_estimate"]["median"]
    out = bench_out / "merged.json"
    assert proof_manifest.main(["merge", str(out), str(c / "bench/results/proof-pipelines-1gpu-cpu-20000101.json")]) == 0
    assert [p["before"]["trace"] for p in proof_manifest.load(out)["pairs"]] == [
        "commit/sample_traces/pipelines_1gpu/sparse/trace_rank0.json.gz"]


def test_compare_results_agrees_with_itself_and_not_with_a_shifted_run(bench_out, tmp_path, capsys):
    path = bench_out / "results.json"
    assert compare_main([str(path), str(path)]) == 0
    doc = json.loads(path.read_text())
    r = doc["presets"][0]["summary"]["fused"]["ratio"]
    width = r["hi"] - r["lo"] + 0.01
    for k in ("median", "lo", "hi"):
        r[k] += 2 * width  # the whole interval moved beyond the other's
    shifted = tmp_path / "shifted.json"
    shifted.write_text(json.dumps(doc))
    capsys.readouterr()
    assert compare_main([str(path), str(shifted)]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE: 1 of 2" in out
    # the timer's resolution (~1e-4 on a ratio at most) does not bridge a shift of twice the interval
    assert "At the step timer's resolution" in out and "1 of 2 step-time ratios agree" in out
    assert compare_main([str(path), str(tmp_path / "missing.json")]) == 2


def test_steady_host_ratio_by_hand():
    from bench.pipelines_compare import steady_host_ratio

    def rd(sparse, fused, probe_s, probe_f, warmup=False):
        return {"warmup": warmup, "runs": {"sparse": {"step_ms_median": sparse, "host_probe_us": probe_s},
                                           "fused": {"step_ms_median": fused, "host_probe_us": probe_f}}}

    doc = {"presets": [{"preset": "p", "rounds": [
        rd(10.0, 5.0, 3.0, 3.0, warmup=True),  # left out: warm-up
        rd(10.0, 9.0, 3.0, 3.1),   # 0.9, steady
        rd(10.0, 9.4, 2.9, 3.0),   # 0.94, steady
        rd(10.0, 10.5, 3.0, 6.0),  # fused's run on a slow host: left out
        rd(10.0, 9.2, 3.0, 3.2),   # 0.92, steady
    ]}]}
    m, n = steady_host_ratio(doc, "p", "fused", "sparse", limit_us=3.6)
    assert n == 3 and m == pytest.approx(0.92)
    assert steady_host_ratio(doc, "q", "fused", "sparse", limit_us=3.6) == (None, 0)


def test_host_summary_by_hand():
    from bench.pipelines import host_summary

    def run(step, probe, steal=0, irq=1, inv=0):
        return {"step_ms_median": step, "host_probe_us": probe, "host": {
            "involuntary_switches": inv, "voluntary_switches": 0, "thread_cpu_share": 1.0, "cpu": 7,
            "steal_ticks": steal, "irq_ticks": irq, "all_ticks": 100}}

    # every run's step is its variant's median times its probe over the median probe: r = 1
    timed = [{"runs": {"sparse": run(40.0, 2.0), "fused": run(36.0, 2.0)}},
             {"runs": {"sparse": run(50.0, 2.5, steal=10, inv=3), "fused": run(45.0, 2.5)}},
             {"runs": {"sparse": run(30.0, 1.5), "fused": run(27.0, 1.5)}}]
    h = host_summary(timed)
    assert h["runs"] == 6 and h["probe_us"]["median"] == 2.0 and h["probe_us"]["p10"] == pytest.approx(1.5)
    assert h["step_vs_probe_r"] == pytest.approx(1.0)
    assert h["involuntary_switches"] == {"median": 0, "max": 3} and h["cpus"] == [7]
    assert h["steal_share"] == pytest.approx(10 / 600, abs=1e-4) and h["irq_share"] == pytest.approx(6 / 600, abs=1e-4)
    # a probe that does not move: no correlation to give
    flat = [{"runs": {"sparse": run(40.0 + k, 2.0)}} for k in range(3)]
    assert host_summary(flat)["step_vs_probe_r"] is None


def test_a_time_limit_stops_the_pass_running_and_starts_no_other(tmp_path):
    # the parent runs one process per pass; SIGTERM (timeout's) goes to the pass running, which
    # writes the rounds it ran, and no later pass starts
    import signal
    import time

    cmd = [sys.executable, "-m", "bench.pipelines", "--device", "cpu", "--plan", "tiny:fused",
           "--rounds", "400", "--min-rounds", "400", "--passes", "3", "--warmup-steps", "1", "--steps", "2",
           "--profile-steps", "0", "--date", "20000101", "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300

    def timed_rounds() -> int:
        try:
            doc = json.loads((tmp_path / "results.json").read_text())
        except (OSError, ValueError):
            return 0
        return sum(not r["warmup"] for p in doc["presets"] for r in p["rounds"])

    while timed_rounds() == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    doc = json.loads((tmp_path / "results.json").read_text())
    (p,) = doc["presets"]
    assert [q["pass"] for q in doc["processes"]] == [0] and p["rounds"] and 0 < p["timed_rounds"] < 400 // 3 + 2
