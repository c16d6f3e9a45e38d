"""The server-side list of traces a dashboard serves, and their analyses.

The browser only ever sends an index into this list (and a rank), never a path: the server
serves exactly the paths it was started with. Two levels per source:

- ``summary(i)``: the per-rank report objects of ``tracekit.report`` (headline figures, steps,
  gaps...). When the trace was analysed before they come from tracekit's report cache (a small
  JSON file, milliseconds), so the overview, gaps and compare pages are up at once;
- ``get(i)``: each rank loaded and analysed (``tracekit.api.analyzed``: a ``LoadedTrace`` per
  rank, whose parse cache makes a restart fast), needed by the timeline, overlap, stalls and
  memory pages; loaded the first time a page asks for it, or in the background by ``prefetch``.

A source that fails to load keeps its error message, which the pages show in its place; the
other sources are unaffected.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dashboards import imports
from dashboards.names import Variant, distinct, variant
from tracekit.api import short_labels
from tracekit.errors import TracekitError

log = logging.getLogger("tracekit.dashboard")

ANALYSIS_HTA = False
"""The dashboard's analyses leave HTA's section out: no view draws it (the idle view asks
``LoadedTrace.hta`` for its figures), and it costs seconds on a big trace."""


@dataclass
class Source:
    """One path given at start: a trace file or a directory of per-rank traces."""

    index: int
    """Position in the catalog: the only handle the browser uses."""
    path: str
    """The path as given at start."""
    label: str
    """Short unique name shown in the page."""
    results: tuple[Any, ...] | None = None
    """A ``tracekit.api.LoadedTrace`` per rank, sorted by rank, once loaded and analysed."""
    reports: tuple[dict, ...] | None = None
    """``tracekit.report.to_dict`` per rank, sorted by rank, once summarised."""
    error: str | None = None
    """Why it could not be loaded, once tried and failed."""
    load_s: float | None = None
    """Seconds the load + analysis took in this process."""
    variant: Variant | None = None
    """Its variant name and run group (``dashboards.names.variant``)."""
    unique_name: str | None = None
    """Its name, made unique among the catalog's (``dashboards.names.distinct``)."""
    job: dict | None = None
    """The job object of a directory of rank traces (``tracekit.api.job_document``), once computed."""
    hta: dict = field(default_factory=dict, repr=False)
    """rank -> HTA's section as JSON values (``tracekit.analyses.hta``), once computed."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        """The variant name when the files give one, else the label; unique in its catalog."""
        if self.unique_name is not None:
            return self.unique_name
        return self.variant.name if self.variant is not None else self.label

    def warnings(self, rank: int | None) -> list[str]:
        """What tracekit warned about in ``rank``'s report (the lowest rank's when absent); []
        before the report is read."""
        if not self.reports:
            return []
        from dashboards.reports import warnings

        return warnings(self.report(rank))

    @property
    def loaded(self) -> bool:
        return self.results is not None or self.error is not None

    @property
    def ranks(self) -> list[int]:
        if self.reports is not None:
            return [int(r["rank"]) for r in self.reports]
        return [lt.rank for lt in (self.results or ())]

    def report(self, rank: int | None) -> dict:
        """The report object of ``rank``, or of the lowest rank when absent or None."""
        if not self.reports:
            raise LookupError(f"{self.label} has no trace")
        for r in self.reports:
            if r["rank"] == rank:
                return r
        return self.reports[0]

    def pick(self, rank: int | None) -> tuple[Any, Any]:
        """The ``(LoadedTrace, Analysis)`` of ``rank``, or of the lowest rank when absent or
        None."""
        if not self.results:
            raise LookupError(f"{self.label} has no trace")
        got = next((lt for lt in self.results if lt.rank == rank), self.results[0])
        return got, got.analysis(with_hta=ANALYSIS_HTA)


class Catalog:
    """The traces one server serves, loaded on first use and kept in memory."""

    def __init__(self, paths: list[str], *, cache_dir: str | None = None, use_cache: bool = True,
                 rules: str | None = None) -> None:
        """``rules``: a phase-rules TOML path (read now: a bad file raises ``RulesError`` before
        anything is served) or None for the defaults."""
        self.sources = [Source(i, p, label, variant=variant(p, label))
                        for i, (p, label) in enumerate(zip(paths, short_labels(list(paths))))]
        for s, n in zip(self.sources, distinct([s.name for s in self.sources], [s.variant for s in self.sources],
                                                [s.label for s in self.sources])):
            s.unique_name = n
        self.by_label = {s.label: s.index for s in self.sources}
        """label -> index: how a link (``?trace=<label>``) names a source."""
        self.by_link: dict[str, int] = {}
        """What a link may name a source by (``?trace=``): its label or its name (both unique,
        never a path); -> index."""
        for s in self.sources:
            self.by_link.setdefault(s.name, s.index)
        self.by_link.update(self.by_label)  # a label wins over a name that reads like it
        self._cache_dir = cache_dir
        self._use_cache = use_cache
        self._rules_path = rules
        self._rules = None
        if rules is not None:
            self._rules = self.rules  # a bad file fails here, before anything is served
        self._jobs: dict[tuple, Any] = {}
        self._jobs_lock = threading.Lock()
        self._pool = None
        self.after_loads: list[Callable[[], None]] = []
        """More work ``prefetch`` does once every source is loaded, in order (the app adds the
        Diff view's default pairs)."""
        self.first_page = threading.Event()
        """Set by the app once it has answered the first page (see ``prefetch``)."""

    @property
    def rules(self) -> Any:
        """The phase rules (``tracekit.api.load_rules``) every trace is analysed with. Read on
        first use: the default rules need pandas, which a first page served from the report
        cache does not."""
        if self._rules is None:
            imports.ensure()
            from tracekit.api import load_rules

            self._rules = load_rules(self._rules_path)
        return self._rules

    def __len__(self) -> int:
        return len(self.sources)

    def _at(self, index: Any) -> Source | None:
        if isinstance(index, bool) or not isinstance(index, (int, float)):
            return None
        if index != int(index) or not 0 <= int(index) < len(self.sources):
            return None
        return self.sources[int(index)]

    def ready(self, key: tuple, work) -> bool:
        """Whether ``work()`` (loading a trace, building what a view draws of it) has run for
        ``key``: started in a background thread the first time it is asked for, so that a page
        that needs it answers at once (it polls) instead of waiting seconds in its callback.
        An exception in ``work`` is the view's to show: it is re-raised there, when it runs again."""
        with self._jobs_lock:
            job = self._jobs.get(key)
            if job is None:
                from concurrent.futures import ThreadPoolExecutor

                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracekit-dashboard-load")
                job = self._jobs[key] = self._pool.submit(work)
        return job.done()

    def get(self, index: Any) -> Source | None:
        """The source at ``index`` with its traces and analyses loaded; None for anything that is
        not a valid index."""
        source = self._at(index)
        if source is not None:
            self._load(source)
        return source

    def summary(self, index: Any) -> Source | None:
        """The source at ``index`` with its report objects (from the report cache when it holds
        them, else from a full load); None for anything that is not a valid index."""
        source = self._at(index)
        if source is None or source.reports is not None or source.error is not None:
            return source
        if self._use_cache and source.results is None:
            from tracekit.api import cached_reports

            for with_hta in (False, None, True):  # `tracekit analyze` caches with HTA's section when the trace is small
                hit = cached_reports(source.path, rules_path=self._rules_path, cache_dir=self._cache_dir, with_hta=with_hta)
                if hit:
                    source.reports = tuple(sorted(hit, key=lambda r: r["rank"]))
                    return source
        self._load(source)
        return source

    def _load(self, source: Source) -> None:
        if source.loaded:
            return
        imports.ensure()  # before the lock: the imports wait for the requests in flight
        with source._lock:
            if source.loaded:
                return
            from tracekit.api import analyzed

            t0 = time.perf_counter()
            try:
                # no HTA section (ANALYSIS_HTA): no view draws it, and it costs seconds on a big trace
                got = analyzed(source.path, rules=self.rules, cache_dir=self._cache_dir,
                               use_cache=self._use_cache, with_hta=ANALYSIS_HTA)
                for lt in got:
                    # the operators' and kernels' tables (small) while the activities and steps
                    # the analysis derived are still there: their views then draw at once
                    lt.operators()
                    lt.kernels()
                    lt.release()  # what the analyses derived: kept by the analyses' results, not twice
                source.results = tuple(sorted(got, key=lambda lt: lt.rank))
                if source.reports is None:
                    source.reports = tuple(lt.report(with_hta=ANALYSIS_HTA) for lt in source.results)
            except TracekitError as exc:
                source.error = str(exc)
            except Exception as exc:  # a bug in an analysis: keep serving the other traces
                log.error("loading %s failed:\n%s", source.path, traceback.format_exc())
                source.error = f"internal error while analysing {source.path}: {type(exc).__name__}: {exc}"
            source.load_s = time.perf_counter() - t0

    def prefetch(self, *, defer_s: float = 10.0) -> threading.Thread:
        """Summarise every source, then import what the views need and load every source, in a
        background thread.

        The imports and the full loads hold the GIL for a while each: they start once the first
        page has been answered (``first_page.set()``, done by the app) or after ``defer_s``
        seconds, so that they do not slow the first page down (``dashboards.imports``). Pages
        that need a source meanwhile load it themselves.
        """

        def run() -> None:
            for s in self.sources:
                self.summary(s.index)
            self.first_page.wait(defer_s)
            imports.ensure()
            from dashboards import results

            for s in self.sources:
                self._load(s)
            # The timeline's lanes (about 1 s for a 1.7 M-event trace), memoised for as many traces
            # as the memo keeps, first sources first: building more would push out the first ones.
            traces = [lt for s in self.sources for lt in s.results or ()]
            for lt in traces[: results.LANES_KEPT]:
                results.lane_events(lt)
            for s in self.sources:  # HTA's figures for the idle-time view
                for r in s.ranks:
                    self.hta(s, r)
            for work in self.after_loads:
                work()

        t = threading.Thread(target=run, name="tracekit-dashboard-prefetch", daemon=True)
        t.start()
        return t

    def hta(self, source: Source, rank: int | None) -> dict | None:
        """HTA's section (``tracekit.analyses.hta``, as JSON values) of ``rank`` of a loaded
        source: from its report when that has it, else computed once on the parsed trace (a
        fraction of a second for the bundled traces) and kept. None when not loaded."""
        rep = source.report(rank) if source.reports else None
        if rep is not None and isinstance(rep.get("hta"), dict):
            return rep["hta"]
        if not source.results:
            return None
        lt, _ = source.pick(rank)
        hit = source.hta.get(lt.rank)
        if hit is None:
            hit = source.hta[lt.rank] = lt.hta()
        return hit

    def job(self, source: Source) -> dict:
        """The job object (``tracekit.report.schema.Job``: collectives matched across
        ranks, stragglers, clock offsets, ranks x steps) of a source with several ranks,
        computed once in this process (one worker: the ranks' reports come from the caches)."""
        if source.job is None:
            imports.ensure()
            from tracekit.api import job_document

            doc = job_document(source.path, rules_path=self._rules_path, cache_dir=self._cache_dir,
                               use_cache=self._use_cache, workers=1)
            source.job = doc["jobs"][0]
        return source.job
