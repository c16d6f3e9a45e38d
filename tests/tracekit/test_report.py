"""The JSON report's stable keys, its text rendering and the compare document."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from tests.tracegen import TraceBuilder, load_built
from tracekit import report
from tracekit.report import serialise
from tracekit.analyses import analyze_trace
from tracekit.phases import default_rules

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"
LOOKUP = "void split_embedding_codegen_forward_unweighted_kernel<float>(int)"

SECTION_FIELDS = {
    "steps": {"steps", "source", "boundary", "p50_ns", "p90_ns", "cpu_p50_ns", "cpu_p90_ns",
              "gpu_p50_ns",
              "gpu_p90_ns"},
    "overlap": {"streams", "pairs", "classes", "compute_ns", "communication_ns", "memcpy_ns",
                "gpu_busy_ns", "comm_compute_overlap_ns", "exposed_comm_ns",
                "exposed_memcpy_ns", "comm_overlap_ratio", "warnings"},
    "gaps": {"gaps", "optimizer_occurrences", "lookup_occurrences", "mean_gap_ns",
             "median_gap_ns", "mean_idle_ns", "mean_overlap_ns", "note"},
    "syncs": {"stalls", "by_call_site", "by_phase", "by_step", "count", "total_ns",
              "idle_after_ns",
              "poll_count", "poll_total_ns", "allocator_poll_count", "allocator_poll_total_ns",
              "allocator_known", "polls_by_call_site", "polls_by_step"},
    "allocator": {"series", "series_points", "devices", "per_step", "peak_allocated",
                  "peak_reserved", "unused_at_peak_reserved", "unused_fraction",
                  "reconstructed", "note", "warnings"},
    "collectives": {"kernels", "groups", "source", "count", "kernel_ns", "by_type", "warnings"},
    "identity": {"distributed_info", "base_time_ns", "start_ns", "end_ns"},
}
TABLE_COLUMNS = {
    ("steps", "steps"): ["step", "step_start", "step_end", "step_ns", "cpu_start", "cpu_end", "cpu_ns", "gpu_start", "gpu_end",
                         "gpu_ns", "activities"],
    ("overlap", "streams"): ["device", "stream", "activities", "busy_ns", "first_ts", "last_end"],
    ("overlap", "pairs"): ["device", "stream_a", "stream_b", "overlap_ns"],
    ("gaps", "gaps"): ["device", "step", "optimizer_batch", "lookup_batch", "optimizer_start",
                       "optimizer_end", "lookup_start", "lookup_end", "gap_ns", "overlap_ns",
                       "idle_ns", "matched_by"],
    ("syncs", "stalls"): ["ts", "end", "dur_ns", "name", "tid", "device", "op_chain",
                          "call_site", "phase", "step", "idle_after_ns", "source"],
    ("syncs", "by_phase"): ["phase", "count", "total_ns", "max_ns", "idle_after_ns"],
    ("allocator", "series"): ["device", "ts", "allocated", "reserved"],
    ("allocator", "per_step"): ["step", "device", "allocations", "allocated_bytes"],
    ("collectives", "kernels"): ["group", "collective", "seq", "index", "step", "stream", "ts",
                                 "end", "in_bytes", "out_bytes"],
    ("collectives", "by_type"): ["collective", "count", "kernel_ns", "in_bytes", "out_bytes"],
}


def full_builder() -> TraceBuilder:
    """A small trace in which every section has something to say."""
    b = TraceBuilder(rank=0, world_size=2)
    for k in range(3):
        t0 = 1000.0 * k
        b.profiler_step(k + 1, t0, 1000)
        b.annotation(f"## forward {k} ##", t0 + 10, 100)
        b.kernel(LOOKUP, t0 + 200, 50, launch_at=t0 + 20)
        b.kernel("gemm", t0 + 250, 100, launch_at=t0 + 30)
        b.kernel(NCCL, t0 + 300, 100, stream=20, launch_at=t0 + 40)
        b.annotation(f"## optimizer {k} ##", t0 + 500, 100)
        b.kernel("adam", t0 + 600, 100, launch_at=t0 + 510)
        b.cpu_op("aten::item", t0 + 700, 50)
        c = b.runtime("cudaMemcpyAsync", t0 + 710, 30)
        b.memcpy(t0 + 720, 2, direction="DtoH", dst="Pageable", launched_by=c)
        b.memory(t0 + 5, 1000, 1000 * (k + 1), 4096)
    return b


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    trace = load_built(full_builder(), tmp_path_factory.mktemp("full"))
    return analyze_trace(trace, default_rules(), with_hta=False)


def test_keys_are_stable(analysis):
    d = report.to_dict(analysis)
    assert tuple(d) == report.RANK_KEYS
    assert tuple(d["headline"]) == report.HEADLINE_KEYS
    for section, fields in SECTION_FIELDS.items():
        assert set(d[section]) == fields, section
    for (section, table), cols in TABLE_COLUMNS.items():
        rows = d[section][table]
        assert rows, (section, table)
        assert list(rows[0]) == cols, (section, table)
    assert d["hta"] is None and d["snapshot"] is None
    doc = report.document([d], "9.9")
    assert set(doc) == {"tracekit_version", "format", "analyses", "jobs"} and doc["format"] == 1
    json.dumps(doc, allow_nan=False)  # NaN became null


def test_headline_values(analysis):
    h = report.to_dict(analysis)["headline"]
    assert h["steps"] == 3 and h["step_source"] == "ProfilerStep"
    assert h["step_cpu_p90_ns"] == 1_000_000
    assert h["peak_allocated_bytes"] == 3000 and h["peak_reserved_bytes"] == 4096
    assert h["mean_gap_ns"] == 500_000  # next lookup at +1200, optimizer ends at +700
    assert h["comm_overlap_ratio"] == 0.5  # NCCL [300,400] under gemm [250,350]
    assert h["exposed_comm_ns"] == 3 * 50_000  # 50 us per step
    assert h["stall_count"] == 3 and h["stall_total_ns"] == 90_000


def test_text_has_every_section(analysis):
    text = report.render_text(report.document([report.to_dict(analysis)], "0"))
    assert "Headline" in text
    for title in ("Steps", "Stream overlap", "Optimizer -> next lookup gap", "Sync stalls", "Allocator"):
        assert re.search(rf"^\d+\. {title}", text, re.M), title
    assert "aten::item > cudaMemcpyAsync" in text
    assert "matched by batch index" in text


def test_cpu_only_trace_says_no_gpu(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.cpu_op("aten::add", 10, 10)
    a = analyze_trace(load_built(b, tmp_path), default_rules(), with_hta=False)
    d = report.to_dict(a)
    assert d["platform"] == "cpu"
    text = report.render_rank(d)
    for title in ("Stream overlap", "Optimizer", "Sync stalls"):
        head = re.search(rf"^\d+\. {title}.*$", text, re.M).group(0)
        assert text.split("\n" + head + "\n", 1)[1].split("\n", 1)[0].strip() == "no GPU activity"
    assert "no [memory] events" in text


def test_series_downsampled_keeps_peaks():
    n = 5000
    alloc = np.arange(n) % 977
    alloc[4321] = 10**9
    series = pd.DataFrame({"device": 0, "ts": np.arange(n), "allocated": alloc,
                           "reserved": np.full(n, -1)})
    rows = serialise._downsample(series)
    assert len(rows) == report.SERIES_POINTS
    assert max(r["allocated"] for r in rows) == 10**9
    assert rows[0]["ts"] == 0


def test_compare_document():
    a = {"label": "a", "source": "a.json", "rank": 0,
         "headline": dict.fromkeys(report.HEADLINE_KEYS, None) | {"step_cpu_p90_ns": 100_000_000,
                                                                  "stall_count": 4}}
    b = {"label": "b", "source": "b.json", "rank": 0,
         "headline": dict.fromkeys(report.HEADLINE_KEYS, None) | {"step_cpu_p90_ns": 80_000_000,
                                                                  "stall_count": 1,
                                                                  "mean_gap_ns": 5.0}}
    doc = report.compare_document([a, b], "0")
    assert doc["baseline"] == "a"
    assert doc["differences"][1]["step_cpu_p90_ns"] == -20_000_000
    assert doc["differences"][1]["stall_count"] == -3
    assert doc["differences"][1]["mean_gap_ns"] is None  # a has none
    assert doc["differences"][0]["step_cpu_p90_ns"] == 0
    text = report.render_compare(doc)
    row = next(line for line in text.splitlines() if "CPU span P90" in line)
    assert row.split()[-3:] == ["100.000", "80.000", "-20.000"]
    assert "Δ vs a" in text


def test_report_cache_key_sees_a_snapshot_beside_the_trace(tmp_path):
    from tracekit import api

    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_text('{"traceEvents": []}')
    before = api.report_key(str(trace), b"rules")
    assert before is not None
    (tmp_path / "rank0_snapshot.pickle").write_bytes(b"x")  # the loader's <name> form
    with_snap = api.report_key(str(trace), b"rules")
    assert with_snap != before
    (tmp_path / "rank0_snapshot.pickle").write_bytes(b"other")
    assert api.report_key(str(trace), b"rules") not in (before, with_snap)


def _pandas_records(df: pd.DataFrame) -> list[dict]:
    """What ``serialise._records`` gave before it built the rows itself (pandas' ``to_dict``)."""
    df = df.rename(columns=str)
    nan = df.isna().to_numpy()
    if nan.any():
        df = df.astype(object).where(~nan, None)
    return df.to_dict(orient="records")


@pytest.mark.filterwarnings("ignore:DataFrame columns are not unique")
@pytest.mark.parametrize("df", [
    pd.DataFrame({"i": np.array([1, -2, 3], np.int64), "u": np.array([1, 2, 3], np.uint16),
                  "f": [0.5, np.nan, np.inf], "b": [True, False, True],
                  "s": ["a", None, "c"], "o": [np.int64(4), 2.5, [1, 2]],
                  "d": [{"k": 1}, None, np.float32(1.5)]}),
    pd.DataFrame({"x": pd.Series([], dtype=np.int64), "y": pd.Series([], dtype=object)}),
    pd.DataFrame(index=range(2)),
    pd.DataFrame({0: [1, 2], "name": pd.array(["p", pd.NA], dtype="string")}),
    pd.DataFrame({"t": pd.to_datetime([0, 1]), "n": [1, 2]}),  # datetimes: pandas' way
    pd.DataFrame([[1, 2]], columns=["a", "a"]),  # repeated names: pandas' way
    pd.DataFrame({"c": pd.Categorical(["x", "y"]), "g": [np.nan, 1.0]}),
])
def test_records_equal_pandas_to_dict(df):
    got, want = serialise._records(df), _pandas_records(df)
    assert got == want
    assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in want]
