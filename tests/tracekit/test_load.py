"""tracekit.trace.load on hand-built traces: every schema variant, truncation, bad input."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.tracegen import TraceBuilder
from tests.tracekit.loadhelp import digest, write_raw, x
from tracekit.errors import EmptyTraceError, InputError, TraceFormatError
from tracekit.trace import Kind, load
from tracekit.trace.model import EVENT_COLUMNS, MEMORY_COLUMNS

US = 1000  # ns per microsecond


def _one(path, **kw):
    ts = load(path, use_cache=False, **kw)
    assert len(ts.traces) == 1
    return ts.traces[0]


def _row(events, name):
    rows = events[events["name"] == name]
    assert len(rows) == 1, (name, len(rows))
    return rows.iloc[0]


def _check_dtypes(tr):
    for col, dtype in EVENT_COLUMNS.items():
        assert str(tr.events[col].dtype) == ("category" if dtype == "category" else np.dtype(dtype).name), col
    for col, dtype in MEMORY_COLUMNS.items():
        assert tr.memory[col].dtype == np.dtype(dtype), col
    assert list(tr.events.columns) == list(EVENT_COLUMNS)
    assert list(tr.memory.columns) == list(MEMORY_COLUMNS)
    assert np.all(np.diff(tr.events["ts"].to_numpy()) >= 0)
    assert np.all(np.diff(tr.memory["ts"].to_numpy()) >= 0)


def _pt2_builder(**kw) -> TraceBuilder:
    b = TraceBuilder(rank=3, world_size=4, **kw)
    b.profiler_step(7, ts=0, dur=100)
    b.annotation("## optimizer 0 ##", 10, 20.5)
    b.cpu_op("aten::add", 11, 3.25)
    c = b.runtime("cudaLaunchKernel", 12, 2)
    b.kernel("my_kernel", 30, 5.125, stream=7, launched_by=c)
    b.memcpy(40, 2, nbytes=4096, stream=9, launch_at=13)
    b.memset(45, 1, nbytes=512, stream=9, launch_at=14)
    b.gpu_annotation("## optimizer 0 ##", 29, 20, stream=7)
    b.cuda_sync(50, 3, stream=7)
    b.python("train.py(10): step", 5, 50)
    b.memory(15, 1024, total_allocated=4096, total_reserved=8192, addr=0x1000)
    b.memory(16, -1024, total_allocated=3072, total_reserved=8192, addr=0x1000)
    return b


def test_pytorch2_every_kind_and_column(tmp_path):
    b = _pt2_builder()
    doc = b.to_dict()
    tr = _one(b.write(tmp_path / "t.json"))
    _check_dtypes(tr)
    ev = tr.events
    assert tr.rank == 3 and tr.world_size == 4
    assert tr.schema == "pytorch2" and tr.platform == "cuda" and tr.warnings == ()
    base = 1_000_000 * US
    step = _row(ev, "ProfilerStep#7")
    assert (step.kind, step.ts, step.dur, step.stream, step.device) == (Kind.ANNOTATION, base, 100 * US, -1, -1)
    add = _row(ev, "aten::add")
    assert (add.kind, add.ts, add.dur, add.pid, add.tid) == (Kind.CPU_OP, base + 11 * US, 3250, 4242, 4242)
    k = _row(ev, "my_kernel")
    launch = ev[(ev["kind"] == Kind.RUNTIME) & (ev["correlation"] == k.correlation)]
    assert len(launch) == 1 and launch.iloc[0]["name"] == "cudaLaunchKernel"
    assert (k.kind, k.ts, k.dur, k.stream, k.device, k.bytes) == (Kind.KERNEL, base + 30 * US, 5125, 7, 0, -1)
    assert k.external_id == launch.iloc[0]["external_id"] != -1
    cp = ev[ev["kind"] == Kind.MEMCPY].iloc[0]
    assert (cp.stream, cp.bytes, cp["name"]) == (9, 4096, "Memcpy HtoD (Pinned -> Device)")
    ms = ev[ev["kind"] == Kind.MEMSET].iloc[0]
    assert (ms.stream, ms.bytes, ms.dur) == (9, 512, 1000)
    ga = ev[ev["kind"] == Kind.GPU_ANNOTATION].iloc[0]
    assert (ga.stream, ga.device, ga.ts) == (7, 0, base + 29 * US)
    sync = ev[ev["kind"] == Kind.SYNC].iloc[0]
    assert (sync["name"], sync.stream, sync.dur) == ("Stream Sync", 7, 3000)
    assert _row(ev, "train.py(10): step").kind == Kind.PYTHON
    # one row per X event of the file, nothing else (flows, metadata, memory are not events)
    assert len(ev) == sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    assert set(ev.loc[ev["kind"] == Kind.RUNTIME, "bytes"]) == {-1}
    mem = tr.memory
    assert mem["bytes"].tolist() == [1024, -1024]
    assert mem["total_allocated"].tolist() == [4096, 3072]
    assert mem["total_reserved"].tolist() == [8192, 8192]
    assert mem["addr"].tolist() == [0x1000, 0x1000]
    assert mem["device_type"].tolist() == [1, 1] and mem["device_id"].tolist() == [0, 0]
    assert mem["ts"].tolist() == [base + 15 * US, base + 16 * US]
    assert mem["tid"].tolist() == [4242, 4242]
    assert tr.metadata["distributedInfo"]["rank"] == 3
    assert tr.metadata["displayTimeUnit"] == "ms"  # a key after traceEvents
    assert "traceEvents" not in tr.metadata


def test_legacy2021_schema(tmp_path):
    b = TraceBuilder(schema="legacy2021")
    b.profiler_step(1, ts=0, dur=100)
    b.cpu_op("aten::mm", 10, 20)
    c = b.runtime("cudaLaunchKernel", 11, 2)
    b.kernel("gemm", 30, 5, stream=7, launched_by=c)
    b.memcpy(40, 2, direction="HtoD", src="Pageable", nbytes=99, stream=7, launch_at=12)
    b.memory(15, 1024, total_allocated=4096, total_reserved=8192)
    doc = b.to_dict()
    assert any(e.get("tid") == "stream 7" for e in doc["traceEvents"])  # the schema's quirks
    tr = _one(b.write(tmp_path / "legacy.json.gz"))
    _check_dtypes(tr)
    ev = tr.events
    assert tr.schema == "legacy2021" and tr.platform == "cuda"
    k = _row(ev, "gemm")
    assert (k.kind, k.tid, k.stream, k.device, k.dur) == (Kind.KERNEL, 7, 7, 0, 5000)
    mm = _row(ev, "aten::mm")
    assert (mm.kind, mm.tid) == (Kind.CPU_OP, 4242)
    launch = ev[ev["correlation"] == k.correlation]
    assert sorted(launch["kind"].tolist()) == [Kind.KERNEL, Kind.RUNTIME]
    assert k.external_id == launch[launch["kind"] == Kind.RUNTIME].iloc[0]["external_id"] != -1
    assert _row(ev, "ProfilerStep#1").kind == Kind.ANNOTATION  # written as "Operator"
    cp = ev[ev["kind"] == Kind.MEMCPY].iloc[0]
    assert cp.bytes == 99 and cp["name"] == "Memcpy HtoD (Pageable -> Device)"
    assert tr.memory["bytes"].tolist() == [1024]
    assert tr.memory["total_allocated"].tolist() == [-1] and tr.memory["total_reserved"].tolist() == [-1]
    assert tr.memory["addr"].tolist() == [-1]


def test_ns_resolution_times_are_exact(tmp_path):
    # as Kineto writes them (json.dumps of a Python float would already have lost the digits)
    text = """{"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,
    "ts": 1712195495519689.047, "dur": 63.813},
  {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1,
    "ts": 1712195495519695.812, "dur": 0.001},
  {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
    "ts": 1712195495519700.999, "dur": 4.928, "args": {"stream": 7, "correlation": 5}}
]}"""
    tr = _one(write_raw(tmp_path / "ns.json", text))
    assert tr.events["ts"].tolist() == [1712195495519689047, 1712195495519695812, 1712195495519700999]
    assert tr.events["dur"].tolist() == [63813, 1, 4928]
    # float64 cannot even hold these: the loader must not go through float
    assert int(round(1712195495519689.047 * 1000)) != 1712195495519689047


def test_mixed_number_formats(tmp_path):
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "cpu_op", "name": "int", "pid": 1, "tid": 1, "ts": 1000, "dur": 2},'
        '{"ph": "X", "cat": "cpu_op", "name": "one", "pid": 1, "tid": 1, "ts": 1000.5, "dur": 2.5},'
        '{"ph": "X", "cat": "cpu_op", "name": "four", "pid": 1, "tid": 1, "ts": 1000.0006, "dur": 1},'
        '{"ph": "X", "cat": "cpu_op", "name": "exp", "pid": 1, "tid": 1, "ts": 1.0015e3, "dur": 1e0}'
        "]}"
    )
    ev = _one(write_raw(tmp_path / "m.json", text)).events.set_index("name")
    assert ev.loc["int", "ts"] == 1_000_000 and ev.loc["int", "dur"] == 2000
    assert ev.loc["one", "ts"] == 1_000_500 and ev.loc["one", "dur"] == 2500
    assert ev.loc["four", "ts"] == 1_000_001
    assert ev.loc["exp", "ts"] == 1_001_500 and ev.loc["exp", "dur"] == 1000


def test_rocm_platform(tmp_path):
    b = TraceBuilder(platform="rocm")
    b.kernel("rocm_kernel", 10, 5, launch_at=1)
    tr = _one(b.write(tmp_path / "rocm.json"))
    assert tr.platform == "rocm"
    assert _row(tr.events, "hipLaunchKernel").kind == Kind.RUNTIME
    assert _row(tr.events, "rocm_kernel").kind == Kind.KERNEL


def test_cpu_only_trace(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 10)
    b.cpu_op("aten::mm", 1, 5)
    b.memory(2, 64, total_allocated=64, total_reserved=128, device_type=0)
    tr = _one(b.write(tmp_path / "cpu.json"))
    assert tr.platform == "cpu" and not tr.has_gpu
    assert tr.memory["device_type"].tolist() == [0] and tr.memory["device_id"].tolist() == [-1]


def test_unexpected_value_types_degrade_to_sentinels(tmp_path):
    evs = [
        x("cpu_op", "s", 10, 1, pid="Spans", tid="PyTorch Profiler", External_id="12"),
        x("kernel", "k", 11, 1, pid=0, tid=7, stream=7, correlation=2**70),
        {"ph": "X", "cat": "cpu_op", "name": "noargs", "pid": 1, "tid": 1, "ts": 12, "dur": 1},
        {"ph": "X", "name": "nocat", "pid": 1, "tid": 1, "ts": 13, "dur": 0},
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 14, "dur": -3},
        {"ph": "X", "cat": "cpu_op", "name": "nodur", "pid": 1, "tid": 1, "ts": 15},
        42,
    ]
    tr = _one(write_raw(tmp_path / "odd.json", evs))
    ev = tr.events.set_index("name")
    assert (ev.loc["s", "pid"], ev.loc["s", "tid"], ev.loc["s", "external_id"]) == (-1, -1, 12)
    assert ev.loc["k", "correlation"] == -1 and ev.loc["k", "stream"] == 7
    assert ev.loc["noargs", "external_id"] == -1
    assert ev.loc["nocat", "kind"] == Kind.OTHER and ev.loc["nocat", "dur"] == 0
    assert ev.loc["neg", "dur"] == 0
    assert "nodur" not in ev.index  # a complete event without a duration cannot be read
    w = " | ".join(tr.warnings)
    assert "negative duration" in w
    assert "1 events could not be read and are left out (dur missing or not a number: 1)" in w
    assert "'nodur'" in w
    # the values read as absent are counted (strings for pid/tid are Kineto's own: not counted)
    assert "args.correlation 1" in w and "cat 1" in w and "pid" not in w


def test_metadata_keeps_top_level_keys(tmp_path):
    p = write_raw(tmp_path / "m.json", [x("cpu_op", "a", 1, 1)], schemaVersion=1,
                  deviceProperties=[{"id": 0, "name": "H200"}], custom={"k": [1, 2]})
    tr = _one(p)
    assert tr.metadata == {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H200"}], "custom": {"k": [1, 2]}}
    assert tr.rank == 0 and tr.world_size is None


def test_events_sorted_by_ts_stable(tmp_path):
    evs = [x("cpu_op", "late", 30, 1), x("cpu_op", "early", 10, 1), x("cpu_op", "tie1", 20, 1), x("cpu_op", "tie2", 20, 1)]
    tr = _one(write_raw(tmp_path / "s.json", evs))
    assert tr.events["name"].tolist() == ["early", "tie1", "tie2", "late"]


# ---- truncated traces ------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_trace_keeps_complete_events(tmp_path, gz):
    b = TraceBuilder()
    for i in range(50):
        b.cpu_op(f"op{i}", i * 10, 5)
    data = json.dumps(b.to_dict()).encode()
    cut = data.index(b'"op40"') + 3  # in the middle of op40's event
    p = tmp_path / ("cut.json.gz" if gz else "cut.json")
    p.write_bytes(gzip.compress(data[:cut]) if gz else data[:cut])
    before = digest(p)
    tr = _one(p)
    assert tr.events["name"].tolist() == [f"op{i}" for i in range(40)]
    assert len(tr.warnings) == 1 and tr.warnings[0].startswith("the trace is truncated")
    assert digest(p) == before


def test_truncated_gzip_stream(tmp_path):
    b = TraceBuilder()
    for i in range(2000):
        b.cpu_op(f"op{i}", i * 10, 5)
    z = gzip.compress(json.dumps(b.to_dict()).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(z[: len(z) // 2])
    tr = _one(p)
    assert 0 < len(tr.events) < 2000
    assert tr.events["name"].tolist() == [f"op{i}" for i in range(len(tr.events))]
    assert any("truncated" in w for w in tr.warnings)


def test_truncated_before_first_event(tmp_path):
    p = write_raw(tmp_path / "t.json", '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "na')
    with pytest.raises(EmptyTraceError, match="truncated"):
        load(p, use_cache=False)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, error, message",
    [
        (b"", TraceFormatError, "empty file"),
        (b"this is not json", TraceFormatError, "not valid JSON"),
        (b'{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', TraceFormatError, "not valid JSON"),
        (b'{"schemaVersion": 1}', TraceFormatError, "not a Kineto trace"),
        (b'{"traceEvents": {"ph": "X"}}', TraceFormatError, "not a Kineto trace"),
        (b"[1, 2, 3]", TraceFormatError, "not a Kineto trace"),
        (b'{"traceEvents": []}', EmptyTraceError, "traceEvents is empty"),
        (b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}', EmptyTraceError, "no complete"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage-garbage", TraceFormatError, "corrupt gzip"),
    ],
)
def test_bad_input_raises_naming_the_file(tmp_path, content, error, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(error, match=message) as info:
        load(p, use_cache=False)
    assert str(p) in str(info.value) and info.value.path == str(p)
    assert p.read_bytes() == content


def test_gzip_with_bad_checksum(tmp_path):
    z = bytearray(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}'))
    z[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    p = tmp_path / "crc.json.gz"
    p.write_bytes(bytes(z))
    with pytest.raises(TraceFormatError, match="corrupt gzip"):
        load(p, use_cache=False)


@pytest.mark.parametrize("inflate", ["isal", "zlib"])
def test_gzip_read_alike_with_isal_or_zlib(tmp_path, monkeypatch, inflate):
    """ISA-L inflates .gz traces; zlib where isal is missing: the same tables either way, and
    the same errors for a corrupt stream and a bad checksum."""
    import zlib

    from tracekit.trace import _reader
    from tracekit.trace.loader import parse_file

    if inflate == "zlib":
        monkeypatch.setattr(_reader, "_inflate", zlib)
    else:  # a dependency: a venv made before it came in lacks it until `pip install -e .`
        pytest.importorskip("isal")
        assert _reader._inflate is not zlib
    got = parse_file("sample_traces/issue5/issue5_delta_blocking.json.gz")
    monkeypatch.undo()
    want = parse_file("sample_traces/issue5/issue5_delta_blocking.json.gz")
    assert got.names == want.names and len(got.events["ts"]) > 1000
    for c in want.events:
        assert np.array_equal(got.events[c], want.events[c])
    if inflate == "zlib":
        monkeypatch.setattr(_reader, "_inflate", zlib)
    test_gzip_with_bad_checksum(tmp_path)
    test_bad_input_raises_naming_the_file(
        tmp_path, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage-garbage",
        TraceFormatError, "corrupt gzip")


def test_multi_member_gzip(tmp_path):
    text = json.dumps({"traceEvents": [x("cpu_op", f"op{i}", i, 1) for i in range(10)]}).encode()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    assert len(_one(p).events) == 10


def test_missing_path(tmp_path):
    with pytest.raises(InputError, match="no such file") as info:
        load(tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in str(info.value)


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(InputError, match="no trace files"):
        load(tmp_path)


def test_run_directory_skips_metrics_json(tmp_path):
    """A runtime.train output directory: the trace is read, metrics*.json beside it are not."""
    b = TraceBuilder(rank=0)
    b.cpu_op("only", 0, 1)
    b.write(tmp_path / "trace_rank0.json.gz")
    (tmp_path / "metrics.json").write_text(json.dumps({"step_ms_p90": 7.0, "ranks": [{"rank": 0}]}))
    (tmp_path / "metrics_rank0.json").write_text(json.dumps({"rank": 0}))
    with gzip.open(tmp_path / "other.json.gz", "wt") as f:  # gzipped, not a trace either
        f.write(json.dumps({"rows": []}))
    ts = load(tmp_path, use_cache=False)
    assert [t.source for t in ts.traces] == [str(tmp_path / "trace_rank0.json.gz")]
    assert ts.traces[0].events["name"].tolist() == ["only"]


def test_directory_trace_with_long_metadata_is_read(tmp_path):
    """A trace whose "traceEvents" comes after more than the sniffed bytes of metadata (a long
    distributedInfo.pg_config, say) is still one of the directory's traces."""
    from tracekit.trace.loader import SNIFF_BYTES

    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 3, "pad": "x" * (SNIFF_BYTES + 10)},
           "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": 1,
                            "ts": 10, "dur": 2}]}
    (tmp_path / "trace.json").write_text(json.dumps(doc))
    (tmp_path / "metrics.json").write_text(json.dumps({"step_ms_p90": 7.0}))
    ts = load(tmp_path, use_cache=False)
    assert ts.ranks == [3]
    assert ts.traces[0].events["name"].tolist() == ["late"]


