"""Sync stalls: which calls block, their op chain, phase, step and the GPU idle after them."""

from __future__ import annotations

import math

from tests.tracegen import US, TraceBuilder, load_built, ns
from tracekit.analyses import syncs
from tracekit.phases import default_rules


def _trace(tmp_path, platform="cuda"):
    p = "hip" if platform == "rocm" else "cuda"
    b = TraceBuilder(platform=platform)
    b.profiler_step(1, 0, 450)
    b.kernel("long_kernel", 0, 150, launch_at=1)
    b.annotation("## forward 0 ##", 50, 250)
    b.cpu_op("aten::item", 100, 100)
    b.cpu_op("aten::_local_scalar_dense", 105, 90)
    c = b.runtime(f"{p}MemcpyAsync", 110, 5)  # pageable: blocks
    b.memcpy(150, 2, direction="DtoH", dst="Pageable", launched_by=c)
    s = b.runtime(f"{p}StreamSynchronize", 116, 74)
    b.cuda_sync(116, 74, correlation=s)  # the same stall seen by Kineto: counted once
    b.kernel("next_kernel", 260, 10, launch_at=250)  # GPU idle after the sync: 260 - 190
    b.cpu_op("aten::copy_", 300, 20)
    c2 = b.runtime(f"{p}MemcpyAsync", 305, 5)  # pinned: does not block
    b.memcpy(310, 2, direction="DtoH", launched_by=c2)
    b.runtime(f"{p}DeviceSynchronize", 400, 10)
    b.kernel("late_kernel", 420, 10, launch_at=395)  # idle after the device sync: 10
    b.cuda_sync(500, 20, kind="event_synchronize")  # no runtime call: a stall of its own
    b.cuda_sync(530, 5, kind="stream_wait_event")  # blocks a stream, not the host
    return load_built(b, tmp_path)


def test_stalls(tmp_path):
    r = syncs.compute(_trace(tmp_path), default_rules())
    t = r.stalls
    assert t["name"].tolist() == ["cudaMemcpyAsync", "cudaStreamSynchronize",
                                  "cudaDeviceSynchronize", "Event Sync"]
    assert t["ts"].tolist() == [ns(110), ns(116), ns(400), ns(500)]
    assert t["dur_ns"].tolist() == [5 * US, 74 * US, 10 * US, 20 * US]
    assert t["op_chain"].tolist() == ["aten::item > aten::_local_scalar_dense"] * 2 + ["", ""]
    assert t["call_site"].tolist()[:2] == [
        "aten::item > aten::_local_scalar_dense > cudaMemcpyAsync",
        "aten::item > aten::_local_scalar_dense > cudaStreamSynchronize"]
    assert t["phase"].tolist() == ["forward", "forward", "other", "other"]
    assert t["step"].tolist() == [1, 1, 1, -1]
    assert t["source"].tolist() == ["runtime", "runtime", "runtime", "cuda_sync"]
    assert t["tid"].tolist()[3] == -1
    idle = t["idle_after_ns"].tolist()
    assert idle[:3] == [0.0, 70.0 * US, 10.0 * US]  # the first ends while long_kernel runs
    assert math.isnan(idle[3])  # nothing runs after it
    assert r.count == 4 and r.total_ns == 109 * US and r.idle_after_ns == 80 * US


def test_totals(tmp_path):
    r = syncs.compute(_trace(tmp_path), default_rules())
    ph = r.by_phase.set_index("phase")
    assert ph.loc["forward", "count"] == 2 and ph.loc["forward", "total_ns"] == 79 * US
    assert ph.loc["forward", "idle_after_ns"] == 70 * US
    assert ph.loc["other", "count"] == 2 and ph.loc["other", "total_ns"] == 30 * US
    assert r.by_phase["phase"].tolist() == ["forward", "other"]  # largest total first
    site = r.by_call_site.set_index("call_site")
    assert site.loc["aten::item > aten::_local_scalar_dense > cudaStreamSynchronize",
                    "max_ns"] == 74 * US
    st = r.by_step.set_index("step")
    assert st.loc[1, "count"] == 3 and st.loc[1, "total_ns"] == 89 * US
    assert st.loc[-1, "count"] == 1


def test_rocm_calls(tmp_path):
    r = syncs.compute(_trace(tmp_path, platform="rocm"), default_rules())
    assert r.stalls["name"].tolist()[:3] == ["hipMemcpyAsync", "hipStreamSynchronize",
                                             "hipDeviceSynchronize"]


