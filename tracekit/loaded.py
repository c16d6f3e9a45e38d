"""One loaded trace: a rank's parsed trace and every answer about it, each computed once.

``loading(path)`` loads a trace file or a directory of per-rank traces once and gives one
``LoadedTrace`` per rank; each answers every question about its rank (``steps()``,
``activities()``, ``graph()``, ``analysis()``, ``explain()``, ``report()``,
``critical_path()``, ``lanes()``, ``operators()``, ``kernels()``, ``diff(other)``, ``hta()``...), computing each once and keeping it on the
object (what the answers share underneath, the activities with their phases, the steps and the
graph, is kept on the trace itself: ``Trace.memo``). Perfetto's ``TraceProcessor`` and HTA's
``TraceAnalysis`` have this shape.

``report_for_path(path)`` is the report objects of a path through the report cache
(``tracekit.reportcache``): read from it when it holds them, else loaded here and stored.
Every command and the per-rank work of a job (``tracekit.ranks``) come through this module;
``tracekit.api`` is the facade above it and ``tracekit.ranks``.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Iterator

from tracekit._files import cache_dir as _cache_dir
from tracekit._files import check_readable, find_snapshot
from tracekit.reportcache import cached_report, remember, resolve_rules, trace_files

if TYPE_CHECKING:  # heavy imports stay out of the warm path
    import pandas as pd

    from tracekit.analyses import Analysis
    from tracekit.analyses.explain import ExplainResult
    from tracekit.graph import Graph, GraphConfig
    from tracekit.lanes import Lanes
    from tracekit.phases import Rules
    from tracekit.steps import StepsResult
    from tracekit.trace.model import Trace


class LoadedTrace:
    """One rank's parsed trace with its phase rules (and the memory snapshot found beside a
    single trace file), and every answer about it: each method computes its answer once and
    keeps it. The trace is never modified."""

    def __init__(self, trace: Trace, rules: Rules, *, snapshot: Any = None,
                 parallel: bool = False, rules_id: bytes | None = None) -> None:
        """``snapshot``: a ``tracekit.analyses.snapshot.SnapshotResult`` to analyse with the
        trace; ``parallel``: compute the sections other than explain in a forked child while
        this process computes explain (``tracekit.analyses.forked``), as a one-shot CLI
        process does; ``rules_id``: the rules' identity in the report cache's key
        (``tracekit.reportcache.resolve_rules``; None: worked out from ``rules``)."""
        self.trace = trace
        """The parsed trace (``tracekit.trace.model.Trace``)."""
        self.rules = rules
        """The phase rules every answer uses (``tracekit.phases.Rules``)."""
        self.rules_id = resolve_rules(rules)[1] if rules_id is None else rules_id
        """What identifies the rules in the report cache's key."""
        self.snapshot = snapshot
        """The memory snapshot's result, or None."""
        self.parallel = parallel
        self._answers: dict[tuple, Any] = {}

    def __repr__(self) -> str:
        return f"LoadedTrace({self.source!r}, rank={self.rank})"

    @property
    def source(self) -> str:
        return self.trace.source

    @property
    def rank(self) -> int:
        return self.trace.rank

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the loader had to repair or guess."""
        return self.trace.warnings

    def _once(self, key: tuple, compute) -> Any:
        try:
            return self._answers[key]
        except KeyError:
            value = self._answers[key] = compute()
            return value

    # ---- what the answers share -----------------------------------------------------------

    def steps(self) -> StepsResult:
        """The steps and their CPU/GPU spans (``tracekit.steps``)."""
        from tracekit import steps

        return steps.compute(self.trace, self.rules)

    def activities(self) -> pd.DataFrame:
        """Every GPU activity with its phase (``tracekit.phases.assign_activities``); do not
        modify it."""
        from tracekit import phases

        return phases.activities(self.trace, self.rules)[0]

    def graph(self, config: GraphConfig | None = None) -> Graph:
        """The dependency graph (``tracekit.graph.build_graph``)."""
        from tracekit.graph import build_graph

        return build_graph(self.trace, self.rules, config)

    @property
    def origin(self) -> int:
        """Time 0 of the trace's timeline: its first event's ``ts`` (ns; 0 for an empty trace)."""
        from tracekit.lanes import origin

        return origin(self.trace)

    def lanes(self) -> Lanes:
        """What a timeline draws: every drawable event on its lane, with its phase
        (``tracekit.lanes``). Not kept: a viewer keeps the lanes of the traces it shows."""
        from tracekit import lanes, phases

        acts, index = phases.activities(self.trace, self.rules)
        return lanes.compute(self.trace, acts, index.table)

    def release(self) -> None:
        """Drop what the answers derived from the trace and share (the activities with their
        phases, the steps, the graph: ``Trace.memo``); the answers themselves stay. For a
        holder of many traces (the dashboard): what they derive is computed again if asked."""
        self.trace.forget()

    # ---- the sections ---------------------------------------------------------------------

    def analysis(self, *, with_hta: bool | None = True, with_skeleton: bool = True) -> Analysis:
        """Every section (``tracekit.analyses.analyze_trace``); ``with_hta``: also HTA's own
        figures (None: only on traces of at most ``HTA_AUTO_MAX_EVENTS`` events);
        ``with_skeleton``: also the skeleton a job's graph joins."""

        def compute():
            from tracekit.analyses import analyze_trace

            return analyze_trace(self.trace, self.rules, with_hta=with_hta,
                                 snapshot=self.snapshot, parallel=self.parallel,
                                 with_skeleton=with_skeleton)

        return self._once(("analysis", with_hta, with_skeleton), compute)

    def _computed(self, section: str) -> Any:
        """A section of an analysis already computed, else None."""
        for key, value in self._answers.items():
            if key[0] == "analysis" and getattr(value, section, None) is not None:
                return getattr(value, section)
        return None

    def explain(self, what_ifs: tuple[str, ...] = (), *, traced: bool = False,
                step_ms: float | None = None, beside: bool = True) -> ExplainResult:
        """Critical path, bound and findings (``tracekit.analyses.explain``), with the user's
        what-ifs (``tracekit.graph.whatif.parse_spec``) replayed too. Of the estimated untraced
        step (the profiler's host overhead taken out), or with ``traced`` of the step as the
        trace shows it; ``step_ms``: the untraced step the user knows, else (with ``beside``)
        the one the run wrote beside the trace (``tracekit.beside``) sets the estimate's
        scale. Without any of these it is the analysis's own explain section."""
        what_ifs = tuple(what_ifs)
        given = step_ms
        source = "--step-ms" if step_ms else ""
        if not step_ms and beside:
            from tracekit.beside import per_step, untraced_step

            got = untraced_step(self.source, self.rank)
            if got is not None:
                step_ms, source = per_step(got, self.steps().source)
                source += " beside the trace"
        if not what_ifs and not traced and not step_ms:
            done = self._computed("explain")
            if done is not None:
                return done

        def compute():
            from tracekit.analyses.explain import ExplainConfig, compute

            config = ExplainConfig(what_ifs=what_ifs, untraced=not traced, step_ms=step_ms,
                                   step_ms_source=source)
            return compute(self.trace, self.rules, snapshot=self.snapshot, config=config)

        return self._once(("explain", what_ifs, traced, given, beside), compute)

    def syncs(self):
        """The sync stalls (``tracekit.analyses.syncs``)."""
        from tracekit.analyses import syncs

        return self._computed("syncs") or self._once(
            ("syncs",), lambda: syncs.compute(self.trace, self.rules))

    def gaps(self):
        """The optimizer -> next lookup gaps (``tracekit.analyses.gaps``)."""
        from tracekit.analyses import gaps

        return self._computed("gaps") or self._once(
            ("gaps",), lambda: gaps.compute(self.trace, self.rules))

    def operators(self):
        """Every host op with its calls, CPU and GPU time, over all steps and per step
        (``tracekit.analyses.operators``)."""
        from tracekit.analyses import operators

        return self._once(("operators",), lambda: operators.compute(self.trace, self.rules))

    def kernels(self):
        """Every GPU activity name with its calls, time and launching op, over all steps and per
        step (``tracekit.analyses.kernels``)."""
        from tracekit.analyses import kernels

        return self._once(("kernels",), lambda: kernels.compute(self.trace, self.rules))

    def diff_side(self):
        """What ``tracekit.analyses.diff`` reads of this trace (``diff.Side``), from the answers
        kept here."""
        from tracekit.analyses import diff

        return self._once(("diff_side",), lambda: diff.side(self.trace, self.rules, explain=self.explain(),
                                                              operators=self.operators(), kernels=self.kernels()))

    def diff(self, other: LoadedTrace):
        """Where ``other`` (B) differs from this trace (A): ``tracekit.analyses.diff``."""
        from tracekit.analyses import diff

        return diff.compute(self.diff_side(), other.diff_side())

    def hta(self) -> dict:
        """HTA's section as JSON values (``tracekit.analyses.hta``)."""
        def compute():
            from tracekit.analyses import hta
            from tracekit.report import jsonable

            done = self._computed("hta")
            return jsonable(hta.compute(self.trace, self.rules) if done is None else done)

        return self._once(("hta",), compute)

    def report(self, *, with_hta: bool | None = True, with_skeleton: bool = True,
               keys: tuple[str, ...] | None = None) -> dict:
        """The rank's report object (``tracekit.report.schema.Rank``); ``with_skeleton``: with
        the skeleton a job's graph joins (else ``skeleton`` is null); ``keys``: only those keys,
        explain brief (``tracekit.report.to_dict``)."""
        from tracekit.report import to_dict

        return self._once(("report", with_hta, with_skeleton, keys), lambda: to_dict(
            self.analysis(with_hta=with_hta, with_skeleton=with_skeleton), keys=keys))

    def critical_path(self, step: int | None = None, what_ifs: tuple[str, ...] = (),
                      **view: Any) -> pd.DataFrame:
        """The critical path's segments of every step, or of ``step``
        (``tracekit.graph.critical.SEGMENT_COLUMNS``), from ``explain(what_ifs, **view)``."""
        path = self.explain(what_ifs, **view).path
        if path is None:
            import pandas as pd

            from tracekit.graph.critical import SEGMENT_COLUMNS

            return pd.DataFrame({c: [] for c in SEGMENT_COLUMNS})
        return path if step is None else path[path["step"] == step]

    def annotate(self, out: str, what_ifs: tuple[str, ...] = (), **view: Any) -> int:
        """Write a copy of the trace with the critical path (of ``explain(what_ifs, **view)``),
        the sync stalls and the gaps as tracks and flows (``tracekit.annotate``); the number of
        events added."""
        from tracekit.annotate import write_annotated

        return write_annotated(self.source, out, self.explain(what_ifs, **view), self.syncs(),
                               self.gaps())


