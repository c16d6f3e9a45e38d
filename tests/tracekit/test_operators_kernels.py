"""tracekit.analyses.operators and .kernels on hand-built traces: exact CPU self/total, the GPU
time of what each op launched (its own and its children's), per step, the launching op of each
kernel."""

from __future__ import annotations

import pytest

from tests.tracegen import US, TraceBuilder, inputs, load_built
from tracekit.analyses import kernels, operators
from tracekit.phases import default_rules


def built(tmp_path):
    """Two steps; in each: ``## forward {k} ##`` > aten::linear > aten::addmm (launches gemm, 30
    us) and aten::relu (launches relu, 5 us) beside it; an embedding op with recorded inputs that
    launches a lookup kernel; a second thread with an op of its own (launches copy_k, 7 us)."""
    b = TraceBuilder()
    for k in range(2):
        t0 = 1000.0 * k
        b.profiler_step(k + 1, t0, 900)
        b.annotation(f"## forward {k} ##", t0 + 10, 300)
        b.cpu_op("aten::linear", t0 + 20, 100)
        b.cpu_op("aten::addmm", t0 + 30, 50)
        c = b.runtime("cudaLaunchKernel", t0 + 40, 5)
        b.kernel("gemm", t0 + 100, 30, launched_by=c)
        b.cpu_op("aten::relu", t0 + 150, 40)
        c = b.runtime("cudaLaunchKernel", t0 + 160, 5)
        b.kernel("relu_k", t0 + 200, 5, launched_by=c)
        b.cpu_op("aten::embedding_bag", t0 + 400, 60, args=inputs(([1024, 64], "float"), ([4096], "long int")))
        c = b.runtime("cudaLaunchKernel", t0 + 410, 5)
        b.kernel("lookup_k", t0 + 420, 20, launched_by=c)
        b.cpu_op("aten::copy_", t0 + 500, 30, tid=77)
        c = b.runtime("cudaMemcpyAsync", t0 + 505, 5, tid=77)
        b.kernel("copy_k", t0 + 520, 7, launched_by=c)
    b.kernel("orphan_k", 2500, 3)  # no launch: no op launched it
    return load_built(b, tmp_path)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return built(tmp_path_factory.mktemp("ops"))


def test_operators_cpu_self_total_and_gpu(trace):
    r = operators.compute(trace, default_rules())
    ops = r.ops.set_index("name")
    lin, addmm, relu = ops.loc["aten::linear"], ops.loc["aten::addmm"], ops.loc["aten::relu"]
    assert (lin.calls, lin.cpu_total_ns) == (2, 2 * 100 * US)
    assert lin.cpu_self_ns == 2 * (100 - 50) * US  # addmm nests in linear; relu starts after linear's end
    assert addmm.cpu_self_ns == 2 * 50 * US  # its runtime call is not an op: no child, its time is the op's own
    assert (addmm.gpu_self_ns, addmm.gpu_total_ns) == (2 * 30 * US, 2 * 30 * US)
    assert (lin.gpu_self_ns, lin.gpu_total_ns) == (0, 2 * 30 * US)  # its child's gemm
    assert relu.gpu_total_ns == 2 * 5 * US
    # annotations by a name without their step or batch number: one row over all steps
    fwd = ops.loc["## forward {i} ##"]
    assert fwd.kind == "annotation" and fwd.calls == 2
    assert fwd.gpu_total_ns == 2 * (30 + 5) * US and fwd.activities == 4
    assert fwd.cpu_self_ns == 2 * (300 - 100 - 40) * US
    step = ops.loc["ProfilerStep#{step}"]
    assert step.gpu_total_ns == 2 * (30 + 5 + 20) * US  # copy_k ran from another thread: not the step's child
    # another thread's op: its own tree
    assert ops.loc["aten::copy_"].gpu_total_ns == 2 * 7 * US
    # what no op launched
    assert r.unlaunched_gpu_ns == 3 * US
    assert r.gpu_ns == r.ops["gpu_self_ns"].sum() + r.unlaunched_gpu_ns
    # recorded input shapes where the loader keeps them (embedding ops)
    emb = r.ops[r.ops["name"] == "aten::embedding_bag"].iloc[0]
    assert emb.input_dims == "[[1024,64],[4096]]"
    assert (r.ops[r.ops["name"] != "aten::embedding_bag"]["input_dims"] == "").all()
    # largest GPU total first
    assert r.ops["gpu_total_ns"].is_monotonic_decreasing


