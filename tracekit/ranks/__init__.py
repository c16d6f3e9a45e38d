"""A job of many ranks as one analysis: collectives matched across ranks, clock offsets,
stragglers, all-to-all sizes, the spread of step time; and where the per-rank work runs.

``analyze_job(directory)`` lists the directory's trace files, runs the per-rank work on each
(``work.RankTask``: the rank's report, from the report cache when it holds it; in this process,
local worker processes or a Dask cluster, ``executors``), decides which file is which rank and
which are not part of the job (``inputs``), and combines the ranks' small results into the job
object (``job``, using ``match`` and ``clocks``). Only the per-rank work touches a trace; the
cross-rank part reads rank objects and is pure.

The job object's keys are documented in ``tracekit.report.schema.Job``; ``tracekit analyze DIR`` prints it
first (``report.render_job``), ``tracekit analyze DIR --format json`` writes it under ``jobs``,
and ``tracekit.api.job_document`` returns that document to a program.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tracekit.ranks.config import JobConfig
from tracekit.ranks.inputs import Problem


@dataclass(frozen=True)
class JobReport:
    """The analysis of one directory of rank traces."""

    source: str
    """The directory, as given."""
    ranks: list[dict]
    """The job's rank objects (whole, or their ``work.summary``), sorted by rank."""
    problems: list[Problem]
    """Files and ranks that are not read (empty when the job is complete)."""
    job: dict
    """The job object (``tracekit.report.schema.Job`` documents its keys)."""
    graph: object | None = None
    """The job's graph it read (``tracekit.ranks.jobgraph.Context``; None without one): what a
    what-if across ranks replays again (``tracekit.ranks.whatif``)."""


def analyze_job(
    directory: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    with_hta: bool | None = False,
    whole: bool = True,
    workers: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout_s: float | None = None,
    config: JobConfig | None = None,
) -> JobReport:
    """Analyse every rank trace in ``directory`` and the job they form.

    ``directory``: a local directory, or a URL fsspec reads (``s3://bucket/job/``: each rank's
    work fetches its file, ``sources``). ``rules_path``: a phase-rules TOML file (else the
    defaults). ``with_hta``: include the HTA section in each rank's object (None: for traces of
    at most 500,000 events). ``whole``: return whole rank objects (False: only what the job
    needs, much smaller).
    ``workers``: local processes (default: one per CPU; 1: this process only). ``scheduler``:
    ``tcp://HOST:PORT`` of a Dask scheduler to run the per-rank work on instead; its workers read
    the files at the same absolute paths and keep their own caches; ``scheduler_timeout_s``:
    how long to try to reach it and wait for a worker (None: ``executors.CONNECT_TIMEOUT_S``).
    ``config``: ``JobConfig``.

    Raises ``InputError`` when the directory cannot be listed or holds no trace file,
    ``RulesError`` for a bad rules file, ``ClusterError`` when the scheduler cannot be used. A
    rank file that cannot be read is not an exception: it is one of ``problems``.
    """
    from tracekit._files import trace_files_in
    from tracekit.errors import InputError
    from tracekit.phases import load_rules
    from tracekit.ranks import executors, inputs, job, sources
    from tracekit.ranks.work import RankTask

    src = os.fspath(directory)
    url = sources.is_url(src)
    if url:
        files = sources.list_url(src)
    elif not os.path.isdir(src):
        raise InputError("not a directory", path=src)
    else:
        try:
            files = trace_files_in(src)
        except OSError as exc:
            raise InputError(f"cannot list directory: {exc.strerror or exc}", path=src) from None
    if not files:
        raise InputError("no trace files (*.json, *.json.gz holding traceEvents) in this "
                         "directory", path=src)
    if rules_path is not None:
        load_rules(rules_path)  # a bad rules file is one error, before any rank's work
    config = JobConfig() if config is None else config
    remote = scheduler is not None
    rules = None if rules_path is None else os.fspath(rules_path)
    if rules is not None and remote:
        rules = os.path.abspath(rules)  # the workers' working directory is not ours
    task = RankTask(rules_path=rules,
                    cache_dir=None if remote or cache_dir is None else os.fspath(cache_dir),
                    use_cache=use_cache, with_hta=with_hta, whole=whole,
                    with_skeleton=config.job_graph)
    paths = [os.path.abspath(f) for f in files] if remote and not url else files
    results: list = [None] * len(files)
    if use_cache and not remote and not url:  # reports already cached here need no worker
        from tracekit.reportcache import cached_report
        from tracekit.ranks.work import summary

        for i, f in enumerate(files):
            hit = cached_report(f, rules_path=task.rules_path, cache_dir=task.cache_dir,
                                with_hta=with_hta, with_skeleton=config.job_graph)
            if hit is not None:
                results[i] = hit[0] if whole else summary(hit[0])
    todo = [i for i, r in enumerate(results) if r is None]
    done = executors.run(task, [paths[i] for i in todo], workers=workers, scheduler=scheduler,
                         connect_timeout_s=scheduler_timeout_s)
    for i, r in zip(todo, done):
        results[i] = r
    for given, r in zip(files, results):  # the names as the user gave them
        if isinstance(r, dict):
            r["source"] = given
    results = [inputs.Failed(given, r.message) if isinstance(r, inputs.Failed) else r
               for given, r in zip(files, results)]
    rankset = inputs.assign(src, results, other_job_gap_ns=config.other_job_gap_ns)
    built, ctx = job.build_with_graph(rankset, config)
    if ctx is not None:
        from tracekit.ranks import whatif

        got = whatif.straggler_row(rankset.ranks, built, ctx, task=whatif.StragglerTask(
            rules_path=rules, cache_dir=task.cache_dir, use_cache=use_cache), workers=workers,
            scheduler=scheduler, connect_timeout_s=scheduler_timeout_s)
        if got is not None:
            built["graph"]["what_ifs"].append(got)
    if ctx is not None and config.balance_what_if and not url:
        from tracekit.ranks import whatif

        got = whatif.balanced(rankset.ranks, built, ctx, config,
                              task=whatif.RankSkeletonTask(rules_path=rules,
                                                           cache_dir=task.cache_dir,
                                                           use_cache=use_cache),
                              workers=workers, scheduler=scheduler,
                              connect_timeout_s=scheduler_timeout_s)
        if got is not None:
            built["graph"]["what_ifs"].append(got)
    return JobReport(source=src, ranks=rankset.ranks, problems=rankset.problems, job=built,
                     graph=ctx)


