"""What identifies a user's file, and where caches live: shared by the parsed-trace cache
(``tracekit.trace.cache``), the report cache (``tracekit.reportcache``) and the snapshot finder.

Standard library only, so that a warm ``tracekit analyze`` (answered from the report cache)
never imports numpy or pandas.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import zlib
from pathlib import Path

from tracekit.errors import InputError, display  # noqa: F401 (display: what the callers print paths with)

TRACE_SUFFIXES = (".json", ".json.gz")
"""Suffixes of the files of a directory that may be traces (``*.pt.trace.json(.gz)`` included)."""
SNIFF_BYTES = 1 << 16
"""How much of a directory's file (decompressed) ``is_trace_file`` looks at."""
ENV_VAR = "TRACEKIT_CACHE_DIR"
_HASH_BLOCK = 1 << 20


def _kind_of(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def check_readable(path: str | os.PathLike, what: str = "file", *, directory_ok: bool = False) -> None:
    """Raise ``InputError`` unless ``path`` (symlinks followed) is a regular file (or, with
    ``directory_ok``, a directory). Called before anything opens a user's path: opening a FIFO
    blocks until something writes to it, and a device such as /dev/zero never ends."""
    src = os.fspath(path)
    try:
        st = os.stat(src)
    except FileNotFoundError:
        raise InputError("no such file or directory", path=src) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=src) from None
    if stat.S_ISREG(st.st_mode) or (directory_ok and stat.S_ISDIR(st.st_mode)):
        return
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"is a directory, not a {what}", path=src)
    raise InputError(f"is {_kind_of(st.st_mode)}, not a {what}: tracekit reads only regular "
                     "files", path=src)


def is_trace_file(path: str, opener=open) -> bool:
    """Whether a ``.json``/``.json.gz`` file found in a directory is to be read as a trace.

    Skipped: a file that is a whole JSON document within its first ``SNIFF_BYTES``
    (decompressed) without a ``"traceEvents"`` key (a run directory's ``metrics.json`` and the
    like). Everything else counts, so nothing that might be a trace is dropped silently: a
    longer file whose ``traceEvents`` comes late is read, and a file that is cut short, is not
    JSON, or cannot be read or decompressed counts too, so that loading it reports why.
    ``opener``: what opens ``path`` for reading bytes (an fsspec filesystem's ``open`` for a URL)."""
    try:
        with opener(path, "rb") as f:
            head = f.read(SNIFF_BYTES + 1)
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as g:
                    head = g.read(SNIFF_BYTES + 1)
    except (OSError, EOFError, zlib.error):
        return True
    if b'"traceEvents"' in head or len(head) > SNIFF_BYTES:
        return True
    try:
        json.loads(head)
    except (ValueError, RecursionError):
        return True  # not a whole JSON document: a trace cut short, say
    return False


def trace_files_in(directory: str) -> list[str]:
    """The trace files of a directory of per-rank traces, sorted by name (raises OSError when
    it cannot be listed). An entry named like a trace that is not a regular file (a FIFO, a
    device, a directory, a symlink loop or to nothing) is listed too, never opened here: loading
    it names it and says what it is."""
    out = []
    for n in sorted(os.listdir(directory)):
        if not n.endswith(TRACE_SUFFIXES):
            continue
        p = os.path.join(directory, n)
        try:
            regular = stat.S_ISREG(os.stat(p).st_mode)
        except OSError:
            regular = False
        if not regular or is_trace_file(p):
            out.append(p)
    return out


def files_read(paths, *, rules_path=None, snapshot_path=None) -> list[str]:
    """Every file a command given these paths reads: each trace (a directory's trace files),
    the snapshot found beside a trace file, the rules and snapshot files named. ``--out`` must
    be none of them (``check_out``)."""
    got = [p for p in (rules_path, snapshot_path) if p is not None]
    for p in paths:
        if os.path.isdir(p):
            try:
                got += [os.path.join(p, n) for n in os.listdir(p)]
            except OSError:
                pass
        else:
            got.append(p)
            snap = find_snapshot(p)
            if snap is not None:
                got.append(os.fspath(snap))
    return got


def check_out(out: str | None, paths, *, rules_path=None, snapshot_path=None,
              what: str = "--out") -> None:
    """Refuse an output file that is, or is linked to (symlink or hard link), a file the
    command reads (``files_read``), or that is a directory: writing it would destroy an
    input. ``what``: the option's name in the message."""
    if out is None:
        return
    if os.path.isdir(out):
        raise InputError(f"{what} is a directory", path=out)
    try:
        st = os.stat(out)
    except OSError:
        return  # does not exist (yet): it cannot be an input
    if not stat.S_ISREG(st.st_mode):
        return  # a pipe or a terminal (/dev/stdout, a process substitution)
    for p in files_read(paths, rules_path=rules_path, snapshot_path=snapshot_path):
        try:
            other = os.stat(p)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            same = "is" if os.path.realpath(p) == os.path.realpath(out) else "is linked to"
            raise InputError(f"{what} {same} {p}, an input this command reads; it would be "
                             "overwritten", path=out)


