"""explain's allocator_polls finding: the caching allocator's polls (``cudaEventQuery`` on the
events of blocks ``record_stream`` tied to side streams, right before an allocation) taken out
of the host and the graph replayed. Hand-built traces where the polls bound the host (the
saving is their host time) and where the GPU bounds the step (the replay says it would not
help), and the runtime's FusedSparseDist trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tracegen import US, TraceBuilder, load_built
from tracekit import api
from tracekit.analyses import explain
from tracekit.phases import default_rules
from tracekit.report import explain_dict, schema
from tracekit.report.explain_text import text_findings

RULES = default_rules()
TRACED = explain.ExplainConfig(untraced=False)
STEPS, ALLOCS, STEP_US, POLL_US = 4, 5, 100, 8
SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"


def allocating(tmp_path, *, kernel_us: float, memory: bool = True):
    """``allocating_trace``'s trace, loaded."""
    return load_built(allocating_trace(kernel_us=kernel_us, memory=memory), tmp_path)


def allocating_trace(*, kernel_us: float, memory: bool = True) -> TraceBuilder:
    """``STEPS`` steps of ``STEP_US`` us; each makes ``ALLOCS`` allocations, every one after a
    ``POLL_US``-us ``cudaEventQuery`` inside ``aten::empty_strided`` (the allocator asking
    whether a side stream is done with a block), and launches a ``kernel_us`` kernel after
    each. One poll in each step is a user's ``event.query()`` (a launch follows it, not an
    allocation)."""
    b = TraceBuilder()
    for k in range(STEPS):
        t0 = k * STEP_US
        b.profiler_step(k + 1, t0, STEP_US)
        for i in range(ALLOCS):
            t = t0 + 2 + i * 18
            b.cpu_op("aten::to", t, 12)
            b.cpu_op("aten::_to_copy", t, 12)
            b.cpu_op("aten::empty_strided", t, 12)
            b.runtime("cudaEventQuery", t + 1, POLL_US)
            if memory:
                b.memory(t + 10, 4096, total_allocated=4096 * (i + 1), total_reserved=1 << 20)
            b.kernel("elementwise", t + 17, kernel_us,
                     launched_by=b.runtime("cudaLaunchKernel", t + 13, 2))
        # the user's poll: a launch follows it, not an allocation
        b.runtime("cudaEventQuery", t0 + 92, 1)
        b.kernel("tail", t0 + 97, 1, launched_by=b.runtime("cudaLaunchKernel", t0 + 94, 1))
    return b


def _finding(r, fid="allocator_polls"):
    return next((f for f in r.findings if f["id"] == fid), None)


def test_host_bound_polls_help_by_their_host_time(tmp_path):
    """The host decides every step (3-us kernels): taking the polls out saves their host time,
    5 x 8 us a step, traced; in the estimated untraced view the polls' time there."""
    t = allocating(tmp_path, kernel_us=3)
    r = explain.compute(t, RULES, config=TRACED)
    assert r.bound == "host"
    f = _finding(r)
    assert f is not None and f["helps"]
    assert f["allocator_polls_per_step"] == ALLOCS  # the user's poll is not the allocator's
    assert f["allocator_poll_ns_per_step"] == ALLOCS * POLL_US * US
    assert f["allocator_poll_traced_ns_per_step"] == ALLOCS * POLL_US * US
    assert f["observed_step_ns"] == STEP_US * US
    assert f["saving_ns"] == ALLOCS * POLL_US * US  # 40 us of a 100-us step
    assert f["saving_fraction"] == pytest.approx(0.40)
    site = f["allocator_poll_sites"][0]
    assert site["call_site"] == "aten::to > aten::_to_copy > aten::empty_strided > cudaEventQuery"
    assert site["per_step"] == ALLOCS
    assert "5.0 polls of the caching allocator per step (of 6.0 polls" in f["evidence"]
    assert "record_stream" in f["fix"]
    # a known fix: before the generic host what-if, whatever they save
    ids = [x["id"] for x in r.findings]
    assert ids.index("allocator_polls") < ids.index("host")

    u = explain.compute(t, RULES)  # the default view: the profiler's cost taken out first
    assert u.view == "untraced"
    fu = _finding(u)
    assert fu["helps"] and u.bound == "host"
    # each poll keeps what the overhead model leaves of it (8 us less a runtime call's cost)
    assert 0 < fu["allocator_poll_ns_per_step"] < ALLOCS * POLL_US * US
    assert fu["allocator_poll_traced_ns_per_step"] == ALLOCS * POLL_US * US
    assert "as traced" in fu["evidence"]
    # host-bound there too: the saving is the polls' host time in that view
    assert fu["saving_ns"] == pytest.approx(fu["allocator_poll_ns_per_step"], rel=0.01)


def test_gpu_bound_polls_would_not_help(tmp_path):
    """25-us kernels: the GPU takes 125 us a step against the host's 100; the same polls, and
    the replay says taking them out saves nothing."""
    t = allocating(tmp_path, kernel_us=25)
    for config in (TRACED, explain.ExplainConfig()):
        r = explain.compute(t, RULES, config=config)
        assert r.bound == "gpu"
        f = _finding(r)
        assert f is not None and not f["helps"]
        assert f["allocator_polls_per_step"] == ALLOCS
        assert abs(f["saving_ns"]) < 0.01 * f["observed_step_ns"]
        assert f["saving_ns"] >= 0  # taking host time out never predicts a slower step
        assert r.findings[-1]["helps"] is False
    text = text_findings(explain_dict(r))
    assert "the caching allocator polls side streams' events" in text
    assert "would not help here" in text


def test_without_memory_events_it_cannot_be_told(tmp_path):
    r = explain.compute(allocating(tmp_path, kernel_us=3, memory=False), RULES, config=TRACED)
    assert _finding(r) is None
    w = r.what_ifs.set_index("id").loc["allocator_polls"]
    assert not w["applies"] and "profile_memory off" in w["evidence"]


def test_fused_sample_trace():
    """sample_traces/pipelines_1gpu/fused (H200, 2026-11-27): 475 of its 479 polls a step are
    the allocator's, 0.366 ms traced; the step is GPU-bound, so taking them out would not help
    (the replay: under 0.1 % of the step), as explain says by default."""
    lt = api.open(str(SAMPLE / "pipelines_1gpu/fused/trace_rank0.json.gz"))
    r = lt.explain()
    f = _finding(r)
    assert r.bound == "gpu" and f is not None and not f["helps"]
    assert f["allocator_polls_per_step"] == 475 and f["polls_per_step"] == 479
    assert f["allocator_poll_traced_ns_per_step"] / 1e6 == pytest.approx(0.366, abs=0.001)
    assert 0.2 < f["allocator_poll_ns_per_step"] / 1e6 < 0.366  # the profiler's cost out
    assert 0 <= f["saving_fraction"] < 0.001
    assert [s["call_site"] for s in f["allocator_poll_sites"][:2]] == [
        "aten::sqrt > cudaEventQuery", "aten::div > cudaEventQuery"]
    d = explain_dict(r)
    assert not schema.problems(d, schema.Explain)
    assert any(x["id"] == "allocator_polls" for x in d["findings"])
