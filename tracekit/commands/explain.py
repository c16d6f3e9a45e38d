"""``tracekit explain PATH``: what bounds each step, and what each fix would save."""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit._files import check_new_file, check_out
from tracekit.commands.common import (cache_options, echo_lines, emit, format_option,
                                      out_option, rules_option, select_rank, verbose_option,
                                      warning_lines)


@click.command("explain")
@click.argument("path", type=click.Path())
@click.option("--step", type=int, default=None,
              help="Also print this step's critical path (the longest runs, in time order).")
@click.option("--what-if", "what_ifs", multiple=True, metavar="SPEC",
              help="Replay a change: kernel:REGEX=N, phase:NAME=N, host=N (N times faster) or "
                   "sync:REGEX (remove matching host syncs; sync:all). Repeatable.")
@click.option("--annotate", "annotate", type=click.Path(), default=None,
              help="Write a copy of the trace (.json or .json.gz) with the critical path, sync "
                   "stalls and optimizer -> lookup gaps added as tracks and flows.")
@click.option("--traced", is_flag=True,
              help="Explain the traced step as the trace shows it (default: the estimated "
                   "untraced step, the profiler's host overhead taken out).")
@click.option("--step-ms", "step_ms", type=float, default=None,
              help="The untraced step time (ms), if known: it sets the scale of the untraced "
                   "estimate (default: a metrics.json or TorchRec timing file beside the trace, "
                   "else the overhead model alone).")
@format_option()
@out_option
@rules_option
@click.option("--rank", type=int, default=None, help="Only this rank of a multi-rank directory.")
@click.option("--limit", type=int, default=20, show_default=True,
              help="Rows per long table (and runs shown with --step).")
@verbose_option
@cache_options()
def command(path, step, what_ifs, annotate, traced, step_ms, fmt, out, rules_path, rank, limit,
            verbose, no_cache, cache_dir):
    """What bounds each step of PATH's training loop, and what each fix would save.

    For every step: its critical path (the chain of dependencies that decided when it ended),
    the time on it by category (host, GPU compute by phase, communication, memcpy, sync, idle)
    and the bound; the findings, each with its evidence and a predicted saving from a what-if
    replay of the trace's dependency graph. Without --step/--what-if/--annotate the answer
    comes from the report cache that `tracekit analyze` shares.
    """
    from tracekit.errors import InputError
    from tracekit.report import explain_document, render_explain

    if what_ifs:  # (numpy and pandas only when the slow path runs)
        from tracekit.graph.whatif import check_phases, parse_spec

        specs = [parse_spec(s) for s in what_ifs]
        if any(sp.what == "phase" for sp in specs):
            from tracekit.phases import load_rules

            check_phases(specs, load_rules(rules_path))
    check_out(out, (path,), rules_path=rules_path)
    if annotate is not None:
        import os

        # never anything read (the trace, the snapshot beside it, the rules, a link to one), a
        # device, FIFO, socket or directory, nor the empty name
        check_new_file(annotate, what="--annotate")
        check_out(annotate, (path,), rules_path=rules_path, what="--annotate")
        if out is not None and os.path.realpath(annotate) == os.path.realpath(out):
            raise InputError("--annotate and --out name the same file", path=annotate)
    if limit < 1:
        raise InputError("--limit must be at least 1")
    if step_ms is not None and not (step_ms > 0 and step_ms < 1e9):
        raise InputError("--step-ms must be a positive number of milliseconds")
    from tracekit.loaded import has_untraced_beside

    slow = bool(step is not None or what_ifs or annotate is not None or traced or step_ms
                or has_untraced_beside(path))
    ranks: list[dict]
    paths: dict[int, list[dict]] = {}
    if not slow:
        from tracekit.loaded import report_for_path

        # explain needs no HTA section: the report `tracekit analyze` keeps when there is one
        # (HTA's or not, it holds explain's answer), else one computed without HTA
        got = report_for_path(path, rules_path=rules_path, cache_dir=cache_dir,
                              use_cache=not no_cache, with_hta=False, prefetch=True,
                              also_hta=(None, True))
        ranks = select_rank(got, rank, path)
    else:
        from tracekit.loaded import loading
        from tracekit.report import explain_dict, path_rows

        view = {"traced": traced, "step_ms": step_ms}
        with loading(path, rules=rules_path, cache_dir=cache_dir, use_cache=not no_cache,
                     prefetch=True) as traces:
            if rank is not None:
                traces = [lt for lt in traces if lt.rank == rank]
                if not traces:
                    select_rank([], rank, path)
            ranks = []
            for lt in traces:
                r = {"source": lt.source, "rank": int(lt.rank), "warnings": list(lt.warnings),
                     "explain": explain_dict(lt.explain(what_ifs, **view))}
                ranks.append(r)
                if step is not None:
                    seg = lt.critical_path(step, what_ifs, **view)
                    steps = [s["step"] for s in r["explain"]["steps"]]
                    if step not in steps:
                        have = ", ".join(str(s) for s in steps)
                        raise InputError(f"no step {step} here (steps: {have or 'none'})",
                                         path=path)
                    # a step of events of 0 us has a step and an empty critical path
                    paths[int(lt.rank)] = path_rows(seg) if not seg.empty else []
                if annotate is not None:
                    if len(traces) != 1:
                        raise InputError("--annotate goes with one trace (choose one with "
                                         "--rank)", path=path)
                    n = lt.annotate(annotate, what_ifs, **view)
                    click.echo(f"tracekit: wrote {annotate} ({n} events added)", err=True)
    lines = [ln for r in ranks for ln in warning_lines(r)]
    echo_lines(lines, verbose=verbose, room=2 if annotate is not None else 3)
    ranks = [{**r, "path": paths.get(r["rank"])} for r in ranks]
    _in_job(ranks, path, rules_path=rules_path, cache_dir=cache_dir, use_cache=not no_cache)
    if fmt == "json":
        emit(json.dumps(explain_document(ranks, __version__), allow_nan=False) + "\n", out)
    else:
        emit(render_explain(ranks, limit=limit, step=step), out)


def _in_job(ranks: list[dict], path, *, rules_path, cache_dir, use_cache: bool) -> None:
    """For a directory of several ranks: each rank's place in the job (``rank_context``: its
    own work against its wait on the job's graph; for a rank that waits, the fixes of the rank
    it waits for), from the job's analysis through the report cache."""
    import os

    from tracekit._files import trace_files_in

    if not os.path.isdir(path) or len(trace_files_in(path)) < 2:
        return
    from tracekit.ranks import analyze_job
    from tracekit.ranks.job import job_fixes, rank_context
    from tracekit.ranks.whatif import RankSkeletonTask

    rep = analyze_job(path, rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                      whole=False)
    fixes = None
    for r in ranks:
        ctx = rank_context(rep.job, int(r["rank"]), rep.ranks)
        if ctx is not None:
            if fixes is None:  # each known fix that a rank predicts, on every rank of the job
                fixes = job_fixes(rep.ranks, rep.graph, task=RankSkeletonTask(
                    rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache))
            r["job"] = {**ctx, "what_ifs": list(ctx["what_ifs"]) + fixes}
