"""tracekit.trace.prefetch: the CLI's cold path parses in a forked child while it imports the
analyses; the result is the same report, errors are the parent's own, nothing is left behind."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests import damage
from tests.tracekit.test_report import full_builder
from tracekit.trace import prefetch


def _cli(*args, env_extra=None, tmp=None):
    env = {**os.environ, **(env_extra or {})}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")
def test_same_report_with_and_without_the_child(tmp_path):
    trace = full_builder().write(tmp_path / "run.json.gz")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    got = {}
    for mode in ("1", "0"):
        for cache in (["--no-cache"], ["--cache-dir", tmp_path / f"cache{mode}"]):
            r = _cli("analyze", trace, "--format", "json", "--no-hta", *cache,
                     env_extra={"TRACEKIT_LOAD_PARALLEL": mode}, tmp=tmp)
            assert r.returncode == 0 and r.stderr == "", r.stderr
            got[(mode, cache[0])] = r.stdout
    assert len(set(got.values())) == 1
    assert list(tmp.iterdir()) == []  # the private directory of --no-cache is gone
    # with the cache, the child wrote the parsed trace's entry where the loader looks
    assert any(p.suffix == ".tkc" for p in (tmp_path / "cache1").iterdir())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")
def test_a_bad_input_is_the_parents_one_error(tmp_path):
    doc = damage.read_doc(full_builder().write(tmp_path / "run.json"))
    bad = damage.truncate(damage.text_of(doc), 40, tmp_path / "cut.json")
    for mode in ("1", "0"):
        r = _cli("analyze", bad, "--no-cache", env_extra={"TRACEKIT_LOAD_PARALLEL": mode})
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_not_where_pandas_is_imported_already():
    import pandas  # noqa: F401 - this test process has it: nothing to overlap with

    assert not prefetch.available()
    assert prefetch.start(["x.json"], None) is None


def test_no_temporary_directory_means_no_child(monkeypatch, tmp_path):
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(prefetch, "available", lambda: True)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    assert prefetch.start([str(tmp_path / "t.json")], None) is None  # parsed in-process instead


_GC_PROBE = """
import gc, json, sys
from tracekit import _oneshot
from tracekit.api import report_for_path
kept = []
real = _oneshot.keep_freed_memory
_oneshot.keep_freed_memory = lambda: kept.append(real()) or kept[-1]
if sys.argv[2] == "off":
    gc.disable()
report_for_path(sys.argv[1], use_cache=False, with_hta=False, prefetch=sys.argv[3] == "cli")
print(json.dumps([gc.isenabled(), gc.get_freeze_count() > 0, bool(kept)]))
"""


@pytest.mark.parametrize("caller,gc_state,want", [
    # held over the imports and the load, then frozen, back on; malloc keeps freed memory
    ("cli", "on", [True, True, True]),
    ("cli", "off", [False, False, True]),  # off already: left off, nothing frozen
    ("library", "on", [True, False, False]),  # a library call touches neither
])
def test_the_collector_and_malloc_are_set_only_on_the_clis_cold_path(tmp_path, caller,
                                                                      gc_state, want):
    import json

    trace = full_builder().write(tmp_path / "run.json.gz")
    r = subprocess.run([sys.executable, "-c", _GC_PROBE, str(trace), gc_state, caller],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == want


_BLAS_PROBE = """
import json, os, sys
from tracekit.api import report_for_path
if sys.argv[3] == "numpy first":
    import numpy  # noqa: F401
report_for_path(sys.argv[1], use_cache=False, with_hta=False, prefetch=sys.argv[2] == "cli")
print(json.dumps(os.environ.get("OPENBLAS_NUM_THREADS")))
"""


@pytest.mark.parametrize("caller,before,env,want", [
    ("cli", "", None, "1"),  # the cold path asks OpenBLAS for one thread
    ("cli", "", "3", "3"),  # the user's number stays
    ("cli", "numpy first", None, None),  # loaded already: too late to matter, left alone
    ("library", "", None, None),  # a library call leaves the environment alone
])
def test_openblas_gets_one_thread_only_on_the_clis_cold_path(tmp_path, caller, before, env, want):
    import json

    trace = full_builder().write(tmp_path / "run.json.gz")
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env is not None:
        environ["OPENBLAS_NUM_THREADS"] = env
    r = subprocess.run([sys.executable, "-c", _BLAS_PROBE, str(trace), caller, before],
                       capture_output=True, text=True, timeout=120, env=environ)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == want


def test_reading_a_cached_trace_imports_no_parser(tmp_path):
    """The parent of the CLI's cold path reads the entry its child wrote: neither the parser's
    modules nor msgspec are imported for that (their import is the child's, in parallel)."""
    trace = full_builder().write(tmp_path / "run.json.gz")
    probe = ("import sys; from tracekit.trace import load; load(sys.argv[1], cache_dir=sys.argv[2]);"
             "print(sorted(m for m in ('msgspec', 'tracekit.trace._reader', 'tracekit.trace._columns')"
             " if m in sys.modules))")
    runs = [subprocess.run([sys.executable, "-c", probe, str(trace), str(tmp_path / "c")],
                           capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert runs[0].stdout.strip() != "[]"  # the first load parsed
    assert runs[1].stdout.strip() == "[]"  # the second read the cache only


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's mallopt")
def test_malloc_settings_are_accepted_here():
    """glibc takes every setting (a value out of its range would be refused: False)."""
    r = subprocess.run([sys.executable, "-c", "from tracekit._oneshot import keep_freed_memory; "
                        "print(keep_freed_memory())"], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "True", r.stderr
