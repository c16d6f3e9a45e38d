"""Parse trace files in a forked child while the parent imports what the analyses need.

A cold ``tracekit analyze`` spent its first ~0.35 s importing pandas and the analyses, and
only then began to read the trace: one core idle while the other imported. ``start`` forks a
child before those imports (the parent has imported only the standard library, click, numpy
and what reads the trace cache by then); the child imports the parser (msgspec, the compiled
scanner: ``tracekit.trace.loader.parse_file``), parses each trace
file that the trace cache does not already hold and writes its cache entry; the parent imports
pandas meanwhile, ``wait``s for the child, and its ``load`` then reads the entries (a warm
load: memory-mapped, milliseconds). With ``--no-cache`` the entries go to a private directory
that ``finish`` removes.

The child never reports anything: whatever fails there (a bad file, a full disk) leaves the
entry missing, and the parent's own load parses the file and raises the error as it always
did. Used only where it helps and fork is safe: Linux, more than one CPU, pandas not yet
imported (a library caller or a test process has it already) and no other thread running.
``TRACEKIT_LOAD_PARALLEL=0`` turns it off, as it does the parse helper.

A big trace's parse uses both cores anyway (the scanner thread, ``_scanthread``, or helper
processes, ``_parallel``: in the child then), and the child writes its cache entry before the
parent reads it, where the parent would have written it in the background while the analyses
ran. Until 2026-11-24 such a trace was parsed in the parent after its imports; the imports now
run beside the parse: on the 508 MB stand-in (``bench/data/syn24r.json.gz``) the imports and
the load took 1.16-1.44 s instead of 1.43-1.69 s (bench/NOTES-load.md, 2026-11-24 session 2).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass

ENV_DISABLE = "TRACEKIT_LOAD_PARALLEL"


@dataclass
class Prefetch:
    pid: int
    cache_dir: str
    """Where the child writes the entries: the cache dir, or a private one (``private``)."""
    private: bool


def available() -> bool:
    return (hasattr(os, "fork") and sys.platform.startswith("linux")
            and os.environ.get(ENV_DISABLE, "1") != "0" and (os.cpu_count() or 1) >= 2
            and "pandas" not in sys.modules and threading.active_count() == 1)


def start(files: list[str], cache_dir: str | None) -> Prefetch | None:
    """Fork the child that parses ``files`` into the trace cache at ``cache_dir`` (None: a
    private directory); None when prefetching does not apply here."""
    if not files or not available():
        return None
    private = cache_dir is None
    try:
        where = tempfile.mkdtemp(prefix="tracekit-prefetch-") if private else cache_dir
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except OSError:  # no temporary directory, no process to spare: parse here, as before
        if private and "where" in locals():
            shutil.rmtree(where, ignore_errors=True)
        return None
    if pid == 0:  # the child: parse, write, leave without running the parent's exit code
        code = 1
        try:
            _parse_into(files, where)
            code = 0
        except BaseException:  # noqa: BLE001 - the parent's own load reports any error
            pass
        finally:
            os._exit(code)
    return Prefetch(pid, where, private)


def _parse_into(files: list[str], where: str) -> None:
    from tracekit.trace import cache
    from tracekit.trace.loader import parse_file

    for path in files:
        try:
            st = cache.stamp(path)
            entry_path = cache.entry_path(where, st)
            try:
                cache.read(entry_path, st)
                continue  # already there
            except cache.Invalid:
                pass
            cache.write(entry_path, st, parse_file(path, progress=None))
        except Exception:  # noqa: BLE001 - see the module docstring
            continue


def wait(p: Prefetch | None) -> None:
    """Returns once the child has finished (its entries are then complete, or absent)."""
    if p is not None:
        try:
            os.waitpid(p.pid, 0)
        except ChildProcessError:
            pass


def finish(p: Prefetch | None) -> None:
    """``wait``, then remove a private cache directory."""
    wait(p)
    if p is not None and p.private:
        shutil.rmtree(p.cache_dir, ignore_errors=True)
