"""The profiler's overhead model: where each recorded thing's cost falls, the untraced estimate,
a given untraced step, what the run wrote beside the trace, and explain's two views."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.tracegen import US, TraceBuilder, load_built
from tests.tracekit.test_cli_analyze import run
from tracekit.analyses import explain
from tracekit.beside import untraced_step
from tracekit.graph import build_graph
from tracekit.graph import overhead as oh
from tracekit.graph.model import NodeKind
from tracekit.phases import default_rules
from tracekit.report import explain_dict

RULES = default_rules()
ROOT = Path(__file__).resolve().parents[2]
ONE = oh.OverheadModel(cpu_op_ns=2 * US, runtime_ns=1 * US, memory_ns=1 * US, sync_call_ns=1 * US,
                       python_ns=0, shapes_ns=0, min_call_ns=500, source="test")


def host_bound(tmp_path, gpu_us=5):
    """Two steps of 100 us host work each: per step one op around a launch (enter and exit
    halves: 2 us), a [memory] event, then the host's own time; the kernels take ``gpu_us``."""
    b = TraceBuilder()
    for i in range(3):
        t0 = 100 * i
        b.profiler_step(i + 1, t0, 100)
        b.cpu_op("aten::add", t0 + 10, 20)
        b.kernel("k", t0 + 30, gpu_us, launched_by=b.runtime("cudaLaunchKernel", t0 + 20, 5))
        b.memory(t0 + 40, 1024, total_allocated=1024, total_reserved=2048)
        b.runtime("cudaEventRecord", t0 + 90, 3)
    return load_built(b, tmp_path)


def test_counts_fall_where_they_happen(tmp_path):
    t = host_bound(tmp_path)
    g = build_graph(t, RULES)
    c = oh.count(t, g)
    launch = np.flatnonzero((g.kind == NodeKind.CALL) & (g.name == "cudaLaunchKernel"))
    record = np.flatnonzero((g.kind == NodeKind.CALL) & (g.name == "cudaEventRecord"))
    op, rt, mem = oh.TERMS.index("cpu_op"), oh.TERMS.index("runtime"), oh.TERMS.index("memory")
    # before the launch: the op's enter half and the ProfilerStep's start half (and, from the
    # second step on, the previous ProfilerStep's end half); before the record: the op's exit
    # half and the [memory] event
    assert c.before[launch, op].tolist() == [1.0, 1.5, 1.5]
    assert c.before[record, op].tolist() == [0.5] * 3 and c.before[record, mem].tolist() == [1] * 3
    assert c.in_call[launch, rt].tolist() == [1] * 3 and c.in_call[record, rt].tolist() == [1] * 3
    assert c.totals["cpu_op"] == 3 + 3  # the op and the ProfilerStep annotation, per step


def test_host_bound_step_shrinks_by_the_overhead(tmp_path):
    t = host_bound(tmp_path)
    g = build_graph(t, RULES)
    e = oh.estimate(t, g, ONE)
    assert e.traced_step_ns == 100 * US
    # per step: 2 op halves x 1 us (the op) + the ProfilerStep's halves (around the step's
    # edges: 1 us each, one inside the step) + 2 calls x 1 us + 1 [memory] x 1 us
    assert e.untraced_step_ns < e.traced_step_ns
    assert e.traced_step_ns - e.untraced_step_ns == pytest.approx(
        sum(e.host_ns_per_step.values()), abs=1.5 * US)
    assert e.scale == "model" and "recorded CPU ops" in e.rests_on


def test_gpu_bound_step_keeps_its_length(tmp_path):
    t = host_bound(tmp_path, gpu_us=300)  # the GPU decides the step: the host overhead hides
    g = build_graph(t, RULES)
    e = oh.estimate(t, g, ONE)
    assert e.untraced_step_ns == pytest.approx(e.traced_step_ns, rel=0.01)


def test_given_step_sets_the_scale(tmp_path):
    t = host_bound(tmp_path)
    g = build_graph(t, RULES)
    e = oh.estimate(t, g, ONE, step_ms=0.080)
    assert e.scale == "given" and e.host_factor > 1
    assert e.untraced_step_ns == pytest.approx(80 * US, rel=0.01)
    assert "sets the scale" in e.rests_on