def test_directory_of_metrics_only_is_no_traces(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(InputError, match="no trace files"):
        load(tmp_path)


def test_directory_file_that_cannot_be_sniffed_is_still_loaded_and_named(tmp_path):
    """A corrupt .json.gz in a directory is not skipped silently: loading it says what is wrong."""
    b = TraceBuilder()
    b.cpu_op("ok", 0, 1)
    b.write(tmp_path / "a.json")
    (tmp_path / "b.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(TraceFormatError) as info:
        load(tmp_path, use_cache=False)
    assert "b.json.gz" in str(info.value)


# ---- directories -----------------------------------------------------------------------------


def test_directory_ranks_declared_and_positional(tmp_path):
    d = tmp_path / "run"
    b = TraceBuilder(rank=1)
    b.cpu_op("r1", 0, 1)
    b.write(d / "a.pt.trace.json")  # declares rank 1
    b = TraceBuilder()
    b.cpu_op("none0", 0, 1)
    b.write(d / "b.json.gz")  # position 1, taken by a.json -> 2
    b = TraceBuilder()
    b.cpu_op("none1", 0, 1)
    b.write(d / "c.json")  # position 2, taken -> 3
    b = TraceBuilder(rank=1)
    b.cpu_op("dup", 0, 1)
    b.write(d / "d.json")  # declares rank 1 again: never dropped, gets a free rank
    (d / "README.md").write_text("not a trace")
    ts = load(d, use_cache=False)
    assert ts.ranks == [1, 2, 3, 4]
    by_rank = {t.rank: t.events["name"].tolist()[0] for t in ts.traces}
    assert by_rank == {1: "r1", 2: "none0", 3: "none1", 4: "dup"}
    assert ts.rank(2).warnings and "rank" in ts.rank(2).warnings[0]
    # one warning that says both what clashed and what was done (issue 14: there were two)
    assert ts.rank(4).warnings == (
        "distributedInfo.rank 1 is also a.pt.trace.json's rank; loaded as rank 4",)
    assert ts.rank(1).warnings == ()


# ---- streaming: chunk boundaries never change the result -------------------------------------


def test_small_chunks_give_the_same_tables(tmp_path, monkeypatch):
    from tracekit.trace import _reader

    b = _pt2_builder()
    for i in range(300):
        b.cpu_op(f"op{i % 7}", 60 + i, 0.5)
    # an event whose args hold a list of objects: a "},{" inside an event
    doc = b.to_dict()
    doc["traceEvents"].insert(5, x("cpu_op", "nested", 1_000_001, 1, extra=[{"a": 1}, {"ph": "X"}]))
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=1))
    whole = _one(p)
    monkeypatch.setattr(_reader, "_CHUNK", 256)
    monkeypatch.setattr(_reader, "_READ_PLAIN", 100)
    chunked = _one(p)
    assert chunked.events.equals(whole.events)
    assert chunked.memory.equals(whole.memory)
    assert chunked.metadata == whole.metadata
    assert "nested" in set(chunked.events["name"])