@contextlib.contextmanager
def loading(
    path: str | os.PathLike,
    *,
    rules: Any = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    prefetch: bool = False,
) -> Iterator[list[LoadedTrace]]:
    """Load ``path`` (a trace file or a directory of per-rank traces) once: one ``LoadedTrace``
    per rank, sorted by rank. ``rules``: a ``Rules`` object, a rules TOML path or None for
    the defaults. A memory-snapshot pickle beside a single trace file
    (``tracekit._files.find_snapshot``) is analysed and attached.

    ``prefetch``: the CLI's cold path, in a process that ends with the command: parse in a
    forked child while this process imports the analyses (``tracekit.trace.prefetch``), compute
    the sections other than explain in another while this process computes explain, and take a
    one-shot process's settings (``tracekit._oneshot``: the collector held off over the imports
    and the load, OpenBLAS on one thread, malloc keeping what it frees). The child copies the
    parsed trace into the cache while the caller analyses; leaving the block waits for it."""
    from tracekit import _oneshot

    src = os.fspath(path)
    pre = pf = None
    held = prefetch and _oneshot.hold_gc()
    if prefetch:
        _oneshot.one_blas_thread()  # before the first import of numpy (by the loader)
        _oneshot.keep_freed_memory()
        from tracekit.trace import prefetch as pf

        pre = pf.start(trace_files(src), _cache_dir(cache_dir) if use_cache else None)
    try:
        try:
            from tracekit.analyses import analyze_trace  # noqa: F401 - pandas: imported while the child parses
            from tracekit.analyses import explain  # noqa: F401 - and the graph's modules
            from tracekit.trace import load, loader

            r, rules_id = resolve_rules(rules)
            if pre is not None:
                ts = load(src, cache_dir=pre.cache_dir, use_cache=True, progress=progress,
                          entries=pf.wait(pre))
                if pre.private:
                    loader.wait_for_cache_writes()  # before its directory goes
            else:
                ts = load(src, cache_dir=cache_dir, use_cache=use_cache, progress=progress)
        finally:
            if held:
                _oneshot.release_gc()
        snap = None
        snap_path = find_snapshot(src)
        if snap_path is not None and len(ts.traces) == 1:
            from tracekit.analyses.snapshot import compute_snapshot

            snap = compute_snapshot(snap_path)
        yield [LoadedTrace(t, r, snapshot=snap, parallel=prefetch, rules_id=rules_id)
               for t in ts.traces]
    finally:
        if pre is not None:  # the child copied the entries into the cache meanwhile
            pf.finish(pre)