def test_untraced_graph_is_consistent(tmp_path):
    """The corrected graph replays to its own times: the critical path tiles the shorter step."""
    from tracekit.graph import critical as cr
    from tracekit.graph.replay import Plan, replay

    t = host_bound(tmp_path)
    g = build_graph(t, RULES)
    e = oh.estimate(t, g, ONE)
    u = oh.untraced_graph(g, oh.host_cost(t, g, ONE), host_factor=e.host_factor)
    s, end = replay(Plan.of(u))
    assert (s == u.start).all() and (end == u.end).all()
    win = cr.step_windows(u)
    path = cr.step_paths(u, windows=win)
    assert path.groupby("step")["dur"].sum().tolist() == (win["end"] - win["start"]).tolist()


def test_explain_views(tmp_path):
    t = host_bound(tmp_path)
    r = explain.compute(t, RULES)
    assert r.view == "untraced" and r.overhead is not None
    d = explain_dict(r)
    assert d["view"] == "untraced" and d["steps"][1]["traced_ns"] == 100 * US
    assert d["steps"][1]["untraced_ns"] < 100 * US
    assert d["steps"][1]["duration_ns"] == d["steps"][1]["untraced_ns"]
    rt = explain.compute(t, RULES, config=explain.ExplainConfig(untraced=False))
    assert rt.view == "traced" and rt.steps["duration_ns"].tolist()[1] == 100 * US


def test_untraced_step_beside(tmp_path):
    (tmp_path / "trace_rank0.json.gz").write_bytes(b"")
    (tmp_path / "metrics.json").write_text(json.dumps(
        {"preset": "p", "variant": "sparse", "world_size": 1,
         "trace_run": {"step_ms": [10.0, 12.0, 11.0], "traced_step_ms": [15.0]}}))
    ms, src, meta = untraced_step(str(tmp_path / "trace_rank0.json.gz"))
    assert ms == 11.0 and "trace_run.step_ms" in src and meta["variant"] == "sparse"
    (tmp_path / "trace-fused-rank0.json.gz").write_bytes(b"")
    (tmp_path / "timing-fused-rank0.json").write_text(json.dumps(
        {"world_size": 1, "iterations": [{"traced": False, "gpu_ms": 80.0},
                                          {"traced": False, "gpu_ms": 82.0},
                                          {"traced": True, "gpu_ms": 150.0}]}))
    ms, src, meta = untraced_step(str(tmp_path / "trace-fused-rank0.json.gz"))
    assert ms == 81.0 and src.startswith("timing-fused-rank0.json") and meta["preset"] == "torchrec"
    (tmp_path / "metrics.json").write_text("{not json")
    assert untraced_step(str(tmp_path / "trace_rank0.json.gz")) is None


def test_command_views(tmp_path, capsys):
    b = TraceBuilder()
    for i in range(3):
        t0 = 100 * i
        b.profiler_step(i + 1, t0, 100)
        b.cpu_op("aten::add", t0 + 10, 20)
        b.kernel("k", t0 + 30, 5, launched_by=b.runtime("cudaLaunchKernel", t0 + 20, 5))
    src = b.write(tmp_path / "t.json.gz")
    code, out, err = run(["explain", src, "--no-cache"], capsys)
    assert code == 0, err
    assert "estimated untraced" in out
    assert "bound and findings: the estimated untraced step" in out
    code, out, err = run(["explain", src, "--no-cache", "--traced"], capsys)
    assert code == 0 and "bound and findings: the traced step" in out
    code, out, err = run(["explain", src, "--no-cache", "--step-ms", "0.09"], capsys)
    assert code == 0 and "untraced step given: 0.090 ms (--step-ms)" in out
    code, out, err = run(["explain", src, "--no-cache", "--step-ms", "-1"], capsys)
    assert code == 2 and "--step-ms" in err


def test_real_host_bound_trace():
    """multitask_b4k SparseDist (H200, 2026-11-27): traced 36.5 and 40.8 ms a step, the same
    process untraced 26.9 ms; from the trace alone (the default model, no untraced input). Each
    step on its own: the second is 4.3 ms longer traced with nothing recorded to explain it (the
    host's own time, which the model keeps), so its estimate is that much longer too."""
    from tracekit.trace import load

    p = ROOT / "sample_traces/pipelines_1gpu/multitask_b4k/sparse/trace_rank0.json.gz"
    t = load(str(p), progress=False).traces[0]
    e = oh.estimate(t, build_graph(t, RULES))
    measured = untraced_step(str(p))[0]
    first = e.steps.iloc[0]
    assert abs(first["untraced_ns"] / 1e6 / measured - 1) <= 0.10
    assert first["traced_ns"] / 1e6 / measured - 1 > 0.25
    extra = e.steps["traced_ns"].diff().iloc[1]
    assert e.steps["untraced_ns"].diff().iloc[1] == pytest.approx(extra, rel=0.05)


