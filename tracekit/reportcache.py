"""The report cache: the per-rank report objects (``tracekit.report.schema.Rank``) of a path,
kept so that the second ``tracekit analyze`` of an unchanged file reads one small JSON file
instead of loading the trace (``tracekit.loaded.report_for_path`` reads and fills it).

Report cache: ``<cache dir>/reports/<key>.json`` where the cache dir is the loader's
(``--cache-dir``, else ``$TRACEKIT_CACHE_DIR``, else the user cache dir) and the key hashes

- the tracekit version, ``REPORT_CACHE_VERSION`` and the report format,
- each trace file's stamp: resolved path, size, mtime_ns and a hash of its bytes
  (``tracekit._files.content_stamp``, as the loader's cache), for a directory each trace in it,
- the phase rules: the bytes of ``default_rules.toml`` and of the ``--rules`` file,
- the stamp of a memory-snapshot pickle found beside the trace, if any,
- whether the HTA section was asked for.

Any change to one of these is a miss (the stamp hashes every byte of the file, so even a
same-size edit with its mtime put back is one). An entry is a header line (its key and the
SHA-256 of the rest) and the reports' JSON: an entry whose hash or key does not match, or that
does not parse, is ignored and rewritten.
At most ``MAX_REPORTS`` entries are kept (the least recently written are removed).
The warm path (``cached_report``) imports only the standard library: no numpy, no pandas.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit import __version__
from tracekit._files import cache_dir as _cache_dir
from tracekit._files import check_readable, content_stamp, find_snapshot, trace_files_in
from tracekit.errors import RulesError

if TYPE_CHECKING:  # heavy imports stay out of the warm path
    from tracekit.phases import Rules

MAX_REPORTS = 256
"""Reports kept in the report cache; the least recently written go first."""
REPORT_CACHE_VERSION = 19
"""Part of every report-cache key: bump it when a change to the loader or the analyses changes
a figure of an unchanged trace, or a rank object gains keys (the version string stays 0.1.0
between releases)."""


def trace_files(path: str) -> list[str]:
    """The trace files a path stands for (the loader's rule), [] when there are none."""
    if os.path.isdir(path):
        try:
            return trace_files_in(path)
        except OSError:
            return []
    return [path]


_DEFAULT_RULES = Path(__file__).parent / "default_rules.toml"
_DEFAULT_BYTES: dict[tuple, bytes] = {}


def _default_rules_bytes() -> bytes:
    """The bytes of ``default_rules.toml``, read again only when its size or mtime changed (a
    job's worker asks once per rank: a read cost ~0.1 ms, a stat a tenth of it)."""
    st = os.stat(_DEFAULT_RULES)
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    got = _DEFAULT_BYTES.get(stamp)
    if got is None:
        got = _DEFAULT_RULES.read_bytes()
        _DEFAULT_BYTES.clear()
        _DEFAULT_BYTES[stamp] = got
    return got


def rules_bytes(rules_path: str | os.PathLike | None) -> bytes:
    default = _default_rules_bytes()
    if rules_path is None:
        return default
    if os.path.exists(rules_path):
        check_readable(rules_path, "rules file")
    try:
        user = Path(rules_path).read_bytes()
    except FileNotFoundError:
        raise RulesError("rules file not found", path=os.fspath(rules_path)) from None
    except OSError as exc:
        raise RulesError(f"cannot read rules file: {exc.strerror or exc}",
                         path=os.fspath(rules_path)) from None
    return default + b"\0" + user


def report_key(path: str, rules_id: bytes, with_hta: bool | None = True,
               with_skeleton: bool = True) -> str | None:
    """The report-cache key of ``path`` with these rules (and with, without or with automatic
    HTA section: True / False / None; without the skeleton a job's graph joins: a key of its
    own), None when the path cannot be stamped."""
    files = trace_files(path)
    if not files:
        return None
    try:
        stamps = [content_stamp(f) for f in files]
        snap = find_snapshot(path)
        snap_stamp = content_stamp(snap) if snap else None
    except OSError:
        return None
    from tracekit.report.keys import FORMAT

    h = hashlib.sha256()
    h.update(json.dumps([__version__, REPORT_CACHE_VERSION, FORMAT, stamps, snap_stamp,
                         with_hta] + ([] if with_skeleton else ["no skeleton"])).encode())
    h.update(hashlib.sha256(rules_id).digest())
    return h.hexdigest()[:40]


def _entry(cache_dir: str | os.PathLike | None, key: str) -> str:
    return os.path.join(_cache_dir(cache_dir), "reports", f"{key}.json")


def cached_report(
    path: str, *, rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None, with_hta: bool | None = True,
    with_skeleton: bool = True,
) -> list[dict] | None:
    """The cached per-rank report objects of ``path``, or None (miss, stale or corrupt)."""
    key = report_key(path, rules_bytes(rules_path), with_hta, with_skeleton)
    if key is None:
        return None
    try:
        with open(_entry(cache_dir, key), "rb") as f:
            data = f.read()
        head, _, body = data.partition(b"\n")
        meta = json.loads(head)
        if (not isinstance(meta, dict) or meta.get("key") != key
                or meta.get("sha256") != hashlib.sha256(body).hexdigest()):
            return None
        ranks = json.loads(body)
    except (OSError, ValueError, RecursionError):
        return None
    return ranks if isinstance(ranks, list) else None


def cached_reports(
    path: str, *, rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None, with_hta: bool | None = True,
) -> list[dict] | None:
    """``cached_report`` of ``path``; for a directory without an entry of its own (``tracekit
    analyze DIR`` caches each rank on its own; the directory's entry is written only by loading
    it whole), its rank files' own entries, when every rank file has one and each declares its
    own, distinct rank: only then does loading the directory give each file the rank it has
    alone, with no warning (a file without ``distributedInfo.rank``, or a clash, is renumbered
    by the loader). None on a miss."""
    hit = cached_report(path, rules_path=rules_path, cache_dir=cache_dir, with_hta=with_hta)
    if hit or not os.path.isdir(path):
        return hit
    reports: list[dict] = []
    for f in trace_files(path):
        hit = cached_report(f, rules_path=rules_path, cache_dir=cache_dir, with_hta=with_hta)
        if not hit or len(hit) != 1:
            return None
        declared = ((hit[0].get("identity") or {}).get("distributed_info") or {}).get("rank")
        if type(declared) is not int or declared != hit[0].get("rank"):
            return None
        reports.append(hit[0])
    if len({r["rank"] for r in reports}) != len(reports):
        return None
    return reports or None


def remember(path: str, rules_id: bytes, with_hta: bool | None,
             cache_dir: str | os.PathLike | None, ranks: list[dict], *,
             with_skeleton: bool = True) -> None:
    """Keep ``ranks`` in the report cache under ``path``'s key (nothing when it has none)."""
    key = report_key(path, rules_id, with_hta, with_skeleton)
    if key is not None:
        store(cache_dir, key, ranks)


def store(cache_dir: str | os.PathLike | None, key: str, ranks: list[dict]) -> None:
    dest = _entry(cache_dir, key)
    try:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), suffix=".tmp")
        body = json.dumps(ranks, allow_nan=False).encode()  # C encoder: fast
        head = json.dumps({"key": key, "sha256": hashlib.sha256(body).hexdigest()}).encode()
        with os.fdopen(fd, "wb") as f:
            f.write(head + b"\n" + body)
        os.replace(tmp, dest)
        _prune(os.path.dirname(dest))
    except OSError:
        pass  # a cache that cannot be written only costs speed


