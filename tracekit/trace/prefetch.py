"""Parse trace files in a forked child while the parent imports what the analyses need.

A cold ``tracekit analyze`` spent its first ~0.35 s importing pandas and the analyses, and
only then began to read the trace: one core idle while the other imported. ``start`` forks a
child before those imports (the parent has imported only the standard library, click, numpy
and what reads the trace cache by then); the child imports the parser (msgspec, the compiled
scanner: ``tracekit.trace.loader.parse_file``), parses each trace
file that the trace cache does not already hold and hands its cache entry over (below); the
parent imports pandas meanwhile, ``wait``s for the child, and its ``load`` then reads the entries
(a warm load: memory-mapped, milliseconds). With ``--no-cache`` the entries go to a private directory
that ``finish`` removes.

The child never reports anything: whatever fails there (a bad file, a full disk) leaves the
entry missing, and the parent's own load parses the file and raises the error as it always
did. Used only where it helps and fork is safe: Linux, more than one CPU, pandas not yet
imported (a library caller or a test process has it already) and no other thread running.
``TRACEKIT_LOAD_PARALLEL=0`` turns it off, as it does the parse helper.

A big trace's parse uses both cores anyway (the scanner thread, ``_scanthread``, or helper
processes, ``_parallel``: in the child then). The child hands each entry over in memory first:
it writes it into an anonymous file (``os.memfd_create``, made before the fork; ~0.03 s for the
stand-in's 79 MB entry), writes a byte to a pipe, and only then copies it into the cache dir
(``cache.copy``: renamed into place) while the parent analyses; the parent reads the memfd
(checked like a cache entry) and waits for the child only when its analyses are done. Until
2026-11-24 the parent waited for the child to write the cache file (0.1-0.2 s of kernel time
on this machine's ext4 for a 79 MB ``write``) and to exit. Before that, a big trace was
parsed in the parent after its imports; the imports now run beside the parse: on the 508 MB
stand-in (``bench/data/syn24r.json.gz``) the imports and the load took 1.16-1.44 s instead of
1.43-1.69 s (bench/NOTES-load.md, 2026-11-24 session 2).
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
    files: list[str]
    memfds: list[int]
    """One anonymous in-memory file per trace file: the child writes its entry there first."""
    signal: int
    """The read end of a pipe: the child writes one byte per file once its entry is in its
    memfd (``b"1"``), or it is not (``b"0"``: already in the cache, or not parsed)."""


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
    fds: list[int] = []
    where = None
    try:
        where = tempfile.mkdtemp(prefix="tracekit-prefetch-") if private else cache_dir
        fds = [os.memfd_create("tracekit-entry", os.MFD_CLOEXEC) for _ in files]
        fds += os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except (OSError, AttributeError):  # no temporary directory, no memfd, no process to spare:
        for fd in fds:                 # parse here, as before
            os.close(fd)
        if private and where is not None:
            shutil.rmtree(where, ignore_errors=True)
        return None
    memfds, (signal, done) = fds[:-2], fds[-2:]
    if pid == 0:  # the child: parse, write, leave without running the parent's exit code
        code = 1
        try:
            os.close(signal)
            _parse_into(files, where, memfds, done, private)
            code = 0
        except BaseException:  # noqa: BLE001 - the parent's own load reports any error
            pass
        finally:
            os._exit(code)
    os.close(done)
    return Prefetch(pid, where, private, list(files), memfds, signal)


def _parse_into(files: list[str], where: str, memfds: list[int], done: int,
                private: bool) -> None:
    """Each file's entry into its memfd, a byte to ``done`` for each; then closes ``done`` (the
    parent reads the memfds meanwhile) and copies the entries into the cache at ``where``
    (unless ``private``: the parent has all it needs then)."""
    from tracekit.trace import cache
    from tracekit.trace.loader import parse_file

    handed = []
    for path, fd in zip(files, memfds):
        ok = False
        try:
            st = cache.stamp(path)
            entry_path = cache.entry_path(where, st)
            try:
                cache.read(entry_path, st)
                continue  # already there
            except cache.Invalid:
                pass
            with os.fdopen(fd, "wb", closefd=False) as f:
                cache.write_to(f, st, parse_file(path, progress=None))
            ok = True
            handed.append((entry_path, fd))
        except Exception:  # noqa: BLE001 - see the module docstring
            continue
        finally:
            os.write(done, b"1" if ok else b"0")
    os.close(done)
    if not private:
        for entry_path, fd in handed:
            try:
                cache.copy(entry_path, fd)
            except OSError:  # a read-only or full cache dir only costs the next run speed
                pass


def wait(p: Prefetch | None) -> dict[str, int]:
    """Returns once the child has handed over each file's entry, or finished: {file: memfd
    holding its entry} for those it handed over (the others are in the cache, or not
    parsed: the parent's own load parses them and reports any error)."""
    if p is None:
        return {}
    got = b""
    while len(got) < len(p.files):
        chunk = os.read(p.signal, len(p.files) - len(got))  # EINTR: retried by Python (PEP 475)
        if not chunk:  # the child is gone: what it did not hand over is complete or absent
            finish_child(p)  # (written by rename only); the load parses what is missing
            break
        got += chunk
    return {f: fd for f, fd, b in zip(p.files, p.memfds, got) if b == ord("1")}


def finish_child(p: Prefetch) -> None:
    """Waits for the child to end (once)."""
    if p.pid:
        try:
            os.waitpid(p.pid, 0)
        except ChildProcessError:
            pass
        p.pid = 0


def finish(p: Prefetch | None) -> None:
    """Waits for the child (its copies into the cache are then complete, or absent), closes
    the memfds (what was read from them stays mapped) and removes a private cache directory."""
    if p is None:
        return
    finish_child(p)
    for fd in (*p.memfds, p.signal):
        try:
            os.close(fd)
        except OSError:
            pass
    if p.private:
        shutil.rmtree(p.cache_dir, ignore_errors=True)
