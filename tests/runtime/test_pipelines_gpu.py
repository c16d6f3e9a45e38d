"""Pipelines on real GPUs: the same numerics as on the CPU with streams, NCCL and the CUDA
kernels, and where the in-place batch copy puts its memory. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch

from runtime.data import DataConfig, SyntheticLoader
from runtime.dist import spawn
from runtime.model import DLRM, DenseOptimizerConfig, ModelConfig, make_dense_optimizer
from runtime.pipelines import PIPELINES
from runtime.pipelines.common import copy_batch_to_gpu, new_stream
from runtime.sharding import shard_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MODEL = ModelConfig(
    num_embeddings=(1000, 3000, 2000, 500), embedding_dim=16, num_dense=5, dense_arch=(64,), over_arch=(128, 64),
    embedding_lr=0.05,
)
STEPS = 8
DATA = DataConfig(num_embeddings=MODEL.num_embeddings, batch_size=64, num_batches=STEPS, num_dense=5, pooling_factor=6, weighted=True, seed=9)
VARIANTS = [
    ("sparse", {}),
    ("sparse", {"inplace_copy_batch_to_gpu": True}),
    ("fused", {"lookup_stream": "data_dist"}),
    ("fused", {"lookup_stream": "new", "lookup_placement": "after_data_dist"}),
    ("fused", {"lookup_stream": "current", "inplace_copy_batch_to_gpu": True}),
    ("fused", {"emb_backward": "separate"}),
    ("fused", {"emb_backward": "separate", "lookup_stream": "new", "lookup_placement": "step_start"}),
    ("semi", {"start_batch": STEPS}),
]


def _run(name: str, kw: dict, process_group, device: torch.device, rank: int = 0, main_priority: int = 0):
    model = DLRM(MODEL, device=device)
    shard_model(model, process_group=process_group, device=device)
    opt = make_dense_optimizer(model, DenseOptimizerConfig(kind="adam", lr=0.01))
    if main_priority:  # as runtime.train does: a higher-priority main stream made current
        main = torch.cuda.Stream(device=device, priority=main_priority)
        main.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(main):
            res = PIPELINES[name](model, opt, SyntheticLoader(DATA, rank=rank), device=device, **kw)
    else:
        res = PIPELINES[name](model, opt, SyntheticLoader(DATA, rank=rank), device=device, **kw)
    torch.cuda.synchronize()
    assert res.steps == STEPS
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _semi_reference(process_group, device, rank, start_batch):
    from tests.runtime.test_pipelines import _semi_sync_reference

    model = DLRM(MODEL, device=device)
    shard_model(model, process_group=process_group, device=device)
    opt = make_dense_optimizer(model, DenseOptimizerConfig(kind="adam", lr=0.01))
    batches = [b.to(device) for b in SyntheticLoader(DATA, rank=rank)]
    _semi_sync_reference(model, opt, batches, start_batch)
    torch.cuda.synchronize()
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _all(rank: int, world: int):
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device())
    pg = dist.group.WORLD if dist.is_initialized() else None
    out = {"base": _run("base", {}, pg, device, rank)}
    for k, (name, kw) in enumerate(VARIANTS):
        out[k] = _run(name, kw, pg, device, rank)
    out["fused_prio"] = _run("fused", {"lookup_stream": "new"}, pg, device, rank, main_priority=-2)
    out["sparse_prio"] = _run("sparse", {}, pg, device, rank, main_priority=-2)
    out["semi"] = _run("semi", {"start_batch": 2}, pg, device, rank)
    out["semi_after_forward"] = _run("semi", {"start_batch": 2, "lookup_placement": "after_forward"}, pg, device, rank,
                                     main_priority=-2)
    out["semi_ref"] = _semi_reference(pg, device, rank, 2)
    return out


def _check(out: dict) -> None:
    def same(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    for k, (name, kw) in enumerate(VARIANTS):
        assert same(out[k], out["base"]), (name, kw)
    assert same(out["fused_prio"], out["base"]) and same(out["sparse_prio"], out["base"])
    assert same(out["semi"], out["semi_ref"]) and same(out["semi_after_forward"], out["semi_ref"])
    assert not same(out["semi"], out["base"])


def test_one_gpu_pipelines_match_base():
    _check(_all(0, 1))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpus_nccl_pipelines_match_base():
    for out in spawn(_all, 2, timeout_s=300, collective_timeout_s=60, backend="nccl"):
        _check(out)


def _splits_read_times(rank: int, world: int):
    """Host seconds of the splits read with ~1 s of GPU work queued behind the splits on the
    same stream, and of the synchronize that follows."""
    import time

    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device())
    model = DLRM(MODEL, device=device)
    shard_model(model, process_group=dist.group.WORLD, device=device)
    arch = model.sparse_arch
    (host,) = SyntheticLoader(DataConfig(**{**DATA.__dict__, "num_batches": 1}), rank=rank)
    kjt = host.sparse.to(device)
    ref = arch(kjt)  # [B, F, D] all three stages in a row
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        splits = arch.start_input_dist(kjt)
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time behind the splits (a lookup, say)
        t0 = time.perf_counter()
        tensors = arch.wait_input_dist_splits(splits)
        read_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    rest_s = time.perf_counter() - t1
    with torch.cuda.stream(side):  # the rest of the input dist and the lookup still work
        emb = arch.compute_and_output_dist(tensors)
    torch.cuda.synchronize()
    return read_s, rest_s, torch.equal(emb, ref)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_splits_read_waits_for_the_splits_only():
    """The host read of the splits (SemiSync issues its stale lookup on the data-dist stream
    before reading the next batch's splits) must not wait for work queued after them."""
    for read_s, rest_s, same in spawn(_splits_read_times, 2, timeout_s=300, collective_timeout_s=60, backend="nccl"):
        assert rest_s > 0.2, rest_s  # the sleep was really queued behind the read
        assert read_s < rest_s / 4, (read_s, rest_s)
        assert same


def test_inplace_copy_puts_the_batch_in_the_main_stream_pool():
    device = torch.device("cuda", torch.cuda.current_device())
    big = DataConfig(num_embeddings=(1000,), batch_size=4096, num_batches=1, pooling_factor=1000, num_dense=4)
    (host,) = SyntheticLoader(big)
    memcpy = new_stream(device, priority=-1)
    main = torch.cuda.current_stream(device).cuda_stream

    def streams_of(batch):
        segs = torch.cuda.memory._snapshot()["segments"]
        ptr = batch.batch.sparse.values.data_ptr()  # an InFlight holding the device Batch
        return [s["stream"] for s in segs if s["address"] <= ptr < s["address"] + s["total_size"]]

    std = copy_batch_to_gpu(host, 0, device=device, memcpy_stream=memcpy, inplace=False)
    inp = copy_batch_to_gpu(host, 1, device=device, memcpy_stream=memcpy, inplace=True)
    torch.cuda.synchronize()
    assert streams_of(std) == [memcpy.cuda_stream]
    assert streams_of(inp) == [main]
    assert torch.equal(std.batch.sparse.values, inp.batch.sparse.values)
    assert torch.equal(inp.batch.sparse.values.cpu(), host.sparse.values)


def test_train_writes_gpu_trace_snapshot_and_memory_metrics(tmp_path):
    import gzip
    import json
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "runtime.train", "--pipeline", "fused", "--device", "cuda", "--memory-snapshot",
        "--tables", "4", "--rows", "5000", "--dim", "32", "--batch-size", "256", "--dense-arch", "64",
        "--over-arch", "128,64", "--warmup-steps", "2", "--steps", "5", "--profile-steps", "2", "--out", str(out),
        # the benchmark's settings: a high-priority main stream, task heads, per-parameter Adam
        "--main-stream-priority", "-2", "--task-heads", "3", "--no-dense-foreach",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["peak_allocated_bytes"] > 0 and m["peak_reserved_bytes"] >= m["peak_allocated_bytes"]
    assert "CUDA events" in m["step_time_source"] and len(m["ranks"][0]["step_ms"]) == 5
    assert m["config"]["main_stream_priority"] == -2 and m["config"]["model"]["task_heads"] == 3
    snap = pickle.loads((out / "trace_rank0_snapshot.pickle").read_bytes())
    assert snap["segments"]
    trace = json.loads(gzip.open(out / "trace_rank0.json.gz").read())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and any(e.get("name") == "[memory]" for e in trace["traceEvents"])
    # the lookup ran on its own stream: kernels on more than one stream
    assert len({e["args"].get("stream") for e in kernels}) >= 2


class _SleepyBackward(torch.autograd.Function):
    """x * 2 whose backward sleeps ~0.1 s on the stream autograd runs it on and, like the TBE's
    fused update, returns no gradient (its ``w`` is a leaf parameter, as the tables are)."""

    @staticmethod
    def forward(ctx, w, x):  # noqa: ANN001
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        torch.cuda._sleep(200_000_000)
        return None, None


def _waits_of_one_backward() -> dict[str, bool]:
    """One backward over a side-stream node (see the test below): which waits the main stream saw."""
    from runtime.pipelines.common import grad_accumulators

    dev = torch.device("cuda")
    main, side = torch.cuda.current_stream(dev), torch.cuda.Stream(dev)
    w = torch.nn.Parameter(torch.zeros(1, device=dev))
    dense = torch.nn.Parameter(torch.ones(8, device=dev))
    held = grad_accumulators(torch.nn.ParameterList([w]))
    with torch.cuda.stream(side):
        emb = _SleepyBackward.apply(w, torch.ones(8, device=dev))  # [8], made on the side stream
    main.wait_stream(side)
    loss = (emb * dense).sum()  # on the main stream
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000_000)  # earlier work on the side stream (the next batch's input dist), ~0.5 s
    prior = torch.cuda.Event()
    prior.record(side)
    loss.backward()
    main_done, side_done = torch.cuda.Event(), torch.cuda.Event()
    main_done.record(main)
    side_done.record(side)
    main_done.synchronize()
    waited = {"earlier side-stream work": prior.query(), "the side stream's backward": side_done.query()}
    side_done.synchronize()
    assert torch.equal(dense.grad, torch.full((8,), 2.0, device=dev)) and len(held) == 1
    return waited


def test_one_autograd_call_leaves_the_main_stream_free():
    """What FusedSparseDist's ``emb_backward="with_dense"`` relies on (gpu/autograd_streams.py
    shows the other ways): with the leaf's gradient accumulator made while the main stream is
    current (``grad_accumulators``), ``loss.backward()`` runs the side stream's node there and
    the main stream waits neither for it nor for earlier work queued on the side stream. Timed
    the second time: the first backward of a process loads its kernels and starts autograd's
    device thread, which can outlast the earlier work."""
    _waits_of_one_backward()
    waited = _waits_of_one_backward()
    assert not any(waited.values()), f"the main stream waited for: {waited}"
