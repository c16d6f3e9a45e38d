"""Sections computed in a forked child (``tracekit.analyses.forked``): the same result, and the
parent's own computation whenever the child fails. A child is forked only when no other thread
runs, and other tests in this pytest process may leave threads behind, so the fork checks run in
a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK = r"""
import os, signal, sys
from tracekit.analyses import analyze_trace, forked
from tracekit.trace import _parallel, load
from tracekit.report import to_dict

if not _parallel.available():
    print("SKIP: no fork here"); sys.exit(0)
parent = os.getpid()
pids = []
real_init = forked.Forked.__init__
def init(self, fn, **kw):
    real_init(self, fn, **kw)
    pids.append(self._pid)
forked.Forked.__init__ = init

from tracekit.analyses import explain
explain.FORK_WHAT_IFS_MIN_NODES = 0  # the generic what-ifs' child too, on a small trace

t = load(sys.argv[1], use_cache=False).traces[0]
a = to_dict(analyze_trace(t, with_hta=False, parallel=True))
forks = [p for p in pids if p is not None]
assert len(forks) == 2, f"{len(forks)} children forked: the other sections', the what-ifs'"
n = len(pids)
b = to_dict(analyze_trace(t, with_hta=False))
assert all(p is None for p in pids[n:]) and a == b, "different reports"
assert a["explain"]["bound"] is not None and a["explain"]["steps"]
assert any(w["id"] in ("host", "syncs") or w["id"].startswith("phase:")
           for w in a["explain"]["what_ifs"] if w["predicted_step_ns"] is not None)

def killed():  # the child dies before it answers: the parent computes it
    if os.getpid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return "here"
assert forked.Forked(killed).result() == "here"

def fails():  # raises in the child and here: the parent's own error
    raise ValueError("boom " + str(os.getpid() == parent))
try:
    forked.Forked(fails).result()
    raise AssertionError("no error")
except ValueError as exc:
    assert str(exc) == "boom True", exc

def unpicklable():  # a result that cannot travel back: computed here
    return lambda: os.getpid() == parent
assert forked.Forked(unpicklable).result()()
assert forked.Forked(lambda: os.getpid(), fork=False).result() == parent
assert forked.Forked(lambda: os.getpid()).result() != parent
os.environ["TRACEKIT_LOAD_PARALLEL"] = "0"
assert forked.Forked(lambda: os.getpid()).result() == parent
print("OK")
"""


@pytest.mark.parametrize("trace", ["sample_traces/pipelines_1gpu/sparse/trace_rank0.json.gz",
                                   "sample_traces/issue5/issue5_writeback_legacy.json.gz"])
def test_explain_in_a_forked_child(trace):
    r = subprocess.run([sys.executable, "-c", CHECK, trace], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    if "SKIP" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_without_fork_computes_here():
    import os

    from tracekit.analyses.forked import Forked

    assert Forked(os.getpid, fork=False).result() == os.getpid()
