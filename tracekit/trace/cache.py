"""The parsed-trace cache: one file per trace, loaded in milliseconds.

An entry holds the two tables' columns as raw little-endian numpy arrays, the event names, the
metadata and the file's stamp. Layout::

    b"TKCACHE\\0"  u32 format version  u32 header length  u64 data length  u32 crc32 (data, header)
    header (JSON)  zero padding to 64  data: the columns, each 64-byte aligned

The entry for a trace lives at ``<cache dir>/<sha256 of its resolved path>.tkc`` and records the
file's stamp (resolved path, size, mtime_ns and a hash of its first and last 64 KiB). An entry
whose stamp, version, sizes or checksum do not match is stale or corrupt: it is ignored and
rewritten, never trusted. Entries are written to a temporary file and renamed into place, so a
reader never sees half an entry.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import tempfile
import zlib

try:  # ISA-L's crc32: the same checksum as zlib's, ~5x less CPU (a 125 MB entry: 7 vs 39 ms)
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib where it has no wheel
    _crc32 = zlib.crc32
from dataclasses import dataclass

import numpy as np

from tracekit._files import ENV_VAR, cache_dir, content_stamp  # noqa: F401 (re-exported)
from tracekit.trace.model import ARG_COLUMNS, EVENT_COLUMNS, MEMORY_COLUMNS

FORMAT_VERSION = 9
"""Bump when the tables, the loader's output or this layout change: old entries then miss."""
_MAGIC = b"TKCACHE\0"
_FIXED = struct.Struct("<8sIIQI")
_ALIGN = 64
_EVENT_DTYPES = {c: np.dtype(np.int32 if t == "category" else t) for c, t in EVENT_COLUMNS.items()}
_MEMORY_DTYPES = {c: np.dtype(t) for c, t in MEMORY_COLUMNS.items()}
_ARG_DTYPES = {c: np.dtype(np.int32 if t == "category" else t) for c, t in ARG_COLUMNS.items()}
_TABLES = (("events", _EVENT_DTYPES), ("memory", _MEMORY_DTYPES), ("args", _ARG_DTYPES))


def stamp(path: str) -> dict:
    """What identifies a file's content cheaply: path, size, mtime and its ends' hash."""
    real, size, mtime_ns, ends = content_stamp(path)
    return {"path": real, "size": size, "mtime_ns": mtime_ns, "ends": ends,
            "version": FORMAT_VERSION}


def entry_path(directory: str, st: dict) -> str:
    digest = hashlib.sha256(f"{FORMAT_VERSION}\0{st['path']}".encode()).hexdigest()[:32]
    return os.path.join(directory, f"{digest}.tkc")


@dataclass
class Entry:
    """What the loader stores for one file."""

    events: dict[str, np.ndarray]
    memory: dict[str, np.ndarray]
    names: list[str]
    info: dict
    """rank, metadata, schema, platform, warnings: JSON-safe."""
    args: dict[str, np.ndarray]
    """``Trace.args``'s columns, strings as codes into ``arg_strings``."""
    arg_strings: list[str]


def write(path: str, st: dict, entry: Entry) -> None:
    """Writes ``entry`` for the file stamped ``st`` at ``path`` atomically."""
    _replace_atomically(path, lambda f: write_to(f, st, entry))


def copy(path: str, fd: int) -> None:
    """Writes the entry held by the file ``fd`` (``write_to``'s output, e.g. in a memfd) at
    ``path`` atomically, copied by the kernel (the entry is checked when it is read)."""

    def fill(f) -> None:
        size, done = os.fstat(fd).st_size, 0
        while done < size:
            sent = os.sendfile(f.fileno(), fd, done, size - done)
            if sent == 0:
                raise OSError("short copy of a cache entry")
            done += sent

    _replace_atomically(path, fill)


def write_to(f, st: dict, entry: Entry) -> None:
    """Writes ``entry`` for the file stamped ``st`` to the binary file ``f``, in this layout."""
    blocks: list[tuple[str, str, np.ndarray]] = []
    for table, cols in (("events", entry.events), ("memory", entry.memory), ("args", entry.args)):
        for name, a in cols.items():
            blocks.append((table, name, np.ascontiguousarray(a)))
    layout: dict[str, dict] = {"events": {}, "memory": {}, "args": {}}
    offset = 0
    for table, name, a in blocks:
        layout[table][name] = [a.dtype.str, offset, len(a)]
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps(
        {"stamp": st, "layout": layout, "names": entry.names, "info": entry.info,
         "arg_strings": entry.arg_strings},
        ensure_ascii=False,
    ).encode()
    crc = 0
    for _, _, a in blocks:
        crc = _crc32(memoryview(a).cast("B"), crc)
        crc = _crc32(b"\0" * (-a.nbytes % _ALIGN), crc)
    crc = _crc32(header, crc)  # the header too: a flipped count must not pass
    head_len = _FIXED.size + len(header)
    f.write(_FIXED.pack(_MAGIC, FORMAT_VERSION, len(header), offset, crc))
    f.write(header)
    f.write(b"\0" * (-head_len % _ALIGN))
    for _, _, a in blocks:
        f.write(memoryview(a).cast("B"))
        f.write(b"\0" * (-a.nbytes % _ALIGN))


