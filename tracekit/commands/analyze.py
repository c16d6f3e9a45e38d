"""``tracekit analyze PATH...``: every analysis of every trace, as text tables or one JSON object."""

from __future__ import annotations

import json
import os

import click

from tracekit import __version__
from tracekit._files import check_out, check_readable, display
from tracekit.errors import InputError


def select_rank(ranks: list[dict], rank: int | None, path: str) -> list[dict]:
    """The rank objects asked for (all when ``rank`` is None)."""
    if rank is None:
        return ranks
    got = [r for r in ranks if r["rank"] == rank]
    if not got:
        have = ", ".join(str(r["rank"]) for r in ranks)
        raise InputError(f"no rank {rank} here (ranks: {have})", path=path)
    return got


def emit(text: str, out: str | None) -> None:
    """Write ``text`` to ``out`` (a file) or stdout."""
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        with open(out, "w") as f:
            f.write(text)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", path=out) from None


def warn_cache(no_cache: bool, cache_dir: str | None) -> None:
    """Say once, on stderr, that the cache cannot be written (each run is then a cold one)."""
    if no_cache:
        return
    from tracekit.api import cache_problem

    problem = cache_problem(cache_dir)
    if problem:
        click.echo(f"tracekit: warning: {problem}", err=True)


def echo_warnings(rank: dict) -> None:
    """A rank's loader and analysis warnings on stderr, one line each."""
    for w in rank["warnings"]:
        click.echo(f"tracekit: warning: {display(rank['source'])}: {w}", err=True)


def with_snapshot(ranks: list[dict], snapshot_path: str) -> dict:
    """The one rank's report with the snapshot at ``snapshot_path`` (it replaces one found
    beside the trace). A snapshot belongs to one process: more ranks than one is an error."""
    if len(ranks) != 1:
        raise InputError(f"--snapshot goes with one trace, not {len(ranks)} ranks "
                         "(choose one with --rank)", path=snapshot_path)
    check_readable(snapshot_path, "memory-snapshot pickle")
    from tracekit.analyses.snapshot import compute_snapshot
    from tracekit.report import snapshot_dict

    return {**ranks[0], "snapshot": snapshot_dict(compute_snapshot(snapshot_path))}


def job_options(f):
    """The options of the commands that analyse a directory of ranks as one job."""
    f = click.option("--workers", type=int, default=None,
                     help="Local processes analysing the ranks of a directory in parallel "
                          "(default: one per CPU; 1: one after the other).")(f)
    f = click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
                     help="Analyse the ranks on this Dask scheduler's workers instead (the "
                          "[cluster] extra; the workers read the traces at the same paths "
                          "and keep their own caches).")(f)
    f = click.option("--scheduler-timeout", type=float, default=None, metavar="SECONDS",
                     help="How long to try to reach the Dask scheduler and wait for a worker "
                          "(default 10).")(f)
    return f


def echo_problems(problems: list, directory: str) -> None:
    """One ``tracekit: error:`` line per file of a job that was not read, and one for the ranks
    that have no file."""
    from tracekit.report import ranges

    missing = [p for p in problems if p.kind == "missing"]
    for p in problems:
        if p.kind != "missing":
            click.echo(f"tracekit: error: {p.line(directory)}", err=True)
    if len(missing) == 1:
        click.echo(f"tracekit: error: {missing[0].line(directory)}", err=True)
    elif missing:
        click.echo(f"tracekit: error: {directory}: ranks {ranges([p.rank for p in missing])} "
                   "have no trace file", err=True)


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Text tables, or one JSON object (schema: tracekit.report).")
@click.option("--out", type=click.Path(), default=None, help="Write to this file instead of stdout.")
@click.option("--rules", "rules_path", type=click.Path(), default=None,
              help="A TOML file of phase rules overriding the defaults.")
@click.option("--rank", type=int, default=None,
              help="Only this rank of a multi-rank directory (its full report).")
@click.option("--detail", is_flag=True,
              help="After a directory's job summary, every rank's full report.")
