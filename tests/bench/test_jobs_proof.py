"""bench/jobs_proof.py: a job's row also reads the traced runs' own untraced steps (the case's and
the balanced case's beside it) and, where ``gpu/ranks_jobs.py --rounds-after-traces`` measured
them, judges the prediction against the rounds after the traces too."""

from __future__ import annotations

import json
import shutil

import pytest

from bench import jobs_proof
from tests.conftest import SAMPLE_TRACES


def test_a_row_reads_the_traced_runs_and_the_rounds_after_the_traces(tmp_path):
    hot, ref = SAMPLE_TRACES / "ranks_4gpu_hot", SAMPLE_TRACES / "ranks_4gpu_balanced"
    job = tmp_path / "ranks_4gpu_hot"
    shutil.copytree(hot, job)
    shutil.copytree(ref, tmp_path / "ranks_4gpu_balanced")
    m = json.loads((job / "metrics.json").read_text())
    bal = json.loads((ref / "metrics.json").read_text())
    # as ranks_jobs.py --rounds-after-traces writes it: a saving of 1.5 ms [1.2, 1.8] at 8 ms
    m["measured_after_traces"] = {"job_step": {"median": 8.0, "lo": 7.9, "hi": 8.1, "n": 10},
                                  "saving_ms": 1.5, "saving_ms_interval": [1.2, 1.8]}
    (job / "metrics.json").write_text(json.dumps(m))
    row = jobs_proof.job_case("balanced", job, str(tmp_path / "cache"))
    assert row["trace_run_untraced_ms"] == pytest.approx(m["trace_run"]["job_step_ms"])
    assert row["reference_trace_run_untraced_ms"] == pytest.approx(bal["trace_run"]["job_step_ms"])
    a = row["after_traces"]
    assert a["measured_saving_ms"] == 1.5 and a["measured_interval_ms"] == [1.2, 1.8]
    # judged as the row is: +-25 % of the saving or +-2 % of the step
    assert a["tolerance_ms"] == pytest.approx(max(0.25 * 1.5, 0.02 * 8.0))
    assert a["within"] == (abs(row["predicted_saving_ms"] - 1.5) <= a["tolerance_ms"])
    line = jobs_proof.table([row]).splitlines()[-1]
    traced = m["trace_run"]["job_step_ms"] - bal["trace_run"]["job_step_ms"]
    assert f"| {traced:.3f} | 1.500 [1.200, 1.800], " in line
    # without them (the folder alone, no balanced case beside it): dashes
    alone = tmp_path / "alone" / "ranks_4gpu_hot"
    shutil.copytree(hot, alone)
    row = jobs_proof.job_case("balanced", alone, str(tmp_path / "cache"))
    assert row["reference_trace_run_untraced_ms"] is None and "after_traces" not in row
    assert jobs_proof.table([row]).splitlines()[-1].endswith("| - | - |")


def test_a_pair_row_holds_its_calibrated_prediction_and_each_ranks_share(tmp_path):
    """A fix on every rank (the tree's 2-GPU FusedSparseDist pair): beside the raw prediction,
    the one with the job's hosts calibrated on the traced run's own untraced step (every rank's
    host F times faster, the model's "before" step then that step) and, per rank, its own work,
    wait and what the fix saves the job on that rank alone."""
    pair = SAMPLE_TRACES / "pipelines_2gpu"
    row = jobs_proof.pair_case("fused_sparse_dist", pair / "sparse", pair / "fused",
                               str(tmp_path / "cache"))
    c = row["calibrated"]
    untraced = row["trace_run_untraced_ms"]
    assert c["trace_run_untraced_ms"] == untraced and c["host_speed"] > 1.0
    assert c["step_ms"] == pytest.approx(untraced, rel=0.002)
    assert c["tolerance_ms"] == row["tolerance_ms"]
    assert c["within"] == (abs(c["predicted_saving_ms"] - row["measured_saving_ms"])
                           <= c["tolerance_ms"])
    j = row["joined"]
    assert set(j["ranks"]) == {"0", "1"} and j["bound_rank"] in (0, 1)
    bound = j["ranks"][str(j["bound_rank"])]
    assert bound["host_slower_than_bound"] is None
    assert max(r["own_ms"] for r in j["ranks"].values()) == bound["own_ms"]
    assert all(r["fix_alone_saving_ms"] is not None for r in j["ranks"].values())
    line = jobs_proof.table([row]).splitlines()[-1]
    assert line.endswith(f"| host /{c['host_speed']:.3f}: {c['predicted_saving_ms']:.3f}, "
                         + ("yes" if c["within"] else "NO") + " |")
    # the "after" job: the what-if's step against the after traces' own job graph and the rounds
    a = row["after_graph"]
    after = json.loads((pair / "fused" / "metrics.json").read_text())
    assert a["predicted_step_ms"] == pytest.approx(row["predicted_step_ms"])
    assert a["measured_step_ms"] == after["measured_summary"]["step"]["median"]
    assert a["trace_run_untraced_ms"] == pytest.approx(after["trace_run"]["step_ms_median"])
    assert a["model_step_ms"] > 0
    assert a["what_if_vs_after_graph_ms"] == pytest.approx(a["predicted_step_ms"] - a["model_step_ms"])
    assert a["after_graph_vs_measured_ms"] == pytest.approx(a["model_step_ms"] - a["measured_step_ms"])
    last = jobs_proof.after_table([row]).splitlines()[-1]
    assert last.startswith(f"| {row['case']} | {a['predicted_step_ms']:.3f} | {a['model_step_ms']:.3f} | ")
    assert jobs_proof.after_table([dict(row, after_graph=None)]) == ""


def test_the_after_graph_of_one_rank_is_none(tmp_path):
    """After traces that hold no job (one rank): no job graph, no diagnostic."""
    one = SAMPLE_TRACES / "pipelines_1gpu" / "fused"
    ma = {"measured_summary": {"step": {"median": 10.0}}}
    assert jobs_proof.after_graph(one, ma, 9.0, str(tmp_path / "cache")) is None