def test_operators_per_step(trace):
    r = operators.compute(trace, default_rules())
    assert r.steps == [1, 2]
    per = r.by_step
    for s in (1, 2):
        mine = per[per["step"] == s].set_index("name")
        assert mine.loc["aten::addmm"].calls == 1 and mine.loc["aten::addmm"].gpu_total_ns == 30 * US
        assert mine.loc["ProfilerStep#{step}"].calls == 1
    # every call counted once: the steps add up to the whole (no op here is outside a step)
    whole = r.ops.set_index(["name", "input_dims"])["calls"]
    summed = per.groupby(["name", "input_dims"])["calls"].sum()
    assert summed.reindex(whole.index).tolist() == whole.tolist()


def test_kernels_table(trace):
    r = kernels.compute(trace, default_rules())
    k = r.kernels.set_index("name")
    assert r.gpu_ns == 2 * (30 + 5 + 20 + 7) * US + 3 * US
    g = k.loc["gemm"]
    assert (g.calls, g.total_ns, g.mean_ns, g.min_ns, g.max_ns) == (2, 60 * US, 30 * US, 30 * US, 30 * US)
    assert g.launched_by == "aten::addmm" and g.launchers == 1 and g.unlaunched == 0
    assert g.share == pytest.approx(60 / 127)
    assert k.loc["copy_k"].launched_by == "aten::copy_"
    assert k.loc["lookup_k"].launched_by == "aten::embedding_bag"
    orphan = k.loc["orphan_k"]
    assert orphan.launched_by == "" and orphan.unlaunched == 1 and orphan.launchers == 0
    assert k.loc["gemm"].streams == "0:7"
    assert r.kernels["total_ns"].is_monotonic_decreasing
    per = r.by_step
    assert set(per["step"]) == {1, 2, -1}  # the orphan has no launch: outside the steps
    one = per[(per["step"] == 1)].set_index("name")
    assert one.loc["gemm"].calls == 1 and one["share"].sum() == pytest.approx(1.0)


def test_empty_and_cpu_only(tmp_path):
    b = TraceBuilder(platform="cpu")
    b.profiler_step(1, 0, 100)
    b.cpu_op("aten::add", 10, 20)
    t = load_built(b, tmp_path)
    r = operators.compute(t, default_rules())
    assert r.ops.set_index("name").loc["aten::add"].cpu_self_ns == 20 * US and r.gpu_ns == 0
    k = kernels.compute(t, default_rules())
    assert k.kernels.empty and k.gpu_ns == 0


def _launch(grid, block, regs, smem, occ) -> dict:
    """A kernel's launch configuration as Kineto writes it in its args."""
    return {"grid": grid, "block": block, "registers per thread": regs, "shared memory": smem,
            "est. achieved occupancy %": occ, "blocks per SM": 1.5, "warps per SM": 6.0}


