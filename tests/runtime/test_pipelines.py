"""Pipelines: numerics against Base on 2 gloo ranks, end of data, labels, errors without hangs."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from runtime.data import DataConfig, SyntheticLoader
from runtime.dist import spawn
from runtime.model import DLRM, DenseOptimizerConfig, ModelConfig, make_dense_optimizer
from runtime.pipelines import PIPELINES
from runtime.sharding import shard_model


pytestmark = pytest.mark.usefixtures("one_intraop_thread")  # tiny CPU ops (conftest)

MODEL = ModelConfig(
    num_embeddings=(100, 300, 200, 50), embedding_dim=4, num_dense=3, dense_arch=(8,), over_arch=(16, 8),
    embedding_lr=0.1, embedding_backend="reference", task_heads=2,  # heads: a third DDP module
)
STEPS = 6
DATA = DataConfig(num_embeddings=MODEL.num_embeddings, batch_size=8, num_batches=STEPS, num_dense=3, pooling_factor=3, weighted=True, seed=4)

# (pipeline, options): every variant the numerics must hold for
VARIANTS = [
    ("base", {}),
    ("base", {"inplace_copy_batch_to_gpu": True}),
    ("sparse", {}),
    ("sparse", {"inplace_copy_batch_to_gpu": True}),
    ("fused", {}),
    ("fused", {"lookup_placement": "step_start"}),
    ("fused", {"lookup_placement": "after_data_dist", "inplace_copy_batch_to_gpu": True}),
    ("fused", {"lookup_stream": "current"}),
    ("fused", {"emb_backward": "separate"}),
    ("fused", {"emb_backward": "separate", "lookup_placement": "step_start", "lookup_stream": "current"}),
    ("semi", {"start_batch": STEPS}),  # never stale: must equal base
    ("semi", {"start_batch": 2}),
    ("semi", {"start_batch": 2, "inplace_copy_batch_to_gpu": True}),
    ("semi", {"start_batch": 2, "lookup_placement": "after_forward"}),  # TorchRec's placement: same numerics
]


def _build(process_group):
    model = DLRM(MODEL)
    shard_model(model, process_group=process_group, device="cpu")
    return model, make_dense_optimizer(model, DenseOptimizerConfig(kind="adam", lr=0.01))


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _semi_sync_reference(model, opt, batches, start_batch: int) -> None:
    """The plain loop SemiSync must equal: batch i+1 looked up before batch i's backward
    (from ``start_batch`` on), after it before that."""
    batches = list(batches)
    emb = model.sparse_arch(batches[0].sparse) if batches else None
    for i, batch in enumerate(batches):
        leaf = emb.detach().requires_grad_()
        loss, _ = model.dense_forward(batch, leaf)
        nxt = None
        if i >= start_batch and i + 1 < len(batches):
            nxt = model.sparse_arch(batches[i + 1].sparse)  # stale: tables without batch i's update
        loss.backward()
        torch.autograd.backward([emb], [leaf.grad])
        opt.step()
        opt.zero_grad()
        if i < start_batch and i + 1 < len(batches):
            nxt = model.sparse_arch(batches[i + 1].sparse)
        emb = nxt


def _all_variants(rank: int, world: int):
    import torch.distributed as dist

    out = {}
    for k, (name, kw) in enumerate(VARIANTS):
        model, opt = _build(dist.group.WORLD)
        res = PIPELINES[name](model, opt, SyntheticLoader(DATA, rank=rank), device="cpu", **kw)
        out[k] = (res.steps, _params(model), [l.item() for l in res.losses])
    model, opt = _build(dist.group.WORLD)
    _semi_sync_reference(model, opt, SyntheticLoader(DATA, rank=rank), start_batch=2)
    out["semi_ref"] = _params(model)
    return out


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_numerics_on_two_ranks():
    per_rank = spawn(_all_variants, 2, timeout_s=150)
    for rank, out in enumerate(per_rank):
        base_steps, base, base_losses = out[0]  # VARIANTS[0] is plain Base
        assert base_steps == STEPS
        for k, (name, kw) in enumerate(VARIANTS):
            steps, params, losses = out[k]
            assert steps == STEPS, (name, kw)
            if name == "semi" and kw["start_batch"] < STEPS:
                # bit-identical to the plain stale loop, and really different from Base
                assert _same(params, out["semi_ref"]), (rank, name, kw)
                assert not _same(params, base), (rank, name, kw)
                assert losses[:3] == base_losses[:3]  # exact until start_batch: losses of 0..2 agree
            else:
                assert _same(params, base), (rank, name, kw)
                assert losses == base_losses
    # the two ranks hold different tables and the same (data-parallel) dense parameters
    p0, p1 = per_rank[0][0][1], per_rank[1][0][1]
    dense = [k for k in p0 if "arch.module" in k]
    assert dense and all(torch.equal(p0[k], p1[k]) for k in dense)
    assert not torch.equal(p0["sparse_arch.local.embedding.weights"][:10], p1["sparse_arch.local.embedding.weights"][:10])


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_every_batch_trained_once_then_return(name, n):
    data = DataConfig(**{**DATA.__dict__, "num_batches": n})
    model, opt = _build(None)
    seen = []
    res = PIPELINES[name](model, opt, SyntheticLoader(data), device="cpu", on_step=seen.append)
    assert res.steps == n and len(res.losses) == n and seen == list(range(n))
    base_model, base_opt = _build(None)
    base = PIPELINES["base"](base_model, base_opt, SyntheticLoader(data), device="cpu")
    if name != "semi":
        assert _same(_params(model), _params(base_model))
        assert [l.item() for l in res.losses] == [l.item() for l in base.losses]


EXPECTED_LABELS = {
    "base": ["copy_batch_to_gpu", "start_sparse_data_dist", "wait_sparse_data_dist", "forward", "backward", "optimizer"],
    "sparse": ["copy_batch_to_gpu", "start_sparse_data_dist", "wait_sparse_data_dist", "forward", "backward", "optimizer"],
    "fused": ["copy_batch_to_gpu", "start_sparse_data_dist", "wait_sparse_data_dist", "start_embedding_lookup", "forward", "backward", "optimizer"],
    "semi": ["copy_batch_to_gpu", "start_sparse_data_dist", "wait_sparse_data_dist", "start_embedding_lookup", "forward", "backward", "emb_backward", "optimizer"],
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("inplace", [False, True])
def test_stage_labels(name, inplace):
    n = 3
    data = DataConfig(**{**DATA.__dict__, "num_batches": n})
    model, opt = _build(None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        PIPELINES[name](model, opt, SyntheticLoader(data), device="cpu", inplace_copy_batch_to_gpu=inplace)
    names = {e.name for e in prof.events()}
    labels = [("inplace_copy_batch_to_gpu" if (s == "copy_batch_to_gpu" and inplace) else s) for s in EXPECTED_LABELS[name]]
    for label in labels:
        for i in range(n):
            assert f"## {label} {i} ##" in names, f"## {label} {i} ##"
    assert "## zero_grad ##" in names
    other_copy = "copy_batch_to_gpu" if inplace else "inplace_copy_batch_to_gpu"
    assert not any(other_copy in s and s.startswith("## " + other_copy) for s in names)


@pytest.mark.parametrize("placement", ["before_optimizer", "step_start", "after_data_dist"])
def test_fused_lookup_placement_host_order(placement):
    """Where the host issues batch i+1's lookup: before step i's optimizer (right behind the
    embedding backward), or in step i+1, before or after batch i+2's data dist."""
    n = 4
    data = DataConfig(**{**DATA.__dict__, "num_batches": n})
    model, opt = _build(None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        PIPELINES["fused"](model, opt, SyntheticLoader(data), device="cpu", lookup_placement=placement,
                           emb_backward="separate")
    start = {e.name: e.time_range.start for e in prof.events() if e.name.startswith("## ")}
    for i in range(n - 1):
        lookup = start[f"## start_embedding_lookup {i + 1} ##"]
        assert start[f"## emb_backward {i} ##"] < lookup
        before_opt = lookup < start[f"## optimizer {i} ##"]
        assert before_opt == (placement == "before_optimizer"), (placement, i)
        if i + 3 < n + 1 and f"## start_sparse_data_dist {i + 2} ##" in start:
            before_dist = lookup < start[f"## start_sparse_data_dist {i + 2} ##"]
            assert before_dist == (placement != "after_data_dist"), (placement, i)
    with pytest.raises(ValueError, match="lookup_placement"):
        PIPELINES["fused"](model, opt, SyntheticLoader(data), device="cpu", lookup_placement="later")


@pytest.mark.parametrize("emb_backward", ["with_dense", "separate"])
def test_fused_emb_backward_calls(emb_backward):
    """``with_dense`` (default): the embedding backward runs inside ``## backward i ##`` (one
    autograd call, no ``## emb_backward i ##``); ``separate``: in ``## emb_backward i ##`` after it.
    Either way once per step, before batch i+1's lookup and step i's optimizer."""
    n = 3
    data = DataConfig(**{**DATA.__dict__, "num_batches": n})
    model, opt = _build(None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        PIPELINES["fused"](model, opt, SyntheticLoader(data), device="cpu", emb_backward=emb_backward)
    events = [e for e in prof.events() if e.name.startswith("## ")]
    names = {e.name for e in events}
    assert any(s.startswith("## emb_backward") for s in names) == (emb_backward == "separate")
    span = {e.name: e.time_range for e in events}
    tbe = [e.time_range.start for e in prof.events() if e.name == "_TBEFunctionBackward"]
    assert len(tbe) == n
    for i in range(n):
        bwd = span[f"## {'backward' if emb_backward == 'with_dense' else 'emb_backward'} {i} ##"]
        assert sum(bwd.start <= t <= bwd.end for t in tbe) == 1, i
        if i + 1 < n:
            assert bwd.end <= span[f"## start_embedding_lookup {i + 1} ##"].start < span[f"## optimizer {i} ##"].start
    with pytest.raises(ValueError, match="emb_backward"):
        PIPELINES["fused"](model, opt, SyntheticLoader(data), device="cpu", emb_backward="later")


@pytest.mark.parametrize("placement", ["after_forward", "after_backward"])
def test_semi_lookup_placement_host_order(placement):
    """SemiSync issues batch i+1's stale lookup after batch i's forward, or after its backward;
    either way before batch i's embedding backward (the tables without batch i's update)."""
    n = 4
    data = DataConfig(**{**DATA.__dict__, "num_batches": n})
    model, opt = _build(None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        PIPELINES["semi"](model, opt, SyntheticLoader(data), device="cpu", lookup_placement=placement)
    start = {e.name: e.time_range.start for e in prof.events() if e.name.startswith("## ")}
    for i in range(n - 1):
        lookup = start[f"## start_embedding_lookup {i + 1} ##"]
        assert start[f"## forward {i} ##"] < lookup < start[f"## emb_backward {i} ##"]
        assert (lookup < start[f"## backward {i} ##"]) == (placement == "after_forward"), (placement, i)
    with pytest.raises(ValueError, match="lookup_placement"):
        PIPELINES["semi"](model, opt, SyntheticLoader(data), device="cpu", lookup_placement="later")


class _Boom(RuntimeError):
    pass


def _failing_loader(data: DataConfig, rank: int, fail_at: int):
    for i, b in enumerate(SyntheticLoader(data, rank=rank)):
        if i == fail_at:
            raise _Boom(f"injected loader failure at batch {i}")
        yield b


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_errors_propagate_single_rank(name):
    model, opt = _build(None)
    with pytest.raises(_Boom, match="batch 3"):
        PIPELINES[name](model, opt, _failing_loader(DATA, 0, 3), device="cpu")
    # a failing stage (the dense forward of step 2) too
    model, opt = _build(None)
    calls = {"n": 0}
    orig = model.dense_forward

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise _Boom("injected forward failure")
        return orig(*a, **k)

    model.dense_forward = flaky
    with pytest.raises(_Boom, match="forward"):
        PIPELINES[name](model, opt, SyntheticLoader(DATA), device="cpu")


def _one_rank_fails(rank: int, world: int, name: str):
    import torch.distributed as dist

    model, opt = _build(dist.group.WORLD)
    batches = _failing_loader(DATA, rank, 2) if rank == 1 else SyntheticLoader(DATA, rank=rank)
    try:
        PIPELINES[name](model, opt, batches, device="cpu")
    except Exception as e:  # noqa: BLE001 - reported to the test
        return f"{type(e).__name__}: {e}"
    return "finished"


@pytest.mark.slow
def test_one_rank_failing_does_not_hang_the_other():
    r0, r1 = spawn(_one_rank_fails, 2, "sparse", timeout_s=90, collective_timeout_s=2)
    assert r1.startswith("_Boom: injected loader failure")
    # rank 0 is left waiting in a collective: it gets the collective's timeout error, not a hang
    assert r0 != "finished" and "_Boom" not in r0
