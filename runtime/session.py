"""A model built once and trained by many pipeline runs (the benchmark's unit of work).

Building the headline model (26 tables of 1M x 128, 13 GB) takes a while, and a benchmark that
compares pipelines runs each of them many times, interleaved. A ``Session`` builds the model,
shards it and keeps its dense parameters' initial values; every :meth:`Session.run` first puts
the model back to that state in place (tables re-initialised from their seeds, the fused
optimizer's state zeroed, the dense parameters copied back, a new dense optimizer), then trains
one pipeline over the batches given. So every run of every pipeline starts from the same
weights, sees the same data and allocates nothing for the model: what differs between runs is
the pipeline alone.

A run: ``warmup_steps`` (not measured), ``timed_steps``, then (with ``profile_steps``) one
profiler warm-up step, the profiled steps and ``tail_steps`` (see ``runtime.train``). Every step
end is marked by a CUDA event on the main stream (read after the run: no sync inside the loop)
or, on the CPU, by the host clock. Besides the step times a run records what explains a slow
one: the host time per step, whether the GPU had already finished the previous step when the
host finished issuing a step (the GPU waited for the host), the first step's cost (first use of
kernels, allocator growth after ``empty_cache``), peak memory and the caching allocator's
counters (device allocations, retries) over the timed steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from runtime.data import SyntheticLoader
from runtime.dist import init_from_env
from runtime.model import DLRM, make_dense_optimizer
from runtime.pipelines import PIPELINES
from runtime.profiling import make_profiler, trace_handler
from runtime.sharding import ShardingPlan, shard_model

class ConfigError(ValueError):
    """The run cannot start as configured (one line for the user)."""


ALLOCATOR_COUNTERS = (
    "segment.all.allocated", "segment.all.freed", "num_device_alloc", "num_device_free", "num_alloc_retries",
    "num_ooms", "num_sync_all_streams",
)
"""Caching-allocator counters (``torch.cuda.memory_stats``) a run reports as differences, where
this torch has them: segments allocated/freed (one cudaMalloc/cudaFree each), retries (a
cudaMalloc that failed, the cache freed, and tried again)."""


@dataclass
class RunResult:
    """One pipeline run of a session on this rank. Step k's time is the time between the ends
    of steps k-1 and k (step 0: from the run's start, pipeline fill included)."""

    pipeline: str
    """The pipeline that ran."""
    steps_trained: int
    """Batches trained."""
    timed: tuple[int, int]
    """``[lo, hi)``: the timed steps' indices."""
    step_ms_all: list[float]
    """Every step's time: GPU time between CUDA events on the main stream (host clock on CPU)."""
    host_step_ms_all: list[float]
    """Every step's host time (perf_counter between the ends of issuing consecutive steps)."""
    gpu_waited_all: list[bool | None]
    """Per step: True if the GPU had finished the previous step when the host finished issuing
    this one (the GPU may have waited for the host); None on the CPU."""
    profiled: tuple[int, int] | None = None
    """``[lo, hi)`` of the profiled steps (after the profiler's warm-up step), if any."""
    peak_allocated_bytes: int | None = None
    """``torch.cuda.max_memory_allocated`` over the run (after ``empty_cache`` and a reset)."""
    peak_reserved_bytes: int | None = None
    """``torch.cuda.max_memory_reserved`` over the run."""
    reserved_at_start_bytes: int | None = None
    """Reserved before the first step (the model itself, after ``empty_cache``)."""
    allocator_timed: dict = field(default_factory=dict)
    """ALLOCATOR_COUNTERS: increase over the timed steps (0 device allocations: steady state)."""
    allocator_run: dict = field(default_factory=dict)
    """ALLOCATOR_COUNTERS: increase over the whole run."""
    final_loss: float | None = None
    """Loss of the last step (equal across pipelines that are numerically identical)."""
    reset_s: float = 0.0
    """Host seconds spent putting the model back to its initial state before the run."""
    wall_s: float = 0.0
    """Host seconds from the first step's start to the GPU's end of the last."""
    trace: str | None = None
    """Path of the Kineto trace written, if any."""
    snapshot: str | None = None
    """Path of the memory snapshot written, if any."""
    embedding_backend: str | None = None
    """The TBE backend (``cuda`` or ``reference``)."""

    @property
    def step_ms(self) -> list[float]:
        """The timed steps' times."""
        return self.step_ms_all[self.timed[0] : self.timed[1]]

    @property
    def host_step_ms(self) -> list[float]:
        return self.host_step_ms_all[self.timed[0] : self.timed[1]]

    @property
    def gpu_waited_share(self) -> float | None:
        """Share of the timed steps in which the GPU had finished the previous step before the
        host finished issuing this one (near 1: the host bounds the step; near 0: the GPU)."""
        flags = self.gpu_waited_all[self.timed[0] : self.timed[1]]
        if not flags or flags[0] is None:
            return None
        return sum(bool(f) for f in flags) / len(flags)

    @property
    def traced_step_ms(self) -> list[float]:
        """The profiled steps' times (profiler overhead included)."""
        return [] if self.profiled is None else self.step_ms_all[self.profiled[0] : self.profiled[1]]

    @property
    def traced_host_step_ms(self) -> list[float]:
        """The profiled steps' host times (perf_counter between the ends of issuing them)."""
        return [] if self.profiled is None else self.host_step_ms_all[self.profiled[0] : self.profiled[1]]


def _counters() -> dict:
    stats = torch.cuda.memory_stats()
    return {k: int(stats[k]) for k in ALLOCATOR_COUNTERS if k in stats}


def _diff(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


class _Progress:
    """One stderr line every few steps (rank 0), from host time only."""

    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self.enabled, self.total, self.label = enabled, total, label
        self.t0 = self.last = time.perf_counter()
        self.every = max(1, total // 10)

    def __call__(self, i: int) -> None:
        now = time.perf_counter()
        if self.enabled and ((i + 1) % self.every == 0 or i + 1 == self.total):
            print(
                f"[{self.label}] step {i + 1}/{self.total}  host {1e3 * (now - self.last) / self.every:.1f} ms/step"
                f"  elapsed {now - self.t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        if (i + 1) % self.every == 0:
            self.last = now


class Session:
    """The model of ``cfg`` (a ``runtime.train.TrainConfig``: its model, device, dense
    optimizer, main-stream priority and TF32 setting), built and sharded once on this rank."""

    def __init__(self, cfg, *, plan: ShardingPlan | None = None) -> None:  # noqa: ANN001 - TrainConfig
        """``plan``: which rank owns each table (default: ``runtime.sharding.plan_table_wise``,
        tables balanced by bytes)."""
        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("--device cuda but torch sees no CUDA GPU")
        self.cfg = cfg
        self.info = init_from_env(cfg.device)
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}") if cfg.device == "cuda" else torch.device("cpu")
        t0 = time.perf_counter()
        self.model = DLRM(cfg.model, device=self.device, materialize_embeddings=False)
        shard_model(self.model, process_group=dist.group.WORLD, device=self.device, plan=plan)
        self._dense_initial = [p.detach().clone() for p in self.model.dense_parameters()]
        # the main stream: the current one, or a new one of higher priority made current in run()
        self.main_stream = None
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = cfg.allow_tf32
            if cfg.main_stream_priority != 0:
                self.main_stream = torch.cuda.Stream(device=self.device, priority=cfg.main_stream_priority)
            torch.cuda.synchronize()
        self.build_s = time.perf_counter() - t0
        """Host seconds the model took to build and shard (the GPU's work included)."""

    def _same_model(self, cfg) -> bool:  # noqa: ANN001
        keys = ("model", "device", "dense_optimizer", "main_stream_priority", "allow_tf32")
        return all(getattr(cfg, k) == getattr(self.cfg, k) for k in keys)

    @property
    def embedding(self):  # noqa: ANN201 - TableBatchedEmbedding | None
        return self.model.sparse_arch.local.embedding

    @torch.no_grad()
    def reset(self) -> torch.optim.Optimizer:
        """Puts the model back to its initial state in place; returns a new dense optimizer."""
        self.model.sparse_arch.local.reset_parameters()
        for p, p0 in zip(self.model.dense_parameters(), self._dense_initial):
            p.copy_(p0)
            p.grad = None
        if self.embedding is not None:
            self.embedding.last_update = None
        return make_dense_optimizer(self.model, self.cfg.dense_optimizer)

    def run(self, cfg, loader: SyntheticLoader, *, progress: bool = True) -> RunResult:  # noqa: ANN001
        """Trains ``cfg.pipeline`` (with cfg's options and step counts) from the initial state over
        ``loader`` (built from ``cfg.data``, ``num_batches = cfg.total_steps``); with
        ``cfg.profile_steps`` writes ``trace_rank{r}.json.gz`` (and with ``cfg.memory_snapshot``
        ``trace_rank{r}_snapshot.pickle``) into ``cfg.out``."""
        if not self._same_model(cfg):
            raise ConfigError("this session was built for another model, device, optimizer or main stream")
        data = dataclasses.replace(cfg.data, num_batches=cfg.total_steps)
        if loader.cfg != data:
            raise ConfigError("the loader given was built for another data config")
        device, rank = self.device, self.info.rank
        on_gpu = device.type == "cuda"
        t_reset = time.perf_counter()
        optimizer = self.reset()
        reserved_at_start = None
        if on_gpu:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            reserved_at_start = torch.cuda.memory_reserved(device)
            if cfg.memory_snapshot:
                torch.cuda.memory._record_memory_history(max_entries=200_000)
        reset_s = time.perf_counter() - t_reset
        dist.barrier()

        out = Path(cfg.out)
        if cfg.profile_steps:
            out.mkdir(parents=True, exist_ok=True)
        lo, hi = cfg.warmup_steps, cfg.warmup_steps + cfg.timed_steps
        marks: list = []  # marks[k]: start of step k (= end of step k-1); CUDA events or host clock
        host_marks: list[float] = []
        waited: list[bool | None] = []
        counters: dict = {}
        show = _Progress(progress and rank == 0, cfg.total_steps, f"{cfg.pipeline} rank {rank}/{self.info.world_size}")

        def mark():
            if not on_gpu:
                return time.perf_counter()
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev

        trace_path = out / f"trace_rank{rank}.json.gz"
        prof = None
        if cfg.profile_steps:
            prof = make_profiler(
                device,
                schedule=torch.profiler.schedule(wait=hi, warmup=1, active=cfg.profile_steps, repeat=1),
                on_trace_ready=trace_handler(cfg.trace_handler, out, rank, check_max=cfg.check_max,
                                             check_min=cfg.check_min),
                options=cfg.profiler,
            )
            prof.start()

        def on_step(i: int) -> None:
            host_marks.append(time.perf_counter())
            prev = marks[-1]
            marks.append(mark())
            waited.append(bool(prev.query()) if on_gpu else None)
            if on_gpu and i + 1 in (lo, hi):
                counters[i + 1] = _counters()
            show(i)
            if prof is not None:
                prof.step()

        kwargs: dict = {"inplace_copy_batch_to_gpu": cfg.inplace_copy_batch_to_gpu, "on_step": on_step}
        if cfg.pipeline == "fused":
            kwargs.update(lookup_stream=cfg.lookup_stream, lookup_placement=cfg.lookup_placement,
                          emb_backward=cfg.emb_backward)
        if cfg.pipeline == "semi":
            kwargs.update(start_batch=cfg.start_batch, lookup_placement=cfg.semi_lookup_placement)
        main_ctx = contextlib.nullcontext()
        if self.main_stream is not None:
            self.main_stream.wait_stream(torch.cuda.current_stream(device))  # the reset above
            main_ctx = torch.cuda.stream(self.main_stream)
        with main_ctx:
            if on_gpu:
                counters[0] = _counters()
            t_start = time.perf_counter()
            host_marks.append(t_start)
            marks.append(mark())
            try:
                result = PIPELINES[cfg.pipeline](self.model, optimizer, loader, device=device, **kwargs)
            finally:
                if prof is not None:
                    prof.stop()
        if on_gpu:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t_start
        if on_gpu:
            step_ms = [marks[k].elapsed_time(marks[k + 1]) for k in range(len(marks) - 1)]
        else:
            step_ms = [1e3 * (marks[k + 1] - marks[k]) for k in range(len(marks) - 1)]
        host_ms = [1e3 * (host_marks[k + 1] - host_marks[k]) for k in range(len(host_marks) - 1)]
        snapshot_path = None
        if on_gpu and cfg.memory_snapshot:
            snapshot_path = out / f"trace_rank{rank}_snapshot.pickle"
            torch.cuda.memory._dump_snapshot(str(snapshot_path))
            torch.cuda.memory._record_memory_history(enabled=None)
        emb = self.embedding
        if emb is not None:
            emb.check_indices()  # raises if a batch had an out-of-range id; drains the pending checks
        end = _counters() if on_gpu else {}
        return RunResult(
            pipeline=cfg.pipeline,
            steps_trained=result.steps,
            timed=(lo, hi),
            step_ms_all=step_ms,
            host_step_ms_all=host_ms,
            gpu_waited_all=waited,
            profiled=(hi + 1, hi + 1 + cfg.profile_steps) if cfg.profile_steps else None,
            peak_allocated_bytes=torch.cuda.max_memory_allocated(device) if on_gpu else None,
            peak_reserved_bytes=torch.cuda.max_memory_reserved(device) if on_gpu else None,
            reserved_at_start_bytes=reserved_at_start,
            allocator_timed=_diff(counters[hi], counters[lo]) if lo in counters and hi in counters else {},
            allocator_run=_diff(end, counters[0]) if on_gpu else {},
            final_loss=float(result.losses[-1].item()) if result.losses else None,
            reset_s=reset_s,
            wall_s=wall,
            trace=str(trace_path) if cfg.profile_steps else None,
            snapshot=str(snapshot_path) if snapshot_path else None,
            embedding_backend=emb.backend if emb is not None else None,
        )