# ---- progress --------------------------------------------------------------------------------


def test_progress_bar_only_when_asked_or_on_a_terminal(tmp_path, capsys):
    b = _pt2_builder()
    p = b.write(tmp_path / "t.json")
    load(p, use_cache=False, progress=None)  # stderr is not a terminal under pytest
    assert capsys.readouterr().err == ""
    load(p, use_cache=False, progress=True)
    err = capsys.readouterr().err
    assert "tracekit: reading t.json" in err and "100.0%" in err and err.endswith("\r\x1b[K")


# ---- the helper process (two-process decoding of big traces) ---------------------------------
# The helper is forked only when no other thread runs; other tests in this pytest process may
# leave threads behind, so these checks run in a fresh interpreter (tests/tracekit/_helper_check.py).


def _big_builder(n: int = 3000) -> TraceBuilder:
    b = _pt2_builder()
    for i in range(n):
        c = b.runtime("cudaLaunchKernel", 100 + i, 0.5)
        b.kernel(f"kernel_{i % 37}", 100.25 + i, 0.5, stream=7 + i % 3, launched_by=c)
        b.memory(100 + i + 0.125, 64 * (i % 5 + 1), total_allocated=i, total_reserved=2 * i)
        if i % 50 == 0:  # collectives spread over the pieces: their args travel with them
            b.cpu_op("record_param_comms", 100.5 + i, 0.1,
                     args={"Collective name": "allreduce", "Seq": i, "In msg nelems": i})
    return b


