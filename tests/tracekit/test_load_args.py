"""``Trace.args``: the extra args of cuda_sync events and collectives, keyed by event row."""

from __future__ import annotations

import json
import random

import pytest

from tests.tracegen import TraceBuilder, ns
from tracekit.trace import load
from tracekit.trace.loader import wait_for_cache_writes

COMMS = {
    "Collective name": "all_to_allv", "In msg nelems": 28, "Out msg nelems": 30, "Group size": 2,
    "dtype": "Long", "In split size": "[14, 14]", "Out split size": "[12, 18]",
    "Process Group Name": "0", "Process Group Description": "default_pg",
    "Process Group Ranks": "[0, 1]", "Rank": 1, "Seq": 7,
}


def _builder() -> TraceBuilder:
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.cpu_op("aten::mm", 1, 2)
    b.cpu_op("record_param_comms", 10, 3, args=COMMS)
    b.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20, 5, stream=17,
             launch_at=11, args=COMMS)
    rec = b.runtime("cudaEventRecord", 12, 1)
    b.kernel("gemm", 13, 4, stream=7, launch_at=12.5)
    b.cuda_sync(14, 0, kind="stream_wait_event", stream=17, wait_stream=7, wait_correlation=rec)
    b.cpu_op("record_param_comms", 30, 1, args={"Collective name": "allreduce",
                                                 "Process Group ID": 3, "In msg nelems": 5})
    b.cpu_op("aten::add", 40, 1)
    b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 41, 2, stream=21, launch_at=40.5)  # no args
    return b, rec


def _shuffled(b: TraceBuilder, path):
    doc = b.to_dict()
    random.Random(3).shuffle(doc["traceEvents"])  # Kineto does not write events in ts order
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("cached", [False, True])
def test_args_rows_point_at_their_events(tmp_path, cached):
    b, rec = _builder()
    p = _shuffled(b, tmp_path / "t.json")
    kw = {"cache_dir": tmp_path / "cache"} if cached else {"use_cache": False}
    t = load(p, **kw).traces[0]
    if cached:  # the second load is answered from the cache entry
        wait_for_cache_writes()
        t = load(p, **kw).traces[0]
    a = t.args
    ev = t.events.iloc[a["event"].to_numpy()]
    got = list(zip(ev["name"].astype(str), ev["ts"]))
    assert got == [
        ("record_param_comms", ns(10)),
        ("Stream Wait Event", ns(14)),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", ns(20)),
        ("record_param_comms", ns(30)),
    ]
    comm = a.iloc[0]
    assert (comm["collective"], comm["group"], comm["group_desc"], comm["group_ranks"]) == (
        "all_to_allv", "0", "default_pg", "[0, 1]")
    assert (comm["in_nelems"], comm["out_nelems"], comm["group_size"], comm["seq"],
            comm["comm_rank"]) == (28, 30, 2, 7, 1)
    assert (comm["in_split"], comm["out_split"], comm["dtype"]) == ("[14, 14]", "[12, 18]", "Long")
    assert a.iloc[2]["collective"] == "all_to_allv" and a.iloc[2]["wait_stream"] == -1
    wait = a.iloc[1]
    assert (wait["wait_stream"], wait["wait_correlation"], wait["collective"]) == (7, rec, "")
    legacy_id = a.iloc[3]  # an older trace's numeric "Process Group ID" names the group
    assert (legacy_id["group"], legacy_id["in_nelems"], legacy_id["out_nelems"]) == ("3", 5, -1)


def test_odd_arg_types_degrade_to_sentinels(tmp_path):
    b, _ = _builder()
    doc = b.to_dict()
    for e in doc["traceEvents"]:
        if e.get("name") == "record_param_comms" and e["ts"] < 1_000_020:
            e["args"].update({"Process Group Ranks": [0, 1], "In msg nelems": "many",
                              "Collective name": None})
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc))
    a = load(p, use_cache=False).traces[0].args
    first = a.iloc[0]
    assert (first["group_ranks"], first["in_nelems"], first["collective"], first["out_nelems"]) == (
        "[0, 1]", -1, "", 30)


def test_a_trace_without_such_events_has_an_empty_args_table(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 10)
    b.kernel("gemm", 1, 2, launch_at=0.5)
    p = b.write(tmp_path / "plain.json")
    t = load(p, use_cache=False).traces[0]
    assert len(t.args) == 0 and "wait_stream" in t.args.columns


def test_thread_names_from_kineto_metadata(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 10)
    b.kernel("gemm", 1, 2, launch_at=0.5)
    doc = b.to_dict()
    pid, tid = doc["traceEvents"][0]["pid"], doc["traceEvents"][0]["tid"]
    meta = [
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": 77, "args": {"name": "thread 77 (pt_autograd_0)"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": 77, "args": {"name": "thread 77 (python3)"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": "main"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": b.device, "tid": 7, "args": {"name": "stream 7 "}},
        {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": "python3"}},
    ]
    doc["traceEvents"] = meta + doc["traceEvents"]
    p = tmp_path / "named.json"
    p.write_text(json.dumps(doc))
    for kw in ({"use_cache": False}, {"cache_dir": tmp_path / "c"}, {"cache_dir": tmp_path / "c"}):
        t = load(p, **kw).traces[0]
        wait_for_cache_writes()
        # the first name of a thread wins; the GPU's stream lanes are not host threads
        assert t.thread_names == {77: "thread 77 (pt_autograd_0)", tid: "main"}