def _replace_atomically(path: str, fill) -> None:
    """``fill(f)`` writes a temporary file beside ``path``, renamed to ``path`` once complete
    (on any error it is removed): a reader never sees half an entry."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".tkc", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Invalid(Exception):
    """The entry is missing, stale or corrupt (the message says which)."""


def read(path: str, st: dict) -> Entry:
    """The entry at ``path`` if it is intact and its stamp is ``st``; else raises ``Invalid``."""
    try:
        with open(path, "rb") as f:
            return read_fd(f.fileno(), st)
    except FileNotFoundError:
        raise Invalid("no entry") from None
    except OSError as exc:
        raise Invalid(f"unreadable: {exc}") from None


def read_fd(fd: int, st: dict) -> Entry:
    """``read`` of the entry held by the open file ``fd`` (the caller may close it after)."""
    try:
        if os.fstat(fd).st_size < _FIXED.size:
            raise Invalid("short file")
        # mapped, not read: no copy, and the arrays below are views of the page cache.
        # Entries are only ever replaced by rename, never rewritten in place.
        data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise Invalid(f"unreadable: {exc}") from None
    try:
        return _parse(data, st)
    except Invalid:
        try:
            data.close()
        except BufferError:  # a view is still alive; the mapping goes with it
            pass
        raise


def _parse(data: mmap.mmap, st: dict) -> Entry:
    magic, version, head_len, data_len, crc = _FIXED.unpack_from(data)
    if magic != _MAGIC or version != FORMAT_VERSION:
        raise Invalid("not a cache entry of this version")
    start = _FIXED.size + head_len
    start += -start % _ALIGN
    if len(data) != start + data_len:
        raise Invalid("size mismatch")
    try:
        header = json.loads(data[_FIXED.size : _FIXED.size + head_len])
    except (ValueError, UnicodeDecodeError):
        raise Invalid("bad header") from None
    if not isinstance(header, dict) or header.get("stamp") != st:
        raise Invalid("stale")
    body = memoryview(data)[start:]
    if _crc32(data[_FIXED.size : _FIXED.size + head_len], _crc32(body)) != crc:
        raise Invalid("checksum mismatch")
    tables: dict[str, dict[str, np.ndarray]] = {}
    try:
        names = header["names"]
        for table, expected in _TABLES:
            layout = header["layout"][table]
            if {k: np.dtype(v[0]) for k, v in layout.items()} != expected:
                raise Invalid(f"{table} columns are not this version's")
            cols = {}
            for name, (dtype, off, n) in layout.items():
                cols[name] = np.frombuffer(body, dtype=np.dtype(dtype), count=n, offset=off)
            lengths = {len(a) for a in cols.values()}
            if len(lengths) > 1:
                raise Invalid("columns of different lengths")
            tables[table] = cols
        codes = tables["events"]["name"]
        if len(codes) and (int(codes.max()) >= len(names) or int(codes.min()) < 0):
            raise Invalid("name codes out of range")
        launch = tables["events"]["launch"]
        if len(launch) and (int(launch.max()) >= len(header["info"]["launches"]) or int(launch.min()) < -1):
            raise Invalid("launch codes out of range")
        strings = header["arg_strings"]
        args = tables["args"]
        for c, t in ARG_COLUMNS.items():
            a = args[c]
            if t == "category" and len(a) and (int(a.max()) >= len(strings) or int(a.min()) < 0):
                raise Invalid("arg string codes out of range")
        ev = args["event"]
        if len(ev) and (int(ev.max()) >= len(codes) or int(ev.min()) < 0):
            raise Invalid("arg rows out of range")
        return Entry(tables["events"], tables["memory"], names, header["info"], args, strings)
    except (KeyError, TypeError, ValueError) as exc:
        raise Invalid(f"bad layout: {exc}") from None
