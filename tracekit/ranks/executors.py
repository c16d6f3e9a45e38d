"""Where the per-rank work runs: this process, local worker processes, or a Dask cluster.

``run(task, paths, workers=..., scheduler=...)`` calls ``task(path)`` for every path and
returns the results in the order of ``paths``. A path whose worker died (a killed or crashed
process: out of memory, say) gets a ``Failed`` once the executor has tried it again elsewhere:

- ``workers=1`` (or one path): in this process, one after the other.
- local (the default): a pool of ``workers`` processes (default: as many as CPUs, at most one
  per path), forked so they start in milliseconds; small files go in chunks (``chunks``); the ranks of a
  chunk whose process dies are retried once each, in a fresh pool.
- ``scheduler="tcp://HOST:PORT"``: the tasks go to that Dask ``distributed`` scheduler (the
  ``[cluster]`` extra); its workers must see the paths (a shared file system) and import
  tracekit. Each path goes first to the worker it went to before (``_homes``), where its
  caches are. The scheduler re-runs a task whose worker dies on another worker
  (``distributed.scheduler.allowed-failures`` times, 3 by default), then it is ``Failed``.
  An unreachable scheduler, or one without workers, is a ``ClusterError``. Before Dask's
  client is made, ``_probe`` connects itself and reads the scheduler's first message (Dask's
  scheduler speaks first): a port that accepts and never answers, or answers something else
  (an HTTP server), is refused within the timeout, instead of a client that waits for ever or
  reads an HTTP reply as a length of exabytes. Only ``tcp://`` addresses are taken.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import struct
import sys
import time
from urllib.parse import urlsplit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from tracekit.errors import ClusterError
from tracekit.ranks.inputs import Failed

CONNECT_TIMEOUT_S = 10.0
"""How long to try to reach a Dask scheduler, and to wait for its first worker."""


def default_workers(n_tasks: int) -> int:
    """Local worker processes for ``n_tasks``: the CPUs this process may use, at most one per task."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_tasks))


def run(task: Callable[[str], object], paths: Sequence[str], *, workers: int | None = None,
        scheduler: str | None = None, connect_timeout_s: float | None = None) -> list:
    """``task(path)`` for every path, in the order of ``paths`` (see the module docstring);
    ``connect_timeout_s``: for a scheduler (None: ``CONNECT_TIMEOUT_S``)."""
    if workers is not None and workers < 1:
        raise ClusterError(f"--workers must be at least 1, not {workers}")
    if scheduler is not None:
        timeout = CONNECT_TIMEOUT_S if connect_timeout_s is None else connect_timeout_s
        if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
            raise ClusterError(f"--scheduler-timeout must be a finite number of seconds > 0, "
                               f"not {timeout}")
        return _dask(task, paths, scheduler, float(timeout))
    n = default_workers(len(paths)) if workers is None else min(workers, max(len(paths), 1))
    if n <= 1:
        return [task(p) for p in paths]
    return _local(task, paths, n)


def _init_worker() -> None:
    # the ranks already keep every CPU busy: no forked decoding helper per load
    os.environ["TRACEKIT_LOAD_PARALLEL"] = "0"
    # what the worker inherited (the imports: ~56,000 objects) is alive until it ends: the
    # collector's full passes, one every few ranks, need not walk it again (a rank of a few
    # events paid ~1.3 ms of collection, 0.7 with it frozen), nor write to the pages it shares
    # with the parent
    import gc

    gc.freeze()
    # the objects a rank's analysis makes are freed by their counts: at the default threshold
    # (700) the collector ran 2-3 times a tiny rank, for 0.4-2 ms of its ~25-40 ms, and
    # collected nothing (200 tiny ranks, 2026-11-28); once every 20,000 allocations it still
    # bounds what cycles there may be
    gc.set_threshold(20_000, 10, 10)


def _pool(n: int) -> ProcessPoolExecutor:
    import multiprocessing as mp

    method = "fork" if sys.platform.startswith("linux") else None
    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context(method),
                               initializer=_init_worker)


CHUNK_BYTES = 256 << 10
"""Local tasks go to the workers in chunks of small files, consecutive paths of at most this
many bytes together (a bigger file, or one whose size is unknown, is a chunk of its own): a task
handed to a worker process and its result handed back cost the parent and the worker ~0.5 ms of
CPU together whatever the rank's size, which a job of a thousand tiny ranks paid a thousand
times, while ranks this small take a few ms each: a chunk of them keeps the workers evenly busy."""
MAX_CHUNK = 16
"""The most paths in one chunk."""
CHUNKS_PER_WORKER = 8
"""A chunk holds fewer paths where needed to give every worker at least this many chunks."""


@dataclass(frozen=True)
class _Chunk:
    """``task`` over several paths in one worker call (picklable: the worker runs it)."""

    task: Callable[[str], object]

    def __call__(self, paths: Sequence[str]) -> list:
        return [self.task(p) for p in paths]


