"""The per-rank work: one trace file -> its rank object (whole, or its ``summary``), or a
``Failed`` saying why the file cannot be read. It runs wherever the executor puts it (this
process, a local worker process, a Dask worker) and returns only that small picklable value,
never the parsed trace. Caches (parsed trace, report) are those of the machine it runs on; a
rank given as a URL is fetched there first (``sources.local_copy``).
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass

from tracekit.errors import TracekitError
from tracekit.ranks.inputs import Failed
from tracekit.report.keys import BRIEF_EXPLAIN_KEYS, BRIEF_EXPLAIN_STEP_KEYS, BRIEF_OVERHEAD_KEYS

SUMMARY_KEYS = ("source", "rank", "schema", "platform", "warnings", "rules", "headline",
                "steps", "collectives", "identity", "explain", "profile", "skeleton")
"""What the cross-rank part reads of a rank object; ``summary`` keeps only these keys."""


EXPLAIN_KEYS, EXPLAIN_STEP_KEYS = BRIEF_EXPLAIN_KEYS, BRIEF_EXPLAIN_STEP_KEYS
"""What ``summary`` keeps of a rank's explain section and of each of its steps."""


def summary(rank: dict) -> dict:
    """A rank object without the sections the job does not read (allocator series, stalls...);
    of ``explain``, the bound, its breakdown and findings, of its untraced estimate only
    ``BRIEF_OVERHEAD_KEYS``, and per step only
    ``EXPLAIN_STEP_KEYS``; its collective kernels and skeleton as columns
    (``tracekit.ranks.compact``: ``plain`` gives its JSON values back)."""
    from tracekit.ranks.compact import compact

    out = {k: rank[k] for k in SUMMARY_KEYS if k in rank}
    ex = out.get("explain")
    if isinstance(ex, dict):
        o = ex.get("overhead")
        out["explain"] = {**{k: ex[k] for k in EXPLAIN_KEYS if k in ex},
                          "overhead": {k: o[k] for k in BRIEF_OVERHEAD_KEYS if k in o}
                          if isinstance(o, dict) else o,
                          "steps": [{k: s[k] for k in EXPLAIN_STEP_KEYS if k in s}
                                    for s in ex.get("steps") or [] if isinstance(s, dict)]}
    return compact(out)


@dataclass(frozen=True)
class RankTask:
    """What every rank's work is asked (the same for all ranks of a job)."""

    rules_path: str | None = None
    """A phase-rules TOML file (an absolute path the workers can read), None: the defaults."""
    cache_dir: str | None = None
    """The cache directory; None: the worker's own default (``$TRACEKIT_CACHE_DIR`` or its
    user cache dir)."""
    use_cache: bool = True
    """Read and write the parsed-trace and report caches."""
    with_hta: bool | None = False
    """Include the HTA section (None: only for traces of at most 500,000 events)."""
    whole: bool = True
    """Return the whole rank object; False: its ``summary``."""
    with_skeleton: bool = True
    """With the skeleton the job's graph joins (``JobConfig.job_graph``)."""

    def __call__(self, path: str) -> dict | Failed:
        if _on_dask_worker():
            return _in_own_thread(self._work, path)
        return self._work(path)

    def _work(self, path: str) -> dict | Failed:
        from tracekit.loaded import report_for_path
        from tracekit.ranks import sources

        local = None
        try:
            if sources.is_url(path):
                from tracekit._files import cache_dir

                local = sources.local_copy(
                    path, cache_dir(self.cache_dir) if self.use_cache else None)
            else:
                from tracekit._files import check_readable

                check_readable(path, "trace file")  # a rank is a file: not a FIFO, a directory
            got = report_for_path(local or path, rules_path=self.rules_path,
                                  cache_dir=self.cache_dir, use_cache=self.use_cache,
                                  progress=False, with_hta=self.with_hta,
                                  with_skeleton=self.with_skeleton,
                                  keys=None if self.whole else SUMMARY_KEYS)
        except TracekitError as exc:
            msg = str(exc)
            for prefix in (f"{path}: ", f"{local}: "):
                msg = msg[len(prefix):] if msg.startswith(prefix) else msg
            return Failed(path, msg)
        finally:
            if local is not None and not self.use_cache:
                os.unlink(local)  # a temporary copy
        rank = got[0]
        rank["source"] = path
        return rank if self.whole else summary(rank)


def _on_dask_worker() -> bool:
    if "distributed" not in sys.modules:
        return False
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def _in_own_thread(fn, *args):
    """``fn(*args)`` in a thread of its own. A Dask worker samples the stacks of the threads
    running its tasks (its profiler, every 10 ms) and holds the frames it sampled for a moment:
    a held frame of the loader keeps the events it decoded alive, and the loader decodes in place
    in a buffer it must then release (``BufferError: memoryview has N exported buffers``). A
    thread the worker did not start is not sampled."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the task's thread, raised there
            box["error"] = exc

    t = threading.Thread(target=run, name="tracekit-rank")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
