"""A job directory with broken, duplicate, foreign and missing ranks: a line per problem, the
other ranks analysed, exit 0 only when every rank was read, and ``check`` fails otherwise."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.tracekit.ranks.jobhelp import Coll, write_job
from tracekit.ranks import analyze_job

COLLS = [Coll("0", "all_to_allv", 1, {r: 100 + 10 * r for r in range(6)}, 400)]


def _run(*args, cache):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *map(str, args),
                           "--cache-dir", str(cache)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory):
    """World size 6: ranks 0, 1, 2 good; rank 3 cut before its events; rank 4 not gzip data;
    a second file declaring rank 1; a rank of an 8-rank job; rank 0 of a run an hour later;
    no file for rank 5."""
    d = tmp_path_factory.mktemp("bad")
    write_job(d, COLLS, world=6, ranks=[0, 1, 2])
    head = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 6}})
    (d / "trace_rank3.json").write_text(head[:-1] + ', "traceEvents": [{"ph": "X", "na')
    (d / "trace_rank4.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage, not deflate")
    shutil.copy(d / "trace_rank1.json", d / "trace_rank1_copy.json")
    other = tmp_path_factory.mktemp("other")
    write_job(other, COLLS, world=8, ranks=[2])
    shutil.copy(other / "trace_rank2.json", d / "z_other_job_rank2.json")
    later = tmp_path_factory.mktemp("later")
    write_job(later, COLLS, world=6, ranks=[0], base_time_ns=1_790_003_600 * 10**9)
    shutil.copy(later / "trace_rank0.json", d / "z_later_run_rank0.json")
    return d


def test_problems_by_name_and_the_other_ranks_analysed(bad_dir, tmp_path):
    rep = analyze_job(bad_dir, cache_dir=tmp_path, workers=1, whole=False)
    got = sorted((p.kind, (p.source or "").rsplit("/", 1)[-1], p.rank) for p in rep.problems)
    assert got == [
        ("duplicate_rank", "trace_rank1_copy.json", 1),
        ("missing", "", 5),
        ("other_job", "z_later_run_rank0.json", 0),
        ("other_job", "z_other_job_rank2.json", 2),
        ("unreadable", "trace_rank3.json", 3),
        ("unreadable", "trace_rank4.json.gz", 4),
    ]
    msgs = {p.source.rsplit("/", 1)[-1]: p.message for p in rep.problems if p.source}
    assert "before its first complete event" in msgs["trace_rank3.json"]
    assert "world size 8" in msgs["z_other_job_rank2.json"]
    assert "3,600 s after" in msgs["z_later_run_rank0.json"]
    assert [r["rank"] for r in rep.ranks] == [0, 1, 2]
    assert rep.job["complete"] is False and rep.job["ranks_read"] == 3
    assert rep.job["matching"]["instances"] == 1  # the three good ranks still matched


def test_cli_lines_and_exit_codes(bad_dir, tmp_path):
    r = _run("analyze", bad_dir, cache=tmp_path)
    assert r.returncode == 2
    assert r.stdout.startswith(f"== job {bad_dir}: 3 ranks read of world size 6 (INCOMPLETE)")
    # six problems of five shapes: three lines, the last counting the rest
    lines = r.stderr.splitlines()
    assert len(lines) == 3 and all(x.startswith("tracekit: error:") for x in lines), lines
    assert lines[2] == ("tracekit: error: 4 more problems and warnings (every one: --verbose, or "
                        "--format json)")
    r = _run("analyze", bad_dir, "--verbose", cache=tmp_path)
    errors = [x for x in r.stderr.splitlines() if x.startswith("tracekit: error:")]
    assert len(errors) == 6 and "Traceback" not in r.stderr
    assert any("trace_rank4.json.gz" in x for x in errors)
    assert any(x.endswith("rank 5 of world size 6: no trace file") for x in errors)
    c = _run("check", bad_dir, "--max", "stall_total=1s", cache=tmp_path)
    assert c.returncode == 1
    assert "all ranks read" in c.stdout and "FAIL" in c.stdout
    j = _run("check", bad_dir, "--max", "stall_total=1s", "--format", "json", cache=tmp_path)
    row = next(x for x in json.loads(j.stdout)["checks"] if x["key"] == "ranks_read")
    assert (row["bound"], row["value"], row["passed"]) == (6, 3, False)


def test_complete_job_exits_0(tmp_path):
    d = tmp_path / "job"
    write_job(d, [Coll("0", "all_to_allv", 1, {0: 100, 1: 130}, 400)], world=2)
    r = _run("analyze", d, cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "(complete)" in r.stdout.splitlines()[0]
    c = _run("check", d, "--max", "stall_total=1s", cache=tmp_path / "c")
    assert c.returncode == 0 and "all ranks read" in c.stdout


def test_empty_directory_is_one_error(tmp_path):
    (tmp_path / "d").mkdir()
    r = _run("analyze", tmp_path / "d", cache=tmp_path / "c")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no trace files" in r.stderr


def test_inputs_are_never_written(bad_dir, tmp_path):
    before = {p.name: p.read_bytes() for p in bad_dir.iterdir()}
    _run("analyze", bad_dir, "--format", "json", cache=tmp_path)
    assert {p.name: p.read_bytes() for p in bad_dir.iterdir()} == before