def test_torchrec_pass_per_batch():
    """TorchRec's benchmark times a pass of 8 batches; its trace has no ProfilerStep, so its
    steps are batches (optimizer boundaries): the pass is divided by its batches."""
    from tracekit.beside import per_step
    from tracekit.loaded import loading

    p = ROOT / "sample_traces/torchrec_1gpu/sparse_b8192/trace-1gpu_sparse_b8192-rank0.json.gz"
    ms, src, meta = untraced_step(str(p))
    assert meta["batches_per_pass"] == 8 and ms == pytest.approx(156.6169)
    assert per_step((ms, src, meta), "ProfilerStep")[0] == ms
    with loading(str(p), use_cache=False) as lts:
        lt = lts[0]
        assert lt.steps().source == "optimizer boundaries"
        r = lt.explain()
    assert r.overhead["given_step_ns"] == pytest.approx(ms / 8 * 1e6)
    assert "a pass of 8 batches / 8" in r.overhead["source"]


def test_shapes_counted_where_the_file_says_record_shapes(tmp_path):
    """record_shapes on a trace without embedding ops (the loader keeps no inputs there): the
    file's own ``record_shapes`` flag says every CPU op's inputs were recorded."""
    counts = []
    for flag in (None, 1):
        b = TraceBuilder()
        for i in range(3):
            t0 = 100 * i
            b.profiler_step(i + 1, t0, 100)
            b.cpu_op("aten::add", t0 + 10, 20)
            b.kernel("k", t0 + 30, 5, launched_by=b.runtime("cudaLaunchKernel", t0 + 20, 5))
        if flag is not None:
            b.extra_metadata["record_shapes"] = flag
        t = load_built(b, tmp_path / f"f{flag}")
        c = oh.count(t, build_graph(t, RULES))
        counts.append((c.shapes_recorded, c.totals["shapes"]))
    assert counts == [(False, 0.0), (True, 3.0)]  # one aten::add per step


def test_shapes_flag_on_a_real_trace():
    from tracekit.trace import load

    p = ROOT / "sample_traces/profiler_1gpu/dense_heavy/sparse/shapes/trace_rank0.json.gz"
    t = load(str(p), progress=False).traces[0]
    e = oh.estimate(t, build_graph(t, RULES))
    assert e.counts_per_step["shapes"] > 0
    q = ROOT / "sample_traces/profiler_1gpu/dense_heavy/sparse/stack/trace_rank0.json.gz"
    t = load(str(q), progress=False).traces[0]
    e = oh.estimate(t, build_graph(t, RULES))
    assert e.counts_per_step["shapes"] == 0 and e.counts_per_step["python"] > 1000


def test_sync_and_modules_terms_follow_the_options(tmp_path):
    """cuda_sync events on: every runtime call of the trace counts once more (what the option
    costs a call); with_modules: every CPU op."""
    def build(sync: bool, modules: bool):
        b = TraceBuilder()
        for i in range(3):
            t0 = 100 * i
            b.profiler_step(i + 1, t0, 100)
            b.cpu_op("aten::add", t0 + 10, 20)
            b.kernel("k", t0 + 30, 5, launched_by=b.runtime("cudaLaunchKernel", t0 + 20, 5))
            b.runtime("cudaEventQuery", t0 + 50, 1)
            if sync:
                b.cuda_sync(t0 + 50, 1, kind="event_sync")
        if modules:
            b.extra_metadata["with_modules"] = 1
        t = load_built(b, tmp_path / f"s{sync}m{modules}")
        return oh.count(t, build_graph(t, RULES))

    plain, synced, mods = build(False, False), build(True, False), build(False, True)
    assert (plain.totals["sync_call"], plain.totals["modules"]) == (0.0, 0.0)
    assert synced.sync_events and synced.totals["sync_call"] == synced.totals["runtime"] == 6.0
    assert mods.modules_recorded and mods.totals["modules"] == 3.0
