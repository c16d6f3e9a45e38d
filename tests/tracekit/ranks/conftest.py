"""A generated 8-rank job (``tests.jobgen``), and a real Dask cluster on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobgen import make_job


@pytest.fixture(scope="session")
def job8(tmp_path_factory):
    """8 ranks from our runtime's 2-GPU traces: straggler rank 3, heavy all-to-all receiver rank
    5, four hosts of two ranks with their own clocks."""
    d = tmp_path_factory.mktemp("job8")
    return d, make_job(d, 8)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A ``dask scheduler`` and ``dask worker`` processes (one thread each, no nanny: killing a
    worker's process kills the worker), each worker with its own trace cache."""

    def __init__(self, root: Path, n_workers: int) -> None:
        dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
        if dask is None:
            pytest.skip("the dask command is not installed")
        self.root = root
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.procs: list[subprocess.Popen] = []
        self.scheduler = self._start([dask, "scheduler", "--host", "127.0.0.1", "--port",
                                      self.address.rsplit(":", 1)[1], "--no-dashboard"], "scheduler")
        self.workers = []
        self.caches = []
        for i in range(n_workers):
            cache = root / f"worker{i}-cache"
            self.caches.append(cache)
            self.workers.append(self._start(
                [dask, "worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                 "--memory-limit", "0", "--local-directory", str(root / f"worker{i}"),
                 "--name", f"w{i}"], f"worker{i}", TRACEKIT_CACHE_DIR=str(cache)))
        from distributed import Client

        with Client(self.address, timeout=60) as c:
            c.wait_for_workers(n_workers, timeout=120)

    def _start(self, cmd, name, **env):
        log = open(self.root / f"{name}.log", "wb")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **env}, cwd=self.root)
        self.procs.append(p)
        return p

    def kill(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for p in self.procs:  # nothing to keep: no graceful shutdown (it takes seconds)
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()


@pytest.fixture
def cluster(tmp_path):
    pytest.importorskip("distributed")
    c = Cluster(tmp_path, 2)
    yield c
    c.close()
