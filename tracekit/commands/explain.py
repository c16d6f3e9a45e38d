"""``tracekit explain PATH``: what bounds each step, and what each fix would save."""

from __future__ import annotations

import json
from dataclasses import replace

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
                   "sync:REGEX (remove matching host syncs; sync:all). Repeatable. In a job "
                   "(a directory of its ranks), rank:R:SPEC changes rank R alone (SPEC as "
                   "above, or fix:ID) and replays the job's graph.")
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

    rank_specs = []
    if what_ifs:  # (numpy and pandas only when the slow path runs)
        from tracekit.graph.whatif import check_phases, parse_spec
        from tracekit.ranks.whatif import is_rank_spec, parse_rank_spec

        rank_specs = [parse_rank_spec(s) for s in what_ifs if is_rank_spec(s)]
        what_ifs = tuple(s for s in what_ifs if not is_rank_spec(s))
        specs = [parse_spec(s) for s in what_ifs]
        # a rank's phase named in the user's words (rank:R:phase:NAME=N)
        specs += [replace(parse_spec(rs.change), text=rs.text) for rs in rank_specs
                  if not rs.change.startswith("fix:")]
        if any(sp.what == "phase" for sp in specs):
            from tracekit.phases import load_rules

            check_phases(specs, load_rules(rules_path))
        if rank_specs:
            _check_job_path(path, rank_specs)
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
    world: dict[int, int | None] = {}  # each rank's job size, as its trace says
    if not slow:
        from tracekit.loaded import report_for_path

        # explain needs no HTA section: the report `tracekit analyze` keeps when there is one
        # (HTA's or not, it holds explain's answer), else one computed without HTA
        got = report_for_path(path, rules_path=rules_path, cache_dir=cache_dir,
                              use_cache=not no_cache, with_hta=False, prefetch=True,
                              also_hta=(None, True))
        ranks = select_rank(got, rank, path)
        for r in ranks:
            info = (r.get("identity") or {}).get("distributed_info") or {}
            world[int(r["rank"])] = info.get("world_size")
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
                world[int(lt.rank)] = lt.trace.world_size
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
    from tracekit.ranks import explain_in_job

    explain_in_job(ranks, path, rules_path=rules_path, cache_dir=cache_dir, use_cache=not no_cache,
                   world=world, rank_specs=rank_specs)
    if fmt == "json":
        emit(json.dumps(explain_document(ranks, __version__), allow_nan=False) + "\n", out)
    else:
        emit(render_explain(ranks, limit=limit, step=step), out)


def _check_job_path(path, rank_specs) -> None:
    """A what-if across ranks needs a job: ``InputError`` (one line) for a path that is no
    directory of several traces."""
    import os

    from tracekit._files import trace_files_in
    from tracekit.errors import InputError

    try:
        several = os.path.isdir(path) and len(trace_files_in(path)) >= 2
    except OSError:
        several = False  # the directory's own error comes from loading it
    if not several and os.path.exists(path):
        raise InputError(f"--what-if {rank_specs[0].text!r} changes one rank of a job: give the "
                         "directory of the job's rank traces", path=path)