def chunks(sizes: Sequence[int | None], n_workers: int) -> list[range]:
    """Positions of the paths whose file sizes are ``sizes`` (None: unknown) cut into
    consecutive chunks for ``n_workers`` local workers (``CHUNK_BYTES``, ``MAX_CHUNK``,
    ``CHUNKS_PER_WORKER``)."""
    n = len(sizes)
    cap = max(1, min(MAX_CHUNK, n // max(1, n_workers * CHUNKS_PER_WORKER)))
    out: list[range] = []
    start = total = 0
    limit = _tail_cap(cap, n, n_workers)
    for i, size in enumerate(sizes):
        size = CHUNK_BYTES + 1 if size is None else size
        if i > start and (i - start >= limit or total + size > CHUNK_BYTES):
            out.append(range(start, i))
            start, total = i, 0
            limit = _tail_cap(cap, n - i, n_workers)
        total += size
    if n:
        out.append(range(start, n))
    return out


def _tail_cap(cap: int, left: int, n_workers: int) -> int:
    """The most paths in the next chunk when ``left`` paths are left: ``cap``, less towards the
    end (a ``TAIL_CHUNKS``-th of a worker's share of what is left), so that the workers finish together
    instead of one waiting for the other's last chunk of sixteen ranks (~0.3 s)."""
    return max(1, min(cap, left // max(1, n_workers * TAIL_CHUNKS)))


TAIL_CHUNKS = 2
"""Towards the end a chunk holds at most 1/``TAIL_CHUNKS`` of a worker's share of what is left."""


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):  # a URL, a file gone: the task says why
        return None


def _local(task, paths: Sequence[str], n: int) -> list:
    results: list = [None] * len(paths)
    lost: list[int] = []
    with _pool(n) as pool:
        futures = {pool.submit(_Chunk(task), [paths[i] for i in c]): c
                   for c in chunks([_size(p) for p in paths], n)}
        for fut in as_completed(futures):
            try:
                for i, r in zip(futures[fut], fut.result()):
                    results[i] = r
            except BrokenProcessPool:  # a worker died: every task still in the pool fails
                lost.extend(futures[fut])
    for i in sorted(lost):  # which one killed it is unknown: again, one process each
        with _pool(1) as pool:
            try:
                results[i] = pool.submit(task, paths[i]).result()
            except BrokenProcessPool:
                results[i] = Failed(paths[i], "the process analysing it died, twice "
                                              "(out of memory?)")
    return results


def _homes(client, paths: Sequence[str]) -> list[str]:
    """The worker each path goes to first: the same one every run while the cluster's workers
    stay the same (by a hash of the path over the workers sorted by name), so that a rank finds
    its parsed trace and report in the cache of the worker that analysed it before. Any worker
    may still take it (``allow_other_workers``): an idle one steals, a dead one is replaced."""
    info = client.scheduler_info()["workers"]
    workers = sorted(info, key=lambda a: (str(info[a].get("name", a)), a))
    return [workers[int(hashlib.sha1(os.fsencode(p)).hexdigest(), 16) % len(workers)]
            for p in paths]


MAX_HANDSHAKE_BYTES = 1 << 20
"""The scheduler's first message (its handshake: ~60 bytes) may not claim more than this."""


def _probe(address: str, timeout: float) -> None:
    """Connects to ``address`` and reads the first message a Dask scheduler sends, within
    ``timeout`` seconds; ``ClusterError`` when the address is not ``tcp://HOST:PORT``, nothing
    listens, nothing is said in time, or what is said is not Dask's handshake."""
    text = address if "://" in address else "tcp://" + address
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ClusterError(f"--scheduler {address!r}: not tcp://HOST:PORT ({exc})") from None
    if parts.scheme != "tcp" or not host or port is None:
        raise ClusterError(f"--scheduler {address!r}: only tcp://HOST:PORT addresses are "
                           "supported")
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            data = b""
            while len(data) < 8 or len(data) < 8 + struct.unpack("<Q", data[:8])[0]:
                if len(data) >= 8 and struct.unpack("<Q", data[:8])[0] > MAX_HANDSHAKE_BYTES:
                    raise ClusterError(f"the server at {address} does not speak Dask's protocol "
                                       f"(it answered {data[:24]!r})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    raise ClusterError(f"the server at {address} closed the connection without "
                                       "speaking Dask's protocol")
                data += chunk
    except socket.timeout:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: no answer within "
                           f"{timeout:g} s") from None
    except OSError as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: "
                           f"{exc.strerror or exc}") from None
    if b"compression" not in data and b"python" not in data:
        raise ClusterError(f"the server at {address} does not speak Dask's protocol (it "
                           f"answered {data[:24]!r})")


def _dask(task, paths: Sequence[str], address: str, timeout: float) -> list:
    try:
        import distributed
    except ImportError:
        raise ClusterError("--scheduler needs Dask's distributed package: "
                           "pip install 'tracekit[cluster]'") from None
    _probe(address, timeout)
    try:
        client = distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    with client:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (TimeoutError, OSError):
            raise ClusterError(f"the Dask scheduler at {address} has no workers "
                               f"(none joined within {timeout:g} s)") from None
        homes = _homes(client, paths)
        futures = [client.submit(task, p, pure=False, workers=[h], allow_other_workers=True)
                   for p, h in zip(paths, homes)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(paths)
        for fut in distributed.as_completed(futures, loop=client.loop):
            i = index[fut.key]
            if fut.status == "error":
                exc = fut.exception()
                if isinstance(exc, distributed.KilledWorker):
                    results[i] = Failed(paths[i], "every Dask worker that tried to analyse it "
                                                  "died (out of memory?)")
                    continue
                if isinstance(exc, ImportError):
                    raise ClusterError(f"the Dask workers at {address} cannot run tracekit: "
                                       f"{exc}") from None
                raise exc
            results[i] = fut.result()
        return results
