"""What the commands share: their common options, rank selection, output and warnings on stderr.

Every command module is thin: it reads its options, asks ``tracekit.api`` (or
``tracekit.ranks`` for a job) and hands the result to a renderer of ``tracekit.report``; what
two commands do alike lives here.
"""

from __future__ import annotations

import os
import re

import click

from tracekit._files import display
from tracekit.errors import InputError


# ---- options ------------------------------------------------------------------------------------

def format_option(help: str | None = None):
    """``--format text|json`` (text by default)."""
    return click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                        show_default=True, help=help)


def out_option(f):
    """``--out FILE``."""
    return click.option("--out", type=click.Path(), default=None,
                        help="Write to this file instead of stdout.")(f)


def rules_option(f):
    """``--rules R.toml``."""
    return click.option("--rules", "rules_path", type=click.Path(), default=None,
                        help="A TOML file of phase rules overriding the defaults.")(f)


def cache_options(no_cache_help: str = "Neither read nor write the caches.",
                  cache_dir_help: str = "Cache directory."):
    """``--no-cache`` and ``--cache-dir DIR``."""
    def add(f):
        f = click.option("--cache-dir", type=click.Path(), default=None, help=cache_dir_help)(f)
        return click.option("--no-cache", is_flag=True, help=no_cache_help)(f)
    return add


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


def verbose_option(f):
    """``--verbose``: every warning and problem on a line of its own."""
    return click.option("--verbose", is_flag=True,
                        help=f"Every warning and problem on a line of its own (by default "
                             f"repeated ones are folded into one line with a count and the "
                             f"first names: at most {MAX_LINES} lines; --format json lists "
                             f"every one).")(f)


# ---- ranks, output, stderr ----------------------------------------------------------------------

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


def cache_lines(no_cache: bool, cache_dir: str | None) -> list[Line]:
    """A warning, once, that the cache cannot be written (each run is then a cold one)."""
    if no_cache:
        return []
    from tracekit.api import cache_problem

    problem = cache_problem(cache_dir)
    return [("warning", "", problem)] if problem else []


Line = tuple[str, str, str]
"""A line for stderr: ``(level, where, message)``, printed ``tracekit: level: where: message``."""

MAX_LINES = 3
"""At most this many lines on stderr without ``--verbose``: repeated problems are folded."""


def warning_lines(rank: dict) -> list[Line]:
    """A rank's loader and analysis warnings."""
    return [("warning", display(rank["source"]), w) for w in rank["warnings"]]


def problem_lines(problems: list, directory: str) -> list[Line]:
    """One error per file of a job that was not read, and one for the ranks without a file."""
    from tracekit.report import ranges

    missing = [p for p in problems if p.kind == "missing"]
    out: list[Line] = [("error", display(p.source) if p.source else directory, p.message)
                       for p in problems if p.kind != "missing"]
    if len(missing) == 1:
        out.append(("error", directory, missing[0].message))
    elif missing:
        out.append(("error", directory,
                    f"ranks {ranges([p.rank for p in missing])} have no trace file"))
    return out


def job_lines(job: dict) -> list[Line]:
    """A job's own warnings (``clock.warnings``: ranks whose clocks disagree beyond a step)."""
    return [("warning", display(job["source"]), w)
            for w in (job.get("clock") or {}).get("warnings") or []]


def _shape(message: str) -> str:
    """A message with its numbers taken out: the lines one fold gathers share it."""
    return re.sub(r"\d[\d,.]*", "#", message)


def folded(lines: list[Line], *, verbose: bool = False, room: int = MAX_LINES) -> list[str]:
    """The lines as text: every one with ``verbose``; else at most ``room``: errors first, the
    lines of one shape (the same message but for its numbers: "not valid JSON" from 499 files)
    as one line with their count and the first three names, and past ``room`` a last line
    counting the rest (every one: ``--verbose``, or the JSON output)."""
    def text(lvl: str, where: str, msg: str) -> str:
        return f"tracekit: {lvl}: {where}: {msg}" if where else f"tracekit: {lvl}: {msg}"

    if verbose or len(lines) <= room:
        return [text(*ln) for ln in lines]
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for lvl, where, msg in sorted(lines, key=lambda ln: ln[0] != "error"):  # stable
        groups.setdefault((lvl, _shape(msg)), []).append((where, msg))
    out: list[tuple[str, str, int]] = []
    for (lvl, _), items in groups.items():
        if len(items) == 1:
            out.append((lvl, text(lvl, *items[0]), 1))
            continue
        dirs = {os.path.dirname(w) for w, _ in items}
        one_dir = dirs.pop() if len(dirs) == 1 else ""
        names = ", ".join(os.path.basename(w) if one_dir else w for w, _ in items[:3])
        more = f" and {len(items) - 3:,} more" if len(items) > 3 else ""
        out.append((lvl, text(lvl, one_dir, f"{len(items):,} files: {items[0][1]} "
                                            f"({names}{more})"), len(items)))
    if len(out) > room:
        rest = out[room - 1:]
        n = sum(c for _, _, c in rest)
        lvl = "error" if any(x[0] == "error" for x in rest) else "warning"
        out = out[: room - 1] + [(lvl, text(lvl, "", f"{n:,} more problems and warnings "
                                                   "(every one: --verbose, or --format json)"),
                                  n)]
    return [t for _, t, _ in out]


def echo_lines(lines: list[Line], *, verbose: bool = False, room: int = MAX_LINES) -> None:
    """``folded(lines)`` on stderr."""
    for t in folded(lines, verbose=verbose, room=room):
        click.echo(t, err=True)

