"""bench/pipelines_host_profile.py runs end to end on the CPU (tiny preset, gloo, the reference TBE) and
what it writes holds together: per-step function times for every variant, the variants' own
functions where they differ (FusedSparseDist's lookup stage, which SparseDist never calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_hostprof_on_cpu(tmp_path):
    cmd = [sys.executable, "-m", "bench.pipelines_host_profile", "--device", "cpu", "--preset", "tiny",
           "--variants", "sparse,fused", "--rounds", "2", "--steps", "2", "--top", "5", "--out", str(tmp_path)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "hostprof.json").read_text())
    assert doc["variants"] == ["sparse", "fused"] and doc["rounds"] == 2
    assert all(len(doc["step_ms"][v]) == 2 and all(ms > 0 for ms in doc["step_ms"][v]) for v in doc["variants"])
    assert doc["ratio_to_reference"]["sparse"] == 1.0
    fused, sparse = doc["functions"]["fused"], doc["functions"]["sparse"]
    lookup = [f for f in fused if f.endswith("(start_embedding_lookup)")]
    assert lookup and not [f for f in sparse if f.endswith("(start_embedding_lookup)")]
    # the pipeline's loop itself is profiled: one call per run, i.e. 1 / (steps of a run) per step
    step = [f for f in sparse if f.endswith("(train_sparse_dist)")]
    assert step and 0 < sparse[step[0]][0] < 1
    md = (tmp_path / "hostprof.md").read_text()
    assert "## fused against sparse" in md and md.count("\n| `") == 5


def test_hostprof_refuses_one_variant(tmp_path):
    cmd = [sys.executable, "-m", "bench.pipelines_host_profile", "--device", "cpu", "--preset", "tiny",
           "--variants", "sparse", "--out", str(tmp_path)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "two or more" in r.stderr
