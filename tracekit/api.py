"""Library entry points: analyse a path, and the cache of computed reports.

``analyze_path(path)`` loads a trace file or a directory of per-rank traces and runs every
analysis, returning ``(Trace, Analysis)`` per rank. ``report_for_path(path)`` returns the same
analyses as the JSON objects of ``tracekit.report`` and keeps them in a *report cache*, so the
second ``tracekit analyze`` of an unchanged file reads one small JSON file instead of loading
the trace. ``job_document(directory)`` analyses a directory of rank traces as one job
(``tracekit.ranks``) and returns the JSON document ``tracekit analyze DIR --format json``
writes, with the job object.

Report cache: ``<cache dir>/reports/<key>.json`` where the cache dir is the loader's
(``--cache-dir``, else ``$TRACEKIT_CACHE_DIR``, else the user cache dir) and the key hashes

- the tracekit version, ``REPORT_CACHE_VERSION`` and the report format,
- each trace file's stamp: resolved path, size, mtime_ns and a hash of its first and last
  64 KiB (``tracekit._files.content_stamp``, as the loader's cache), for a directory each trace in it,
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
    from tracekit.analyses import Analysis
    from tracekit.phases import Rules
    from tracekit.trace.model import Trace

MAX_REPORTS = 256
"""Reports kept in the report cache; the least recently written go first."""
REPORT_CACHE_VERSION = 6
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


def _rules_bytes(rules_path: str | os.PathLike | None) -> bytes:
    default = (Path(__file__).parent / "default_rules.toml").read_bytes()
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


def report_key(path: str, rules_id: bytes, with_hta: bool | None = True) -> str | None:
    """The report-cache key of ``path`` with these rules (and with, without or with automatic
    HTA section: True / False / None), None when the path cannot be stamped."""
    files = trace_files(path)
    if not files:
        return None
    try:
        stamps = [content_stamp(f) for f in files]
        snap = find_snapshot(path)
        snap_stamp = content_stamp(snap) if snap else None
    except OSError:
        return None
    from tracekit.report import FORMAT

    h = hashlib.sha256()
    h.update(json.dumps([__version__, REPORT_CACHE_VERSION, FORMAT, stamps, snap_stamp,
                         with_hta]).encode())
    h.update(hashlib.sha256(rules_id).digest())
    return h.hexdigest()[:40]


def _entry(cache_dir: str | os.PathLike | None, key: str) -> str:
    return os.path.join(_cache_dir(cache_dir), "reports", f"{key}.json")


def cached_report(
    path: str, *, rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None, with_hta: bool | None = True,
) -> list[dict] | None:
    """The cached per-rank report objects of ``path``, or None (miss, stale or corrupt)."""
    key = report_key(path, _rules_bytes(rules_path), with_hta)
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


def _remember(path: str, rules_id: bytes, with_hta: bool | None,
              cache_dir: str | os.PathLike | None, ranks: list[dict]) -> None:
    """Keep ``ranks`` in the report cache under ``path``'s key (nothing when it has none)."""
    key = report_key(path, rules_id, with_hta)
    if key is not None:
        _store(cache_dir, key, ranks)


def _store(cache_dir: str | os.PathLike | None, key: str, ranks: list[dict]) -> None:
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


def _resolve_rules(rules: Any) -> tuple[Rules, bytes]:
    """The rules and their identity in the report-cache key: the rules files' bytes, as the
    CLI's warm path computes it, also for a ``Rules`` object read from an unchanged file (so a
    report stored by ``analyze_path`` serves ``cached_report`` and ``tracekit analyze``)."""
    from tracekit.phases import Rules, default_rules, load_rules

    if not isinstance(rules, Rules):
        return load_rules(rules), _rules_bytes(rules)
    if rules == default_rules():
        return rules, _rules_bytes(None)
    if os.path.isfile(rules.source):
        try:
            if load_rules(rules.source) == rules:
                return rules, _rules_bytes(rules.source)
        except RulesError:
            pass
    return rules, b"rules-object:" + rules.digest().encode()


