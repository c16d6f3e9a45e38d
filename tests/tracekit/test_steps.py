"""Step time: CPU/GPU spans per step and percentiles, on hand-built traces."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLE_TRACES
from tests.tracegen import US, TraceBuilder, load_built, ns
from tracekit.analyses import steps
from tracekit.phases import default_rules

RULES = default_rules()


def test_profiler_steps(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.profiler_step(2, 100, 150)
    b.kernel("a", 20, 30, launch_at=10)
    b.kernel("b", 70, 60, launch_at=60)  # runs into step 2's CPU time, still step 1's
    b.kernel("c", 140, 20, launch_at=110, stream=13)
    b.kernel("d", 240, 60, launch_at=200)
    b.kernel("e", 400, 5)  # not launched inside any step: ignored
    r = steps.compute(load_built(b, tmp_path), default_rules())
    assert r.source == "ProfilerStep" and r.boundary is None
    t = r.steps
    assert t["step"].tolist() == [1, 2]
    assert t["cpu_start"].tolist() == [ns(0), ns(100)]
    assert t["cpu_ns"].tolist() == [100 * US, 150 * US]
    assert t["gpu_start"].tolist() == [ns(20), ns(140)]
    assert t["gpu_end"].tolist() == [ns(130), ns(300)]
    assert t["gpu_ns"].tolist() == [110 * US, 160 * US]
    assert t["activities"].tolist() == [2, 2]
    assert r.cpu_p50_ns == 125 * US and r.cpu_p90_ns == 145 * US
    assert r.gpu_p50_ns == 135 * US and r.gpu_p90_ns == 155 * US


def test_step_without_gpu_work(tmp_path):
    b = TraceBuilder()
    b.profiler_step(7, 0, 100)
    b.profiler_step(8, 100, 50)
    b.kernel("a", 20, 10, launch_at=10)
    r = steps.compute(load_built(b, tmp_path), default_rules())
    assert r.steps["gpu_ns"].tolist() == [10 * US, -1]
    assert r.steps["activities"].tolist() == [1, 0]
    assert r.gpu_p50_ns == 10 * US == r.gpu_p90_ns


def test_inferred_from_optimizer_boundaries(tmp_path):
    b = TraceBuilder()
    for i, (t0, d) in enumerate([(50, 10), (150, 20), (260, 10)]):
        b.annotation(f"## optimizer {i} ##", t0, d)
        b.annotation("Optimizer.step#SGD.step", t0 + 1, d - 2)  # nested: same boundary
    b.kernel("k", 180, 10, launch_at=175)  # launched in step 2 = [170, 270)
    r = steps.compute(load_built(b, tmp_path), default_rules())
    assert r.source == "optimizer boundaries"
    assert r.boundary == "## optimizer # ##"
    assert r.steps["step"].tolist() == [1, 2]
    assert r.steps["cpu_start"].tolist() == [ns(60), ns(170)]
    assert r.steps["cpu_ns"].tolist() == [110 * US, 100 * US]
    assert r.steps["gpu_ns"].tolist() == [-1, 10 * US]


def test_inferred_from_torch_optimizer_only(tmp_path):
    b = TraceBuilder()
    for t0 in (0, 100, 300, 400):
        b.annotation("Optimizer.step#Adam.step", t0, 10)
    r = steps.compute(load_built(b, tmp_path), default_rules())
    assert r.boundary == "Optimizer.step#Adam.step"
    assert r.steps["cpu_ns"].tolist() == [100 * US, 200 * US, 100 * US]
    assert r.cpu_p50_ns == 100 * US


def test_no_steps(tmp_path):
    b = TraceBuilder()
    b.cpu_op("aten::add", 0, 10)
    r = steps.compute(load_built(b, tmp_path), default_rules())
    assert r.source == "none" and r.steps.empty
    assert r.cpu_p90_ns is None and r.gpu_p90_ns is None


def test_legacy_schema(tmp_path):
    """2021 traces: ProfilerStep is an Operator, tids are strings, times integer us."""
    from tracekit.analyses import syncs

    b = TraceBuilder(schema="legacy2021")
    b.profiler_step(5, 0, 100)
    b.profiler_step(6, 100, 100)
    b.cpu_op("aten::copy_", 10, 20)
    c = b.runtime("cudaMemcpyAsync", 12, 8)
    b.memcpy(15, 4, direction="HtoD", src="Pageable", launched_by=c)
    b.runtime("cudaStreamSynchronize", 21, 5)
    b.kernel("k", 120, 30, launch_at=110)
    trace = load_built(b, tmp_path)
    assert trace.schema == "legacy2021"
    r = steps.compute(trace, default_rules())
    assert r.steps["step"].tolist() == [5, 6]
    assert r.steps["gpu_ns"].tolist() == [4 * US, 30 * US]
    y = syncs.compute(trace, default_rules())
    assert y.stalls["call_site"].tolist() == ["aten::copy_ > cudaMemcpyAsync",
                                              "aten::copy_ > cudaStreamSynchronize"]
    assert y.stalls["step"].tolist() == [5, 5]
    # the memcpy ran [15, 19): after the call (ends 20) and the sync (ends 26) the GPU waits for 120
    assert y.stalls["idle_after_ns"].tolist() == [100.0 * US, 94.0 * US]


# ---- the step time: one definition (issue 24 item 3) --------------------------------------------

def test_step_time_is_the_period_the_gpu_sets_when_the_host_runs_ahead(tmp_path):
    """The host enqueues three steps in 30 us (10 us annotations) and the GPU runs each step's
    100-us kernel back to back from 5 us: the steps' spans are the host's enqueue (10 us); the
    step time is the GPU's period (100 us), the first step from its annotation's start."""
    b = TraceBuilder()
    for i in range(3):
        b.profiler_step(i + 1, 10 * i, 10)
        b.kernel(f"k{i}", 5 + 100 * i, 100, launched_by=b.runtime("cudaLaunchKernel", 10 * i + 2, 1))
    r = steps.compute(load_built(b, tmp_path), RULES)
    t = r.steps
    assert t["cpu_ns"].tolist() == [10 * US] * 3
    assert t["step_end"].tolist() == [ns(105), ns(205), ns(305)]
    assert t["step_ns"].tolist() == [105 * US, 100 * US, 100 * US]
    assert r.p50_ns == 100 * US and r.p90_ns == 100 * US  # all steps but the first


def test_step_time_is_the_span_when_the_host_waits_each_step(tmp_path):
    """Each step synchronizes on its kernel before it ends: the step time is the annotation."""
    b = TraceBuilder()
    for i in range(3):
        t0 = 200 * i
        b.profiler_step(i + 1, t0, 150)
        b.kernel(f"k{i}", t0 + 10, 100, launched_by=b.runtime("cudaLaunchKernel", t0 + 2, 1))
        b.runtime("cudaStreamSynchronize", t0 + 5, 110)
    r = steps.compute(load_built(b, tmp_path), RULES)
    assert r.steps["step_end"].tolist() == [ns(150), ns(350), ns(550)]
    assert r.steps["step_ns"].tolist()[1:] == [200 * US, 200 * US]


@pytest.mark.parametrize("path", sorted(str(p) for p in SAMPLE_TRACES.glob("**/*.json.gz")))
def test_one_step_definition_steps_and_explain(path):
    """The steps section's windows are explain's, on every committed trace."""
    from tracekit.graph import build_graph
    from tracekit.graph import critical as cr
    from tracekit.trace import load

    for t in load(path).traces:
        a = steps.compute(t, RULES).steps.rename(columns={"step_start": "start",
                                                          "step_end": "end"})
        a = a.set_index("step")[["start", "end"]]
        b = cr.step_windows(build_graph(t, RULES)).set_index("step")[["start", "end"]]
        assert len(a) == len(b) and a.reindex(b.index).equals(b)


def test_p50_p90_is_numpys_percentile():
    import numpy as np

    from tracekit.steps import _p50_p90

    rng = np.random.default_rng(29)
    cases = [np.array([v], np.int64) for v in (0, -1, 2**63 - 1, -2**63)]
    for n in range(1, 30):  # small values, large ones, and differences that wrap in int64
        cases += [rng.integers(-10, 10, n), rng.integers(0, 10**12, n),
                  rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)]
    cases += [np.array([1.5, 2.5, float("nan")]), np.array([3, 1], np.int32)]  # numpy's own way
    with np.errstate(over="ignore", invalid="ignore"):
        for x in cases:
            want = np.array(np.percentile(x, [50, 90]).tolist())
            assert np.array(_p50_p90(x)).tobytes() == want.tobytes(), x
    assert _p50_p90(np.zeros(0, np.int64)) == (None, None)
