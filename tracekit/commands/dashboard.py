"""``tracekit dashboard [PATH...]``: serve the Dash app over the given traces (bundled samples by default)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from tracekit._files import trace_files_in
from tracekit.errors import InputError


def default_paths() -> list[str]:
    """The bundled ``sample_traces/`` (beside the package in a checkout or an editable install)."""
    here = Path(__file__).resolve().parent.parent.parent / "sample_traces"
    if not here.is_dir():
        raise InputError("no PATH given and no bundled sample_traces/ directory found; name a trace file or directory")
    # A directory of one run's per-rank traces is one source; the trace files of any other
    # directory are sources of their own. Which files are traces: the loader's rule.
    paths: list[str] = []
    for d, subdirs, _ in sorted(os.walk(here)):
        subdirs.sort()
        traces = trace_files_in(d)
        if not traces:
            continue
        if _is_per_rank_dir([os.path.basename(f) for f in traces]):
            paths.append(d)
        else:
            paths.extend(traces)
    if not paths:
        raise InputError(f"{here}: no trace files in the bundled samples")
    return paths


def _is_per_rank_dir(files: list[str]) -> bool:
    """True for a directory of one run's per-rank traces (``rank*`` / ``*rank-N*`` names)."""
    return len(files) > 1 and all("rank" in f for f in files) and len({f.split("rank")[0] for f in files}) == 1


@click.command("dashboard")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (127.0.0.1: this machine only).")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None, help="Where parsed traces are cached.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the parse cache.")
@click.option("--rules", type=click.Path(dir_okay=False, path_type=str), default=None, help="Phase-rules TOML file.")
def command(paths: tuple[str, ...], host: str, port: int, cache_dir: str | None, no_cache: bool, rules: str | None) -> None:
    """Browse traces in a web page: overview, timeline, overlap, gaps, sync stalls, memory, compare.

    PATH is a trace file (.json, .json.gz) or a directory of per-rank traces; the bundled
    sample_traces/ when none is given. Only these traces are served.
    """
    from dashboards.imports import without_notebooks

    without_notebooks()  # before Dash is imported: 0.2 s less before the page is served
    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    for p in paths:
        if not os.path.exists(p):
            raise InputError("no such file or directory", path=p)
    chosen = list(paths) or default_paths()
    catalog = Catalog(chosen, cache_dir=cache_dir, use_cache=not no_cache, rules=rules)
    server = Server(create_app(catalog), host=host, port=port)
    catalog.prefetch()
    click.echo(f"tracekit dashboard: {len(chosen)} trace(s) at {server.url}  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
