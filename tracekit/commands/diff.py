"""``tracekit diff A B``: where the step's time moved from one trace to another."""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit._files import check_out
from tracekit.commands.common import cache_options, emit, format_option, out_option, rules_option


@click.command("diff")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--rank-a", type=int, default=None, help="The rank of A, when A is a directory of ranks.")
@click.option("--rank-b", type=int, default=None, help="The rank of B, when B is a directory of ranks.")
@format_option("Text tables, or one JSON object (schema: tracekit.report.schema.DiffDocument).")
@out_option
@rules_option
@click.option("--limit", type=int, default=15, show_default=True,
              help="Rows shown of a long table (ops, kernels, streams); the rest folded into 'others'.")
@cache_options()
def command(a, b, rank_a, rank_b, fmt, out, rules_path, limit, no_cache, cache_dir):
    """Where B's step time went differently from A's: per step, the step's span, GPU time by
    phase and by stream (a phase that moved to another stream), phases running at once, the
    critical path by category, every op and kernel (calls and time in A and B; added, removed).

    A and B are trace files, or directories of rank traces with --rank-a/--rank-b (the same
    directory twice: two ranks of one job).
    """
    from tracekit.errors import InputError

    if limit < 1:
        raise InputError("--limit must be at least 1")
    check_out(out, (a, b), rules_path=rules_path)
    from tracekit.loaded import diff_paths
    from tracekit.report import diff_document, render_diff

    result = diff_paths(a, b, rank_a=rank_a, rank_b=rank_b, rules_path=rules_path, cache_dir=cache_dir,
                        use_cache=not no_cache, parallel=True)
    doc = diff_document(result, __version__)
    if fmt == "json":
        emit(json.dumps(doc, allow_nan=False) + "\n", out)
    else:
        emit(render_diff(doc, limit=limit), out)
