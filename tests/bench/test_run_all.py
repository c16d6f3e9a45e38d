"""gpu/run_all.sh --dry-run: each part's name, time limit and command on one line, nothing run or
written; the parts made of one function call (pipelines_part, holdout_part, refit_part, jobs_part,
jobs_after_part) give the commands the held-out sets and refits ran, word for word."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

from bench.common import REPO

SCRIPT = REPO / "gpu" / "run_all.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


def _run(tmp_path, *parts: str, env: dict | None = None, flag: bool = True):
    e = {k: v for k, v in os.environ.items() if k not in ("OUT", "RUN_ALL_DRY")}
    e.update(WORK=str(tmp_path / "work"), **(env or {}))
    args = ["bash", str(SCRIPT)] + (["--dry-run"] if flag else []) + list(parts)
    return subprocess.run(args, env=e, capture_output=True, text=True, timeout=60, check=True)


def _dry(tmp_path, *parts: str, **kw) -> list[str]:
    return _run(tmp_path, *parts, **kw).stdout.splitlines()


def _words(line: str) -> tuple[str, int, list[str]]:
    name, limit, rest = line.split(" ", 2)
    return name, int(limit), shlex.split(rest)


def test_held_out_and_refit_parts_give_the_commands_they_ran(tmp_path):
    """One part of each function, its command as the sets ran it (held-out set 12, refit 10,
    the 4-rank job with 6 profiled steps): with --dry-run and with RUN_ALL_DRY=1 alike, and
    nothing under WORK."""
    lines = _dry(tmp_path, "holdout12a", "holdout12b", "refit10b", "jobs4x", "jobs2n", "jobs4f6")
    assert lines == _dry(tmp_path, "holdout12a", "holdout12b", "refit10b", "jobs4x", "jobs2n",
                         "jobs4f6", env={"RUN_ALL_DRY": "1"}, flag=False)
    got = {n: (lim, w) for n, lim, w in map(_words, lines)}
    out = ' --out "$OUT"'
    plan12 = "multitask_b26k:sparse+fused,multitask_h72_b18k:sparse+fused,dense_b14k:sparse+fused"
    assert got["holdout12a"] == (270, ["bash", "-c", (
        "python3 -m bench.pipelines --gpus 1 --passes 2 --budget-s 150 --min-rounds 6 --plan "
        f"{plan12} --profile-options default,shapes,stack --window-variants sparse "
        "--window-trace-max-mb 3 --window-traces-max-mb 10" + out)])
    assert got["holdout12b"] == (250, ["bash", "-c", (
        "python3 -m bench.pipelines --gpus 2 --passes 2 --budget-s 170 --min-rounds 6 --plan "
        f"{plan12} --profile-options default" + out)])
    assert got["refit10b"] == (230, ["bash", "-c", (
        "python3 -m bench.pipelines --gpus 2 --passes 2 --budget-s 120 --min-rounds 6 --plan "
        "multitask_b14k:sparse+fused,multitask_h40_b26k:sparse+fused --profile-options default"
        + out)])
    jobs = "torchrun --standalone --nproc-per-node {} gpu/ranks_jobs.py --preset {} --delay-rank {} "
    assert got["jobs4x"] == (260, ["bash", "-c", jobs.format(4, "jobs_bold", 2) + (
        "--delay-ms 1.5 --budget-s 100 --rounds-after-traces 10" + out)])
    assert got["jobs2n"] == (170, ["bash", "-c", jobs.format(2, "jobs_lite", 0) + (
        "--delay-ms 3 --budget-s 100" + out)])
    assert got["jobs4f6"] == (300, ["bash", "-c", jobs.format(4, "jobs_flat", 3) + (
        "--delay-ms 2 --profile-steps 6 --budget-s 100 --rounds-after-traces 10" + out)])
    assert not (tmp_path / "work").exists()


def test_every_part_dry_runs_to_one_line(tmp_path):
    """Every part name of the script's case list: one line each, its name first, in the order
    asked, a positive limit; a name that is no part is said on stderr and listed nowhere."""
    names = re.findall(r"^    ([a-z0-9_]+)\) ", SCRIPT.read_text(), re.M)
    assert len(names) > 60 and len(set(names)) == len(names)
    got = _run(tmp_path, *names, "no_such_part")
    lines = [x.split(" ", 2) for x in got.stdout.splitlines()]
    assert [x[0] for x in lines] == names
    assert all(int(x[1]) > 0 and x[2] for x in lines)
    assert got.stderr.strip() == "unknown part: no_such_part"
