"""``tracekit explain`` of a rank in its job: a rank that waits is told so, and offered the fixes
of the rank it waits for with what they save the job's step (each replayed on the job's graph),
its own prediction apart; ``--what-if rank:R:SPEC`` changes one rank and replays the job.

The job (``jobhelp.waiting_job`` with a 600-us period): rank 0's GPU work (147 us a step) waits
~450 us a step at the all-to-all for rank 1, whose host runs a 580-us op before it launches
its half of the all-to-all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.tracekit.ranks.jobhelp import waiting_job
from tracekit.report import schema

PERIOD = 600.0


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("waiting")
    waiting_job(d, PERIOD)
    return d


def explain(*args, cache=None):
    cmd = [sys.executable, "-m", "tracekit.cli", "explain", *map(str, args)]
    cmd += ["--cache-dir", str(cache)] if cache else ["--no-cache"]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_a_waiting_rank_is_offered_the_fixes_of_the_rank_it_waits_for(job, cache):
    run = explain(job, "--format", "json", cache=cache)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert schema.problems(doc, schema.ExplainDocument) == []
    by = {e["rank"]: e for e in doc["explain"]}
    j0 = by[0]["job"]
    assert j0["waiting"] and j0["waits_for"][0]["rank"] == 1
    assert 0.3 * PERIOD * 1e3 < j0["waits_for"][0]["ns"] < PERIOD * 1e3
    # rank 1's host finding comes first: on the job's graph it saves about what it saves rank 1
    # alone (rank 1 paces the job), hundreds of us a step
    first = j0["findings"][0]
    assert first["rank"] == 1 and first["id"] == "host" and first["change"] == "host=2"
    assert first["replayed"] and first["helps"] and first["saving_ns"] > 100_000
    assert first["alone_saving_ns"] == pytest.approx(first["saving_ns"], rel=0.25)
    # rank 0's own findings help rank 0 alone and save the job nothing
    own = [f for f in j0["findings"] if f["rank"] == 0]
    assert own and all(f["alone_helps"] and f["alone_saving_ns"] > 0 for f in own)
    assert all(f["replayed"] and not f["helps"] and abs(f["saving_ns"]) <= 1_000 for f in own)
    assert {f["id"] for f in own} >= {"fused_sparse_dist"}
    # rank 1 does not wait: its own findings only, replayed the same way
    j1 = by[1]["job"]
    assert not j1["waiting"] and {f["rank"] for f in j1["findings"]} == {1}
    assert j1["findings"][0]["saving_ns"] == first["saving_ns"]


def test_the_text_says_whom_a_rank_waits_for_and_what_each_fix_saves_the_job(job, cache):
    run = explain(job, "--rank", "0", cache=cache)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[2] == "In its job"
    assert any(x.startswith("  bound: waiting for rank 1 (") and "most at all_to_all" in x
               for x in lines)
    found = [x for x in lines if x.startswith("    ") and x[4:5].isdigit()]
    assert found[0].startswith("    1. rank 1: host time") and ": saves the job " in found[0]
    assert "; rank 1 alone: saves " in found[0]
    fsd = next(x for x in found if "rank 0: the next lookup waits for the dense optimizer" in x)
    assert "would not help the job" in fsd and "; rank 0 alone: saves " in fsd
    assert any(x.startswith("Findings (of this rank alone: in its job it waits ") for x in lines)


def test_one_ranks_file_beside_its_job_is_explained_in_it(job, cache, tmp_path):
    """The file of rank 0, its job's every rank beside it: the same place in the job as with the
    directory; a rank whose job is not all there: explained alone."""
    whole = explain(job, "--rank", "0", cache=cache)
    one = explain(job / "trace_rank0.json.gz", cache=cache)
    assert one.returncode == 0, one.stderr
    head = lambda out: out.split("\nFindings (")[0].splitlines()[1:]  # noqa: E731
    assert head(one.stdout) == head(whole.stdout) and "In its job" in one.stdout
    import shutil

    shutil.copy(job / "trace_rank0.json.gz", tmp_path / "trace_rank0.json.gz")
    alone = explain(tmp_path / "trace_rank0.json.gz", cache=cache)
    assert alone.returncode == 0, alone.stderr
    assert "In its job" not in alone.stdout and "\nFindings\n" in alone.stdout


def test_what_if_a_phase_or_the_host_of_one_rank_is_faster(job, cache):
    """``--what-if rank:R:SPEC``: rank 1's host 2x faster shortens the job (contention-free and
    aware alike); rank 0's backward 2x faster, or a kernel name no rank has, saves nothing."""
    run = explain(job, "--format", "json", "--what-if", "rank:1:host=2", "--what-if",
                  "rank:0:phase:backward=2", "--what-if", "rank:0:kernel:no_such_kernel=2",
                  "--what-if", "rank:0:fix:fused_sparse_dist", cache=cache)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert schema.problems(doc, schema.ExplainDocument) == []
    rows = {w["id"]: w for w in doc["explain"][0]["job"]["what_ifs"]}
    host = rows["rank:1:host=2"]
    assert host["ranks_changed"] == [1] and host["applies"] and host["helps"]
    assert host["saving_ns"] > 100_000 and host["saving_contention_ns"] == host["saving_ns"]
    bwd = rows["rank:0:phase:backward=2"]
    assert bwd["applies"] and abs(bwd["saving_ns"]) <= 1_000 and not bwd["helps"]
    none = rows["rank:0:kernel:no_such_kernel=2"]
    assert not none["applies"] and none["saving_ns"] == 0 and "matches nothing" in none["note"]
    fsd = rows["rank:0:fix:fused_sparse_dist"]
    assert fsd["applies"] and abs(fsd["saving_ns"]) <= 1_000
    # every rank's section lists the same what-ifs across ranks
    assert doc["explain"][1]["job"]["what_ifs"] == doc["explain"][0]["job"]["what_ifs"]
    text = explain(job, "--rank", "0", "--what-if", "rank:1:host=2", cache=cache).stdout
    line = next(x for x in text.splitlines() if "host 2x faster on rank 1" in x)
    assert ", saves " in line and "(contention-aware: job step " in line


@pytest.mark.parametrize("spec, says", [
    ("rank:7:host=2", "no rank 7 in the job's graph (ranks: 0, 1)"),
    ("rank:one:host=2", "the rank must be a whole number, not 'one'"),
    ("rank:1:phase:no_such_phase=2", "'rank:1:phase:no_such_phase=2': no phase 'no_such_phase'"),
    ("rank:1:host=0.5", "the factor must be a finite number >= 1"),
    ("rank:1:kernel:([=2", "invalid regular expression"),
    ("rank:1:fix:faster", "no known fix 'faster'"),
    ("rank:1", "expected rank:R:SPEC"),
])
def test_a_bad_what_if_across_ranks_is_one_line_and_exit_2(job, cache, spec, says):
    run = explain(job, "--what-if", spec, cache=cache)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and says in run.stderr, run.stderr


def test_a_what_if_across_ranks_needs_the_jobs_directory(job, cache, tmp_path):
    run = explain(job / "trace_rank0.json.gz", "--what-if", "rank:1:host=2", cache=cache)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "give the directory of the job's rank traces" in \
        run.stderr
    # a directory of one rank's trace is no job either
    import shutil

    shutil.copy(job / "trace_rank0.json.gz", tmp_path / "trace_rank0.json.gz")
    run = explain(tmp_path, "--what-if", "rank:0:host=2", cache=cache)
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1
    assert "changes one rank of a job" in run.stderr
