"""Instrumented training: one pipeline on synthetic data, with a Kineto trace and metrics.

    python -m runtime.train --pipeline fused --device cuda --out runs/fused
    torchrun --nproc-per-node 2 -m runtime.train --pipeline fused --device cuda --out runs/fused2

Steps, in order: ``warmup_steps`` (not measured), ``timed_steps`` (step times taken from CUDA
events recorded on the main stream at the end of each step, read once after the run: no sync
inside the loop; on the CPU, host wall clock), then (with a trace) one profiler warm-up step and
``profile_steps`` profiled steps (their times are not in the statistics, so the profiler's
overhead does not bias them), then ``tail_steps`` more steps, neither measured nor traced, so that
the timed (and profiled) steps run with the pipeline full (batches i+1..i+3 in flight) rather
than draining at the end of the data: the last steps of a pipelined run do less work (no next
lookup to issue), and timed they made FusedSparseDist's and SemiSync's runs look ~1 % faster or
slower than their steady state (d124cf4:bench/NOTES-pipelines.md, "2026-11-24 session 2").

The model is built once (``runtime.session.Session``) and trained by one run. Writes into
``out`` for each rank r: ``trace_rank{r}.json.gz`` (Kineto: ``ProfilerStep#N`` markers,
``distributedInfo``, ``[memory]`` events, and ``cuda_sync`` events where this torch writes them:
``runtime.profiling``), ``trace_rank{r}_snapshot.pickle`` with
``memory_snapshot`` (CUDA only), ``metrics_rank{r}.json``; rank 0 also writes ``metrics.json``
with every rank's figures and the summary. Progress goes to stderr (rank 0).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from runtime.data import DataConfig, SyntheticLoader
from runtime.model import DenseOptimizerConfig, ModelConfig
from runtime.pipelines import FUSED_EMB_BACKWARDS, LOOKUP_PLACEMENTS, LOOKUP_STREAMS, PIPELINES, SEMI_LOOKUP_PLACEMENTS
from runtime.profiling import TEARDOWN_ENV, ProfilerOptions, TraceHandlerError, cuda_sync_events
from runtime.session import ConfigError, Session


@dataclass(frozen=True)
class TrainConfig:
    """One instrumented run."""

    pipeline: str = "sparse"
    """``base``, ``sparse``, ``fused`` or ``semi``."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (rank r uses GPU ``LOCAL_RANK``)."""
    warmup_steps: int = 3
    """Steps run first and not measured."""
    timed_steps: int = 10
    """Steps whose times give P50/P90 and QPS."""
    profile_steps: int = 3
    """Steps recorded in the trace (after one profiler warm-up step); 0: no trace."""
    tail_steps: int = 3
    """Steps trained last (after the timed steps, or after the profiled ones with a trace),
    neither measured nor traced: the deepest pipeline (SemiSync) holds batches i+1..i+3 while it
    trains batch i, so with 3 the timed and traced steps show the steady state, not the pipeline
    draining at the end of the data."""
    lookup_stream: str = "data_dist"
    """FusedSparseDist: ``data_dist``, ``new`` or ``current``."""
    lookup_placement: str = "before_optimizer"
    """FusedSparseDist: where the host issues the next batch's lookup: ``before_optimizer``
    (right behind the embedding backward), ``step_start`` (TorchRec's default: at the start of
    the next step) or ``after_data_dist`` (after the next batch's data dist)."""
    emb_backward: str = "with_dense"
    """FusedSparseDist: the embedding backward inside the dense backward's autograd call
    (``with_dense``: one call, less host work per step) or in a call of its own (``separate``,
    ``## emb_backward i ##``, the runtime's only way before 2026-11-24); same streams, same numerics."""
    start_batch: int = 0
    """SemiSync: batches before this one are trained exactly."""
    semi_lookup_placement: str = "after_backward"
    """SemiSync: where batch i+1's stale lookup runs on the GPU: ``after_backward`` (beside batch
    i's optimizer; the faster one measured) or ``after_forward`` (TorchRec's: beside batch i's
    backward); same numerics."""
    inplace_copy_batch_to_gpu: bool = False
    """Allocate each device batch on the main stream and fill it from the memcpy stream."""
    profiler: ProfilerOptions = field(default_factory=ProfilerOptions)
    """What the profiled steps' trace records (``runtime.profiling``: ``[memory]`` and cuda_sync
    events by default; shapes, stacks, FLOPs, modules on request)."""
    memory_snapshot: bool = False
    """Record allocator history and dump a snapshot pickle beside the trace (CUDA only)."""
    trace_handler: str | None = None
    """``module:factory`` of a trace handler to use instead of writing the trace only
    (``runtime.profiling.trace_handler``): ``tracekit.handler:on_trace_ready`` writes it, reads
    it and says in the log what bounds the steps (``tracekit run --analyze`` passes it)."""
    check_max: tuple[str, ...] = ()
    """The handler's upper thresholds (``tracekit check --max`` specs, ``stall_total=5ms``)."""
    check_min: tuple[str, ...] = ()
    """The handler's lower thresholds."""
    allow_tf32: bool = False
    """Let the dense matmuls use TF32 tensor cores (CUDA); off: full fp32, torch's default."""
    main_stream_priority: int = 0
    """CUDA priority of the main stream (forward, backward, optimizer). 0: torch's default
    stream, the lowest priority, as TorchRec runs; -1..-3: a new stream of that higher priority
    made current for the whole run, so that the main stream's kernels are scheduled before
    those of the side streams (memcpy and data dist are -1, a new lookup stream 0)."""
    out: str = "runs/latest"
    """Output directory."""
    model: ModelConfig = field(default_factory=lambda: ModelConfig(num_embeddings=(100_000,) * 8))
    """The DLRM."""
    data: DataConfig = field(default_factory=lambda: DataConfig(num_embeddings=(100_000,) * 8))
    """The synthetic data (``num_batches`` is set from the step counts)."""
    dense_optimizer: DenseOptimizerConfig = field(default_factory=DenseOptimizerConfig)
    """Optimizer of the dense parameters."""

    def __post_init__(self) -> None:
        if self.pipeline not in PIPELINES:
            raise ConfigError(f"pipeline must be one of {sorted(PIPELINES)}, got {self.pipeline!r}")
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be cpu or cuda, got {self.device!r}")
        if self.warmup_steps < 0 or self.timed_steps < 1 or self.profile_steps < 0 or self.tail_steps < 0:
            raise ConfigError("need warmup_steps >= 0, timed_steps >= 1, profile_steps >= 0, tail_steps >= 0")
        if self.lookup_stream not in LOOKUP_STREAMS:
            raise ConfigError(f"lookup_stream must be one of {LOOKUP_STREAMS}, got {self.lookup_stream!r}")
        if self.lookup_placement not in LOOKUP_PLACEMENTS:
            raise ConfigError(f"lookup_placement must be one of {LOOKUP_PLACEMENTS}, got {self.lookup_placement!r}")
        if self.emb_backward not in FUSED_EMB_BACKWARDS:
            raise ConfigError(f"emb_backward must be one of {FUSED_EMB_BACKWARDS}, got {self.emb_backward!r}")
        if self.start_batch < 0:
            raise ConfigError("start_batch must be >= 0")
        if self.semi_lookup_placement not in SEMI_LOOKUP_PLACEMENTS:
            raise ConfigError(f"semi_lookup_placement must be one of {SEMI_LOOKUP_PLACEMENTS}, got {self.semi_lookup_placement!r}")
        if self.trace_handler is not None and ":" not in self.trace_handler:
            raise ConfigError(f"trace_handler must be module:factory, got {self.trace_handler!r}")
        if (self.check_max or self.check_min) and self.trace_handler is None:
            raise ConfigError("check thresholds need a trace handler that evaluates them")
        if not -3 <= self.main_stream_priority <= 0:
            raise ConfigError(f"main_stream_priority must be in -3..0, got {self.main_stream_priority}")
        if self.model.num_embeddings != self.data.num_embeddings or self.model.num_dense != self.data.num_dense:
            raise ConfigError("model and data disagree on the tables or the number of dense features")

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps + (1 + self.profile_steps if self.profile_steps else 0) + self.tail_steps


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def versions() -> dict:
    v = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        v["gpu"] = torch.cuda.get_device_name()
        try:
            v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - informational only
            pass
    return v