def load(path: str | os.PathLike, **options: Any) -> list[LoadedTrace]:
    """``loading(path, **options)`` as a list (no prefetch)."""
    with loading(path, **options) as got:
        return got


def report_for_path(
    path: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    with_hta: bool | None = True,
    prefetch: bool = False,
    also_hta: tuple[bool | None, ...] = (),
    with_skeleton: bool = True,
    keys: tuple[str, ...] | None = None,
) -> list[dict]:
    """Per-rank report objects (``tracekit.report.schema.Rank``) of ``path``, from the report
    cache when it holds them, else loaded (``loading``) and stored. ``keys`` (only without
    ``use_cache``, which stores whole reports): only those keys of each, explain brief
    (``tracekit.report.to_dict``). ``prefetch``: on a miss,
    ``loading``'s cold path (the CLI asks for it). ``also_hta``: other ``with_hta`` values
    whose cached reports will do (``tracekit explain`` needs no HTA section, so the report
    ``tracekit analyze`` keeps, HTA's or not, answers it). ``with_skeleton``: False: without
    the skeleton a job's graph joins (``tracekit.ranks.JobConfig.job_graph``)."""
    src = os.fspath(path)
    check_readable(src, "trace file or directory", directory_ok=True)
    if use_cache:
        for h in (with_hta, *also_hta):
            hit = cached_report(src, rules_path=rules_path, cache_dir=cache_dir, with_hta=h,
                                with_skeleton=with_skeleton)
            if hit is not None:
                return hit
    with loading(src, rules=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                 progress=progress, prefetch=prefetch) as traces:
        ranks = [lt.report(with_hta=with_hta, with_skeleton=with_skeleton,
                           keys=None if use_cache else keys) for lt in traces]
    if use_cache and traces:
        remember(src, traces[0].rules_id, with_hta, cache_dir, ranks,
                 with_skeleton=with_skeleton)
    return ranks


