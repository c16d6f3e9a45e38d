"""``tracekit check PATH --max KEY=VALUE --min KEY=VALUE``: gate a job on headline figures.

Exit 0 when every threshold holds on every rank, 1 when one does not (or its figure cannot be
measured in that trace), 2 on bad input, like every other command. A directory is a job: its
ranks are checked, and a job of which a rank could not be read (or is missing) fails the check
``all ranks read`` (exit 1, with one ``tracekit: error:`` line per rank not read).
"""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit._files import check_out
from tracekit.commands.common import (cache_lines, cache_options, echo_lines, emit,
                                      format_option, job_lines, job_options, out_option,
                                      problem_lines,
                                      rules_option, select_rank, verbose_option, warning_lines)


@click.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--max", "maxima", multiple=True, metavar="KEY=VALUE",
              help="Fail when the figure is above VALUE, e.g. stall_total=5ms, "
                   "peak_reserved=60GiB, step_p90=6s.")
@click.option("--min", "minima", multiple=True, metavar="KEY=VALUE",
              help="Fail when the figure is below VALUE, e.g. comm_overlap_ratio=80%.")
@format_option()
@out_option
@rules_option
@click.option("--rank", type=int, default=None, help="Only this rank of a multi-rank directory.")
@job_options
@verbose_option
@cache_options()
def command(paths, maxima, minima, fmt, out, rules_path, rank, workers, scheduler,
            scheduler_timeout, verbose, no_cache, cache_dir):
    """Check headline figures of traces against thresholds (exit 1 when one fails).

    KEY is a headline figure of `tracekit analyze --format json` (docs/metrics.md defines each;
    the _ns/_bytes suffix may be left out); VALUE carries a unit for times (ns, us, ms, s) and
    sizes (B, KiB, MiB, GiB, KB, MB, GB), ratios are 0..1 or a percentage (80%). A figure the
    trace cannot give fails the check, and the output says why.
    """
    from tracekit import api
    from tracekit.checks import parse, evaluate
    from tracekit.errors import InputError
    from tracekit.report import render_check

    thresholds = [parse(s, upper=True) for s in maxima] + [parse(s, upper=False) for s in minima]
    if not thresholds:
        raise InputError("check needs at least one --max or --min threshold")
    check_out(out, paths, rules_path=rules_path)
    lines = cache_lines(no_cache, cache_dir)
    results, failed = [], 0
    for p in paths:
        got = api.reports(p, rules_path=rules_path, cache_dir=cache_dir, use_cache=not no_cache,
                          prefetch=True, with_hta=False, whole=True, workers=workers,
                          scheduler=scheduler, scheduler_timeout_s=scheduler_timeout)
        if got.job is not None:
            lines += problem_lines(got.problems, p) + job_lines(got.job)
            job = got.job
            expected = job["world_size"] or job["ranks_read"] + sum(
                1 for x in job["problems"] if x["kind"] != "missing")
            failed += not job["complete"]
            results.append({"source": p, "rank": None, "key": "ranks_read", "op": "==",
                            "bound": expected, "value": job["ranks_read"],
                            "passed": job["complete"], "reason": None})
        for r in select_rank(got.ranks, rank, p):
            lines += warning_lines(r)
            for row in evaluate(r["headline"], thresholds, r):
                failed += not row.passed
                results.append({"source": r["source"], "rank": r["rank"], "key": row.key,
                                "op": row.op, "bound": row.bound, "value": row.value,
                                "passed": row.passed, "reason": row.reason})
    doc = {"tracekit_version": __version__, "passed": failed == 0, "checks": results}
    emit(json.dumps(doc) + "\n" if fmt == "json" else render_check(doc), out)
    echo_lines(lines, verbose=verbose)
    if failed:
        raise SystemExit(1)