def _analyze(path: str, rules: Any, cache_dir, use_cache: bool, progress,
             with_hta: bool | None = True, prefetch: bool = False) -> tuple[list, bytes]:
    """Load and analyse ``path``. ``prefetch``: parse it in a forked child while this process
    imports the analyses (``tracekit.trace.prefetch``), and compute the sections other than
    explain in another while this process computes explain (``tracekit.analyses.forked``): the
    CLI's cold path, in a process that ends with the command, which also takes a one-shot
    process's settings (``tracekit._oneshot``: the collector held off over the imports and the
    load, OpenBLAS on one thread, malloc keeping what it frees)."""
    from tracekit import _oneshot

    pre = None
    held = prefetch and _oneshot.hold_gc()
    if prefetch:
        _oneshot.one_blas_thread()  # before the first import of numpy (by the loader)
        _oneshot.keep_freed_memory()
        from tracekit.trace import prefetch as pf

        pre = pf.start(trace_files(path), _cache_dir(cache_dir) if use_cache else None)
    try:
        try:
            from tracekit.analyses import analyze_trace  # pandas: imported while the child parses
            from tracekit.analyses import explain  # noqa: F401 - and the graph's modules
            from tracekit.trace import load, loader

            r, rules_id = _resolve_rules(rules)
            if pre is not None:
                ts = load(path, cache_dir=pre.cache_dir, use_cache=True, progress=progress,
                          entries=pf.wait(pre))
                if pre.private:
                    loader.wait_for_cache_writes()  # before its directory goes
            else:
                ts = load(path, cache_dir=cache_dir, use_cache=use_cache, progress=progress)
        finally:
            if held:
                _oneshot.release_gc()
        snap = None
        snap_path = find_snapshot(path)
        if snap_path is not None:
            from tracekit.analyses.snapshot import compute_snapshot

            snap = compute_snapshot(snap_path)
        out = [(t, analyze_trace(t, r, with_hta=with_hta,
                                 snapshot=snap if len(ts.traces) == 1 else None,
                                 parallel=prefetch))
               for t in ts.traces]
    finally:
        if pre is not None:  # the child copied the entries into the cache meanwhile
            pf.finish(pre)
    return out, rules_id


def analyze_path(
    path: str | os.PathLike,
    *,
    rules: Rules | str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = False,
    with_hta: bool | None = True,
) -> list[tuple[Trace, Analysis]]:
    """Load ``path`` (a trace file or a directory of per-rank traces) and analyse every rank.

    ``rules``: a ``Rules`` object, a rules TOML path, or None for the defaults. The parsed
    trace is cached by the loader; the JSON report is stored in the report cache too, so a later
    ``tracekit analyze`` of the same file is instant. A memory-snapshot pickle beside a single
    trace file (``tracekit._files.find_snapshot``) is analysed and attached.
    ``with_hta``: also run the HTA-backed section (seconds on a large trace); None: only on
    traces of at most ``tracekit.analyses.HTA_AUTO_MAX_EVENTS`` events.
    """
    src = os.fspath(path)
    out, rules_id = _analyze(src, rules, cache_dir, use_cache, progress, with_hta)
    if use_cache:
        from tracekit.report import to_dict

        _remember(src, rules_id, with_hta, cache_dir, [to_dict(a) for _, a in out])
    return out


def report_for_path(
    path: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    with_hta: bool | None = True,
    prefetch: bool = False,
) -> list[dict]:
    """Per-rank report objects (``tracekit.report.to_dict``) of ``path``, from the report cache
    when it holds them, else computed (and stored). ``prefetch``: on a miss, parse in a forked
    child while this process imports the analyses (the CLI asks for it; see
    ``tracekit.trace.prefetch``)."""
    src = os.fspath(path)
    check_readable(src, "trace file or directory", directory_ok=True)
    if use_cache:
        hit = cached_report(src, rules_path=rules_path, cache_dir=cache_dir, with_hta=with_hta)
        if hit is not None:
            return hit
    from tracekit.report import to_dict

    out, rules_id = _analyze(src, rules_path, cache_dir, use_cache, progress, with_hta, prefetch)
    ranks = [to_dict(a) for _, a in out]
    if use_cache:
        _remember(src, rules_id, with_hta, cache_dir, ranks)
    return ranks


