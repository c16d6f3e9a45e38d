"""``tracekit compare A B [C...]``: headline figures side by side, with differences from A."""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit._files import check_out, short_labels
from tracekit.commands.common import (cache_lines, cache_options, echo_lines, emit,
                                      format_option, out_option, rules_option, select_rank,
                                      verbose_option, warning_lines)


@click.command("compare")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@format_option()
@out_option
@rules_option
@click.option("--rank", type=int, default=None,
              help="Rank to compare in multi-rank directories (default: the lowest).")
@verbose_option
@cache_options()
def command(paths, fmt, out, rules_path, rank, verbose, no_cache, cache_dir):
    """Compare the headline figures of two or more traces (the first is the baseline).

    Figures: P90 step time, peak allocated and reserved, optimizer -> lookup gap, overlap of
    communication by compute, exposed communication and memcpy, sync-stall time.
    """
    from tracekit.loaded import report_for_path
    from tracekit.errors import InputError
    from tracekit.report import compare_document, render_compare

    if len(paths) < 2:
        raise InputError("compare needs at least two traces")
    check_out(out, paths, rules_path=rules_path)
    lines = cache_lines(no_cache, cache_dir)
    entries = []
    for p, label in zip(paths, short_labels(paths)):
        # the headline needs no HTA figures: skip that (slow) section
        ranks = report_for_path(p, rules_path=rules_path, cache_dir=cache_dir,
                                use_cache=not no_cache, prefetch=True, with_hta=False)
        r = select_rank(ranks, rank, p)[0] if rank is not None else min(ranks, key=lambda x: x["rank"])
        lines += warning_lines(r)
        entries.append({"label": label, "source": r["source"], "rank": r["rank"],
                        "headline": r["headline"]})
    doc = compare_document(entries, __version__)
    if fmt == "json":
        emit(json.dumps(doc, allow_nan=False) + "\n", out)  # compact: C-encoded, fast
    else:
        emit(render_compare(doc), out)
    echo_lines(lines, verbose=verbose)
