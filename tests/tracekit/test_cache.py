"""The parsed-trace cache: hit, stale, corrupt, location, never trusted blindly."""

from __future__ import annotations

import os

import pytest

from tests.tracegen import TraceBuilder
from tracekit.trace import cache, load
import tracekit.trace.loader as load_mod


def _trace(tmp_path, n=20, name="t.json.gz"):
    b = TraceBuilder(rank=2)
    for i in range(n):
        c = b.runtime("cudaLaunchKernel", i * 10, 1)
        b.kernel(f"k{i % 3}", i * 10 + 2, 3.5, launched_by=c)
    b.memory(1, 100, total_allocated=100, total_reserved=200)
    p = b.write(tmp_path / name)
    return p


def _entries(d):
    load_mod.wait_for_cache_writes()  # entries are written by a background thread
    return sorted(f for f in os.listdir(d) if f.endswith(".tkc")) if os.path.isdir(d) else []


class Parses:
    """Counts calls of the real parser."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = load_mod.parse_file

        def counted(*a, **k):
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(load_mod, "parse_file", counted)


def _same(a, b):
    ta, tb = a.traces[0], b.traces[0]
    assert ta.events.equals(tb.events) and ta.memory.equals(tb.memory)
    assert list(ta.events["name"].cat.categories) == list(tb.events["name"].cat.categories)
    assert (ta.metadata, ta.schema, ta.platform, ta.warnings, ta.rank) == (
        tb.metadata, tb.schema, tb.platform, tb.warnings, tb.rank)


def test_hit_returns_the_same_trace_without_parsing(tmp_path, monkeypatch):
    p = _trace(tmp_path)
    cdir = tmp_path / "cache"
    parses = Parses(monkeypatch)
    first = load(p, cache_dir=cdir)
    assert parses.n == 1 and len(_entries(cdir)) == 1
    second = load(p, cache_dir=cdir)
    assert parses.n == 1
    _same(first, second)
    _same(first, load(p, use_cache=False))


def test_stale_entry_is_rebuilt(tmp_path, monkeypatch):
    p = _trace(tmp_path, n=5)
    cdir = tmp_path / "cache"
    parses = Parses(monkeypatch)
    assert len(load(p, cache_dir=cdir).traces[0].events) == 10
    _trace(tmp_path, n=7)  # same path, new content
    assert len(load(p, cache_dir=cdir).traces[0].events) == 14
    assert parses.n == 2 and len(_entries(cdir)) == 1
    # same size and content ends but a new mtime is stale too
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    load(p, cache_dir=cdir)
    assert parses.n == 3


@pytest.mark.parametrize(
    "damage", ["flip_data", "flip_header", "header_value", "truncate", "empty", "garbage", "version"]
)
def test_corrupt_entry_is_rebuilt_not_trusted(tmp_path, monkeypatch, damage):
    p = _trace(tmp_path)
    cdir = tmp_path / "cache"
    good = load(p, cache_dir=cdir)
    [entry] = _entries(cdir)
    ep = cdir / entry
    data = bytearray(ep.read_bytes())
    if damage == "flip_data":
        data[-100] ^= 0x01
    elif damage == "flip_header":
        data[40] ^= 0x20
    elif damage == "header_value":  # still valid JSON with the right stamp: only the checksum tells
        i = data.index(b'"schema": "pytorch2"')
        data[i : i + 20] = b'"schema": "pytorch3"'
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    elif damage == "garbage":
        data = bytearray(b"x" * len(data))
    elif damage == "version":
        data[8] += 1
    ep.write_bytes(bytes(data))
    parses = Parses(monkeypatch)
    again = load(p, cache_dir=cdir)
    assert parses.n == 1
    _same(good, again)
    # and the rebuilt entry is good again
    load(p, cache_dir=cdir)
    assert parses.n == 1


def test_cache_location_env_and_default(tmp_path, monkeypatch):
    p = _trace(tmp_path)
    env_dir = tmp_path / "env-cache"
    monkeypatch.setenv(cache.ENV_VAR, str(env_dir))
    load(p)
    assert len(_entries(env_dir)) == 1
    explicit = tmp_path / "explicit"
    load(p, cache_dir=explicit)
    assert len(_entries(explicit)) == 1
    monkeypatch.delenv(cache.ENV_VAR)
    import platformdirs

    assert cache.cache_dir() == platformdirs.user_cache_dir("tracekit")


def test_no_cache_writes_nothing(tmp_path, monkeypatch):
    p = _trace(tmp_path)
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "c"))
    load(p, use_cache=False)
    assert not (tmp_path / "c").exists()


def test_unwritable_cache_dir_still_loads(tmp_path):
    p = _trace(tmp_path)
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    ts = load(p, cache_dir=blocker / "sub")
    assert len(ts.traces[0].events) == 40


def test_warnings_and_ranks_survive_the_cache(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    b = TraceBuilder()
    for i in range(30):
        b.cpu_op(f"op{i}", i, 0.5)
    import json

    data = json.dumps(b.to_dict()).encode()
    (d / "a.json").write_bytes(data[: data.index(b'"op20"')])
    cdir = tmp_path / "cache"
    first = load(d, cache_dir=cdir)
    second = load(d, cache_dir=cdir)
    assert first.traces[0].warnings == second.traces[0].warnings
    assert any("truncated" in w for w in second.traces[0].warnings)
    assert len(second.traces[0].events) == 20


def test_entry_is_written_atomically(tmp_path, monkeypatch):
    p = _trace(tmp_path)
    cdir = tmp_path / "cache"
    real_replace = os.replace

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    load(p, cache_dir=cdir)  # write fails: no entry, no temp file left behind
    load_mod.wait_for_cache_writes()
    assert os.listdir(cdir) == []
    monkeypatch.setattr(os, "replace", real_replace)
    load(p, cache_dir=cdir)
    assert len(_entries(cdir)) == 1 and len(os.listdir(cdir)) == 1


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd: Linux")
@pytest.mark.parametrize("damage", [None, "flip_data", "other_stamp"])
def test_an_entry_handed_over_in_memory_is_checked_then_copied(tmp_path, monkeypatch, damage):
    """The CLI's parse child writes each entry into a memfd first (``entries=`` of ``load``),
    then copies it into the cache: a handed entry is checked like a cached one (a bad one is
    parsed again), and the copy is a whole entry, renamed into place."""
    p = _trace(tmp_path)
    good = load(p, use_cache=False)
    entry = load_mod.parse_file(str(p))
    st = cache.stamp(str(p))
    if damage == "other_stamp":
        st = {**st, "mtime_ns": st["mtime_ns"] + 1}
    fd = os.memfd_create("test-entry")
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            cache.write_to(f, st, entry)
        if damage == "flip_data":
            os.pwrite(fd, bytes([os.pread(fd, 1, os.fstat(fd).st_size - 100)[0] ^ 1]),
                      os.fstat(fd).st_size - 100)
        parses = Parses(monkeypatch)
        got = load(p, cache_dir=tmp_path / "empty", entries={str(p): fd})
        assert parses.n == (0 if damage is None else 1)
        _same(good, got)
        if damage is None:
            cdir = tmp_path / "cache"
            cache.copy(cache.entry_path(str(cdir), st), fd)
            assert len(os.listdir(cdir)) == 1  # the entry, no temporary file
            _same(good, load(p, cache_dir=cdir))
            assert parses.n == 0  # read from the copy
    finally:
        os.close(fd)
