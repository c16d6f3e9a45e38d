"""The per-rank work on a real Dask cluster (a scheduler and two workers on 127.0.0.1): the
same job as the local processes give, a worker killed mid-run survived, one clear line for a
scheduler that is not there."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tests.tracekit.ranks.conftest import free_port
from tracekit.ranks import analyze_job

pytestmark = pytest.mark.slow


def test_cluster_result_equals_local_and_caches_stay_on_the_workers(job8, cluster, tmp_path):
    d, _ = job8
    local = analyze_job(d, cache_dir=tmp_path / "local", whole=True)
    remote = analyze_job(d, scheduler=cluster.address, whole=True)
    assert remote.job == local.job
    assert remote.ranks == local.ranks
    assert not remote.problems
    # the parsed traces and reports were cached where the work ran, on each worker
    for cache in cluster.caches:
        assert any(p.suffix == ".json" for p in (cache / "reports").iterdir())


def test_a_worker_killed_mid_run_is_survived(job8, cluster, tmp_path):
    from distributed import Client

    d, _ = job8
    local = analyze_job(d, cache_dir=tmp_path / "local", whole=False)
    got = {}

    def run():  # no cache: every rank is parsed, so the run lasts seconds
        got["rep"] = analyze_job(d, scheduler=cluster.address, use_cache=False, whole=False)

    t = threading.Thread(target=run)
    t.start()
    with Client(cluster.address, timeout=30) as c:
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline:
            busy = {w: ks for w, ks in c.processing().items() if ks}
            info = c.scheduler_info()["workers"]
            for w in busy:
                if info.get(w, {}).get("name") == "w0":
                    victim = w
            time.sleep(0.05)
        assert victim is not None, "worker w0 never ran a rank"
        cluster.kill(cluster.workers[0])
    t.join(timeout=300)
    assert not t.is_alive()
    rep = got["rep"]
    assert not rep.problems and len(rep.ranks) == 8
    assert rep.job == local.job


def test_unreachable_scheduler_is_one_line_and_exit_2(job8, tmp_path):
    pytest.importorskip("distributed")  # without it the CLI says to install tracekit[cluster] (tested elsewhere)
    d, _ = job8
    addr = f"tcp://127.0.0.1:{free_port()}"
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(d), "--scheduler",
                        addr, "--scheduler-timeout", "2", "--cache-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith(f"tracekit: error: cannot reach the Dask scheduler at {addr}")
    assert r.stderr.count("\n") == 1, r.stderr
