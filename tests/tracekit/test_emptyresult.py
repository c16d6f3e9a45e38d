"""A section's result for a trace with nothing for it (``tracekit.emptyresult``): computed once
by the section's general code, then copied. Each copy must be exactly what the general code
gives that trace (frames with their dtypes and index, every other field), whatever trace first
filled the kept result; and a copy changed by its holder must not change the next one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from tests.tracegen import TraceBuilder, load_built
from tracekit import emptyresult, steps
from tracekit.analyses import allocator, collectives, embedding_bw, syncs
from tracekit.graph.model import NodeKind, main_lanes
from tracekit.phases import default_rules


def _tiny(b: TraceBuilder) -> TraceBuilder:
    for s in range(3):
        b.profiler_step(s + 1, 1000.0 * s, 900)
        b.kernel("gemm_kernel", 1000.0 * s + 10, 100 + s, launch_at=1000.0 * s + 5)
    return b


def _cpu_only(b: TraceBuilder) -> TraceBuilder:
    b.profiler_step(1, 0, 100)
    b.cpu_op("aten::mm", 10, 20)
    return b


def _host_memory(b: TraceBuilder) -> TraceBuilder:
    b.profiler_step(1, 0, 100)
    b.kernel("k", 10, 5, launch_at=2, device=1)
    b.memory(5, 512, total_allocated=512, total_reserved=2048, device_type=0)
    return b


def _no_step(b: TraceBuilder) -> TraceBuilder:
    b.kernel("k", 10, 5, launch_at=2)
    b.kernel("k2", 20, 5, launch_at=3, stream=9)
    return b


SHAPES = {
    "tiny": lambda: _tiny(TraceBuilder(rank=3, world_size=8)),
    "cpu_only": lambda: _cpu_only(TraceBuilder()),
    "host_memory": lambda: _host_memory(TraceBuilder()),
    "no_step": lambda: _no_step(TraceBuilder()),
    "legacy": lambda: _tiny(TraceBuilder(schema="legacy2021")),
}

SECTIONS = {
    "syncs": (syncs, "_result"),
    "collectives": (collectives, "_result"),
    "allocator": (allocator, "_result"),
    "embedding_bw": (embedding_bw, "_compute"),
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("empty")
    return {k: load_built(make(), d, f"{k}.json") for k, make in SHAPES.items()}


def _same(a, b) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, check_exact=True)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("section", sorted(SECTIONS))
@pytest.mark.parametrize("first", sorted(SHAPES))
def test_kept_result_is_the_general_one(section, first, traces, monkeypatch):
    mod, general = SECTIONS[section]
    rules = default_rules()
    emptyresult.forget()
    mod.compute(traces[first], rules)  # fills the kept result from the first trace
    for name, t in traces.items():
        ran = []
        real = getattr(mod, general)
        monkeypatch.setattr(mod, general, lambda *a, **k: ran.append(1) or real(*a, **k))
        fast = mod.compute(t, rules)
        assert not ran, (section, name)  # the kept result, not the general code
        monkeypatch.setattr(mod, general, real)
        emptyresult.forget()
        _same(fast, mod.compute(t, rules))  # what the general code gives this trace
        mod.compute(traces[first], rules)
    emptyresult.forget()


def test_a_copy_changed_leaves_the_next_alone(traces):
    rules = default_rules()
    emptyresult.forget()
    first = syncs.compute(traces["tiny"], rules)
    first.stalls.loc[0] = first.stalls.dtypes.map(lambda d: 0).to_numpy()
    first.by_step.insert(0, "x", [])
    again = syncs.compute(traces["tiny"], rules)
    assert again.stalls.empty and "x" not in again.by_step.columns
    emptyresult.forget()


def test_a_trace_with_something_is_computed(tmp_path):
    b = _tiny(TraceBuilder())
    c = b.runtime("cudaStreamSynchronize", 2500, 40)
    b.cuda_sync(2540, 1, correlation=c)
    b.memory(10, 1024, total_allocated=1024, total_reserved=4096)
    t = load_built(b, tmp_path)
    rules = default_rules()
    assert syncs.compute(t, rules).count == 1
    assert allocator.compute(t, rules).peak_reserved == 4096


def test_main_stream_of_a_device_ties_to_the_highest_stream():
    acts = pd.DataFrame({"device": [0, 0, 0, 1, 1, 0],
                         "stream": [7, 9, 7, 3, 4, 11],
                         "ts": [0, 0, 50, 0, 0, 0],
                         "end": [10, 20, 60, 5, 9, 19]})
    # device 0: streams 7 and 9 busy 20 ns each (tie: 9), 11 busy 19; device 1: stream 4
    assert steps.main_streams(acts).tolist() == [False, True, False, False, True, False]


def test_main_lane_of_a_device_ties_to_the_highest_lane():
    class G:
        lanes = pd.DataFrame({"device": [0, 0, 1, -1]})
        kind = np.array([NodeKind.GPU] * 5 + [NodeKind.CALL], np.int8)
        lane = np.array([1, 0, 0, 2, 2, 3])
        dur = np.array([10, 4, 6, 1, 1, 99], np.int64)

    assert main_lanes(G()).tolist() == [False, True, True, False]


def test_a_kept_results_frames_are_copied_when_read(traces):
    """A kept result's frames are copied when its holder first reads them (a job's worker reads
    none of the syncs' tables): each read sees its own copy, built once; a pickled result
    carries them built."""
    import pickle

    rules = default_rules()
    emptyresult.forget()
    syncs.compute(traces["tiny"], rules)
    got = syncs.compute(traces["tiny"], rules)
    assert got.unbuilt("stalls") is not None and got.unbuilt("by_step") is not None
    assert got.count == 0 and got.unbuilt("stalls") is not None  # a scalar copies no frame
    stalls = got.stalls
    assert got.unbuilt("stalls") is None and got.stalls is stalls
    assert stalls is not syncs.compute(traces["tiny"], rules).stalls
    clone = pickle.loads(pickle.dumps(syncs.compute(traces["tiny"], rules)))
    assert clone.unbuilt("by_phase") is None
    _same(clone, got)
    emptyresult.forget()
