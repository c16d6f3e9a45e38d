"""The job's FusedSparseDist prediction warns where the ranks' hosts blocked on a full launch
queue (``tracekit.graph.fixes.launch_queue_stall_ns``, ``tracekit.ranks.whatif.queue_stall_warning``):
on the released 2-GPU pairs with such stalls the measured saving was above the prediction."""

from __future__ import annotations

import numpy as np

from tests.tracegen import US, TraceBuilder, load_built
from tests.tracekit.ranks.jobhelp import waiting_job
from tracekit.graph import build_graph
from tracekit.graph import critical as cr
from tracekit.graph.fixes import launch_queue_stall_ns
from tracekit.phases import default_rules
from tracekit.ranks import whatif

RULES = default_rules()


def _blocked_trace(tmp_path, *, blocked_in_step: int):
    """Two steps of 200 us; four short kernels launched at the step's start, then a launch that
    held Kineto's 'Command Buffer Full' for 68 us (it waited 70 us for a kernel three launches
    back, as ``test_graph.test_full_launch_queue``), in step ``blocked_in_step``."""
    b = TraceBuilder()
    for step in (1, 2):
        h = 200.0 * (step - 1)
        b.profiler_step(step, h, 200)
        for i, (t, d) in enumerate([(10, 10), (20, 80), (100, 10), (110, 10)]):
            b.kernel(f"k{step}_{i}", h + t, d, launched_by=b.runtime("cudaLaunchKernel", h + 1 + i, 0.5))
        if step == blocked_in_step:
            blocked = b.runtime("cudaLaunchKernel", h + 30, 71)  # returns at 101: k1 ended at 100
            b.overhead("Command Buffer Full", h + 31, 68)
            b.kernel(f"k{step}_4", h + 120, 10, launched_by=blocked)
        b.runtime("cudaLaunchKernel", h + 150, 1)
    return build_graph(load_built(b, tmp_path), RULES)


def test_the_stall_is_the_blocked_launches_wait_in_the_counted_steps(tmp_path):
    g = _blocked_trace(tmp_path / "a", blocked_in_step=2)
    assert launch_queue_stall_ns(g, cr.step_windows(g)) == 70 * US  # one counted step: step 2
    # the first step is not counted (explain's steps: all but the first)
    g1 = _blocked_trace(tmp_path / "b", blocked_in_step=1)
    assert launch_queue_stall_ns(g1, cr.step_windows(g1)) == 0.0
    assert launch_queue_stall_ns(g1, cr.step_windows(g1).iloc[:0]) == 0.0


def test_the_warning_needs_the_fused_fix_two_ranks_and_a_stall_of_a_ms():
    stalled = {0: {"queue_stall_ns": 5.4e6}, 1: {"queue_stall_ns": 0.2e6}}
    w = whatif.queue_stall_warning("fused_sparse_dist", stalled)
    assert w is not None and "rank 0 5.4 ms" in w and "rank 1" not in w and "under-predicted" in w
    assert whatif.queue_stall_warning("async_delta_copy", stalled) is None
    assert whatif.queue_stall_warning("fused_sparse_dist", {0: stalled[0]}) is None  # one rank: no job
    below = {0: {"queue_stall_ns": 0.9e6}, 1: {}}
    assert whatif.queue_stall_warning("fused_sparse_dist", below) is None


def test_a_jobs_fix_row_carries_the_warning(tmp_path, monkeypatch):
    # the skeletons of the fix's replay carry each rank's stall (as traced), with_fix warns: the
    # hand-made job's ranks launch ahead without blocking, so its stall is made 2 ms here
    from bench.common.joined import joined_fix
    from tracekit.graph import fixes

    waiting_job(tmp_path)
    quiet = joined_fix(str(tmp_path), "fused_sparse_dist")
    assert quiet is not None and "launch queue" not in (quiet["warning"] or "")
    monkeypatch.setattr(fixes, "launch_queue_stall_ns", lambda g, w: 2.0e6)
    got = joined_fix(str(tmp_path), "fused_sparse_dist")
    assert got is not None and "full launch queue" in got["warning"]
    assert "rank 0 2.0 ms, rank 1 2.0 ms" in got["warning"]
    assert np.isclose(got["saving_ms"], quiet["saving_ms"])  # a warning, the prediction unchanged
