"""gpu/torchrec_bench.py's driver on a machine without TorchRec (this one): TorchRec's flags for
each plan entry, the layout, and what it records when a run fails or cannot start (entries of
more GPUs than the machine has, the time budget): every run said, nothing silent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "gpu"))

import torchrec_bench  # noqa: E402


def test_torchrec_flags_of_each_entry():
    argv = torchrec_bench.torchrec_argv("4gpu_sparse_b8192", torchrec_bench.PLAN["4gpu_sparse_b8192"], Path("/d"))
    # TorchRec 1.6.1's cmd_conf fields (RunOptions, BenchFuncConfig, PipelineConfig): --name has no default there
    assert argv == ["--world_size=4", "--pipeline=sparse", "--batch_size=8192", "--num_float_features=10", "--feature_pooling_avg=10", "--num_batches=8", "--num_benchmarks=8",
                    "--num_profiles=1", "--profile_dir=/d", "--name=4gpu_sparse_b8192", "--all_rank_traces=True"]
    one = torchrec_bench.torchrec_argv("1gpu_fused_b1024", torchrec_bench.PLAN["1gpu_fused_b1024"], Path("/d"))
    assert "--pipeline=fused" in one and "--batch_size=1024" in one and not any("all_rank" in a for a in one)
    # num_benchmarks >= 5: TorchRec drops the first (warm-up) iteration from its own figures
    assert all(e[3] >= 5 and e[4] >= 1 for e in torchrec_bench.PLAN.values())
    dirs = [torchrec_bench.entry_dir(n, e) for n, e in torchrec_bench.PLAN.items()]
    assert len(set(dirs)) == len(dirs) and "sample_traces/torchrec_1gpu/sparse_b8192_r2" in dirs


def test_failed_and_skipped_runs_are_recorded(tmp_path):
    out = tmp_path / "trc"
    env = {k: v for k, v in os.environ.items() if k != torchrec_bench.CHILD_ENV}
    r = subprocess.run([sys.executable, str(REPO / "gpu" / "torchrec_bench.py"), "--out", str(out), "--budget-s", "120",
                        "--plan", "1gpu_sparse_b8192,4gpu_sparse_b8192", "--gpus", "1", "--date", "20000101"],
                       capture_output=True, text=True, timeout=300, env=env)
    doc = json.loads((out / "results.json").read_text())
    assert r.returncode == 1 and doc["device"] and doc["date_utc"] and doc["versions"]["torch"]
    (run,) = doc["runs"]
    # no TorchRec here: the 1-GPU run fails in its child; the 4-GPU one cannot start (--gpus 1)
    assert run["entry"] == "1gpu_sparse_b8192" and run["rc"] != 0 and run["timing"] is None and run["traces"] == []
    assert "torchrec" in run["log_tail"].lower()
    assert doc["skipped"] == [{"entry": "4gpu_sparse_b8192", "why": "4 GPUs needed, 1 here"}]
    assert (out / "commit/bench/results/torchrec-cpu-20000101.json").is_file()
    folder = out / "commit" / run["dir"]
    assert (folder / "benchmark_output.txt").is_file() and "rc " in (folder / "README.md").read_text()


def test_the_budget_stops_runs_that_would_not_fit(tmp_path):
    out = tmp_path / "trc"
    r = subprocess.run([sys.executable, str(REPO / "gpu" / "torchrec_bench.py"), "--out", str(out), "--budget-s", "5",
                        "--first-run-s", "30", "--gpus", "1", "--plan", "1gpu_sparse_b8192,1gpu_fused_b8192", "--date", "20000101"],
                       capture_output=True, text=True, timeout=300)
    doc = json.loads((out / "results.json").read_text())
    assert r.returncode == 1 and doc["runs"] == []
    assert [s["entry"] for s in doc["skipped"]] == ["1gpu_sparse_b8192", "1gpu_fused_b8192"]
    assert all(s["why"].startswith("budget:") for s in doc["skipped"])


def test_bad_plan_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "gpu" / "torchrec_bench.py"), "--out", str(tmp_path), "--plan", "2gpu_x"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown plan entries ['2gpu_x']" in r.stderr and "Traceback" not in r.stderr