def analyzed(
    path: str | os.PathLike,
    *,
    rules: Rules | str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = False,
    with_hta: bool | None = True,
) -> list[LoadedTrace]:
    """Every rank of ``path`` loaded (``load``) and analysed (``LoadedTrace.analysis``); the
    reports are stored in the report cache too, so a later ``tracekit analyze`` of the same
    file is instant. ``rules``: a ``Rules`` object, a rules TOML path or None."""
    src = os.fspath(path)
    traces = load(src, rules=rules, cache_dir=cache_dir, use_cache=use_cache, progress=progress)
    reports = [lt.report(with_hta=with_hta) for lt in traces]
    if use_cache and traces:
        remember(src, traces[0].rules_id, with_hta, cache_dir, reports)
    return traces


def analyze_path(path: str | os.PathLike, *, with_hta: bool | None = True,
                 **options: Any) -> list[tuple[Trace, Analysis]]:
    """``(Trace, Analysis)`` per rank of ``path``: ``analyzed(path, with_hta=..., **options)``."""
    return [(lt.trace, lt.analysis(with_hta=with_hta))
            for lt in analyzed(path, with_hta=with_hta, **options)]


def explain_path(
    path: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    what_ifs: tuple[str, ...] = (),
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    traced: bool = False,
    step_ms: float | None = None,
    beside: bool = True,
) -> list[tuple[Trace, ExplainResult]]:
    """``(Trace, ExplainResult)`` per rank of ``path``, with the user's what-ifs replayed too
    (``LoadedTrace.explain``: ``traced``, ``step_ms`` and ``beside`` are its)."""
    traces = load(path, rules=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                  progress=progress)
    return [(lt.trace, lt.explain(tuple(what_ifs), traced=traced, step_ms=step_ms, beside=beside))
            for lt in traces]