def _run_check(which: str, trace, tmp_path, kind: str) -> str:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, str(root / "tests" / "tracekit" / "_helper_check.py"), which, str(trace), kind],
        capture_output=True, text=True, cwd=root, timeout=120,
    )
    if "SKIP" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("kind", ["procs", "thread"])
def test_helper_process_gives_the_same_tables(tmp_path, kind):
    p = _big_builder().write(tmp_path / "big.json.gz")
    out = _run_check("same", p, tmp_path, kind)
    assert "OK same" in out


@pytest.mark.parametrize("kind", ["procs", "thread"])
def test_helper_failure_falls_back_to_one_process(tmp_path, kind):
    # the first event's args hold a long list of objects that look like events: the first cut
    # (~4 KiB in) falls inside it, the helper gets that piece and cannot decode it
    doc = _big_builder(300).to_dict()
    doc["traceEvents"].insert(0, x("cpu_op", "huge", 1_000_000, 1, inputs=[{"name": i} for i in range(2000)]))
    p = tmp_path / "nested.json"
    p.write_text(json.dumps(doc))
    out = _run_check("fallback", p, tmp_path, kind)
    assert "OK fallback" in out
    assert f"events {sum(1 for e in doc['traceEvents'] if e.get('ph') == 'X')}" in out


@pytest.mark.parametrize("hold", ["buffer", "view"])
def test_a_decoded_event_held_elsewhere_does_not_break_the_reader(tmp_path, monkeypatch, hold):
    # A stack sampler (Dask's worker profiler) may hold a frame whose locals point into the
    # piece being decoded in place: releasing the view then raises BufferError. The reader goes
    # on in a copy and reads the same tables.
    from tracekit.trace import _reader

    p = _big_builder(400).write(tmp_path / "held.json")
    whole = load(p, use_cache=False).traces[0]
    monkeypatch.setattr(_reader, "_CHUNK", 4096)
    held: list = []
    real = _reader.decode_into

    def decode_and_hold(sink, data, index=None):
        # an export of the bytearray itself (resizing it fails), or of the view (releasing it fails)
        held.append(memoryview(data) if hold == "buffer" else np.frombuffer(data, dtype=np.uint8))
        return real(sink, data, index)

    monkeypatch.setattr(_reader, "decode_into", decode_and_hold)
    chunked = load(p, use_cache=False).traces[0]
    assert len(held) > 1
    assert chunked.events.equals(whole.events) and chunked.args.equals(whole.args)
