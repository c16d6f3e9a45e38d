"""bench/common/joined.py: a fix predicted for a rank of a job on the job's graph, where one rank's
trace alone sees a saving that another rank's pace takes away."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common.joined import complete_job, joined_fix
from tests.tracekit.ranks.jobhelp import A2A, Coll, comm_args, rank_builder
from tracekit.analyses import explain
from tracekit.phases import default_rules
from tracekit.trace import load

RULES = default_rules()
STEPS = 4
PERIOD = 300.0
"""Rank 1's host launches its all-to-all once every 300 us (true clock)."""


def waiting_job(d: Path) -> list[Path]:
    """Two ranks meeting at an all-to-all (5 us of data) once a step. Rank 0 runs SparseDist on
    one stream, its kernels launched far ahead (``test_explain.fused_trace``): lookup 20 us, the
    all-to-all, dense forward 30, dense backward 40, embedding backward 30, optimizer 20, 1 us
    apart: 147 us of its own GPU work a step. Rank 1's host is slow: a 280-us op, then the
    all-to-all's launch; its kernel starts at 300 * step - 2 and the instance ends 5 us after the
    later arrival. Rank 0's all-to-all therefore waits about 150 us a step for rank 1: its trace
    is bound by that collective, rank 1's by its host (no embedding lookup there: the fix does
    not apply to it)."""
    coll = [Coll("0", "all_to_all", i, {}, 0.0) for i in range(1, STEPS + 1)]
    arrive1 = [PERIOD * i - 2 for i in range(1, STEPS + 1)]
    b0 = rank_builder(0, 2, device=0, base_us=1_000_000.0)
    gpu = 10.0
    for i in range(1, STEPS + 1):
        c, a = coll[i - 1], comm_args(coll[i - 1], 0, 2)
        h = (i - 1) * 10.0
        b0.profiler_step(i, h, 10)
        b0.annotation(f"## forward {i} ##", h + 0.5, 2.3)
        b0.kernel("tbe::detail::pooled_forward_kernel", gpu, 20,
                  launched_by=b0.runtime("cudaLaunchKernel", h + 1, 0.3))
        gpu += 21
        b0.cpu_op("record_param_comms", h + 1.4, 0.2, args={**a, "Rank": 0})
        end = max(gpu, arrive1[i - 1]) + 5
        c.starts[0], c.end = gpu, end
        b0.kernel(A2A, gpu, end - gpu, launched_by=b0.runtime("cudaLaunchKernel", h + 1.7, 0.2),
                  args=a)
        gpu = end + 1
        b0.kernel("dense_fwd", gpu, 30, launched_by=b0.runtime("cudaLaunchKernel", h + 2, 0.5))
        b0.annotation(f"## backward {i} ##", h + 2.9, 0.9)
        b0.kernel("dense_bwd", gpu + 31, 40, launched_by=b0.runtime("cudaLaunchKernel", h + 3, 0.5))
        b0.annotation(f"## emb_backward {i} ##", h + 3.9, 0.9)
        b0.kernel("emb_bwd", gpu + 72, 30, launched_by=b0.runtime("cudaLaunchKernel", h + 4, 0.5))
        b0.annotation(f"## optimizer {i} ##", h + 4.9, 0.9)
        b0.kernel("adam", gpu + 103, 20, launched_by=b0.runtime("cudaLaunchKernel", h + 5, 0.5))
        gpu += 124
    b1 = rank_builder(1, 2, device=1, base_us=1_000_000.0)
    for i in range(1, STEPS + 1):
        c, a = coll[i - 1], comm_args(coll[i - 1], 1, 2)
        h = PERIOD * (i - 1)
        b1.profiler_step(i, h, PERIOD)
        b1.cpu_op("aten::slow_host_work", h + 1, 280)
        b1.cpu_op("record_param_comms", h + 290, 1, args={**a, "Rank": 1})
        start = arrive1[i - 1]
        b1.kernel(A2A, start, c.end - start,
                  launched_by=b1.runtime("cudaLaunchKernel", h + 295, 1), args=a)
        b1.kernel("gemm_kernel", c.end + 1, 1,
                  launched_by=b1.runtime("cudaLaunchKernel", h + 296.5, 0.5))
    return [b0.write(d / "trace_rank0.json.gz"), b1.write(d / "trace_rank1.json.gz")]


def test_a_fix_of_a_rank_that_waits_for_another_saves_the_job_nothing(tmp_path):
    p0, _ = waiting_job(tmp_path)
    assert complete_job(str(p0)) == str(tmp_path)
    # rank 0 alone: its all-to-all keeps the ~150 us it waited for rank 1 as its duration; the
    # fix takes the lookup off its stream, so the all-to-all (and its wait) starts earlier, as
    # if rank 1 would arrive that much earlier too: a saving explain says helps (>= 1 %)
    r = explain.compute(load(str(p0), progress=False).traces[0], RULES)
    own = [f for f in r.findings if f["id"] == "fused_sparse_dist"]
    assert own and own[0]["helps"] and own[0]["saving_ns"] >= 5_000
    # the job's graph: rank 1's host paces the all-to-all, and the fix does not change rank 1:
    # the job saves nothing
    got = joined_fix(str(tmp_path), "fused_sparse_dist")
    assert got is not None and got["step_ms"] == pytest.approx(PERIOD / 1000, rel=0.02)
    assert abs(got["saving_ms"]) <= 0.001 and abs(got["saving_free_ms"]) <= 0.001
    assert "rank 0: applies" in got["note"] and "rank 1: does not apply" in got["note"]


def test_a_single_rank_is_not_a_job(tmp_path):
    p0, _ = waiting_job(tmp_path)
    (tmp_path / "trace_rank1.json.gz").unlink()
    assert complete_job(str(p0)) is None


def test_explain_dir_replays_a_ranks_fix_on_the_job(tmp_path):
    """``tracekit explain DIR``: the fix rank 0's trace alone predicts (FusedSparseDist) is also
    applied to every rank and the job's graph replayed, and rank 0's "In its job" says what it
    saves the job: nothing, rank 1's host paces the all-to-all."""
    import json
    import subprocess
    import sys

    from tracekit.report import schema

    waiting_job(tmp_path)
    base = [sys.executable, "-m", "tracekit.cli", "explain", str(tmp_path), "--no-cache"]
    doc = json.loads(subprocess.run(base + ["--format", "json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert schema.problems(doc, schema.ExplainDocument) == []
    by = {e["rank"]: e for e in doc["explain"]}
    own = [f for f in by[0]["findings"] if f["id"] == "fused_sparse_dist"]
    assert own and own[0]["helps"] and own[0]["saving_ns"] >= 5_000
    rows = [w for w in by[0]["job"]["what_ifs"] if w["id"] == "fix:fused_sparse_dist"]
    assert len(rows) == 1 and abs(rows[0]["saving_ns"]) <= 1_000 and not rows[0]["helps"]
    assert "rank 0: applies" in rows[0]["note"] and "rank 1: does not apply" in rows[0]["note"]
    assert by[1]["job"]["what_ifs"] == by[0]["job"]["what_ifs"]
    # a fix replayed on the job applies on some rank (else "would not help" would be a fix not made)
    assert all(": applies" in w["note"] for w in by[0]["job"]["what_ifs"] if w["id"].startswith("fix:"))
    text = subprocess.run(base + ["--rank", "0"], capture_output=True, text=True, check=True).stdout
    assert "what-if across ranks: fused_sparse_dist on every rank: job step " in text
    assert "would not help" in text.split("fused_sparse_dist on every rank")[1].splitlines()[0]
