"""``tracekit analyze PATH...``: every analysis of every trace, as text tables or one JSON object."""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit._files import check_out, check_readable
from tracekit.commands.common import (cache_lines, cache_options, echo_lines, emit,
                                      format_option, job_options, out_option, problem_lines,
                                      rules_option, verbose_option, warning_lines,
                                      select_rank)
from tracekit.errors import InputError


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


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@format_option("Text tables, or one JSON object (schema: tracekit.report.schema).")
@out_option
@rules_option
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
@verbose_option
@cache_options("Neither read nor write the trace and report caches.",
               "Cache directory (default: $TRACEKIT_CACHE_DIR or the user cache dir).")
def command(paths, fmt, out, rules_path, rank, detail, no_align, workers, scheduler,
            scheduler_timeout, snapshot_path, hta, verbose, no_cache, cache_dir):
    """Where do the training steps in these Kineto traces go?

    PATH is a .json/.json.gz trace or a directory of per-rank traces. A directory is one job:
    its summary comes first (ranks found and not read, step time per rank, each rank's bound,
    the spread), then collectives matched across ranks (clock offsets, arrival skew,
    stragglers, all-to-all sizes). Per trace: findings, steps, stream overlap, optimizer ->
    lookup gap, sync stalls, allocator (every figure is defined in docs/metrics.md). Exit 2
    when a rank of a directory cannot be read (the others are still analysed).
    """
    from tracekit import api
    from tracekit.ranks import JobConfig
    from tracekit.ranks.sources import is_url
    from tracekit.report import document, render_job, render_rank

    check_out(out, paths, rules_path=rules_path, snapshot_path=snapshot_path)
    lines = cache_lines(no_cache, cache_dir)
    config = JobConfig(align_clocks=not no_align)
    ranks: list[dict] = []
    jobs: list[dict] = []
    texts: list[str] = []
    problems: list[tuple] = []
    for p in paths:
        job = api.is_job(p)
        # a directory of one trace is shown as that rank: its whole report is needed
        whole = fmt == "json" or detail or rank is not None or (
            job and not is_url(p) and len(api.trace_files(p)) == 1)
        got = api.reports(p, rules_path=rules_path, cache_dir=cache_dir, use_cache=not no_cache,
                          prefetch=True, with_hta=hta if whole or not job else False,
                          whole=whole, workers=workers, scheduler=scheduler,
                          scheduler_timeout_s=scheduler_timeout, config=config)
        sel = select_rank(got.ranks, rank, p)
        ranks += sel
        if got.job is not None:
            problems.append((got.problems, p))
            jobs.append(got.job)
        if got.job is None or rank is not None or (len(got.ranks) == 1 and not got.problems):
            texts += [("rank", r) for r in sel]
        else:
            texts.append(("job", got.job))
            texts += [("rank", r) for r in sel] if detail else []
    if snapshot_path is not None:
        ranks = [with_snapshot(ranks, snapshot_path)]
        texts = [("rank", ranks[0])]
    for r in ranks:
        lines += warning_lines(r)
    if fmt == "json":
        doc = document(ranks, __version__, jobs)
        emit(json.dumps(doc, allow_nan=False) + "\n", out)  # compact: C-encoded, fast
    else:
        emit("\n".join(render_job(x) if kind == "job" else render_rank(x)
                       for kind, x in texts), out)
    for probs, p in problems:
        lines += problem_lines(probs, p)
    echo_lines(lines, verbose=verbose)
    if any(probs for probs, _ in problems):
        raise SystemExit(2)