def cache_problem(cache_dir: str | os.PathLike | None = None) -> str | None:
    """Why the cache directory cannot be written (one sentence), None when it can. A cache
    that cannot be written costs only speed, so the commands say so once and go on."""
    where = _cache_dir(cache_dir)
    try:
        os.makedirs(where, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return (f"cannot write the cache in {where} ({exc.strerror or exc}): every run parses "
                "the traces again (--cache-dir or $TRACEKIT_CACHE_DIR choose another place)")
    return None


def _prune(directory: str) -> None:
    """Drop the least recently written reports beyond ``MAX_REPORTS``."""
    keep = MAX_REPORTS
    entries = [e for e in os.scandir(directory) if e.name.endswith(".json")]
    if len(entries) > keep:
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for e in entries[: len(entries) - keep]:
            try:
                os.unlink(e.path)
            except OSError:
                pass


def resolve_rules(rules: Any) -> tuple[Rules, bytes]:
    """The rules and their identity in the report-cache key: the rules files' bytes, as the
    CLI's warm path computes it, also for a ``Rules`` object read from an unchanged file (so a
    report stored by ``analyze_path`` serves ``cached_report`` and ``tracekit analyze``)."""
    from tracekit.phases import Rules, default_rules, load_rules

    if not isinstance(rules, Rules):
        return load_rules(rules), rules_bytes(rules)
    if rules == default_rules():
        return rules, rules_bytes(None)
    if os.path.isfile(rules.source):
        try:
            if load_rules(rules.source) == rules:
                return rules, rules_bytes(rules.source)
        except RulesError:
            pass
    return rules, b"rules-object:" + rules.digest().encode()
