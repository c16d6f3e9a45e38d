"""``tracekit analyze PATH...``: every analysis of every trace, as text tables or one JSON object."""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit._files import check_out, check_readable
from tracekit.commands.common import (cache_lines, cache_options, echo_lines, emit,
                                      format_option, job_lines, job_options, out_option,
                                      problem_lines,
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


def table_names(given: str | None) -> tuple[str, ...]:
    """The tables ``--tables`` names (comma-separated), in ``TABLE_NAMES``' order; () for none."""
    from tracekit.report import TABLE_NAMES

    if given is None:
        return ()
    names = {x.strip() for x in given.split(",") if x.strip()}
    unknown = sorted(names - set(TABLE_NAMES))
    if unknown or not names:
        raise InputError(f"--tables: no table named {', '.join(map(repr, unknown)) or repr(given)} "
                         f"(tables: {', '.join(TABLE_NAMES)})")
    return tuple(n for n in TABLE_NAMES if n in names)


def rank_tables(path: str, ranks: set[int], wanted: tuple[str, ...], step: int | None = None, **options) -> list[dict]:
    """``schema.RankTables`` of each of ``ranks`` in ``path`` (loaded once, through the parse
    cache; ``options``: ``rules_path``, ``cache_dir``, ``use_cache``), over all steps or of
    ``step`` (a step the rank does not have is an ``InputError`` naming those it has)."""
    from tracekit import api
    from tracekit.report import tables_dict

    out = []
    for lt in api.load(path, rules=options["rules_path"], cache_dir=options["cache_dir"],
                       use_cache=options["use_cache"]):
        if lt.rank in ranks:
            kernels = lt.kernels() if "kernels" in wanted else None
            operators = lt.operators() if "operators" in wanted else None
            if step is not None:
                have = (kernels or operators).steps
                if step not in have:
                    raise InputError(f"--step {step}: no such step in rank {lt.rank} (steps: {step_list(have)})", path=path)
            out.append(tables_dict(lt.source, lt.rank, kernels=kernels, operators=operators, step=step))
    return out


def step_list(steps: list[int]) -> str:
    """Steps as a short text: ``1-14`` for a run of consecutive steps, else the first ones listed."""
    if not steps:
        return "none: the trace has no ProfilerStep#N annotation and too few optimizer boundaries"
    if steps == list(range(steps[0], steps[0] + len(steps))):
        return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])
    return ", ".join(map(str, steps[:12])) + (f", ... ({len(steps)} steps)" if len(steps) > 12 else "")


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
@click.option("--no-job-graph", is_flag=True,
              help="Leave the job's graph out of a directory's analysis (the ranks' graphs joined "
                   "at their collectives: what bounds the job, who waits for whom, the what-ifs "
                   "across ranks); the rest of the job summary as always, in less time.")
@click.option("--snapshot", "snapshot_path", type=click.Path(), default=None,
              help="A CUDA memory-snapshot pickle (torch.cuda.memory._dump_snapshot) to report "
                   "with the one trace analysed. Without it, <stem>.pickle or "
                   "<stem>_snapshot.pickle beside a trace file <stem>.json(.gz) is used.")
@click.option("--hta/--no-hta", default=None,
              help="Include HTA's own figures (temporal, idle, kernel breakdown, comm/comp), or "
                   "leave them out. Default: include them for traces of at most 500,000 events "
                   "(they cost ~3 s per million events); a directory's job summary alone "
                   "never needs them.")
@click.option("--tables", "tables", default=None, metavar="NAMES",
              help="Also each rank's kernels and/or operators table over all steps (or of --step): "
                   "'kernels', 'operators' or 'kernels,operators' (text: the largest rows, the rest "
                   "folded into 'others'; JSON: every row, under \"tables\").")
@click.option("--step", "table_step", type=int, default=None,
              help="With --tables: the tables of this step only (ProfilerStep#N's N; a kernel's "
                   "share is then of that step's GPU time).")
@click.option("--limit", type=int, default=20, show_default=True,
              help="Rows shown of a long table in the text; the rest folded into 'others' or "
                   "left to --format json.")
@verbose_option
@cache_options("Neither read nor write the trace and report caches.",
               "Cache directory (default: $TRACEKIT_CACHE_DIR or the user cache dir).")
def command(paths, fmt, out, rules_path, rank, detail, no_align, workers, scheduler,
            scheduler_timeout, no_job_graph, snapshot_path, hta, tables, table_step, limit, verbose, no_cache,
            cache_dir):
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
    from tracekit.report import document, render_job, render_rank, render_tables

    wanted = table_names(tables)
    if table_step is not None and not wanted:
        raise InputError("--step goes with --tables: it picks the step of the kernels and operators tables")
    if limit < 1:
        raise InputError("--limit must be at least 1")
    check_out(out, paths, rules_path=rules_path, snapshot_path=snapshot_path)
    lines = cache_lines(no_cache, cache_dir)
    config = JobConfig(align_clocks=not no_align, job_graph=not no_job_graph)
    ranks: list[dict] = []
    jobs: list[dict] = []
    texts: list[tuple] = []
    problems: list[tuple] = []
    tabled: list[dict] = []
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
        mine = rank_tables(p, {r["rank"] for r in sel}, wanted, table_step, rules_path=rules_path, cache_dir=cache_dir,
                           use_cache=not no_cache) if wanted else []
        tabled += mine
        if got.job is not None:
            problems.append((got.problems, p))
            jobs.append(got.job)
        if got.job is None or rank is not None or (len(got.ranks) == 1 and not got.problems):
            texts += [("rank", r) for r in sel]
        else:
            texts.append(("job", got.job))
            texts += [("rank", r) for r in sel] if detail else [("tables", t) for t in mine]
    if snapshot_path is not None:
        ranks = [with_snapshot(ranks, snapshot_path)]
        texts = [("rank", ranks[0])]
    for r in ranks:
        lines += warning_lines(r)
    if fmt == "json":
        doc = document(ranks, __version__, jobs, tables=tabled if wanted else None)
        emit(json.dumps(doc, allow_nan=False) + "\n", out)  # compact: C-encoded, fast
    else:
        of = {(t["source"], t["rank"]): t for t in tabled}
        emit("\n".join(render_job(x) if kind == "job"
                       else render_tables(x, limit=limit) if kind == "tables"
                       else render_rank(x, limit=limit, tables=of.get((x["source"], x["rank"])))
                       for kind, x in texts), out)
    for probs, p in problems:
        lines += problem_lines(probs, p)
    for j in jobs:
        lines += job_lines(j)
    echo_lines(lines, verbose=verbose)
    if any(probs for probs, _ in problems):
        raise SystemExit(2)
