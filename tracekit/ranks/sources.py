"""Where a job's rank files are: a local directory, or a URL that fsspec reads (``s3://``,
``gs://``, ``hdfs://``, ``file://``...; fsspec comes with the ``[cluster]`` extra, and each
protocol's own package, ``s3fs`` say, is the user's to install).

For a URL the client lists the directory (the files ending ``.json``/``.json.gz`` that
``tracekit._files.is_trace_file`` keeps) and each rank's work copies its file to the machine it
runs on (``local_copy``: into ``<cache dir>/fetched/``, reused while the remote file's size and
modification time or ETag stay the same), then reads the copy as any local file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile

from tracekit.errors import InputError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return bool(_URL.match(os.fspath(path)))


def _fs(url: str):
    try:
        import fsspec
    except ImportError:
        raise InputError("reading a URL needs fsspec: pip install 'tracekit[cluster]'",
                         path=url) from None
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise InputError(f"cannot read this URL: {exc}", path=url) from None
    return fs, root


def list_url(url: str) -> list[str]:
    """The trace files under the directory ``url``, as URLs, sorted by name."""
    from tracekit._files import TRACE_SUFFIXES, is_trace_file

    fs, root = _fs(url)
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        raise InputError("no such file or directory", path=url) from None
    except OSError as exc:
        raise InputError(f"cannot list: {exc}", path=url) from None
    names = sorted(e["name"] for e in entries
                   if e.get("type") == "file" and e["name"].endswith(TRACE_SUFFIXES))
    scheme = url.split("://", 1)[0]
    urls = [fs.unstrip_protocol(n) if hasattr(fs, "unstrip_protocol") else f"{scheme}://{n}"
            for n in names]
    return [u for u, n in zip(urls, names) if is_trace_file(n, opener=fs.open)]


def local_copy(url: str, cache_dir: str | None) -> str:
    """A local copy of the file ``url``: ``<cache dir>/fetched/<key>-<name>``, fetched unless a
    copy of the same remote version is there (``cache_dir`` None: a fresh temporary file)."""
    fs, path = _fs(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise InputError("no such file", path=url) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", path=url) from None
    version = json.dumps([url, info.get("size"), str(info.get("mtime") or info.get("LastModified")
                                                      or info.get("ETag") or info.get("etag"))])
    name = os.path.basename(path)
    if cache_dir is None:
        fd, dest = tempfile.mkstemp(prefix="tracekit-fetched-", suffix="-" + name)
        os.close(fd)
    else:
        where = os.path.join(cache_dir, "fetched")
        os.makedirs(where, exist_ok=True)
        dest = os.path.join(where, hashlib.sha256(version.encode()).hexdigest()[:24] + "-" + name)
        if os.path.isfile(dest) and os.path.getsize(dest) == info.get("size"):
            return dest
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), suffix=".part")  # one per fetch:
    os.close(fd)  # workers sharing a cache directory may fetch the same file at once
    try:
        fs.get_file(path, tmp)
        os.replace(tmp, dest)
    except OSError as exc:
        raise InputError(f"cannot fetch: {exc}", path=url) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest
