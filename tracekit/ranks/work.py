"""The per-rank work: one trace file -> its rank object (whole, or its ``summary``), or a
``Failed`` saying why the file cannot be read. It runs wherever the executor puts it (this
process, a local worker process, a Dask worker) and returns only that small picklable value,
never the parsed trace. Caches (parsed trace, report) are those of the machine it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.errors import TracekitError
from tracekit.ranks.inputs import Failed

SUMMARY_KEYS = ("source", "rank", "schema", "platform", "warnings", "rules", "headline",
                "steps", "collectives", "identity", "explain")
"""What the cross-rank part reads of a rank object; ``summary`` keeps only these keys."""


def summary(rank: dict) -> dict:
    """A rank object without the sections the job does not read (allocator series, stalls...)."""
    return {k: rank[k] for k in SUMMARY_KEYS if k in rank}


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

    def __call__(self, path: str) -> dict | Failed:
        from tracekit.api import report_for_path

        try:
            got = report_for_path(path, rules_path=self.rules_path, cache_dir=self.cache_dir,
                                  use_cache=self.use_cache, progress=False,
                                  with_hta=self.with_hta)
        except TracekitError as exc:
            msg = str(exc)
            prefix = f"{path}: "
            return Failed(path, msg[len(prefix):] if msg.startswith(prefix) else msg)
        rank = got[0]
        return rank if self.whole else summary(rank)