def train(cfg: TrainConfig, *, loader: SyntheticLoader | None = None) -> dict:
    """Runs ``cfg`` on this process's rank (the process group is created if needed) and
    returns this rank's metrics (rank 0's include every rank). ``loader``: host batches built
    beforehand for this rank from ``cfg.data`` with ``num_batches = cfg.total_steps``; None
    builds them here."""
    session = Session(cfg)
    rank, world = session.info.rank, session.info.world_size
    if loader is None:
        loader = SyntheticLoader(dataclasses.replace(cfg.data, num_batches=cfg.total_steps), rank=rank)
    run = session.run(cfg, loader)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    step_ms = run.step_ms
    mine = {
        "rank": rank,
        "steps_trained": run.steps_trained,
        "timed_steps": list(run.timed),
        "step_ms": step_ms,
        "step_ms_p50": _percentile(step_ms, 0.5),
        "step_ms_p90": _percentile(step_ms, 0.9),
        # host time between step ends: equal to the GPU step time once the launch queue is full
        # (the host waits), so it does not tell the bound; gpu_waited_share does
        "host_step_ms_p50": _percentile(run.host_step_ms, 0.5),
        "gpu_waited_share": run.gpu_waited_share,
        "first_step_ms": run.step_ms_all[0] if run.step_ms_all else None,
        "first_step_host_ms": run.host_step_ms_all[0] if run.host_step_ms_all else None,
        "traced_step_ms": run.traced_step_ms,
        "qps": (cfg.data.batch_size * world) / (sum(step_ms) / len(step_ms) / 1e3) if step_ms else None,
        "final_loss": run.final_loss,
        "peak_allocated_bytes": run.peak_allocated_bytes,
        "peak_reserved_bytes": run.peak_reserved_bytes,
        "allocator_timed": run.allocator_timed,
        "build_s": session.build_s,
        "wall_s": run.wall_s,
        "trace": Path(run.trace).name if run.trace else None,
        "snapshot": Path(run.snapshot).name if run.snapshot else None,
        "cuda_sync_events": cuda_sync_events() if cfg.profile_steps else None,
        "cupti_teardown": os.environ.get(TEARDOWN_ENV) if cfg.profile_steps else None,
        "embedding_backend": run.embedding_backend,
    }
    (out / f"metrics_rank{rank}.json").write_text(json.dumps(mine, indent=1))
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank != 0:
        return mine
    summary = {
        "pipeline": cfg.pipeline,
        "world_size": world,
        "device": torch.cuda.get_device_name(session.device) if session.device.type == "cuda" else platform.processor() or "cpu",
        "step_time_source": "CUDA events on the main stream at each step end, read after the run"
        if session.device.type == "cuda"
        else "host wall clock between step ends",
        "step_ms_p50": max(m["step_ms_p50"] for m in gathered),
        "step_ms_p90": max(m["step_ms_p90"] for m in gathered),
        "qps": min(m["qps"] for m in gathered) if all(m["qps"] for m in gathered) else None,
        "peak_allocated_bytes": max(m["peak_allocated_bytes"] or 0 for m in gathered) or None,
        "peak_reserved_bytes": max(m["peak_reserved_bytes"] or 0 for m in gathered) or None,
        "note": "the profiled steps (after the timed ones) are not in the step-time statistics",
        "config": config_dict(cfg),
        "versions": versions(),
        "ranks": gathered,
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=1))
    return summary


