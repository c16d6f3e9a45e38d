"""bench/common/joined.py: a fix predicted for a rank of a job on the job's graph, where one rank's
trace alone sees a saving that another rank's pace takes away."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common.joined import complete_job, joined_fix
from tests.tracekit.ranks.jobhelp import PERIOD, waiting_job
from tracekit.analyses import explain
from tracekit.phases import default_rules
from tracekit.trace import load

RULES = default_rules()


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
