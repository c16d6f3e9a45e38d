"""bench/explain_proof.py: the judge, and one pair end to end on a hand-made trace with its
run's untraced step beside it."""

from __future__ import annotations

import json

import pytest

from bench import explain_proof
from tests.tracegen import TraceBuilder


def test_judge_time():
    # within 25 % of the saving, or 2 % of the step, whichever is larger
    assert explain_proof.judge_time(4.0, 3.5, 50.0) == (True, pytest.approx(1.0))
    assert explain_proof.judge_time(5.0, 3.5, 50.0)[0] is False
    assert explain_proof.judge_time(0.0, 0.3, 50.0) == (True, pytest.approx(1.0))
    # the fix made the step slower: right when explain predicts at most 2 % of the step
    assert explain_proof.judge_time(0.3, -2.9, 20.0) == (True, pytest.approx(0.4))
    assert explain_proof.judge_time(0.5, -2.9, 20.0)[0] is False
    assert explain_proof.judge_time(None, 1.0, 20.0)[0] is None


def test_a_pair_raw_and_calibrated(tmp_path):
    """A host-bound trace (every step 100 us, the host's), its run untraced 70 us a step: the
    raw estimate from the model, the calibrated one at the timed step given."""
    b = TraceBuilder()
    for i in range(4):
        t0 = 100 * i
        b.profiler_step(i + 1, t0, 100)
        for j in range(8):
            b.cpu_op("aten::add", t0 + 2 + 12 * j, 10)
            b.kernel("k", t0 + 8 + 12 * j, 1, launched_by=b.runtime("cudaLaunchKernel", t0 + 4 + 12 * j, 3))
    d = tmp_path / "sample_traces" / "run"
    d.mkdir(parents=True)
    b.write(d / "trace_rank0.json.gz")
    (d / "metrics.json").write_text(json.dumps({"trace_run": {"step_ms": [0.070]}}))
    man = tmp_path / "bench" / "results" / "m.json"
    man.parent.mkdir(parents=True)
    man.write_text(json.dumps({"format": "tracekit-explain-proof/1", "device": "GPU", "date": "2026-11-27",
                               "pairs": [{"name": "p", "fix": "fused_sparse_dist", "expect": "time",
                                          "before": {"trace": "../../sample_traces/run/trace_rank0.json.gz",
                                                     "step_ms": 0.080},
                                          "after": {"step_ms": 0.081}}]}))
    assert explain_proof.main([str(man), "--out", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "explain-proof-gpu-20261127.json").read_text())
    (r,) = doc["rows"]
    # no FusedSparseDist here: nothing to save, and the measured saving is negative: right
    assert r["predicted_saving_ms"] == 0.0 and r["ok"] and r["ok_calibrated"]
    assert r["untraced_before_ms"] == 0.070 and r["trace_step_ms"] == pytest.approx(0.100)
    assert r["estimated_untraced_before_ms"] < r["trace_step_ms"]  # the profiler's cost out
    assert r["host_factor"] is not None and r["verdict"] == "would not help"
    assert "Within the target" in (tmp_path / "out" / "explain-proof-gpu-20261127.md").read_text()