def diff_paths(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    rank_a: int | None = None,
    rank_b: int | None = None,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    parallel: bool = False,
):
    """``tracekit.analyses.diff`` of a rank of ``a`` (a trace file, or a directory of ranks with
    ``rank_a``) against a rank of ``b``; ``a`` and ``b`` may be one directory (two ranks of one
    job), loaded once. ``parallel``: A's side (loaded, analysed, summed up per step) in a forked
    child while this process does B's (``tracekit.analyses.forked``: the same result, on two
    cores), as a one-shot CLI process does."""
    from tracekit.analyses import diff
    from tracekit.analyses.forked import Forked

    for p in (a, b):
        check_readable(os.fspath(p), "trace file or directory", directory_ok=True)
    opts = dict(rules=rules_path, cache_dir=cache_dir, use_cache=use_cache, progress=progress)

    def pick(got: list[LoadedTrace], rank: int | None, path) -> LoadedTrace:
        return pick_rank(got, rank, path, how="--rank-a/--rank-b")

    if os.path.realpath(os.fspath(a)) == os.path.realpath(os.fspath(b)):  # two ranks of one job: one load
        got = load(a, **opts)
        la, lb = pick(got, rank_a, a), pick(got, rank_b, b)
        side_a = Forked(la.diff_side, fork=parallel)
        side_b = lb.diff_side()
    else:
        side_a = Forked(lambda: pick(load(a, **opts), rank_a, a).diff_side(), fork=parallel)
        side_b = pick(load(b, **opts), rank_b, b).diff_side()
    return diff.compute(side_a.result(), side_b)


def pick_rank(got: list[LoadedTrace], rank: int | None, path: str | os.PathLike, *,
              how: str = "rank=N") -> LoadedTrace:
    """The one of ``got`` (the traces ``path`` holds) that is ``rank``; with ``rank`` None, the
    only one. ``InputError`` naming the ranks there otherwise (``how``: how to name one)."""
    from tracekit.errors import InputError

    if rank is None and len(got) == 1:
        return got[0]
    for lt in got:
        if lt.rank == rank:
            return lt
    have = ", ".join(str(lt.rank) for lt in got)
    raise InputError(f"no rank {rank} here (ranks: {have})" if rank is not None else
                     f"holds {len(got)} ranks ({have}): name one ({how})", path=os.fspath(path))


def has_untraced_beside(path: str | os.PathLike) -> bool:
    """Whether a run wrote its untraced step beside ``path`` (a file, or a directory's traces)."""
    from tracekit.beside import untraced_step

    src = os.fspath(path)
    if os.path.isdir(src):
        import glob

        return any(untraced_step(f, 0) is not None
                   for f in sorted(glob.glob(os.path.join(src, "*.json*")))[:64])
    return untraced_step(src, 0) is not None


__all__ = ["LoadedTrace", "analyze_path", "analyzed", "diff_paths", "explain_path", "has_untraced_beside", "load", "loading",
           "pick_rank", "report_for_path"]
