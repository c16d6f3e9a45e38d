"""tracekit as a library: the one front door, for a trace file and a directory of ranks alike.

    from tracekit import api
    lt = api.open("rank0.json.gz")      # a LoadedTrace: load once, ask everything
    lt.analysis().steps.gpu_p90_ns; lt.explain(("host=2",)).findings; lt.report()["headline"]
    api.reports("run/")                 # the report objects of a file, or of a job's ranks

- ``open(path)``: one rank's ``LoadedTrace`` (``tracekit.loaded``); ``load(path)`` every
  rank's, ``loading(path)`` the same as a ``with`` block (the CLI's cold path).
- ``reports(path)``: what ``tracekit analyze PATH`` reports: a file's rank objects through the
  report cache (``report_for_path``), or a directory analysed as one job (``tracekit.ranks``),
  with its job object and the files that could not be read; ``job_document(directory)`` is
  the JSON document ``tracekit analyze DIR --format json`` writes.
- ``cached_report(path)``: the report objects the report cache holds for a path, without
  loading anything (``None`` on a miss); ``cached_reports(path)`` also finds a directory's in
  its rank files' own entries. ``analyzed(path)``: every rank loaded and analysed, the reports
  stored in the report cache (what a viewer that keeps traces asks for).
- ``diff_paths(a, b)``: where a rank of ``b`` differs from a rank of ``a``
  (``tracekit.analyses.diff``: ops, kernels, phases, streams, critical path, per step); a
  ``LoadedTrace``'s ``operators()`` and ``kernels()`` are its tables of ops and kernels.
- ``load_rules(path)``: phase rules (``tracekit.phases``), checked when read.
- ``short_labels(paths)``: short unique names for paths, as ``compare`` and the dashboard
  label them.
- The results are the analyses' dataclasses (``tracekit.analyses``) and the JSON objects of
  ``tracekit.report.schema``; ``lanes()`` of a ``LoadedTrace`` is what a timeline draws
  (``Lanes``); ``DEFAULT_STREAM_CUPTI``: CUPTI's id of the default stream, the allocator's
  handle 0 (``tracekit.analyses.snapshot_streams``).

The dashboard uses only this module, those results and ``tracekit.report`` (how tracekit
writes its figures).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit._files import short_labels
from tracekit.loaded import (LoadedTrace, analyze_path, analyzed, diff_paths, explain_path,
                             has_untraced_beside, load, loading, pick_rank, report_for_path)
from tracekit.reportcache import (MAX_REPORTS, REPORT_CACHE_VERSION, cache_problem,
                                  cached_report, cached_reports, report_key, trace_files)

if TYPE_CHECKING:
    from tracekit.ranks import JobConfig


_LAZY = {
    "Lanes": ("tracekit.lanes", "Lanes"),
    "DEFAULT_STREAM_CUPTI": ("tracekit.analyses.snapshot_streams", "DEFAULT_STREAM_CUPTI"),
    "load_rules": ("tracekit.phases", "load_rules"),
}
"""Names of the API whose modules need numpy and pandas: imported when first read, so that a
warm ``tracekit analyze`` (which imports this module) imports neither."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open(path: str | os.PathLike, *, rank: int | None = None, **options: Any) -> LoadedTrace:  # noqa: A001 - api.open, as TraceProcessor's
    """The ``LoadedTrace`` of the rank ``path`` holds (a trace file, or a directory of one
    trace), or of ``rank`` among several; ``options``: ``loading``'s (``rules``,
    ``cache_dir``, ``use_cache``, ``progress``). ``InputError`` when the rank is not there,
    or when the path holds several ranks and none is named."""
    return pick_rank(load(path, **options), rank, path)


def is_job(path: str | os.PathLike) -> bool:
    """Whether ``path`` is analysed as a job of ranks (a directory, or a URL of one) rather
    than as one trace file."""
    from tracekit.ranks.sources import is_url

    p = os.fspath(path)
    return os.path.isdir(p) or is_url(p)


@dataclass(frozen=True)
class Reports:
    """What ``tracekit analyze PATH`` reports on one path."""

    source: str
    """The path, as given."""
    ranks: list[dict]
    """The rank objects (``tracekit.report.schema.Rank``; of a job, whole or their summary)."""
    job: dict | None = None
    """The job object of a directory (``tracekit.report.schema.Job``), None for a file."""
    problems: list = field(default_factory=list)
    """A job's files and ranks that could not be read (``tracekit.ranks.inputs.Problem``)."""


def reports(
    path: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    with_hta: bool | None = True,
    prefetch: bool = False,
    whole: bool = True,
    workers: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout_s: float | None = None,
    config: JobConfig | None = None,
) -> Reports:
    """The report objects of ``path``: a trace file's through the report cache
    (``report_for_path``; ``prefetch``: its cold path), a directory's (``is_job``) as one job
    (``tracekit.ranks.analyze_job``: ``whole``, ``workers``, ``scheduler``,
    ``scheduler_timeout_s`` and ``config`` are its arguments; each rank through the report
    cache too)."""
    src = os.fspath(path)
    if not is_job(src):
        return Reports(src, report_for_path(src, rules_path=rules_path, cache_dir=cache_dir,
                                            use_cache=use_cache, with_hta=with_hta,
                                            prefetch=prefetch))
    from tracekit.ranks import analyze_job

    rep = analyze_job(src, rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                      with_hta=with_hta, whole=whole, workers=workers, scheduler=scheduler,
                      scheduler_timeout_s=scheduler_timeout_s, config=config)
    return Reports(src, rep.ranks, rep.job, rep.problems)


def job_document(
    directory: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    with_hta: bool | None = False,
    whole: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout_s: float | None = None,
) -> dict:
    """The document ``tracekit analyze DIRECTORY --format json`` writes, for a program (the
    dashboard's ranks view): ``{"tracekit_version", "format", "analyses": [<rank>...],
    "jobs": [<job>]}`` (``tracekit.report.schema.AnalyzeDocument``).

    ``whole=False`` (the default) keeps in each rank object only what the job reads
    (``tracekit.ranks.work.SUMMARY_KEYS``: headline, steps, collectives, identity, explain...):
    enough for a ranks view, a fraction of the size; a rank's whole object (its timeline
    sections) is ``report_for_path(job["ranks"][i]["source"])``. Ranks that cannot be read are
    in ``jobs[0]["problems"]`` (never an exception); ``InputError`` only when the directory
    cannot be listed or holds no trace. The other arguments are ``tracekit.ranks.analyze_job``'s.
    """
    from tracekit import __version__
    from tracekit.ranks import analyze_job
    from tracekit.report import document

    rep = analyze_job(directory, rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                      with_hta=with_hta, whole=whole, workers=workers, scheduler=scheduler,
                      scheduler_timeout_s=scheduler_timeout_s)
    from tracekit.ranks.compact import plain

    return document([plain(r) for r in rep.ranks], __version__, [rep.job])


__all__ = ["DEFAULT_STREAM_CUPTI", "Lanes", "LoadedTrace", "MAX_REPORTS", "REPORT_CACHE_VERSION",
           "Reports", "analyze_path", "analyzed", "cache_problem", "cached_report",
           "cached_reports", "diff_paths", "load_rules", "explain_path", "has_untraced_beside", "is_job", "job_document", "load",
           "loading", "open", "report_for_path", "report_key", "reports", "short_labels", "trace_files"]
