"""Benchmark of the training pipelines: the upstream table, on 1 GPU and (torchrun) on 2.

    python3 bench/bench_pipelines.py --gpus 1 --out $OUT/pipelines      # 1 GPU
    python3 bench/bench_pipelines.py --gpus 2 --out $OUT/pipelines2     # 2 GPUs (relaunches itself
                                                                          # with torch.distributed.run)
    python bench/bench_pipelines.py --device cpu --plan tiny:sparse+fused --out /tmp/b   # smoke test, CPU

A *plan* is a list of presets (model, data, dense optimizer, main-stream priority), each with
the variants to run (Base, SparseDist, FusedSparseDist with each lookup stream and order,
SemiSync, SparseDist with the in-place copy). Each variant is one run of
``runtime.train.train`` on the preset's model and the same host batches: warm-up steps, timed
steps (CUDA events on the main stream, read after the run), then a few profiled steps whose
trace and metrics are kept in ``<out>/<variant>/`` for the first (headline) preset and in
``<out>/<preset>/<variant>/`` for the others (small: meant for ``sample_traces/``).

The headline model makes the dense optimizer a real share of the step in the way
FusedSparseDist can use: Adam with per-parameter kernels over many small tensors (a multi-task
model with 128 heads) leaves most of the GPU idle while it runs, and the main stream has a
higher priority than the side streams, so the lookup and embedding backward of the side stream
fill the idle SMs instead of queueing the optimizer behind their long grids (see
bench/NOTES-pipelines.md for the measurements behind this). The other presets are the controls.

Writes ``<out>/results.json`` and ``<out>/results.md`` after every variant (partial results
survive a kill); one line per variant with ``Runtime (P90) | Peak Memory alloc (P90) | Peak
Memory reserved (P90)`` (P90 over ranks of each rank's figure, as upstream), the ratio of each
P90 step time to SparseDist's and the host time per step. The whole table is printed last.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from runtime.data import DataConfig, SyntheticLoader  # noqa: E402
from runtime.dist import init_from_env  # noqa: E402
from runtime.model import DenseOptimizerConfig, ModelConfig  # noqa: E402
from runtime.train import TrainConfig, _percentile, _versions, train  # noqa: E402

# name -> (pipeline, options), most important first (a run out of time skips the tail)
VARIANTS: dict[str, tuple[str, dict]] = {
    "sparse": ("sparse", {}),
    "fused": ("fused", {"lookup_stream": "data_dist"}),
    "semi": ("semi", {"start_batch": 0}),
    "base": ("base", {}),
    "fused_new_stream": ("fused", {"lookup_stream": "new"}),
    "fused_step_start": ("fused", {"lookup_stream": "data_dist", "lookup_placement": "step_start"}),
    "fused_lookup_after_dist": ("fused", {"lookup_stream": "data_dist", "lookup_placement": "after_data_dist"}),
    "fused_current_stream": ("fused", {"lookup_stream": "current"}),
    "sparse_inplace_copy": ("sparse", {"inplace_copy_batch_to_gpu": True}),
}

_BIG = dict(tables=26, rows=1_000_000, dim=128, pooling=20.0, dense_arch=(1024, 1024), over_arch=(4096, 4096, 4096, 2048))

PRESETS: dict[str, dict] = {
    # 26 tables of 1M x 128 (13 GB), pooling 20, 16384 samples per GPU; a multi-task over arch:
    # 128 task heads (256 small parameters) on the 4096-wide MLP, Adam with per-parameter
    # kernels (foreach off): a dense optimizer of ~2000 short kernels that leaves most of the
    # GPU idle, stepped on a main stream of priority -2 (above the side streams)
    "multitask": dict(_BIG, batch=16384, task_heads=128, adam_foreach=False, main_priority=-2),
    # the same on torch's default stream (priority 0, below the side streams: the long lookup
    # and embedding-backward grids then hold the GPU until their last wave)
    "multitask_p0": dict(_BIG, batch=16384, task_heads=128, adam_foreach=False, main_priority=0),
    # half the batch and half the heads; and twice the batch
    "multitask_b8k": dict(_BIG, batch=8192, task_heads=64, adam_foreach=False, main_priority=-2),
    "multitask_b32k": dict(_BIG, batch=32768, task_heads=128, adam_foreach=False, main_priority=-2),
    # the first run's model (one head, foreach Adam over ~44M parameters: a bandwidth-bound
    # optimizer), with a priority -2 main stream and as first run (priority 0)
    "dense_heavy_p2": dict(_BIG, batch=4096, task_heads=1, adam_foreach=True, main_priority=-2),
    "dense_heavy": dict(_BIG, batch=4096, task_heads=1, adam_foreach=True, main_priority=0),
    # the CI-sized smoke preset (seconds on any GPU)
    "tiny": dict(tables=8, rows=10_000, dim=32, batch=256, pooling=4.0, dense_arch=(64,), over_arch=(256, 128),
                 task_heads=4, adam_foreach=False, main_priority=-2),
}

MAIN = ("sparse", "fused", "semi")
# (preset, variants) in order; the first preset is the headline: every variant, its traces in
# <out>/<variant>/ (the others' in <out>/<preset>/<variant>/)
# The headline is multitask_b32k: on the second H200 run (2026-11-21) the 16384-sample
# multitask preset was host-bound (host ms/step = step time: ~2000 per-parameter Adam launches),
# so nothing a side stream hides could show; at 32768 samples the GPU is the bottleneck and the
# optimizer a real share of the step (bench/NOTES-pipelines.md, outcomes).
# The headline's three main variants run once more at the end (timed only, no trace): the
# spread between the two runs of one variant shows how far a ratio can move from run to run on
# the same machine.
PLAN = (
    ("multitask_b32k", tuple(VARIANTS)),
    ("multitask", MAIN),
    ("multitask_p0", MAIN),
    ("dense_heavy", MAIN),
    ("multitask_b32k", MAIN),
)


def _configs(
    preset: dict, *, device: str, warmup: int, timed: int, profile: int, out: Path, seed: int
) -> dict[str, TrainConfig]:
    rows = (preset["rows"],) * preset["tables"]
    model = ModelConfig(
        num_embeddings=rows, embedding_dim=preset["dim"], num_dense=13, dense_arch=preset["dense_arch"],
        over_arch=preset["over_arch"], task_heads=preset["task_heads"], embedding_optimizer="rowwise_adagrad",
        embedding_backend="auto", seed=seed,
    )
    data = DataConfig(
        num_embeddings=rows, batch_size=preset["batch"], pooling_factor=preset["pooling"], distribution="zipf",
        num_dense=13, distinct_batches=4, seed=seed,
    )
    out_cfgs = {}
    for name, (pipeline, opts) in VARIANTS.items():
        out_cfgs[name] = TrainConfig(
            pipeline=pipeline, device=device, warmup_steps=warmup, timed_steps=timed, profile_steps=profile,
            out=str(out / name), model=model, data=data, allow_tf32=True, main_stream_priority=preset["main_priority"],
            dense_optimizer=DenseOptimizerConfig(kind="adam", lr=1e-3, foreach=preset["adam_foreach"]), **opts,
        )
    return out_cfgs


def _p90(xs: list) -> float | None:
    return None if any(x is None for x in xs) else _percentile(xs, 0.9)


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f} GB"


def _run_preset(preset: str, names: list[str], args, info, out: Path, t0: float, publish, *, run: int = 1) -> dict | None:
    """Every variant of ``names`` on one preset (``run``: this preset's 1st, 2nd... run in the
    plan); rank 0 returns the results document, which ``publish(doc)`` receives after each
    variant too (partial results survive a kill)."""
    spec = PRESETS[preset]
    profile = args.profile_steps if run == 1 else 0  # a repeat measures time only: no trace
    cfgs = _configs(spec, device=args.device, warmup=args.warmup_steps, timed=args.steps, profile=profile, out=out, seed=args.seed)
    first = cfgs[names[0]]
    doc = {
        "world_size": info.world_size,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "preset": preset,
        "run": run,
        "spec": {k: v for k, v in spec.items()},
        "model": dataclasses.asdict(first.model),
        "data": dataclasses.asdict(first.data),
        "dense_optimizer": dataclasses.asdict(first.dense_optimizer),
        "main_stream_priority": first.main_stream_priority,
        "tf32": first.allow_tf32,
        "warmup_steps": args.warmup_steps,
        "timed_steps": args.steps,
        "step_time": "CUDA events on the main stream at each step end, read after the run; "
                     "P90 = max over ranks of each rank's P90",
        "rows": [],
        "targets": {},
        "skipped_for_time": [],
        "errors": {},
    }
    t_build = time.perf_counter()
    # host batches once for every variant (same data, and no minutes spent regenerating)
    loader = SyntheticLoader(dataclasses.replace(first.data, num_batches=first.total_steps), rank=info.rank)
    if info.rank == 0:
        print(f"[bench] {info.world_size} rank(s), preset {preset}, batches built in {time.perf_counter() - t_build:.1f} s",
              file=sys.stderr, flush=True)
    for name in names:
        go = [time.perf_counter() - t0 < args.budget_s]
        dist.broadcast_object_list(go, src=0)  # every rank makes rank 0's choice
        if not go[0]:
            doc["skipped_for_time"].append(name)
            continue
        t1 = time.perf_counter()
        try:
            summary = train(cfgs[name], loader=loader)
        except Exception as e:  # noqa: BLE001 - recorded, and the next variant still runs
            doc["errors"][name] = f"{type(e).__name__}: {e}"[:500]
            print(f"[bench] {preset}/{name}: FAILED {doc['errors'][name]}", file=sys.stderr, flush=True)
            if info.world_size > 1:
                raise  # the other ranks may be inside a collective: end the run (results so far are written)
            continue
        finally:
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
        if info.rank == 0:
            ranks = summary["ranks"]
            row = {
                "variant": name,
                "pipeline": summary["pipeline"],
                "options": VARIANTS[name][1],
                "step_ms_p50": summary["step_ms_p50"],
                "step_ms_p90": summary["step_ms_p90"],
                "peak_allocated_p90_bytes": _p90([r["peak_allocated_bytes"] for r in ranks]),
                "peak_reserved_p90_bytes": _p90([r["peak_reserved_bytes"] for r in ranks]),
                "qps": summary["qps"],
                "host_step_ms_p50_rank0": ranks[0]["host_step_ms_p50"],
                "embedding_backend": ranks[0]["embedding_backend"],
                "final_loss_rank0": ranks[0]["final_loss"],
                "run_s": time.perf_counter() - t1,
            }
            doc["rows"].append(row)
            _ratios(doc)
            publish(doc)
            print(f"[bench] {preset}/{name}: P90 {row['step_ms_p90']:.3f} ms  alloc {_gb(row['peak_allocated_p90_bytes'])}  "
                  f"reserved {_gb(row['peak_reserved_p90_bytes'])}  host {row['host_step_ms_p50_rank0']:.2f} ms/step  "
                  f"({row['run_s']:.1f} s)", file=sys.stderr, flush=True)
    del loader
    gc.collect()
    if info.rank != 0:
        return None
    _ratios(doc)
    publish(doc)
    return doc


def _ratios(doc: dict) -> None:
    rows = doc["rows"]
    ref = next((r["step_ms_p90"] for r in rows if r["variant"] == "sparse"), None)
    for r in rows:
        r["p90_vs_sparse"] = r["step_ms_p90"] / ref if ref else None
    by = {r["variant"]: r for r in rows}
    targets = {}
    if ref:
        fused = [(v, r["p90_vs_sparse"]) for v, r in by.items() if r["pipeline"] == "fused"]
        if "fused" in by:
            targets["fused_p90_le_0.95x_sparse"] = by["fused"]["p90_vs_sparse"] <= 0.95
        if fused:
            best = min(fused, key=lambda x: x[1])
            targets[f"best_fused_option_le_0.95x_sparse ({best[0]})"] = best[1] <= 0.95
        if "semi" in by:
            targets["semi_p90_le_0.92x_sparse"] = by["semi"]["p90_vs_sparse"] <= 0.92
    doc["targets"] = targets


def _markdown(doc: dict) -> list[str]:
    spec = doc["spec"]
    lines = [
        f"## {doc['world_size']} x {doc['device']}, preset {doc['preset']}" + (f" (run {doc['run']})" if doc.get("run", 1) > 1 else ""),
        "",
        f"batch {spec['batch']}/GPU, {spec['tables']} tables x {spec['rows']} x {spec['dim']}, pooling {spec['pooling']}, "
        f"over arch {spec['over_arch']}, {spec['task_heads']} task head(s), Adam foreach={spec['adam_foreach']}, "
        f"main stream priority {spec['main_priority']}",
        "",
        "| Pipeline | Runtime (P90) | Peak Memory alloc (P90) | Peak Memory reserved (P90) | P90 / SparseDist | host ms/step (P50) |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        ratio = "-" if r.get("p90_vs_sparse") is None else f"{r['p90_vs_sparse']:.3f}"
        lines.append(f"| {r['variant']} | {r['step_ms_p90']:.3f} ms | {_gb(r['peak_allocated_p90_bytes'])} | "
                     f"{_gb(r['peak_reserved_p90_bytes'])} | {ratio} | {r['host_step_ms_p50_rank0']:.2f} |")
    backends = sorted({str(r["embedding_backend"]) for r in doc["rows"]})
    if backends:
        lines += ["", "Embedding backend: " + ", ".join(backends) + ("" if backends == ["cuda"] else "  (NOT the CUDA kernels)")]
    if doc["targets"]:
        lines += ["", "Targets: " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in doc["targets"].items())]
    if doc["skipped_for_time"]:
        lines.append("Skipped (time budget): " + ", ".join(doc["skipped_for_time"]))
    for k, v in doc["errors"].items():
        lines.append(f"FAILED {k}: {v}")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--gpus", type=int, default=1, help="ranks (one GPU each); > 1 relaunches under torch.distributed.run")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test of the script (gloo)")
    ap.add_argument("--plan", default=None,
                    help="PRESET[:VARIANT+VARIANT...],... (default: the built-in plan, headline preset first); "
                         "the first preset's traces go to <out>/<variant>/")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--profile-steps", type=int, default=2,
                    help="profiled steps per variant (2 keeps a headline trace under 2 MB gzipped)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="start no new variant after this many seconds (the rest are listed as skipped)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_pipelines: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.gpus > 1 and "RANK" not in os.environ:
        if args.device == "cuda" and torch.cuda.device_count() < args.gpus:
            print(f"bench_pipelines: error: --gpus {args.gpus} but {torch.cuda.device_count()} GPU(s) here", file=sys.stderr)
            return 2
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.gpus}",
               str(Path(__file__).resolve()), *sys.argv[1:]]
        return subprocess.run(cmd).returncode
    if args.plan:
        plans = []
        for item in args.plan.split(","):
            preset, _, vs = item.partition(":")
            plans.append((preset, [v for v in vs.split("+") if v] or list(MAIN)))
    else:
        plans = [(p, list(vs)) for p, vs in PLAN]
    bad = [p for p, _ in plans if p not in PRESETS] + [v for _, vs in plans for v in vs if v not in VARIANTS]
    if bad:
        print(f"bench_pipelines: error: unknown presets/variants {bad}", file=sys.stderr)
        return 2
    info = init_from_env(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    docs: list[dict] = []

    def publish(doc: dict | None = None) -> None:
        """Rank 0: results.json and results.md with every preset so far."""
        shown = docs + ([doc] if doc is not None and doc not in docs else [])
        result = {"versions": _versions(), "total_s": time.perf_counter() - t0, "presets": shown}
        (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
        lines = [f"# Pipelines on {info.world_size} GPU(s)", ""] + [line for d in shown for line in _markdown(d)]
        (out / "results.md").write_text("\n".join(lines))

    for k, (preset, names) in enumerate(plans):
        # the first preset's traces go straight into --out/<variant>/, the others' under
        # --out/<preset>/ (a preset's second run: --out/<preset>_2/)
        runs = sum(p == preset for p, _ in plans[:k])
        folder = out if k == 0 else out / (preset if runs == 0 else f"{preset}_{runs + 1}")
        doc = _run_preset(preset, names, args, info, folder, t0, publish, run=runs + 1)
        if doc is not None:
            docs.append(doc)
    if info.rank == 0:
        publish()
        print((out / "results.md").read_text(), file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
