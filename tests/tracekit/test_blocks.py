"""The block-level contention model (``tracekit.graph.blocks``): kernels' shapes from the launch
configurations, the waits for SMs, and the contention-aware what-if with it, on hand-built
traces worked out by hand (us) and on a real one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.tracegen import US, TraceBuilder, load_built, ns
from tracekit.analyses import explain
from tracekit.graph import blocks, build_graph
from tracekit.graph import whatif as wi
from tracekit.graph.model import NodeKind
from tracekit.phases import default_rules
from tracekit.trace import load

RULES = default_rules()

PROPS = {"id": 0, "name": "Test GPU", "totalGlobalMem": 80 * 2**30, "numSms": 4,
         "maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536,
         "sharedMemPerMultiprocessor": 233472}
"""4 SMs; a block of 128 threads and 32 registers: 16 a SM (by threads and by registers), 64
on the device."""


def holder_trace(tmp_path, *, props=True):
    """k1 (10..70, 384 blocks: 6 waves of 10 us) then k3 (70..80) on the default stream; k2 (10
    us, 64 blocks: one wave) launched between them, which a what-if moves to a stream of its
    own: contention-free it runs 12..22 beside k1."""
    b = TraceBuilder()
    if props:
        b.extra_metadata["deviceProperties"] = [PROPS]
    b.profiler_step(1, 0, 50)
    b.kernel("k1", 10, 60, launched_by=b.runtime("cudaLaunchKernel", 1, 1), args={"grid": [384, 1, 1]})
    b.kernel("k2", 70, 10, launched_by=b.runtime("cudaLaunchKernel", 3, 1), args={"grid": [64, 1, 1]})
    b.kernel("k3", 80, 10, launched_by=b.runtime("cudaLaunchKernel", 5, 1), args={"grid": [64, 1, 1]})
    return load_built(b, tmp_path)


def _kernels(g):
    return {str(g.name[i]): i for i in np.flatnonzero(g.kind == NodeKind.GPU)}


def test_shapes_from_the_launch_configuration(tmp_path):
    g = build_graph(holder_trace(tmp_path), RULES)
    k = _kernels(g)
    assert g.shape.blocks[k["k1"]] == 384 and g.shape.slots[k["k1"]] == 64
    assert g.shape.blocks[k["k2"]] == 64 and g.shape.slots[k["k2"]] == 64
    assert wi.has_shapes(g)
    # registers and shared memory limit the blocks an SM holds: 256 threads of 128 registers
    # (32 K registers a block: 2 an SM), 100 KB of shared memory (2 an SM), 1,024 threads (2)
    assert blocks._resident(256, 128, 0, PROPS) == 2
    assert blocks._resident(128, 32, 100_000, PROPS) == 2
    assert blocks._resident(1024, 16, 0, PROPS) == 2


@pytest.mark.parametrize("honour", [False, True])
def test_a_kernel_waits_for_the_holders_blocks(tmp_path, monkeypatch, honour):
    """k2 moved: contention-free 12..22 beside k1 (10..70). The overlap model charges k1 and k2
    the 10 us they gained (k1 10..80, k2 12..32; k3 80..90). The block-level model: k1's queued
    blocks go first, k2 waits until its last wave is issued (60: 48 us), then runs on the SMs
    its blocks free as they retire over 10 us (half its pace on average: 5 us more): 53 us, more
    than its 10 of overlap (12..75); k1 as the overlap model. With priorities honoured the
    moved stream (a side stream, -1) goes before the default stream (0): k2 only meets one
    wave, 5 us, less than its overlap."""
    monkeypatch.setattr(blocks, "HONOUR_PRIORITIES", honour)
    g = build_graph(holder_trace(tmp_path), RULES)
    k = _kernels(g)
    ch = wi.Change(move=g.name == "k2")
    monkeypatch.setattr(wi, "CONTENTION_MODEL", "overlap")
    over = wi.schedule(g, ch, contention=True)
    assert (over.start[k["k2"]], over.end[k["k2"]]) == (ns(12), ns(32))
    assert over.end[k["k1"]] == ns(80) and over.end[k["k3"]] == ns(90)
    monkeypatch.setattr(wi, "CONTENTION_MODEL", "blocks")
    assert wi.uses_blocks(g)
    sch = wi.schedule(g, ch, contention=True)
    assert sch.end[k["k1"]] == ns(80) and sch.end[k["k3"]] == ns(90)
    assert sch.end[k["k2"]] == (ns(32) if honour else ns(75))


def test_blocks_plus_overlap_charges_both(tmp_path, monkeypatch):
    """``"blocks+overlap"`` (tried, not used): k2 charged its 53-us wait and its 10 us of overlap
    (12..85), where the block-level model charges the longer (12..75): in this hand-worked case
    the sum counts twice the overlap its wait already holds (k2 runs after k1's last wave)."""
    g = build_graph(holder_trace(tmp_path), RULES)
    k = _kernels(g)
    ch = wi.Change(move=g.name == "k2")
    monkeypatch.setattr(wi, "CONTENTION_MODEL", "blocks+overlap")
    assert wi.uses_blocks(g)
    sch = wi.schedule(g, ch, contention=True)
    assert (sch.start[k["k2"]], sch.end[k["k2"]]) == (ns(12), ns(85))
    assert sch.end[k["k1"]] == ns(80)


def test_without_launch_configurations_the_overlap_model(tmp_path, monkeypatch):
    """No ``numSms`` in deviceProperties: no shape, the overlap model's figures."""
    monkeypatch.setattr(wi, "CONTENTION_MODEL", "blocks")
    g = build_graph(holder_trace(tmp_path, props=False), RULES)
    assert not wi.has_shapes(g) and not wi.uses_blocks(g)
    k = _kernels(g)
    sch = wi.schedule(g, wi.Change(move=g.name == "k2"), contention=True)
    assert sch.end[k["k2"]] == ns(32)


def test_a_run_waits_once():
    """Three kernels back to back on lane 0 (0..10, 10..20, 20..30), each with a 15-us wait, then
    one after 40 us idle with 5: the first of the run waits 15, the others nothing more; the one
    after the idle time its own 5."""
    lane = np.zeros(4, np.int64)
    start = np.array([0, 10, 20, 70]) * US
    end = np.array([10, 20, 30, 80]) * US
    wait = np.array([15, 15, 15, 5], float) * US
    got = blocks.carried(wait, lane, np.ones(4, bool), start, end)
    assert got.tolist() == [15 * US, 0, 0, 5 * US]
    # after 30 us idle a 40-us wait still pushes the next by 10: its own 15 adds 5
    got = blocks.carried(np.array([40, 15], float) * US, np.zeros(2, np.int64), np.ones(2, bool),
                         np.array([0, 40]) * US, np.array([10, 50]) * US)
    assert got.tolist() == [40 * US, 5 * US]


def test_a_partial_grid_leaves_sms_free():
    """A one-wave holder with 32 of 64 slots (0..100, 50 us left) leaves half the SMs free: a
    kernel needing a quarter of them runs at its pace; a 10-us one needing them all starts at
    half its pace, faster as the holder's blocks retire (0.5 + t / 200): it has done its work
    at T = 18.32 us (0.5 T + T^2 / 400 = 10), 8.32 us late."""
    shape = blocks.KernelShape(np.array([32, 16, 64]), np.array([64, 64, 64]))
    lane = np.array([0, 1, 1])
    start = np.array([0, 5, 50]) * US
    end = np.array([100, 15, 60]) * US
    w = blocks.waits(lane, np.zeros(2, np.int64), np.array([0, 0]), np.ones(3, bool), shape,
                     start, end)
    assert w[:2].tolist() == [0.0, 0.0]
    assert w[2] == pytest.approx(((-0.5 + 0.35 ** 0.5) * 200 - 10) * US)
    # a collective's 2 blocks of 64 (0..100) beside a 30-us kernel that needs every SM: it
    # runs at 31/32 of its pace, under a microsecond late, not the collective's 50 us left
    shape = blocks.KernelShape(np.array([2, 64]), np.array([64, 64]))
    w = blocks.waits(np.array([0, 1]), np.zeros(2, np.int64), np.array([0, 0]), np.ones(2, bool),
                     shape, np.array([0, 50]) * US, np.array([100, 80]) * US)
    assert w[0] == 0 and 0.5 * US < w[1] < 1.5 * US


REAL = "sample_traces/pipelines_1gpu/multitask/sparse/trace_rank0.json.gz"


def test_real_trace_shapes_and_the_fallback_warning(monkeypatch):
    """The runtime's trace: FBGEMM's table update holds every SM in one wave (528 blocks, 4 an
    SM of the H200's 132); without its launch configurations explain says the contention-aware
    prediction is the overlap model's."""
    trace = load(REAL, progress=False).traces[0]
    g = build_graph(trace, RULES)
    upd = [i for i in np.flatnonzero(g.kernels) if "update_kernel" in str(g.name[i])]
    assert upd and set(g.shape.blocks[upd]) == {528} and set(g.shape.slots[upd]) == {528}
    assert wi.has_shapes(g)
    monkeypatch.setattr(wi, "CONTENTION_MODEL", "blocks")
    cfg = explain.ExplainConfig(generic_findings=False)
    assert blocks.SHAPE_WARNING not in explain.compute(trace, RULES, config=cfg).warnings
    ev = trace.events.copy()
    ev["launch"] = ev["launch"].cat.set_categories([])  # every launch configuration dropped
    stripped = dataclasses.replace(trace, events=ev)
    r = explain.compute(stripped, RULES, config=cfg)
    assert blocks.SHAPE_WARNING in r.warnings
    assert any(f["id"] == "fused_sparse_dist" for f in r.findings)
