"""The timeline's lanes and bins, on hand-built traces where every figure is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dashboards.timeline import build_lanes, lane_events
from tracekit.lanes import compute as trace_lanes
from tracekit.trace.model import EVENT_COLUMNS, MEMORY_COLUMNS, Kind, Trace


def make_trace(rows: list[tuple]) -> Trace:
    """rows: (kind, name, ts_ns, dur_ns, tid, stream) -> a Trace with device 0 for GPU rows."""
    recs = []
    for kind, name, ts, dur, tid, stream in rows:
        gpu = kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
        recs.append(
            dict(kind=int(kind), name=name, ts=ts, dur=dur, pid=0 if gpu else 100, tid=tid, stream=stream if gpu else -1,
                 device=0 if gpu else -1, correlation=-1, external_id=-1, bytes=-1, launch=None)
        )
    ev = pd.DataFrame(recs).astype(EVENT_COLUMNS).sort_values("ts", ignore_index=True)
    mem = pd.DataFrame({c: pd.Series(dtype=t) for c, t in MEMORY_COLUMNS.items()})
    return Trace(source="mem", rank=0, events=ev, memory=mem)


@pytest.fixture()
def trace() -> Trace:
    return make_trace(
        [
            (Kind.ANNOTATION, "ProfilerStep#1", 1000, 10_000, 1, -1),
            (Kind.ANNOTATION, "## forward 1 ##", 1000, 4_000, 1, -1),
            (Kind.ANNOTATION, "## optimizer 1 ##", 6000, 3_000, 1, -1),
            (Kind.CPU_OP, "aten::mm", 1100, 100, 1, -1),  # not an annotation: not drawn
            (Kind.KERNEL, "k_fwd", 2000, 2_000, 7, 7),
            (Kind.KERNEL, "k_opt", 7000, 1_000, 7, 7),
            (Kind.MEMCPY, "Memcpy HtoD", 1000, 3_000, 20, 20),
        ]
    )


def test_lanes_cpu_above_gpu_with_depth_and_phase(trace):
    acts = pd.DataFrame({"device": [0, 0, 0], "stream": [7, 7, 20], "name": ["k_fwd", "k_opt", "Memcpy HtoD"],
                         "ts": [2000, 7000, 1000], "end": [4000, 8000, 4000], "phase": ["forward", "optimizer", "other"]})
    ev, origin = lane_events(trace_lanes(trace, acts))
    assert origin == 1000
    # the thread with ProfilerStep is the main one; its second nesting level a lane of its own
    assert list(dict.fromkeys(ev["lane"])) == ["main thread 1", "main thread 1 · level 1", "GPU 0 · stream 7", "GPU 0 · stream 20"]
    # GPU lanes by the names given, CPU threads by the trace's names
    named, _ = lane_events(trace_lanes(trace, acts), stream_names={(0, 7): "main · stream 7"}, thread_names={1: "thread 1 (python3)"})
    assert list(dict.fromkeys(named["lane"]))[:3] == ["main python3 1", "main python3 1 · level 1", "main · stream 7"]
    k = ev[ev["name"] == "k_opt"].iloc[0]
    assert (k["start"], k["end"], k["phase"]) == (6000, 7000, "optimizer")
    assert ev[ev["name"] == "Memcpy HtoD"]["phase"].item() == "other"
    # without tracekit's phases, every GPU activity is "other" and nothing is lost
    ev2, _ = lane_events(trace_lanes(trace))
    assert len(ev2) == len(ev) and set(ev2.loc[ev2["lane"].str.startswith("GPU"), "phase"]) == {"other"}


def test_window_detail_and_bins_conserve_busy_time(trace):
    ev, _ = lane_events(trace_lanes(trace))
    # window 1..5 us from origin: k_fwd (1000..3000) and the memcpy (0..3000) and forward ann intersect
    lanes = build_lanes(ev, (1000, 5000), bins=10)
    names = set(lanes.detail["name"])
    assert names == {"ProfilerStep#1", "## forward 1 ##", "k_fwd", "Memcpy HtoD"}
    assert lanes.events_in_window == 4 and not lanes.aggregated_in_window
    # Outside the window, stream 7 has k_opt only (1 us busy): the bins hold exactly that.
    s7 = lanes.bins[lanes.bins["lane"] == "GPU 0 · stream 7"]
    assert np.isclose((s7["busy"] * s7["dur_ms"]).sum(), 1000 / 1e6)
    assert set(s7["phase"]) == {"other"}


def test_too_many_events_in_window_are_binned_and_busy_is_conserved():
    rows = [(Kind.KERNEL, f"k{i}", i * 100, 50, 7, 7) for i in range(500)]
    ev, _ = lane_events(trace_lanes(make_trace(rows)))
    lanes = build_lanes(ev, None, max_detail=100, bins=7)
    assert lanes.aggregated_in_window and lanes.detail.empty
    assert lanes.events_in_window == 500
    assert np.isclose((lanes.bins["busy"] * lanes.bins["dur_ms"]).sum() * 1e6, 500 * 50)
    assert len(lanes.bins) <= 7 * 4
    assert (lanes.bins["busy"] <= 1.0).all()


def test_event_spanning_many_bins_fills_them():
    ev, _ = lane_events(trace_lanes(make_trace([(Kind.KERNEL, "long", 0, 1000, 7, 7), (Kind.KERNEL, "end", 1000, 0, 7, 7)])))
    lanes = build_lanes(ev, (1000, 1000), bins=10)  # an empty window falls back to the whole trace
    assert lanes.window_ms == (0.0, 1000 / 1e6)
    from dashboards.timeline import _binned

    b = _binned(ev, ["GPU 0 · stream 7"], 0, 1000, 10)
    assert np.allclose(b["busy"].to_numpy(), 1.0) and len(b) == 10