def test_no_stalls(tmp_path):
    b = TraceBuilder()
    b.kernel("k", 10, 5, launch_at=1)
    r = syncs.compute(load_built(b, tmp_path), default_rules())
    assert r.count == 0 and r.total_ns == 0 and r.stalls.empty and r.by_phase.empty


def _polling(tmp_path, memory=True):
    """A step whose host polls events: twice inside an allocating op (the caching allocator's
    process_events before an allocation), once on its own (a user's event.query()), and Kineto's
    Event Sync cuda_sync event written for each poll; one real stall."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 300)
    b.kernel("k", 0, 100, launch_at=1)
    b.cpu_op("aten::to", 10, 40)
    b.cpu_op("aten::_to_copy", 11, 38)
    b.cpu_op("aten::empty_strided", 12, 10)
    for t in (13, 16):
        q = b.runtime("cudaEventQuery", t, 2)
        b.cuda_sync(t, 2, kind="event_synchronize", correlation=q)
    if memory:
        b.memory(19, 4096, total_allocated=4096, total_reserved=8192)
    b.runtime("cudaMemcpyAsync", 25, 3)
    q = b.runtime("cudaEventQuery", 60, 4)  # no allocation follows before the next call
    b.cuda_sync(60, 4, kind="event_synchronize", correlation=q)
    b.runtime("cudaLaunchKernel", 70, 3)
    if memory:
        b.memory(80, 1024, total_allocated=5120, total_reserved=8192)
    b.runtime("cudaStreamQuery", 90, 1)  # a poll without a cuda_sync event
    s = b.runtime("cudaStreamSynchronize", 200, 50)
    b.cuda_sync(200, 50, correlation=s)
    return load_built(b, tmp_path)


def test_polls_are_not_stalls(tmp_path):
    r = syncs.compute(_polling(tmp_path), default_rules())
    assert r.stalls["name"].tolist() == ["cudaStreamSynchronize"]
    assert r.count == 1 and r.total_ns == 50 * US
    p = r.polls
    assert p["name"].tolist() == ["cudaEventQuery"] * 3 + ["cudaStreamQuery"]
    assert p["ts"].tolist() == [ns(13), ns(16), ns(60), ns(90)]
    assert r.poll_count == 4 and r.poll_total_ns == 9 * US
    assert p["allocator"].tolist() == [True, True, False, False]
    assert r.allocator_known and r.allocator_poll_count == 2 and r.allocator_poll_total_ns == 4 * US
    assert p["op_chain"].tolist()[0] == "aten::to > aten::_to_copy > aten::empty_strided"
    site = r.polls_by_call_site.set_index("call_site")
    assert site.loc["aten::to > aten::_to_copy > aten::empty_strided > cudaEventQuery",
                    "allocator_count"] == 2
    st = r.polls_by_step.set_index("step")
    assert st.loc[1, "count"] == 4 and st.loc[1, "allocator_ns"] == 4 * US


def test_polls_without_memory_events(tmp_path):
    r = syncs.compute(_polling(tmp_path, memory=False), default_rules())
    assert r.poll_count == 4 and not r.allocator_known and r.allocator_poll_count == 0


def test_polls_on_the_fused_sample_trace():
    """sample_traces/pipelines_1gpu/fused: Kineto's Event Sync events are cudaEventQuery polls,
    nearly all of them the caching allocator's; its one stall is the device synchronize."""
    from pathlib import Path

    from tracekit.trace import load

    path = Path(__file__).resolve().parents[2] / "sample_traces/pipelines_1gpu/fused/trace_rank0.json.gz"
    r = syncs.compute(load(str(path), progress=False).traces[0], default_rules())
    assert r.stalls["name"].tolist() == ["cudaDeviceSynchronize"]
    assert r.poll_count == 964 and r.allocator_poll_count == 956  # H200, 2026-11-27
    assert "aten::to > aten::_to_copy > aten::empty_strided > cudaEventQuery" in \
        set(r.polls_by_call_site["call_site"])


def test_poll_is_no_host_wait_on_the_graph(tmp_path):
    from tracekit.graph import build_graph
    from tracekit.graph.model import NodeKind

    g = build_graph(_polling(tmp_path), default_rules())
    calls = g.kind == NodeKind.CALL
    sync = {str(n) for n in g.name[calls & (g.category == "sync")]}
    assert sync == {"cudaStreamSynchronize"}
