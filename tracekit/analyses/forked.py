"""One section computed in a forked child while this process computes the others.

``analyze_trace(..., parallel=True)`` (the CLI's cold path) hands the sections other than
explain to a child forked once the sections they share with explain (phases, steps) are computed
and memoised: the child inherits them, computes its sections and sends back their pickled
results through a pipe, while the parent computes explain (two thirds of the sections' CPU time
on a big trace, and the largest result) on the second core. (Until 2026-11-24 the child computed
explain: on the 508 MB stand-in that child took 1.44-1.88 CPU-s for 1.06-1.3 in-process, the
fork's copy-on-write and the pickled critical path included.)

The child never decides anything: whatever fails there (an exception, a killed process, a
result that does not unpickle) makes ``Forked.result`` compute the section here, as it always
was, so the result and any error are the same with or without it. Used only where a fork is
safe and helps (``tracekit._fork.available``: Linux, more than one CPU, no thread
running but the loader's own cache writer; ``TRACEKIT_LOAD_PARALLEL=0`` turns it off).
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

SAFE_THREADS = ("tracekit-cache-write",)
"""Threads that may be running when the child is forked: the loader's cache writer only writes
its entry (its file, its own lock); the child never touches either."""


class Forked(Generic[T]):
    """``fn()`` computed in a forked child (without ``fork``, or where that is not available:
    by ``result``, here)."""

    def __init__(self, fn: Callable[[], T], *, fork: bool = True) -> None:
        from tracekit._fork import available

        self._fn = fn
        self._pid: int | None = None
        self._fd = -1
        if not fork or not available(allow_threads=SAFE_THREADS):
            return
        try:
            r, w = os.pipe()
        except OSError:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            with warnings.catch_warnings():  # 3.12+: "multi-threaded, use of fork()": see above
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # the child: compute, send, leave without running the parent's exit code
            code = 1
            try:
                os.close(r)
                data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(w, "wb") as f:
                    f.write(data)
                code = 0
            except BaseException:  # noqa: BLE001 - the parent computes it again and raises
                pass
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._fd = pid, r

    def result(self) -> T:
        """The child's result; computed here when there was no child or it failed."""
        if self._pid is None:
            return self._fn()
        pid, self._pid = self._pid, None
        data = b""
        try:
            with os.fdopen(self._fd, "rb") as f:
                data = f.read()
        except OSError:
            pass
        try:
            _, status = os.waitpid(pid, 0)
            ok = os.waitstatus_to_exitcode(status) == 0
        except ChildProcessError:
            ok = False
        if ok and data:
            try:
                return pickle.loads(data)
            except Exception:  # noqa: BLE001 - computed here instead
                pass
        return self._fn()


__all__ = ["Forked"]