def explain_path(
    path: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    what_ifs: tuple[str, ...] = (),
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
    traced: bool = False,
    step_ms: float | None = None,
    beside: bool = True,
) -> list[tuple[Trace, Any]]:
    """``(Trace, ExplainResult)`` per rank of ``path``, with the user's what-ifs replayed too
    (``tracekit.graph.whatif.parse_spec``). Not cached: the report cache holds the explain
    section without user what-ifs (``report_for_path``). ``traced``: explain the traced step,
    not the estimated untraced one; ``step_ms``: the untraced step the user knows, else (with
    ``beside``) the one the run wrote beside each trace (``tracekit.beside``) sets the scale."""
    import dataclasses

    from tracekit.analyses.explain import ExplainConfig, compute
    from tracekit.beside import untraced_step
    from tracekit.phases import load_rules
    from tracekit.trace import load

    src = os.fspath(path)
    if not os.path.exists(src):
        raise InputError("no such file or directory", path=src)
    config = ExplainConfig(what_ifs=tuple(what_ifs), untraced=not traced, step_ms=step_ms,
                           step_ms_source="--step-ms" if step_ms else "")

    def config_for(t: Trace) -> ExplainConfig:
        if step_ms or not beside:
            return config
        got = untraced_step(t.source, t.rank)
        if got is None:
            return config
        return dataclasses.replace(config, step_ms=got[0], step_ms_source=got[1] + " beside the trace")
    rules = load_rules(rules_path)
    ts = load(src, cache_dir=cache_dir, use_cache=use_cache, progress=progress)
    snap = None
    snap_path = find_snapshot(src)
    if snap_path is not None and len(ts.traces) == 1:
        from tracekit.analyses.snapshot import compute_snapshot

        snap = compute_snapshot(snap_path)
    return [(t, compute(t, rules, snapshot=snap, config=config_for(t))) for t in ts.traces]


def has_untraced_beside(path: str | os.PathLike) -> bool:
    """Whether a run wrote its untraced step beside ``path`` (a file, or a directory's traces)."""
    from tracekit.beside import untraced_step

    src = os.fspath(path)
    if os.path.isdir(src):
        import glob

        return any(untraced_step(f, 0) is not None
                   for f in sorted(glob.glob(os.path.join(src, "*.json*")))[:64])
    return untraced_step(src, 0) is not None


def job_document(
    directory: str | os.PathLike,
    *,
    rules_path: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    with_hta: bool | None = False,
    whole: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout_s: float | None = None,
) -> dict:
    """The document ``tracekit analyze DIRECTORY --format json`` writes, for a program (the
    dashboard's ranks view): ``{"tracekit_version", "format", "analyses": [<rank>...],
    "jobs": [<job>]}``, the job object documented in ``tracekit.report.schema.Job``.

    ``whole=False`` (the default) keeps in each rank object only what the job reads
    (``tracekit.ranks.work.SUMMARY_KEYS``: headline, steps, collectives, identity, explain...):
    enough for a ranks view, a fraction of the size; a rank's whole object (its timeline
    sections) is ``report_for_path(job["ranks"][i]["source"])``. Ranks that cannot be read are
    in ``jobs[0]["problems"]`` (never an exception); ``InputError`` only when the directory
    cannot be listed or holds no trace. The other arguments are ``tracekit.ranks.analyze_job``'s.
    """
    from tracekit.ranks import analyze_job
    from tracekit.report import document

    rep = analyze_job(directory, rules_path=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                      with_hta=with_hta, whole=whole, workers=workers, scheduler=scheduler,
                      scheduler_timeout_s=scheduler_timeout_s)
    return document(rep.ranks, __version__, [rep.job])
