"""``tracekit run``: train the reference runtime with one pipeline and write its traces.

tracekit never imports the runtime (or torch): this command launches ``python -m
runtime.train`` (or, with ``--nproc-per-node N > 1``, ``python -m torch.distributed.run
--nproc-per-node N -m runtime.train``) as a child process, passes its progress through and
turns its one-line errors into tracekit's.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import click

from tracekit.errors import InputError, RuntimeConfigError

_CHILD_ERROR = "runtime.train: error: "
HANDLER = "tracekit.handler:on_trace_ready"
"""The trace handler ``--analyze`` names to the runtime (which does not import tracekit)."""


def _runtime_root() -> str:
    """The directory holding the ``runtime`` package (the checkout, or site-packages)."""
    here = Path(__file__).resolve().parents[2]
    if (here / "runtime" / "train.py").is_file():
        return str(here)
    spec = importlib.util.find_spec("runtime")  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeConfigError("the reference runtime (package 'runtime') is not installed")
    return str(Path(list(spec.submodule_search_locations)[0]).parent)


def build_argv(opts: dict) -> list[str]:
    """runtime.train's arguments for the options of this command."""
    argv = [
        "--pipeline", opts["pipeline"], "--device", opts["device"], "--out", opts["out"],
        "--steps", str(opts["steps"]), "--warmup-steps", str(opts["warmup_steps"]),
        "--profile-steps", str(opts["profile_steps"]),
        "--lookup-stream", opts["lookup_stream"],
        "--lookup-placement", opts["lookup_placement"], "--emb-backward", opts["emb_backward"],
        "--start-batch", str(opts["start_batch"]), "--semi-lookup-placement", opts["semi_lookup_placement"],
        "--main-stream-priority", str(opts["main_stream_priority"]),
        "--tables", str(opts["tables"]), "--rows", str(opts["rows"]), "--dim", str(opts["dim"]),
        "--dense-arch", opts["dense_arch"], "--over-arch", opts["over_arch"], "--task-heads", str(opts["task_heads"]),
        "--embedding-optimizer", opts["embedding_optimizer"],
        "--embedding-backend", opts["embedding_backend"],
        "--dense-optimizer", opts["dense_optimizer"], "--dense-lr", repr(opts["dense_lr"]),
        "--dense-foreach" if opts["dense_foreach"] else "--no-dense-foreach",
        "--batch-size", str(opts["batch_size"]), "--pooling-factor", repr(opts["pooling_factor"]),
        "--distribution", opts["distribution"], "--num-dense", str(opts["num_dense"]),
        "--distinct-batches", str(opts["distinct_batches"]), "--seed", str(opts["seed"]),
    ]
    if opts["inplace_copy"]:
        argv.append("--inplace-copy")
    if opts["memory_snapshot"]:
        argv.append("--memory-snapshot")
    if opts["weighted"]:
        argv.append("--weighted")
    if opts["tf32"]:
        argv.append("--tf32")
    if opts["record_shapes"]:
        argv.append("--record-shapes")
    if opts["analyze"] or opts["check_max"] or opts["check_min"]:
        argv += ["--trace-handler", HANDLER]
        for spec in opts["check_max"]:
            argv += ["--check-max", spec]
        for spec in opts["check_min"]:
            argv += ["--check-min", spec]
    return argv


SIZES = {
    "cuda": dict(tables=8, rows=100_000, dim=64, dense_arch="512,256", over_arch="1024,1024,512", batch_size=512,
                 steps=10, warmup_steps=3, profile_steps=3),
    "cpu": dict(tables=4, rows=10_000, dim=32, dense_arch="64", over_arch="128,64", batch_size=128, steps=5,
                warmup_steps=2, profile_steps=2),
}
"""What a run trains when an option is not given, by ``--device``: on a CPU a small model and
fewer steps, so that a run takes seconds (its trace is host-bound, as a CPU run is, and tracekit
says so)."""