def job_folder(path, world: int | None) -> str | None:
    """The folder whose job ``path``'s ranks are explained in: the directory given, when it holds
    several traces; for one trace file, its folder when that holds exactly its job's
    ``world`` rank files (at most ``JOB_FIXES_MAX_RANKS``: a larger job is analysed with
    ``tracekit explain DIR --rank N``); else None."""
    from tracekit._files import trace_files_in
    from tracekit.ranks.job import JOB_FIXES_MAX_RANKS

    if "://" in str(path):
        return None
    if os.path.isdir(path):
        return path if len(trace_files_in(path)) >= 2 else None
    if not world or world < 2 or world > JOB_FIXES_MAX_RANKS:
        return None
    folder = os.path.dirname(str(path)) or "."
    try:
        files = trace_files_in(folder)
        mine = any(os.path.samefile(f, path) for f in files)
    except OSError:
        return None
    return folder if mine and len(files) == world else None


def explain_in_job(ranks: list[dict], path, *, rules_path, cache_dir, use_cache: bool,
                   world: dict[int, int | None], rank_specs: list) -> None:
    """For a rank of a job whose every rank is in the folder (``explain DIR``, or one rank's file
    beside the others): each rank's place in the job (``rank_context``: its own work against
    its wait on the job's graph), its findings replayed on the job's graph (``job_findings``:
    for a rank that waits, first those of the rank it waits for), each known fix some rank
    predicts on every rank (``job_fixes``) and the user's what-ifs across ranks
    (``rank:R:SPEC``, ``tracekit.ranks.whatif.parse_rank_spec``), from the job's analysis through
    the report cache; each rank's ``job`` key set in ``ranks`` (``tracekit explain``'s rank
    objects). ``world``: each rank's job size as its trace says."""
    from tracekit.errors import InputError

    folder = None
    for r in ranks:
        folder = folder or job_folder(path, world.get(int(r["rank"])))
    if folder is None:
        if rank_specs:  # (a URL's job, or a directory of one trace)
            raise InputError(f"--what-if {rank_specs[0].text!r} changes one rank of a job: give "
                             "a local directory of the job's rank traces", path=path)
        return
    from tracekit.ranks.job import job_findings, job_fixes, rank_context
    from tracekit.ranks.whatif import RankChangesTask, RankSkeletonTask, on_ranks

    rep = analyze_job(folder, rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                      whole=False)
    if folder != path and not rep.job.get("complete"):
        return  # one rank's file among traces that are not its whole job
    contexts = {}
    for r in ranks:
        ctx = rank_context(rep.job, int(r["rank"]), rep.ranks)
        if ctx is not None:
            contexts[int(r["rank"])] = ctx
    changes = RankChangesTask(rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache)
    asked = []
    if rank_specs:
        if rep.graph is None:
            raise InputError(f"--what-if {rank_specs[0].text!r}: this job has no graph to "
                             "replay (fewer than two ranks with collectives and steps)",
                             path=path)
        joined = sorted(ri.rank for ri in rep.graph.inputs)
        for rs in rank_specs:
            if rs.rank not in joined:
                raise InputError(f"--what-if {rs.text!r}: no rank {rs.rank} in the job's graph "
                                 f"(ranks: {', '.join(map(str, joined))})", path=path)
        wanted: dict[int, list[str]] = {}
        for rs in rank_specs:
            wanted.setdefault(rs.rank, []).append(rs.change)
        rows = on_ranks(rep.ranks, rep.graph, wanted, task=changes)
        for rs in rank_specs:
            row = rows.get((rs.rank, rs.change))
            if row is None:
                raise InputError(f"--what-if {rs.text!r}: rank {rs.rank}'s trace could not be "
                                 "read again", path=path)
            row = {**row, "id": rs.text, "title": rs.title}
            if not row["applies"]:
                row["note"] = "; ".join(x for x in (
                    f"does not apply to rank {rs.rank}" if rs.change.startswith("fix:") else
                    f"matches nothing on rank {rs.rank}", row.get("note")) if x)
            asked.append(row)
    if not contexts:
        return
    fixes = job_fixes(rep.ranks, rep.graph, task=RankSkeletonTask(
        rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache))
    found = job_findings(rep.ranks, rep.graph, contexts, task=changes)
    for r in ranks:
        ctx = contexts.get(int(r["rank"]))
        if ctx is not None:
            r["job"] = {**ctx, "findings": found.get(int(r["rank"]), []),
                        "what_ifs": list(ctx["what_ifs"]) + fixes + asked}


__all__ = ["JobConfig", "JobReport", "analyze_job", "explain_in_job", "job_folder"]
