"""``tracekit.analyses.collectives``: one rank's communication kernels."""

from __future__ import annotations

from tests.conftest import SAMPLE_TRACES
from tests.tracegen import TraceBuilder, load_built, ns
from tracekit.analyses import collectives
from tracekit.phases import default_rules
from tracekit.trace import load

KERNEL_ARGS = {
    "Collective name": "all_to_allv", "In msg nelems": 28, "Out msg nelems": 30, "Group size": 2,
    "dtype": "Long", "In split size": "[14, 14]", "Out split size": "[12, 18]",
    "Process Group Name": "0", "Process Group Description": "default_pg",
    "Process Group Ranks": "[0, 1]",
}


def _trace(tmp_path):
    b = TraceBuilder(rank=1, world_size=2)
    b.profiler_step(3, 0, 100)
    # the op that launched it carries the sequence number, the kernel does not
    b.cpu_op("record_param_comms", 10, 3, args={**KERNEL_ARGS, "Seq": 7, "Rank": 1})
    b.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20, 5, stream=17,
             launch_at=11, args=KERNEL_ARGS)
    b.kernel("gemm", 13, 4, stream=7, launch_at=12.5)
    # an older trace's kernel without metadata, launched after the last step
    b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 141, 2, stream=21, launch_at=140.5)
    return load_built(b, tmp_path)


def test_kernels_with_and_without_metadata(tmp_path):
    c = collectives.compute(_trace(tmp_path), default_rules())
    rows = c.kernels.to_dict(orient="records")
    assert rows == [
        {"group": "0", "collective": "all_to_allv", "seq": 7, "index": 0, "step": 3,
         "stream": 17, "ts": ns(20), "end": ns(25), "in_bytes": 28 * 8, "out_bytes": 30 * 8},
        {"group": "stream 21", "collective": "allreduce", "seq": -1, "index": 0, "step": -1,
         "stream": 21, "ts": ns(141), "end": ns(143), "in_bytes": -1, "out_bytes": -1},
    ]
    assert c.source == collectives.SOURCE_MIXED and c.count == 2 and c.kernel_ns == 7000
    assert c.groups == [{"group": "0", "desc": "default_pg", "size": 2, "ranks": [0, 1]},
                        {"group": "stream 21", "desc": "", "size": None, "ranks": None}]
    assert c.by_type.to_dict(orient="records") == [
        {"collective": "all_to_allv", "count": 1, "kernel_ns": 5000, "in_bytes": 224,
         "out_bytes": 240},
        {"collective": "allreduce", "count": 1, "kernel_ns": 2000, "in_bytes": 0, "out_bytes": 0},
    ]


def test_no_collectives(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 13, 4, stream=7, launch_at=12.5)
    c = collectives.compute(load_built(b, tmp_path), default_rules())
    assert c.count == 0 and c.source == collectives.SOURCE_NONE and c.kernels.empty


def test_parse_int_list():
    assert collectives.parse_int_list("[0, 1, 2]") == [0, 1, 2]
    assert collectives.parse_int_list("[]") == []
    assert collectives.parse_int_list("[0, 1, ...]") is None
    assert collectives.parse_int_list("") is None


def test_runtime_trace_on_two_gpus():
    """Our runtime's trace (torch 2.11, NCCL 2.28): every NCCL kernel carries its metadata."""
    t = load(SAMPLE_TRACES / "pipelines_2gpu" / "sparse" / "trace_rank0.json.gz",
             use_cache=False).traces[0]
    c = collectives.compute(t, default_rules())
    assert c.source == collectives.SOURCE_ARGS
    counts = dict(zip(c.by_type["collective"], c.by_type["count"]))
    assert counts == {"all_to_allv": 10, "allreduce": 14}
    assert set(c.kernels["step"]) == {8, 9}  # the 2026-11-27 run's two profiled steps
    assert [g["group"] for g in c.groups] == ["0", "1"]
    # the input dist's first all-to-all: 28 int64 indices each way
    first = c.kernels.iloc[0]
    assert (first["collective"], first["in_bytes"], first["out_bytes"]) == ("all_to_allv", 224, 224)


def test_public_trace_without_metadata(public_traces):
    """HTA's sampled 2021-era trace: NCCL kernels without args fall back to stream, and the
    collective the launching op names (every kernel is a SendRecv; the ops say all-to-all,
    all-reduce, all-gather)."""
    t = load(public_traces / "hta_sampled_rank0.json.gz", use_cache=False).traces[0]
    c = collectives.compute(t, default_rules())
    assert c.source == collectives.SOURCE_NAMES
    per_group = c.kernels.groupby("group").size().to_dict()
    assert per_group == {"stream 84": 8, "stream 203": 2}
    assert set(c.kernels["collective"]) == {
        "all_to_all", "all_reduce", "all_gather_base"}
    assert c.kernels.groupby("group")["collective"].agg(lambda x: sorted(set(x))).to_dict() == {
        "stream 84": ["all_reduce", "all_to_all"], "stream 203": ["all_gather_base"]}