def check_new_file(out: str, *, what: str) -> None:
    """Refuse ``out`` as a file to be replaced by a new one (``--annotate``: written under a
    temporary name, then renamed onto it): empty, a directory, or an existing device, FIFO or
    socket (a rename would put a regular file in its place: ``/dev/full``, as root)."""
    from tracekit.errors import InputError

    if not out:
        raise InputError(f"{what} needs a file name")
    try:
        st = os.stat(out)
    except OSError:
        return  # does not exist (yet)
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} is a directory", path=out)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} is {_kind_of(st.st_mode)}; it would be replaced by a "
                         "regular file", path=out)


def cache_dir(explicit: str | os.PathLike | None = None) -> str:
    """``explicit``, else ``$TRACEKIT_CACHE_DIR``, else the platform's user cache dir."""
    if explicit is not None:
        return os.fspath(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    import platformdirs

    return platformdirs.user_cache_dir("tracekit")


_stamps: dict[tuple, tuple[str, int, int, str]] = {}


def content_stamp(path: str | os.PathLike) -> tuple[str, int, int, str]:
    """(resolved path, size, mtime_ns, SHA-256 of the whole file): it changes whenever the
    bytes do, even for a same-size edit with the mtime put back (about 30 ms per 50 MB; the
    caches' hits pay it, never a parse). A file name that is not UTF-8 is kept as
    ``display`` shows it. Within a process a file is hashed once while its inode, size, mtime
    and ctime stay the same (the report cache and the trace cache both stamp it)."""
    real = os.path.realpath(path)
    if not stat.S_ISREG(os.stat(real).st_mode):  # before opening: a FIFO's open blocks
        raise OSError(f"{display(real)} is not a regular file")
    with open(real, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{display(real)} is not a regular file")
        ident = (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if ident in _stamps:
            return _stamps[ident]
        h = hashlib.sha256()
        buf = bytearray(_HASH_BLOCK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    out = display(real), st.st_size, st.st_mtime_ns, h.hexdigest()
    if len(_stamps) > 4096:
        _stamps.clear()
    _stamps[ident] = out
    return out


def snapshot_candidates(trace_path: str | os.PathLike) -> list[Path]:
    """The memory-snapshot files looked for beside a trace ``<stem>.json(.gz)``, in order:
    ``<stem>.pickle``, ``<stem>_snapshot.pickle``, for ``<x>.pt.trace`` stems the same without
    ``.pt.trace``, and for TorchRec's benchmark (``trace-<name>-rank<N>``) its
    ``memory-<name>-rank<N>.pickle``."""
    p = Path(trace_path)
    name = p.name
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    stems = [name]
    if name.endswith(".pt.trace"):
        stems.append(name[: -len(".pt.trace")])
    out = [p.parent / f"{s}{tail}" for s in stems for tail in (".pickle", "_snapshot.pickle")]
    if name.startswith("trace-"):
        out.append(p.parent / f"memory-{name[len('trace-'):]}.pickle")
    return out


def find_snapshot(trace_path: str | os.PathLike) -> Path | None:
    """The first of ``snapshot_candidates`` that is a file, or ``None`` (a directory of traces
    has none)."""
    if os.path.isdir(trace_path):
        return None
    for cand in snapshot_candidates(trace_path):
        if cand.is_file():
            return cand
    return None


def short_labels(paths: list[str] | tuple[str, ...]) -> list[str]:
    """Short unique names for the traces a person named: the file name without .json(.gz);
    where names collide, the colliding ones take as many parent folders as make them differ
    (``sparse/trace_rank0`` vs ``fused/trace_rank0``); the same path twice gets its position
    (``run#1``, ``run#2``)."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    for suffix in (".json.gz", ".json"):
        parts = [q[:-1] + [q[-1][: -len(suffix)]] if q[-1].endswith(suffix) else q for q in parts]
    depth = [1] * len(parts)
    while True:
        names = ["/".join(q[-d:]) for q, d in zip(parts, depth)]
        dup = {n for n in names if names.count(n) > 1}
        if not dup:
            return [display(n) for n in names]
        grew = False
        for i, n in enumerate(names):
            if n in dup and depth[i] < len(parts[i]):
                depth[i] += 1
                grew = True
        if not grew:  # the same path more than once
            return [display(n if names.count(n) == 1 else f"{q[-1]}#{i + 1}")
                    for i, (n, q) in enumerate(zip(names, parts))]