def _check_widths(ctx, param, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        widths = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        widths = []
    if not widths or any(w <= 0 for w in widths):
        raise click.BadParameter(f"expected comma-separated positive integers, got {value!r}")
    return value


@click.command("run")
@click.option("--pipeline", type=click.Choice(["base", "sparse", "fused", "semi"]), default="sparse",
              show_default=True, help="Base (no overlap), SparseDist, FusedSparseDist or SemiSync.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ranks on this host (launched with torch.distributed.run; one GPU each).")
@click.option("--out", type=click.Path(file_okay=False), default="runs/latest", show_default=True,
              help="Output directory (must be new or empty).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Timed steps [default: 10 on cuda, 5 on cpu].")
@click.option("--warmup-steps", type=click.IntRange(min=0), default=None, help="[default: 3 on cuda, 2 on cpu]")
@click.option("--profile-steps", type=click.IntRange(min=0), default=None,
              help="Steps recorded in the trace (0: no trace) [default: 3 on cuda, 2 on cpu].")
@click.option("--lookup-stream", type=click.Choice(["data_dist", "new", "current"]), default="data_dist",
              show_default=True, help="fused: the stream of the embedding lookup.")
@click.option("--lookup-placement", type=click.Choice(["before_optimizer", "step_start", "after_data_dist"]),
              default="before_optimizer", show_default=True,
              help="fused: where the host issues the next batch's lookup: right behind the embedding backward "
                   "(before the optimizer), at the start of the next step (TorchRec's default) or after the "
                   "next batch's input dist.")
@click.option("--emb-backward", type=click.Choice(["with_dense", "separate"]), default="with_dense", show_default=True,
              help="fused: the embedding backward in the dense backward's autograd call, or in a second call of its own.")
@click.option("--start-batch", type=click.IntRange(min=0), default=0, show_default=True,
              help="semi: batches trained exactly before semi-sync starts.")
@click.option("--semi-lookup-placement", type=click.Choice(["after_backward", "after_forward"]), default="after_backward",
              show_default=True, help="semi: the stale lookup of the next batch beside this batch's optimizer "
                                      "(after_backward) or beside its backward (after_forward, TorchRec's).")
@click.option("--inplace-copy", is_flag=True, help="Allocate device batches on the main stream (in-place copy).")
@click.option("--memory-snapshot", is_flag=True, help="Write the allocator snapshot beside the trace (CUDA).")
@click.option("--tf32", is_flag=True, help="TF32 dense matmuls (CUDA).")
@click.option("--record-shapes", is_flag=True,
              help="Record the ops' input shapes in the trace (the embedding bandwidth reads them).")
@click.option("--analyze", is_flag=True,
              help="Write each trace through tracekit.on_trace_ready: the log says what bounds the steps.")
@click.option("--check-max", multiple=True, metavar="KEY=VALUE",
              help="With the trace written, fail the run when a figure exceeds this (as tracekit check).")
@click.option("--check-min", multiple=True, metavar="KEY=VALUE",
              help="With the trace written, fail the run when a figure is below this.")
@click.option("--main-stream-priority", type=click.IntRange(-3, 0), default=0, show_default=True,
              help="CUDA priority of the main stream: 0 is torch's default stream (the lowest); -1..-3 a "
                   "new stream of higher priority, so side streams (lookup, data dist) yield to it.")
@click.option("--tables", type=click.IntRange(min=1), default=None, help="Embedding tables [default: 8 on cuda, 4 on cpu].")
@click.option("--rows", type=click.IntRange(min=1), default=None,
              help="Rows per table [default: 100,000 on cuda, 10,000 on cpu].")
@click.option("--dim", type=click.IntRange(min=1), default=None, help="Embedding dim [default: 64 on cuda, 32 on cpu].")
@click.option("--dense-arch", default=None, callback=_check_widths,
              help="Dense MLP widths [default: 512,256 on cuda, 64 on cpu].")
@click.option("--over-arch", default=None, callback=_check_widths,
              help="Over-arch MLP widths [default: 1024,1024,512 on cuda, 128,64 on cpu].")
@click.option("--task-heads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Output heads; > 1: a multi-task model with one Linear(width, 1) per head.")
@click.option("--embedding-optimizer", type=click.Choice(["sgd", "rowwise_adagrad"]),
              default="rowwise_adagrad", show_default=True)
@click.option("--embedding-backend", type=click.Choice(["auto", "cuda", "reference"]), default="auto",
              show_default=True)
@click.option("--dense-optimizer", type=click.Choice(["sgd", "adagrad", "adam"]), default="adam",
              show_default=True)
@click.option("--dense-lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--dense-foreach/--no-dense-foreach", default=True, show_default=True,
              help="Multi-tensor (foreach) dense optimizer, or per-parameter kernels.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="[default: 512 on cuda, 128 on cpu]")
@click.option("--pooling-factor", type=click.FloatRange(min=0), default=8.0, show_default=True)
@click.option("--distribution", type=click.Choice(["zipf", "uniform"]), default="zipf", show_default=True)
@click.option("--num-dense", type=click.IntRange(min=1), default=13, show_default=True)
@click.option("--weighted", is_flag=True, help="Per-id weights in the sparse features.")
@click.option("--distinct-batches", type=click.IntRange(min=0), default=4, show_default=True,
              help="Distinct synthetic batches, cycled (0: all distinct).")
@click.option("--seed", type=int, default=0, show_default=True)
def command(nproc_per_node, **opts):
    """Train the reference DLRM with one pipeline; write per-rank traces and metrics.

    Writes into --out: trace_rank{r}.json.gz (Kineto, ProfilerStep markers, memory events),
    trace_rank{r}_snapshot.pickle with --memory-snapshot, metrics_rank{r}.json and
    metrics.json (P50/P90 step time, QPS, peak allocated/reserved, config, versions).
    Needs torch (pip install 'tracekit[runtime]').
    """
    if importlib.util.find_spec("torch") is None:
        raise RuntimeConfigError("the run command needs torch: pip install 'tracekit[runtime]'")
    from tracekit import checks

    for spec in opts["check_max"]:  # refused here, before any training
        checks.parse(spec, upper=True)
    for spec in opts["check_min"]:
        checks.parse(spec, upper=False)
    for key, value in SIZES[opts["device"]].items():  # what the user did not give: by device
        if opts[key] is None:
            opts[key] = value
    out = opts["out"]
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError("output directory exists and is not empty; name a new one", path=out)
    root = _runtime_root()
    if nproc_per_node > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc_per_node),
               "-m", "runtime.train"]
    else:
        cmd = [sys.executable, "-m", "runtime.train"]
    cmd += build_argv(opts)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    child_error = None
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        for line in proc.stdout:
            if line.startswith(_CHILD_ERROR):
                child_error = child_error or line[len(_CHILD_ERROR):].strip()
                continue
            click.echo(line, nl=False, err=True)
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise click.exceptions.Abort() from None
    if rc != 0:
        raise RuntimeConfigError(child_error or f"training failed (exit code {rc}); see the messages above")
    click.echo(os.path.join(out, "metrics.json"))