@click.option("--no-align", is_flag=True,
              help="Compare the ranks' timestamps as written (no clock offsets estimated "
                   "from collective ends).")
@job_options
@click.option("--snapshot", "snapshot_path", type=click.Path(), default=None,
              help="A CUDA memory-snapshot pickle (torch.cuda.memory._dump_snapshot) to report "
                   "with the one trace analysed. Without it, <stem>.pickle or "
                   "<stem>_snapshot.pickle beside a trace file <stem>.json(.gz) is used.")
@click.option("--hta/--no-hta", default=None,
              help="Include HTA's own figures (temporal, idle, kernel breakdown, comm/comp), or "
                   "leave them out. Default: include them for traces of at most 500,000 events "
                   "(they cost ~3 s per million events); a directory's job summary alone "
                   "never needs them.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the trace and report caches.")
@click.option("--cache-dir", type=click.Path(), default=None,
              help="Cache directory (default: $TRACEKIT_CACHE_DIR or the user cache dir).")
def command(paths, fmt, out, rules_path, rank, detail, no_align, workers, scheduler,
            scheduler_timeout, snapshot_path, hta, no_cache, cache_dir):
    """Where do the training steps in these Kineto traces go?

    PATH is a .json/.json.gz trace or a directory of per-rank traces. A directory is one job:
    its summary comes first (ranks found and not read, step time per rank, each rank's bound,
    the spread), then collectives matched across ranks (clock offsets, arrival skew,
    stragglers, all-to-all sizes). Per trace: findings, steps, stream overlap, optimizer ->
    lookup gap, sync stalls, allocator (every figure is defined in docs/metrics.md). Exit 2
    when a rank of a directory cannot be read (the others are still analysed).
    """
    from tracekit.api import report_for_path, trace_files
    from tracekit.ranks import JobConfig, analyze_job
    from tracekit.ranks.sources import is_url
    from tracekit.report import document, render_job, render_rank

    check_out(out, paths, rules_path=rules_path, snapshot_path=snapshot_path)
    warn_cache(no_cache, cache_dir)
    config = JobConfig(align_clocks=not no_align)
    ranks: list[dict] = []
    jobs: list[dict] = []
    texts: list[str] = []
    problems: list[tuple] = []
    for p in paths:
        if not (os.path.isdir(p) or is_url(p)):
            got = report_for_path(p, rules_path=rules_path, cache_dir=cache_dir,
                                  use_cache=not no_cache, prefetch=True, with_hta=hta)
            ranks += select_rank(got, rank, p)
            texts += [("rank", r) for r in select_rank(got, rank, p)]
            continue
        # a directory of one trace is shown as that rank: its whole report is needed
        whole = fmt == "json" or detail or rank is not None or (
            not is_url(p) and len(trace_files(p)) == 1)
        rep = analyze_job(p, rules_path=rules_path, cache_dir=cache_dir, use_cache=not no_cache,
                          with_hta=hta if whole else False, whole=whole, workers=workers,
                          scheduler=scheduler, scheduler_timeout_s=scheduler_timeout,
                          config=config)
        problems.append((rep.problems, p))
        jobs.append(rep.job)
        sel = select_rank(rep.ranks, rank, p) if rank is not None else rep.ranks
        ranks += sel
        if rank is not None or (len(rep.ranks) == 1 and not rep.problems):
            texts += [("rank", r) for r in sel]
        else:
            texts.append(("job", rep.job))
            texts += [("rank", r) for r in sel] if detail else []
    if snapshot_path is not None:
        ranks = [with_snapshot(ranks, snapshot_path)]
        texts = [("rank", ranks[0])]
    for r in ranks:
        echo_warnings(r)
    if fmt == "json":
        doc = document(ranks, __version__, jobs)
        emit(json.dumps(doc, allow_nan=False) + "\n", out)  # compact: C-encoded, fast
    else:
        emit("\n".join(render_job(x) if kind == "job" else render_rank(x)
                       for kind, x in texts), out)
    for probs, p in problems:
        echo_problems(probs, p)
    if any(probs for probs, _ in problems):
        raise SystemExit(2)
