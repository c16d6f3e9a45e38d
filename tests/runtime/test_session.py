"""runtime.session: a model built once, many runs from the same initial state."""

from __future__ import annotations

import dataclasses
import os
import gzip
import json

import pytest
import torch

from runtime.data import DataConfig, SyntheticLoader
from runtime.model import DenseOptimizerConfig, ModelConfig
from runtime.profiling import TEARDOWN_ENV, cuda_sync_events, make_profiler, trace_counts
from runtime.session import ConfigError, Session
from runtime.train import TrainConfig

pytestmark = pytest.mark.usefixtures("one_intraop_thread")  # tiny CPU ops (conftest)

MODEL = ModelConfig(
    num_embeddings=(50, 80, 30), embedding_dim=4, num_dense=3, dense_arch=(8,), over_arch=(8,), task_heads=2,
    embedding_backend="reference",
)
DATA = DataConfig(num_embeddings=MODEL.num_embeddings, batch_size=8, num_dense=3, pooling_factor=2, distinct_batches=3, seed=2)


def _cfg(tmp_path, pipeline: str = "sparse", **kw) -> TrainConfig:
    base = dict(
        pipeline=pipeline, warmup_steps=1, timed_steps=3, profile_steps=0, out=str(tmp_path / pipeline),
        model=MODEL, data=DATA, dense_optimizer=DenseOptimizerConfig(kind="adam", lr=0.01, foreach=False),
    )
    return TrainConfig(**{**base, **kw})


def _loader(cfg: TrainConfig) -> SyntheticLoader:
    return SyntheticLoader(dataclasses.replace(cfg.data, num_batches=cfg.total_steps))


def _state(session: Session) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in session.model.state_dict().items()}


def test_every_run_starts_from_the_initial_state(tmp_path):
    cfg = _cfg(tmp_path)
    loader = _loader(cfg)
    session = Session(cfg)
    initial = _state(session)
    weights = session.embedding.weights
    first = session.run(cfg, loader, progress=False)
    trained = _state(session)
    assert not torch.equal(trained["sparse_arch.local.embedding.weights"], initial["sparse_arch.local.embedding.weights"])
    # fused in between (numerically identical to sparse), then sparse again: the same losses and
    # final state each time, in the same memory
    fused = session.run(_cfg(tmp_path, "fused"), loader, progress=False)
    again = session.run(cfg, loader, progress=False)
    assert first.final_loss == fused.final_loss == again.final_loss
    assert all(torch.equal(v, _state(session)[k]) for k, v in trained.items())
    assert session.embedding.weights is weights
    # and the same as a model built afresh
    fresh = Session(cfg)
    assert all(torch.equal(v, _state(fresh)[k]) for k, v in initial.items())
    assert fresh.run(cfg, loader, progress=False).final_loss == first.final_loss


def test_run_result_slices_the_steps(tmp_path):
    cfg = _cfg(tmp_path, "semi", warmup_steps=2, timed_steps=4, profile_steps=2, tail_steps=1)
    session = Session(cfg)
    run = session.run(cfg, _loader(cfg), progress=False)
    assert cfg.total_steps == 2 + 4 + 1 + 2 + 1 == run.steps_trained
    assert len(run.step_ms_all) == len(run.host_step_ms_all) == len(run.gpu_waited_all) == run.steps_trained
    assert run.timed == (2, 6) and run.step_ms == run.step_ms_all[2:6] and run.profiled == (7, 9)
    assert run.traced_step_ms == run.step_ms_all[7:9] and all(x > 0 for x in run.step_ms_all)
    # on the CPU: host clock, no GPU to have waited, no allocator figures
    assert run.gpu_waited_share is None and run.peak_reserved_bytes is None and run.allocator_timed == {}
    trace = json.loads(gzip.open(run.trace).read())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"ProfilerStep#7", "ProfilerStep#8", "## forward 7 ##", "[memory]"} <= names and "ProfilerStep#9" not in names


def test_the_timed_steps_are_followed_by_tail_steps_without_a_trace(tmp_path):
    # the pipeline drains in its last steps (no next lookup to issue): those are the tail, never timed
    cfg = _cfg(tmp_path, "semi", warmup_steps=1, timed_steps=3, profile_steps=0, tail_steps=3)
    run = Session(cfg).run(cfg, _loader(cfg), progress=False)
    assert cfg.total_steps == 1 + 3 + 3 == run.steps_trained == len(run.step_ms_all)
    assert run.timed == (1, 4) and run.step_ms == run.step_ms_all[1:4] and run.trace is None


def test_a_session_refuses_another_model_or_data(tmp_path):
    cfg = _cfg(tmp_path)
    session = Session(cfg)
    other = dataclasses.replace(cfg, model=dataclasses.replace(MODEL, embedding_dim=8))
    with pytest.raises(ConfigError, match="another model"):
        session.run(other, _loader(cfg), progress=False)
    with pytest.raises(ConfigError, match="another data config"):
        session.run(dataclasses.replace(cfg, timed_steps=5), _loader(cfg), progress=False)


def test_first_batches_share_the_built_ones():
    loader = SyntheticLoader(dataclasses.replace(DATA, num_batches=10))
    short = loader.first(4)
    assert len(short) == 4 and short.cfg == dataclasses.replace(DATA, num_batches=4)
    assert [id(b) for b in short] == [id(b) for b in list(loader)[:4]]
    all_distinct = SyntheticLoader(dataclasses.replace(DATA, num_batches=3, distinct_batches=0))
    with pytest.raises(ValueError, match="distinct"):
        all_distinct.first(5)


def test_the_profiler_asks_for_cuda_sync_events():
    # torch 2.13 (the CPU wheel of the tests) has the option; an older torch says why not
    assert cuda_sync_events() == "on"


def test_the_profiler_tears_cupti_down_unless_the_caller_said_otherwise(monkeypatch):
    # Kineto keeps CUPTI attached after a trace unless TEARDOWN_CUPTI=1: the runs after it pay
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    make_profiler(torch.device("cpu"), schedule=None, on_trace_ready=None)
    assert os.environ[TEARDOWN_ENV] == "1"
    monkeypatch.setenv(TEARDOWN_ENV, "0")  # the caller's choice (CUDA graphs under CUPTI) stays
    make_profiler(torch.device("cpu"), schedule=None, on_trace_ready=None)
    assert os.environ[TEARDOWN_ENV] == "0"


def test_trace_counts_of_a_hand_made_trace(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "ts": 1, "dur": 0},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "ts": 2, "dur": 0},
        {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "ts": 3, "dur": 1},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 4},
    ]
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert trace_counts(path) == {"events": 5, "cuda_sync": 3, "cuda_sync_by_name": {"Stream Wait Event": 2, "Event Sync": 1},
                                  "memory": 1, "kernels": 1, "by_cat": {"kernel": 1, "cuda_sync": 3, "cpu_instant_event": 1},
                                  "bytes": path.stat().st_size}
