"""``tracekit compare``: headline figures side by side, and the public traces end to end."""

from __future__ import annotations

import json

import pytest

from tests.tracegen import TraceBuilder
from tests.tracekit.test_cli_analyze import run
from tracekit import api


def _variant(path, step_us, stall_us, peak):
    b = TraceBuilder()
    for k in range(4):
        t0 = 10_000.0 * k
        b.profiler_step(k + 1, t0, step_us)
        b.kernel("k", t0 + 10, 5, launch_at=t0 + 1)
        b.runtime("cudaDeviceSynchronize", t0 + 20, stall_us)
        b.memory(t0 + 2, 100, peak if k == 2 else 100, 2 * peak)
    return b.write(path)


def test_compare_text_and_json(tmp_path, capsys):
    a = _variant(tmp_path / "sparse_dist.json", 5000, 100, 1000)
    b = _variant(tmp_path / "fused.json", 4000, 40, 3000)
    code, out, err = run(["compare", a, b, "--format", "json", "--no-cache"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["baseline"] == "sparse_dist"
    assert [t["label"] for t in doc["traces"]] == ["sparse_dist", "fused"]
    d = doc["differences"][1]
    assert d["step_cpu_p90_ns"] == -1_000_000
    assert d["stall_total_ns"] == 4 * (40 - 100) * 1000
    assert d["peak_allocated_bytes"] == 2000 and d["peak_reserved_bytes"] == 4000
    assert d["mean_gap_ns"] is None
    code, out, _ = run(["compare", a, b, "--no-cache"], capsys)
    row = next(line for line in out.splitlines() if "CPU span P90" in line)
    assert row.split()[-3:] == ["5.000", "4.000", "-1.000"]
    assert "Δ vs sparse_dist" in out


def test_compare_same_name_twice(tmp_path, capsys):
    a = _variant(tmp_path / "x" / "run.json", 5000, 100, 1000)
    b = _variant(tmp_path / "y" / "run.json", 5000, 100, 1000)
    code, out, _ = run(["compare", a, b, "--format", "json", "--no-cache"], capsys)
    assert [t["label"] for t in json.loads(out)["traces"]] == ["x/run", "y/run"]
    assert json.loads(out)["differences"][1]["step_cpu_p90_ns"] == 0


def test_short_labels():
    from tracekit._files import short_labels

    assert short_labels(("a/sparse.json", "b/fused.json.gz")) == ["sparse", "fused"]
    assert short_labels(("r/sparse/trace_rank0.json.gz", "r/fused/trace_rank0.json.gz")) == \
        ["sparse/trace_rank0", "fused/trace_rank0"]
    assert short_labels(("a/x/t.json", "b/x/t.json", "c/y.json")) == ["a/x/t", "b/x/t", "y"]
    assert short_labels(("t.json", "t.json", "u.json")) == ["t#1", "t#2", "u"]
    assert short_labels(("runs/sparse", "runs/fused")) == ["sparse", "fused"]


@pytest.mark.parametrize("argv, message", [
    (["compare", "{a}"], "at least two"),
    (["compare", "{a}", "{t}/missing.json"], "no such file"),
])
def test_compare_bad_input(tmp_path, capsys, argv, message):
    a = _variant(tmp_path / "a.json", 5000, 100, 1000)
    code, out, err = run([x.format(a=a, t=tmp_path) for x in argv] + ["--no-cache"], capsys)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


PUBLIC = ["hta_ns_resolution_rank0.json.gz", "hta_sampled_rank0.json.gz",
          "hta_sampled_rank1.json.gz", "kineto_tbplugin_resnet50.json.gz"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_traces(public_traces, tmp_path, name):
    ((trace, a),) = api.analyze_path(public_traces / name, cache_dir=tmp_path, with_hta=False)
    s = a.steps
    assert s.source == "ProfilerStep" and len(s.steps) >= 2
    assert 0 < s.cpu_p50_ns <= s.cpu_p90_ns < 10e9  # under 10 s a step
    assert 0 < s.gpu_p50_ns <= s.gpu_p90_ns < 10e9
    assert (s.steps["activities"] > 0).all()
    o = a.overlap
    assert 0 < o.gpu_busy_ns <= o.compute_ns + o.communication_ns + o.memcpy_ns
    assert (o.streams["busy_ns"] > 0).all()
    assert a.syncs.count >= 1 and a.syncs.total_ns > 0
    if "sampled" in name:  # NCCL on 5 streams, DDP + TorchRec labels
        assert len(o.streams) == 5 and 0 < o.comm_overlap_ratio < 1
        assert o.exposed_comm_ns + o.comm_compute_overlap_ns == o.communication_ns
        assert len(a.gaps.gaps) == 1 and a.gaps.gaps["gap_ns"].iloc[0] > 0
        assert a.allocator.peak_allocated is None
    if name.startswith("kineto"):  # legacy: Bytes only
        assert a.allocator.reconstructed and a.allocator.peak_allocated > 0
        assert a.allocator.peak_reserved is None
        assert set(a.syncs.stalls["name"]) == {"cudaMemcpyAsync", "cudaStreamSynchronize",
                                               "cudaDeviceSynchronize"}


def test_sample_trace_text_is_useful(capsys, tmp_path):
    from tests.conftest import SAMPLE_TRACES

    path = SAMPLE_TRACES / "public" / "hta_sampled_rank0.json.gz"
    if not path.exists():
        pytest.skip("no bundled sample trace")
    code, out, _ = run(["analyze", path, "--cache-dir", tmp_path], capsys)
    assert code == 0
    assert "steps from ProfilerStep: 2" in out
    assert "communication overlapped with compute:" in out
    assert "aten::item > aten::_local_scalar_dense > cudaMemcpyAsync" in out


def test_modern_two_stream_gpu_trace(tmp_path):
    """The H200 trace in tests/data (DLRM loop, batch copy on a side stream, profile_memory)."""
    from tests.conftest import TEST_DATA
    from tracekit.phases import activities, default_rules

    path = TEST_DATA / "dlrm_2stream_small.json.gz"
    ((trace, a),) = api.analyze_path(path, use_cache=False, with_hta=False)
    s = a.steps
    assert s.source == "ProfilerStep" and s.steps["step"].tolist() == [3, 4, 5, 6]
    assert s.steps["activities"].nunique() == 1  # every step launches the same work
    assert 0 < s.gpu_p50_ns <= s.gpu_p90_ns and 0 < s.cpu_p50_ns <= s.cpu_p90_ns
    acts, _ = activities(trace, default_rules())
    by_stream = acts.groupby("stream")["phase"].agg(set).to_dict()
    assert set(by_stream) == {7, 13}
    assert by_stream[13] == {"batch_copy"}  # the side stream only copies batches
    assert {"forward", "lookup", "backward", "optimizer"} <= by_stream[7]
    g = a.gaps.gaps
    assert g["matched_by"].unique().tolist() == ["batch index"]
    assert g["optimizer_batch"].tolist() == [3, 4, 5] and g["lookup_batch"].tolist() == [4, 5, 6]
    assert (g["gap_ns"] > 0).all() and (g["idle_ns"] <= g["gap_ns"]).all()
    assert (g["overlap_ns"] == 0).all()
    y = a.syncs
    sites = set(y.by_call_site["call_site"])
    assert "aten::coalesce > aten::_coalesce > cudaStreamSynchronize" in sites
    assert y.by_phase["phase"].iloc[0] == "optimizer"  # Adagrad's sparse coalesce syncs
    m = a.allocator
    assert not m.reconstructed and 0 < m.peak_allocated <= m.peak_reserved
    assert 0 < m.unused_fraction < 1
    assert m.per_step["step"].tolist() == [3, 4, 5, 6]