def test_kernels_by_launch_configuration(tmp_path):
    """One kernel name launched with two grids is two rows (``configs`` 2), each with its own
    calls and time; a kernel whose args record no configuration and a memcpy are blank."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 900)
    for i, (grid, dur) in enumerate([([512, 16, 1], 30), ([512, 16, 1], 20), ([4, 1, 1], 5)]):
        c = b.runtime("cudaLaunchKernel", 10 + 20 * i, 5)
        b.kernel("gemm", 100 + 50 * i, dur, launched_by=c, args=_launch(grid, [128, 1, 1], 128, 13056, 25))
    c = b.runtime("cudaLaunchKernel", 80, 5)
    b.kernel("bare_k", 300, 4, launched_by=c,  # no launch configuration in its args
             args={"grid": None, "block": None, "registers per thread": None, "shared memory": None})
    c = b.runtime("cudaLaunchKernel", 90, 5)
    b.kernel("odd_k", 320, 2, launched_by=c, args={"grid": "512", "block": [64, 1, 1], "registers per thread": True,
                                                   "est. achieved occupancy %": 12.5})
    c = b.runtime("cudaMemcpyAsync", 95, 5)
    b.memcpy(400, 6, launched_by=c)
    t = load_built(b, tmp_path)
    r = kernels.compute(t, default_rules())
    k = r.kernels
    gemm = k[k["name"] == "gemm"].set_index("grid")
    assert sorted(gemm.index) == ["[4, 1, 1]", "[512, 16, 1]"] and (gemm["configs"] == 2).all()
    big = gemm.loc["[512, 16, 1]"]
    assert (big.calls, big.total_ns, big.max_ns) == (2, 50 * US, 30 * US)
    assert (big.block, big.registers, big.shared_memory, big.occupancy) == ("[128, 1, 1]", 128, 13056, 25)
    assert gemm.loc["[4, 1, 1]"].calls == 1 and gemm.loc["[4, 1, 1]"].total_ns == 5 * US
    bare = k.set_index("name").loc["bare_k"]
    assert bare.grid == "" and bare.block == "" and bare.configs == 1
    assert all(v != v for v in (bare.registers, bare.shared_memory, bare.occupancy))  # NaN: not recorded
    odd = k.set_index("name").loc["odd_k"]  # values of other types read as not recorded
    assert (odd.grid, odd.block, odd.occupancy) == ("", "[64, 1, 1]", 12.5) and odd.registers != odd.registers
    copy = k[k["kind"] == "memcpy"].iloc[0]
    assert copy.grid == "" and copy.registers != copy.registers
    assert k["calls"].sum() == 6 and len(k) == 5
    per = r.by_step[r.by_step["name"] == "gemm"]
    assert sorted(per["grid"]) == ["[4, 1, 1]", "[512, 16, 1]"] and (per["step"] == 1).all()
    # the loader's column: each kernel's configuration as compact JSON text, NaN elsewhere
    launch = t.events["launch"]
    assert launch.notna().sum() == 4
    assert '{"grid":[512,16,1],"block":[128,1,1],"registers":128,"shared_memory":13056,"occupancy":25}' in set(launch.dropna())


def test_kernels_of_a_trace_without_launch_configurations(tmp_path):
    """A trace whose kernels' args record no configuration (older Kineto): the columns are
    there, blank, one row per name."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    none = {"grid": None, "block": None, "registers per thread": None, "shared memory": None}
    b.kernel("a_k", 10, 5, launch_at=2, args=none)
    b.kernel("a_k", 20, 5, launch_at=4, args=none)
    k = kernels.compute(load_built(b, tmp_path), default_rules()).kernels
    assert len(k) == 1 and k.iloc[0].calls == 2 and k.iloc[0].grid == "" and k.iloc[0].block == ""
    assert k[["registers", "shared_memory", "occupancy"]].isna().all().all() and k.iloc[0].configs == 1


def test_kernels_of_the_fused_pipeline_trace():
    """The runtime's FusedSparseDist trace (H200): each kernel's calls and time per launch
    configuration as the file's own args count them (read here with ``json``)."""
    import gzip
    import json
    from collections import Counter

    from tests.conftest import SAMPLE_TRACES
    from tracekit.trace import load

    path = SAMPLE_TRACES / "pipelines_1gpu" / "fused" / "trace_rank0.json.gz"
    calls: Counter = Counter()
    for e in json.load(gzip.open(path))["traceEvents"]:
        if e.get("cat") == "kernel":
            a = e["args"]
            calls[(e["name"], str(a["grid"]), str(a["block"]), a["registers per thread"], a["shared memory"],
                   a["est. achieved occupancy %"])] += 1
    (t,) = load(str(path)).traces
    k = kernels.compute(t, default_rules()).kernels
    k = k[k["kind"] == "kernel"]
    got = Counter({(r.name, r.grid, r.block, int(r.registers), int(r.shared_memory), int(r.occupancy)): r.calls
                   for r in k.itertuples(index=False)})
    assert got == calls and len(calls) == 147 and sum(calls.values()) == 3988
    several = k[k["configs"] > 1]["name"].nunique()
    assert several == 19  # of its 69 kernel names, 19 are launched with more than one configuration
    gemm = k.iloc[0]
    assert (gemm.grid, gemm.block, gemm.registers, gemm.shared_memory) == ("[132, 1, 1]", "[384, 1, 1]", 168, 231424)
