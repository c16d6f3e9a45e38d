"""What the commands share: their common options, rank selection, output and warnings on stderr.

Every command module is thin: it reads its options, asks ``tracekit.api`` (or
``tracekit.ranks`` for a job) and hands the result to a renderer of ``tracekit.report``; what
two commands do alike lives here.
"""

from __future__ import annotations

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