def config_dict(cfg: TrainConfig) -> dict:
    return json.loads(json.dumps(asdict(cfg), default=str))


# ------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------
def _ints(s: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"runtime.train: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m runtime.train", description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--pipeline", choices=sorted(PIPELINES), default="sparse")
    a("--device", choices=["cpu", "cuda"], default="cpu")
    a("--steps", type=int, default=10, help="timed steps")
    a("--warmup-steps", type=int, default=3)
    a("--profile-steps", type=int, default=3, help="steps in the trace (0: no trace)")
    a("--lookup-stream", choices=list(LOOKUP_STREAMS), default="data_dist")
    a("--lookup-placement", choices=list(LOOKUP_PLACEMENTS), default="before_optimizer",
      help="fused: where the host issues the next batch's lookup")
    a("--emb-backward", choices=list(FUSED_EMB_BACKWARDS), default="with_dense",
      help="fused: the embedding backward in the dense backward's autograd call (with_dense) or its own (separate)")
    a("--start-batch", type=int, default=0, help="semi: exact batches before semi-sync")
    a("--semi-lookup-placement", choices=list(SEMI_LOOKUP_PLACEMENTS), default="after_backward",
      help="semi: the stale lookup beside the optimizer (after_backward) or the backward (after_forward, TorchRec's)")
    a("--inplace-copy", action="store_true")
    a("--memory-snapshot", action="store_true")
    a("--record-shapes", action="store_true", help="record the ops' input shapes in the trace")
    a("--trace-handler", default=None, metavar="MODULE:FACTORY",
      help="a trace handler factory (tracekit.handler:on_trace_ready: write, analyse, check)")
    a("--check-max", action="append", default=[], metavar="KEY=VALUE", help="the handler's --max thresholds")
    a("--check-min", action="append", default=[], metavar="KEY=VALUE", help="the handler's --min thresholds")
    a("--tf32", action="store_true", help="TF32 dense matmuls (CUDA)")
    a("--main-stream-priority", type=int, default=0,
      help="CUDA priority of the main stream: 0 (default stream) or -1..-3 (a new, higher-priority one)")
    a("--out", default="runs/latest")
    # model
    a("--tables", type=int, default=8)
    a("--rows", type=int, default=100_000, help="rows per table")
    a("--dim", type=int, default=64)
    a("--dense-arch", type=_ints, default=(512, 256))
    a("--over-arch", type=_ints, default=(1024, 1024, 512))
    a("--task-heads", type=int, default=1, help="output heads (> 1: a multi-task model, one Linear per head)")
    a("--embedding-optimizer", choices=["sgd", "rowwise_adagrad"], default="rowwise_adagrad")
    a("--embedding-backend", choices=["auto", "cuda", "reference"], default="auto")
    a("--dense-optimizer", choices=["sgd", "adagrad", "adam"], default="adam")
    a("--dense-lr", type=float, default=1e-3)
    a("--dense-foreach", dest="dense_foreach", action="store_true", default=True,
      help="multi-tensor (foreach) dense optimizer (default)")
    a("--no-dense-foreach", dest="dense_foreach", action="store_false",
      help="per-parameter kernels in the dense optimizer")
    # data
    a("--batch-size", type=int, default=512)
    a("--pooling-factor", type=float, default=8.0)
    a("--distribution", choices=["zipf", "uniform"], default="zipf")
    a("--num-dense", type=int, default=13)
    a("--weighted", action="store_true")
    a("--distinct-batches", type=int, default=4)
    a("--seed", type=int, default=0)
    return p


def config_from_args(ns: argparse.Namespace) -> TrainConfig:
    rows = (ns.rows,) * ns.tables
    try:
        model = ModelConfig(
            num_embeddings=rows, embedding_dim=ns.dim, num_dense=ns.num_dense, dense_arch=ns.dense_arch,
            over_arch=ns.over_arch, task_heads=ns.task_heads, embedding_optimizer=ns.embedding_optimizer,
            embedding_backend=ns.embedding_backend, seed=ns.seed,
        )
        data = DataConfig(
            num_embeddings=rows, batch_size=ns.batch_size, pooling_factor=ns.pooling_factor,
            distribution=ns.distribution, num_dense=ns.num_dense, weighted=ns.weighted,
            distinct_batches=ns.distinct_batches, seed=ns.seed,
        )
        return TrainConfig(
            pipeline=ns.pipeline, device=ns.device, warmup_steps=ns.warmup_steps, timed_steps=ns.steps,
            profile_steps=ns.profile_steps, lookup_stream=ns.lookup_stream,
            lookup_placement=ns.lookup_placement, emb_backward=ns.emb_backward, start_batch=ns.start_batch,
            semi_lookup_placement=ns.semi_lookup_placement,
            inplace_copy_batch_to_gpu=ns.inplace_copy, memory_snapshot=ns.memory_snapshot, allow_tf32=ns.tf32,
            profiler=ProfilerOptions(record_shapes=ns.record_shapes), trace_handler=ns.trace_handler,
            check_max=tuple(ns.check_max), check_min=tuple(ns.check_min),
            main_stream_priority=ns.main_stream_priority, out=ns.out,
            model=model, data=data, dense_optimizer=DenseOptimizerConfig(kind=ns.dense_optimizer, lr=ns.dense_lr, foreach=ns.dense_foreach),
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(ns)
        summary = train(cfg)
    except ConfigError as e:
        print(f"runtime.train: error: {e}", file=sys.stderr)
        return 2
    except TraceHandlerError as e:  # a check the trace handler made failed
        print(f"runtime.train: error: {e}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if summary.get("ranks") is not None:
        print(
            f"{cfg.pipeline}: P50 {summary['step_ms_p50']:.2f} ms  P90 {summary['step_ms_p90']:.2f} ms  "
            f"QPS {summary['qps'] or float('nan'):.0f}  -> {os.path.join(cfg.out, 'metrics.json')}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
