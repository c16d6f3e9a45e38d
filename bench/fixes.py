"""What the fixes of issue 5 cost or save: delta tracking, sync-free writeback, in-place batch
copy (one GPU).

    python -m bench.fixes --out "$OUT"            # on a GPU; all three parts
    python -m bench.fixes --out /tmp/x --quick    # tiny sizes, runs on a CPU too
    python -m bench.fixes --analyze DIR --out OUT  # CPU, afterwards: tracekit on DIR's traces

Parts, each in its own subprocess (a failing part does not stop the others; each writes its
JSON as soon as it has it, the parent merges what exists):

(a) delta tracking, one TableBatchedEmbedding + an MLP, steps of ~tens of ms:
    step time with no tracking / blocking / async (mapped) / async (memcpy), median over
    interleaved windows; a profiled trace of a few steps per variant; and a check that a host
    mirror rebuilt from the deltas equals the device tables.
(b) writeback (EXACT_SGD, bag mode, one index per bag): legacy vs precomputed vs none:
    step time, backward time (GPU span between events around ``loss.backward()``, and host
    time of the call), a profiled trace of each, and a check that the tables are identical.
(c) in-place batch copy with E's SparseDist pipeline and a batch of about 1 GB:
    peak reserved, bytes reserved per stream (memcpy / data-dist / main) from
    ``torch.cuda.memory._snapshot()``, a memory snapshot (``_dump_snapshot``) and a profiled
    trace (with memory events), standard vs in-place, each variant in a fresh process.

Writes under --out: issue5_results.json (everything), issue5_results.md (tables),
issue5_<part>.json per part, traces/issue5_*.json.gz and, beside the two in-place-copy
traces, their snapshots traces/issue5_inplace_{standard,inplace}.pickle.
Traces are labelled with DESIGN.md's stage names (## forward i ##, ## backward i ##,
## optimizer i ##, ProfilerStep#N) so ``tracekit analyze`` reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from torch import nn
from torch.profiler import profile, record_function, schedule

from bench.common import method, module_command, proof_manifest, repo_env
from runtime.profiling import make_profiler, trace_counts

PART_TIMEOUT_S = {"a": 240, "b": 200, "c_standard": 150, "c_inplace": 150, "c_timed": 90}
"""Most seconds each part may run (c_timed: each timed round's process); ``--budget-s`` caps the
sum (the rest is skipped)."""
TRACES = Path("commit/sample_traces/issue5")
"""Where the traces and snapshots go under --out: the repository's layout (the lead copies
``commit/`` in); the explain proof's manifest names them by their repository paths."""
PROOF_PAIRS = (
    ("async_delta_copy", "a", "blocking", "async", "issue5_delta_{}"),
    ("precomputed_writeback", "b", "legacy", "precomputed", "issue5_writeback_{}"),
    ("inplace_batch_copy", "c", "standard", "inplace", "issue5_inplace_{}"),
)
"""(fix, part, before, after, trace stem) of each pair of the explain proof."""


# ------------------------------------------------------------------------------------------
# shared helpers
# ------------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def gzip_trace(json_path: Path) -> dict:
    """json -> json.gz beside it (the .json is removed); returns name and sizes."""
    gz = json_path.with_suffix(".json.gz")
    with open(json_path, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw = json_path.stat().st_size
    json_path.unlink()
    return {"file": str(gz), "bytes_json": raw, "bytes_gz": gz.stat().st_size}


class Model(nn.Module):
    """A TableBatchedEmbedding (pooled SUM) + an MLP on the concatenated embeddings."""

    def __init__(self, emb: nn.Module, in_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        from runtime.model import mlp

        self.emb = emb
        self.mlp = mlp((in_dim, *[hidden] * layers, 1), last_relu=False).to(emb.weights.device)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        pooled = self.emb(indices, offsets)  # (B, F*D)
        logits = self.mlp(pooled).squeeze(1)  # (B,)
        return nn.functional.binary_cross_entropy_with_logits(logits, labels)


def make_embedding(cfg: dict, device: torch.device, optimizer: str):
    from runtime.embedding import OptimizerConfig, OptimType, Pooling, TableBatchedEmbedding, TableConfig

    opt = OptimType.EXACT_SGD if optimizer == "sgd" else OptimType.EXACT_ROWWISE_ADAGRAD
    torch.manual_seed(0)
    return TableBatchedEmbedding(
        [TableConfig(cfg["rows"], cfg["dim"]) for _ in range(cfg["tables"])],
        pooling=Pooling.SUM,
        optimizer=OptimizerConfig(opt, 0.05),
        device=device,
    )


def make_batches(cfg: dict, device: torch.device, count: int) -> list[tuple]:
    """``count`` device batches: (indices (F*B*L,), offsets (F*B+1,), labels (B,)); every bag
    holds exactly L ids, uniform over the table."""
    gen = torch.Generator(device="cpu").manual_seed(1)
    f, b, l = cfg["tables"], cfg["batch"], cfg["pooling"]
    out = []
    for _ in range(count):
        idx = torch.randint(0, cfg["rows"], (f * b * l,), generator=gen)
        off = torch.arange(0, f * b * l + 1, l, dtype=torch.int64)
        lab = torch.randint(0, 2, (b,), generator=gen).float()
        out.append((idx.to(device), off.to(device), lab.to(device)))
    return out


STAGES = ("zero_grad", "forward", "backward", "optimizer")


def train_step(model: Model, opt: torch.optim.Optimizer, batch: tuple, i: int, timing: dict | None = None) -> None:
    """One step under DESIGN.md's labels. ``timing``: collects backward GPU span / host time
    ("events", "host_s": perf_counter around ``loss.backward()`` only) and the host seconds of
    each stage ("stage_s": {stage: [s, ...]})."""
    indices, offsets, labels = batch
    marks = [time.perf_counter()]
    with record_function("## zero_grad ##"):
        opt.zero_grad(set_to_none=True)
    marks.append(time.perf_counter())
    with record_function(f"## forward {i} ##"):
        loss = model(indices, offsets, labels)
    marks.append(time.perf_counter())
    with record_function(f"## backward {i} ##"):
        if timing is not None:
            on_gpu = indices.is_cuda
            if on_gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.perf_counter()
            loss.backward()
            timing["host_s"].append(time.perf_counter() - t0)
            if on_gpu:
                end.record()
                timing["events"].append((start, end))
        else:
            loss.backward()
    marks.append(time.perf_counter())
    with record_function(f"## optimizer {i} ##"):
        opt.step()
    if timing is not None:
        marks.append(time.perf_counter())
        per = timing.setdefault("stage_s", {})
        for name, a, b in zip(STAGES, marks, marks[1:]):
            per.setdefault(name, []).append(b - a)


def timed_window(run_steps, device: torch.device, steps: int) -> float:
    """Seconds per step of ``run_steps(steps)`` (host wall time, GPU drained at both ends)."""
    sync(device)
    t0 = time.perf_counter()
    run_steps(steps)
    sync(device)
    return (time.perf_counter() - t0) / steps


def profiler_for(device: torch.device, path: Path, active: int) -> profile:
    """The runtime's profiler (``[memory]`` events, cuda_sync events where torch has them) that
    skips one warm-up step, records ``active`` steps (``ProfilerStep#N`` each) and writes
    ``path`` when they are done; call ``prof.step()`` after every step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return make_profiler(
        device,
        schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        memory=True,
    )


def step_mark(device: torch.device):  # noqa: ANN201 - a CUDA event (recorded now) or the host clock
    if device.type != "cuda":
        return time.perf_counter()
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def step_ms(marks: list) -> list[float]:
    """Times between consecutive marks of ``step_mark`` (read after a sync), ms."""
    if marks and not isinstance(marks[0], float):
        return [round(a.elapsed_time(b), 4) for a, b in zip(marks, marks[1:])]
    return [round((b - a) * 1e3, 4) for a, b in zip(marks, marks[1:])]


def profile_steps(run_one, device: torch.device, path: Path, steps: int) -> dict:
    """A trace of ``steps`` steps (after 2 unprofiled steps and 1 profiler warm-up step); the
    profiled steps' own times (CUDA events, profiler overhead included) as traced_step_ms."""
    for _ in range(2):
        run_one()
    sync(device)
    marks = [step_mark(device)]
    with profiler_for(device, path, steps) as prof:
        for _ in range(steps + 1):
            run_one()
            marks.append(step_mark(device))
            if _ == steps:
                sync(device)  # the last active step's GPU work ends inside the trace
            prof.step()
    info = gzip_trace(path)
    return {**info, "traced_step_ms": step_ms(marks)[1:], "counts": trace_counts(info["file"])}


def interleaved_windows(variants: list[str], rounds: int, window, device: torch.device) -> dict:  # noqa: ANN001
    """The benchmark method (bench/common/method.py) over timed windows: a warm-up round in the given
    order (discarded), then ``rounds`` timed rounds in mirrored pairs of rotated orders. One
    window of a variant: the allocator emptied and its peak reset, then ``window(name)`` (the
    variant's set-up and its timed steps: seconds per step). Returns the orders, the warm-up
    round's and each timed round's figures ({"step_ms", "peak_reserved"}) and the summary
    (median over rounds [95 % interval], ratios to ``variants[0]`` within each round)."""
    orders = [list(variants)] + method.round_orders(list(variants), rounds)
    per_round: list[dict] = []
    for order in orders:
        figs = {}
        for name in order:
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            sec = window(name)
            figs[name] = {"step_ms": sec * 1e3, "peak_reserved": torch.cuda.max_memory_reserved() if device.type == "cuda" else None}
        per_round.append(figs)
    return {"orders": orders, "warmup": per_round[0], "rounds": per_round[1:], "summary": method_summary(per_round[1:], variants[0])}


def method_summary(rounds: list[dict], reference: str) -> dict:
    """{variant: {"step", "step_ratio", "reserved", "reserved_ratio"}} (Estimate dicts) from timed
    rounds of {variant: {"step_ms", "peak_reserved"}}; ratios to ``reference`` within each round."""
    summary: dict = {}
    for key, label in (("step_ms", "step"), ("peak_reserved", "reserved")):
        rows = [{v: f[key] for v, f in r.items() if f.get(key) is not None} for r in rounds]
        if any(rows):
            for v, est in method.summarize(rows, reference).items():
                summary.setdefault(v, {})[label] = est["value"].to_dict()
                if "ratio" in est:
                    summary[v][f"{label}_ratio"] = est["ratio"].to_dict()
    return summary


def record_windows(res: dict) -> None:
    """The part's classic figures from its windows: median step ms of each variant over the
    timed rounds, every window's step ms, and the overhead over the first variant (the paired
    ratio's median, with its interval)."""
    m = res["method"]
    ref = next(iter(m["summary"]))
    res["step_ms"] = {v: round(f["step"]["median"], 3) for v, f in m["summary"].items()}
    res["step_ms_windows"] = {v: [round(r[v]["step_ms"], 3) for r in m["rounds"]] for v in m["summary"]}
    res["overhead_pct_vs_" + ref] = {
        v: [round((f["step_ratio"][k] - 1) * 100, 2) for k in ("median", "lo", "hi")]
        for v, f in m["summary"].items() if v != ref and "step_ratio" in f
    }


# ------------------------------------------------------------------------------------------
# (a) delta tracking
# ------------------------------------------------------------------------------------------
class HostMirror:
    """The consumer: keeps a host copy of every table up to date from the deltas."""

    def __init__(self, emb) -> None:  # noqa: ANN001
        self.tables = [t.detach().cpu().clone() for t in emb.split_embedding_weights()]
        self.rows = 0

    def __call__(self, delta) -> None:  # noqa: ANN001
        for t in delta.tables:
            if t.rows.numel():
                self.tables[t.table].index_copy_(0, t.rows, t.values)
        self.rows += delta.num_rows

    def equals(self, emb) -> bool:  # noqa: ANN001
        return all(torch.equal(a, b.detach().cpu()) for a, b in zip(self.tables, emb.split_embedding_weights()))


def part_a(cfg: dict, device: torch.device, out: Path, res: dict, save) -> None:  # noqa: ANN001
    from runtime.delta import track_deltas

    emb = make_embedding(cfg, device, "rowwise_adagrad")
    model = Model(emb, cfg["tables"] * cfg["dim"], cfg["hidden"], cfg["layers"])
    opt = torch.optim.SGD(model.mlp.parameters(), lr=0.01)
    data = make_batches(cfg, device, 4)
    res["config"] = cfg
    res["backend"] = emb.backend
    res["rows_per_step_upper_bound"] = cfg["tables"] * cfg["batch"] * cfg["pooling"]
    step = {"i": 0}

    def run(n: int) -> None:
        for _ in range(n):
            i = step["i"]
            train_step(model, opt, data[i % len(data)], i)
            step["i"] += 1

    variants = {
        "none": None,
        "blocking": dict(mode="blocking"),
        # the defaults: transport auto (= memcpy, copy engine), 2 host slots, 4 MiB pieces
        "async": dict(mode="async", transport="auto"),
        # copy kernels writing through the mapped view (the first run's "async")
        "async_mapped": dict(mode="async", transport="mapped"),
        # one host slot: every step waits for the previous copy-out (the first run's join)
        "async_1slot": dict(mode="async", transport="auto", slots=1),
        # the copy in one piece (the first run's copy)
        "async_nochunk": dict(mode="async", transport="auto", chunk_bytes=1 << 40),
        # the copy queued behind the next forward's kernels (runs under the dense work)
        "async_after_fwd": dict(mode="async", transport="auto", copy_after="next_forward"),
    }
    run(cfg["warmup"])
    extra: dict[str, dict] = {}

    def window(name: str) -> float:
        kw = variants[name]
        tracker = None
        if kw is not None:
            # consumer: none here (the copy thread already copies each delta out into fresh
            # CPU tensors); the mirror check below uses a real consumer
            tracker = track_deltas(emb, consumer=lambda d: None, initial_rows=res["rows_per_step_upper_bound"], **kw)
            run(2)  # first steps of a tracker (thread start-up) outside the window
        sec = timed_window(run, device, cfg["steps"])
        if tracker is not None:
            tracker.close()
            s = tracker.stats
            extra[name] = {
                "transport": s.transport,
                "slots": tracker.config.slots,
                "chunk_bytes": tracker.config.chunk_bytes,
                "copy_after": tracker.config.copy_after,
                "joins_waited": s.joins_waited,
                "join_wait_s": s.join_wait_s,
                "rows_delivered": s.rows,
                "steps": s.steps,
            }
        return sec

    # interleaved windows: drift hits every variant alike
    res["method"] = interleaved_windows(list(variants), cfg["windows"], window, device)
    record_windows(res)
    res["trackers"] = extra
    save()

    # correctness: a host mirror rebuilt from the deltas equals the device tables
    res["mirror_equals_device"] = {}
    for name in ("async", "async_mapped", "async_1slot", "async_nochunk", "async_after_fwd", "blocking"):
        mirror = HostMirror(emb)
        tracker = track_deltas(emb, consumer=mirror, **variants[name])
        run(cfg["verify_steps"])
        tracker.close()
        sync(device)
        res["mirror_equals_device"][name] = mirror.equals(emb)
        save()

    # traces: a few profiled steps per variant
    res["traces"] = {}
    for name, kw in variants.items():
        tracker = track_deltas(emb, consumer=lambda d: None, **kw) if kw is not None else None
        try:
            res["traces"][name] = profile_steps(
                lambda: run(1), device, out / TRACES / f"issue5_delta_{name}.json", cfg["trace_steps"]
            )
        finally:
            if tracker is not None:
                tracker.close()
        save()


# ------------------------------------------------------------------------------------------
# (b) writeback
# ------------------------------------------------------------------------------------------
def part_b(cfg: dict, device: torch.device, out: Path, res: dict, save) -> None:  # noqa: ANN001
    from runtime.writeback import enable_writeback

    cfg = {**cfg, "pooling": 1}  # writeback's domain: one id per bag
    res["config"] = cfg
    variants = {"none": None, "legacy": False, "precomputed": True}
    models = {}
    for name, pre in variants.items():
        emb = make_embedding(cfg, device, "sgd")
        if pre is not None:
            enable_writeback(emb, mode="bag", precompute=pre)
        model = Model(emb, cfg["tables"] * cfg["dim"], cfg["hidden"], cfg["layers"])
        models[name] = (model, torch.optim.SGD(model.mlp.parameters(), lr=0.01))
    res["backend"] = models["none"][0].emb.backend
    data = make_batches(cfg, device, 4)
    counters = {name: 0 for name in variants}

    def runner(name: str, timing: dict | None = None):
        model, opt = models[name]

        def run(n: int) -> None:
            for _ in range(n):
                i = counters[name]
                train_step(model, opt, data[i % len(data)], i, timing)
                counters[name] += 1

        return run

    # identical tables: legacy and precomputed saw the same batches from the same init
    for name in variants:
        runner(name)(cfg["warmup"])
    sync(device)
    res["legacy_equals_precomputed"] = torch.equal(models["legacy"][0].emb.weights, models["precomputed"][0].emb.weights)
    res["none_differs_from_writeback"] = not torch.equal(models["none"][0].emb.weights, models["legacy"][0].emb.weights)
    save()

    bwd: dict[str, dict] = {v: {"events": [], "host_s": []} for v in variants}
    res["method"] = interleaved_windows(
        list(variants), cfg["windows"], lambda name: timed_window(runner(name, bwd[name]), device, cfg["steps"]), device
    )
    sync(device)
    for b in bwd.values():  # the warm-up round's window (each variant's first) left out
        b["events"], b["host_s"] = b["events"][cfg["steps"]:], b["host_s"][cfg["steps"]:]
        b["stage_s"] = {st: x[cfg["steps"]:] for st, x in b.get("stage_s", {}).items()}
    record_windows(res)
    if device.type == "cuda":
        res["backward_gpu_ms"] = {
            v: round(statistics.median(s.elapsed_time(e) for s, e in b["events"]), 3) for v, b in bwd.items()
        }
    res["backward_host_ms"] = {v: round(statistics.median(b["host_s"]) * 1e3, 3) if b["host_s"] else None for v, b in bwd.items()}
    # where the host spends each windowed step: when the host runs ahead, the launch queue fills
    # and the waiting lands in whichever stage launches then
    res["window_host_ms_by_stage"] = {
        v: {st: round(statistics.median(x) * 1e3, 3) for st, x in b.get("stage_s", {}).items()} for v, b in bwd.items()
    }
    save()
    # the same steps with the GPU drained before each: the host cost of each stage itself (a
    # sync inside backward then waits only for this step's own queued work)
    drained: dict[str, dict] = {v: {"events": [], "host_s": []} for v in variants}
    for name in variants:
        run = runner(name, drained[name])
        for _ in range(cfg["drained_steps"]):
            sync(device)
            run(1)
    sync(device)
    res["drained_host_ms_by_stage"] = {
        v: {st: round(statistics.median(x) * 1e3, 3) for st, x in b.get("stage_s", {}).items()} for v, b in drained.items()
    }
    res["backward_host_drained_ms"] = {v: round(statistics.median(b["host_s"]) * 1e3, 3) for v, b in drained.items()}
    save()
    res["traces"] = {}
    for name in ("legacy", "precomputed"):
        res["traces"][name] = profile_steps(
            lambda: runner(name)(1), device, out / TRACES / f"issue5_writeback_{name}.json", cfg["trace_steps"]
        )
        save()


# ------------------------------------------------------------------------------------------
# (c) in-place batch copy (one variant per process: a fresh caching allocator)
# ------------------------------------------------------------------------------------------
def part_c(cfg: dict, device: torch.device, out: Path, res: dict, save, inplace: bool, traced: bool = True) -> None:  # noqa: ANN001
    """One variant in this (fresh) process. ``traced``: every step but the first profiled, with
    ``[memory]`` events, the allocator's history and a snapshot beside the trace (the method's
    warm-up round); else ``c_warmup`` + ``c_timed`` untraced steps timed with CUDA events (a
    timed round): step ms and peak memory only."""
    import runtime.pipelines.sparse_dist as sd
    from runtime.data import DataConfig, SyntheticLoader
    from runtime.model import DLRM, DenseOptimizerConfig, ModelConfig, make_dense_optimizer
    from runtime.sharding import shard_model

    tag = "inplace" if inplace else "standard"
    res["config"] = cfg
    res["traced"] = traced
    steps = cfg["c_batches"] if traced else cfg["c_warmup"] + cfg["c_timed"]
    mcfg = ModelConfig(
        num_embeddings=(cfg["c_rows"],) * cfg["c_tables"], embedding_dim=64, num_dense=cfg["c_dense"],
        dense_arch=(512, 256), over_arch=(512, 256), embedding_optimizer="sgd",
    )
    dcfg = DataConfig(
        num_embeddings=mcfg.num_embeddings, batch_size=cfg["c_batch"], num_batches=steps,
        pooling_factor=2.0, distribution="uniform", num_dense=cfg["c_dense"], distinct_batches=2, seed=3,
    )
    model = DLRM(mcfg, device=device)
    shard_model(model, process_group=None, device=device)
    opt = make_dense_optimizer(model, DenseOptimizerConfig(kind="sgd", lr=0.01))
    loader = SyntheticLoader(dcfg)
    host_batches = list(loader)  # built (and pinned) before anything is measured
    res["batch_bytes"] = host_batches[0].nbytes()
    res["backend"] = [m.backend for m in model.modules() if hasattr(m, "backend") and hasattr(m, "layout")]

    # the pipeline creates its streams itself: memcpy first, then data-dist (sparse_dist.py)
    created: list = []
    real_new_stream = sd.new_stream

    def recording_new_stream(dev, *, priority=0):  # noqa: ANN001
        s = real_new_stream(dev, priority=priority)
        created.append(s)
        return s

    sd.new_stream = recording_new_stream
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        if traced:
            torch.cuda.memory._record_memory_history(max_entries=cfg["c_history"], stacks="python")
    marks = [step_mark(device)]
    trace_path = out / TRACES / f"issue5_inplace_{tag}.json"
    # traced: the first step is the profiler's warm-up; the others are recorded, with [memory] events
    prof = profiler_for(device, trace_path, steps - 1) if traced else contextlib.nullcontext()
    with prof:
        t0 = time.perf_counter()

        def on_step(i: int) -> None:
            marks.append(step_mark(device))
            if traced:
                if i == steps - 1:
                    sync(device)
                prof.step()

        result = sd.train_sparse_dist(model, opt, host_batches, device=device, inplace_copy_batch_to_gpu=inplace, on_step=on_step)
        sync(device)
        res["seconds"] = round(time.perf_counter() - t0, 3)
    res["steps"] = result.steps
    res["final_loss"] = float(result.losses[-1]) if result.losses else None
    times = step_ms(marks)
    if traced:
        info = gzip_trace(trace_path)
        res["trace"] = {**info, "traced_step_ms": times[1:], "counts": trace_counts(info["file"])}
    else:
        res["step_ms_all"] = times
        res["step_ms"] = round(statistics.median(times[cfg["c_warmup"]:]), 4)
    save()
    if not on_cuda:
        res["note"] = "no CUDA: allocator figures not available"
        return
    res["peak_reserved"] = torch.cuda.max_memory_reserved()
    res["peak_allocated"] = torch.cuda.max_memory_allocated()
    if not traced:
        return
    snap = torch.cuda.memory._snapshot()
    names = {0: "main (default)"}
    main_handle = torch.cuda.current_stream().cuda_stream
    names[main_handle] = "main (default)"
    if len(created) >= 2:
        names[created[0].cuda_stream] = "memcpy"
        names[created[1].cuda_stream] = "data_dist"
    per_stream: dict[str, int] = {}
    for seg in snap["segments"]:
        name = names.get(seg.get("stream", 0), f"stream {seg.get('stream')}")
        per_stream[name] = per_stream.get(name, 0) + int(seg["total_size"])
    res["reserved_by_stream_at_end"] = per_stream
    res["stream_handles"] = {names[k]: k for k in names}
    # beside the trace, same stem: `tracekit analyze <trace>` finds it there
    snap_path = trace_path.with_suffix(".pickle")
    torch.cuda.memory._dump_snapshot(str(snap_path))
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(snap_path, "rb") as f:
        gz_size = len(gzip.compress(f.read(), 6))
    res["snapshot"] = {"file": str(snap_path), "bytes": snap_path.stat().st_size, "bytes_gz": gz_size}
    save()


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def config(quick: bool) -> dict:
    if quick:
        return dict(
            tables=3, rows=2000, dim=16, batch=64, pooling=2, hidden=64, layers=2,
            warmup=2, windows=2, steps=3, verify_steps=3, trace_steps=2, drained_steps=3,
            c_tables=2, c_rows=1000, c_dense=16, c_batch=64, c_batches=4, c_history=2000,
            c_warmup=1, c_timed=2, c_rounds=2,
        )
    return dict(
        tables=8, rows=1_000_000, dim=64, batch=8192, pooling=2, hidden=3072, layers=3,
        warmup=10, windows=6, steps=30, verify_steps=12, trace_steps=3, drained_steps=15,
        # (c): dense features make a ~1.07 GB batch (32768 x 8192 fp32) + ~0.5M ids; the traced
        # process is the method's warm-up round, then c_rounds timed rounds of one process each
        c_tables=8, c_rows=100_000, c_dense=8192, c_batch=32768, c_batches=6, c_history=4000,
        c_warmup=3, c_timed=8, c_rounds=6,
    )


def run_part(part: str, out: Path, quick: bool) -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = config(quick or device.type != "cuda")
    path = out / f"issue5_{part}.json"
    res: dict = {"part": part, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                 "torch": torch.__version__, "status": "running"}

    def save() -> None:
        write_json(path, res)

    save()
    try:
        if part == "a":
            part_a(cfg, device, out, res, save)
        elif part == "b":
            part_b(cfg, device, out, res, save)
        elif part in ("c_standard", "c_inplace"):
            part_c(cfg, device, out, res, save, inplace=part == "c_inplace")
        elif part.startswith(("c_standard_r", "c_inplace_r")):  # a timed round: untraced
            part_c(cfg, device, out, res, save, inplace=part.startswith("c_inplace"), traced=False)
        else:
            raise ValueError(f"unknown part {part!r}")
        res["status"] = "ok"
        return 0
    except Exception as exc:  # noqa: BLE001 - the parent reports it and goes on
        res["status"] = "failed"
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()[-4000:]
        return 1
    finally:
        save()


def fmt(v) -> str:  # noqa: ANN001
    if isinstance(v, float):
        return f"{v:.3f}"
    return "-" if v is None else str(v)


def chunk_text(n) -> str:  # noqa: ANN001
    if n is None:
        return "-"
    return "whole" if n >= 1 << 40 else f"{n / 2**20:g} MiB"


def gib(n) -> str:  # noqa: ANN001
    return "-" if n is None else f"{n / 2**30:.3f} GiB"


def est_text(e: dict | None, scale: float = 1.0) -> str:
    return "-" if not e else f"{e['median'] * scale:.3f} [{e['lo'] * scale:.3f}, {e['hi'] * scale:.3f}]"


def pct_text(v) -> str:  # noqa: ANN001 - [median, lo, hi] in %, or a number
    if isinstance(v, list):
        return f"{v[0]:+.2f}% [{v[1]:+.2f}, {v[2]:+.2f}]"
    return f"{fmt(v)}%"


def proof_pairs(results: dict) -> list[dict]:
    """The explain proof's pairs (PROOF_PAIRS) from the parts' results: timed rounds, traces."""
    pairs = []
    for fix, part, before, after, stem in PROOF_PAIRS:
        if part == "c":
            m = results.get("c_method") or {}
            traced = {v: results.get(f"c_{v}", {}) for v in (before, after)}
            traced_ms = {v: (t.get("trace") or {}).get("traced_step_ms", []) for v, t in traced.items()}
            snapshots = {v: f"{TRACES.relative_to('commit')}/{stem.format(v)}.pickle" if traced[v].get("snapshot") else None
                         for v in (before, after)}
        else:
            m = (results.get(part) or {}).get("method") or {}
            traces = (results.get(part) or {}).get("traces") or {}
            traced_ms = {v: (traces.get(v) or {}).get("traced_step_ms", []) for v in (before, after)}
            snapshots = {before: None, after: None}
        rounds = [r for r in m.get("rounds", []) if before in r and after in r]
        if not rounds:
            continue

        def series(v: str) -> dict:
            return {"step_ms": [r[v]["step_ms"] for r in rounds], "reserved": [r[v]["peak_reserved"] for r in rounds]}

        sides = {v: proof_manifest.side(v, trace=f"{TRACES.relative_to('commit')}/{stem.format(v)}.json.gz",
                                        snapshot=snapshots[v], step_ms=series(v)["step_ms"], reserved=series(v)["reserved"],
                                        traced_step_ms=traced_ms[v]) for v in (before, after)}
        pairs.append(proof_manifest.pair(fix, {"bench": "issue5", "part": part}, expect="memory" if part == "c" else "time",
                                         before=sides[before], after=sides[after], before_rounds=series(before),
                                         after_rounds=series(after)))
    return pairs


def write_commit(out: Path, results: dict, md: str, *, quick: bool) -> None:
    """``<out>/commit/``: the results (``bench/results/issue5-<gpu>-<date>.{json,md}``) and the
    explain proof's manifest (``bench/results/proof-issue5-<gpu>-<date>.json``) beside the traces
    and snapshots already there (``sample_traces/issue5/``)."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    device = next((r.get("device") for r in results.values() if isinstance(r, dict) and r.get("device")), "cpu")
    tag = f"{proof_manifest.device_slug(device)}-{now:%Y%m%d}" + ("-quick" if quick else "")
    res = out / "commit" / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    write_json(res / f"issue5-{tag}.json", results)
    (res / f"issue5-{tag}.md").write_text(f"{md}\nWritten {now.isoformat(timespec='seconds')} by bench/fixes.py.\n")
    pairs = proof_pairs(results)
    if pairs:
        proof_manifest.write(res / f"proof-issue5-{tag}.json", pairs, repo=out / "commit", device=device,
                             date_utc=now.isoformat(timespec="seconds"), source=f"bench/results/issue5-{tag}.json",
                             versions={"torch": torch.__version__})


def summarize(out: Path, parts: list[str], wall: dict) -> tuple[dict, str]:
    results = {}
    for p in parts:
        f = out / f"issue5_{p}.json"
        results[p] = json.loads(f.read_text()) if f.exists() else {"status": "no output"}
        results[p]["wall_s"] = wall.get(p)
    timed_c = {}
    for p in parts:
        if p.startswith(("c_standard_r", "c_inplace_r")) and results[p].get("status") == "ok":
            v, k = p[2:].rsplit("_r", 1)
            timed_c.setdefault(int(k), {})[v] = {"step_ms": results[p].get("step_ms"), "peak_reserved": results[p].get("peak_reserved")}
    if timed_c:
        rounds = [timed_c[k] for k in sorted(timed_c)]
        results["c_method"] = {"rounds": rounds, "summary": method_summary(rounds, "standard")}
    lines = ["# Issue 5 benchmark", "",
             "Method (bench/common/method.py): a warm-up round (discarded), then timed rounds in mirrored pairs of rotated "
             "orders; (a) and (b): one window of steps per variant and round, (c): one fresh process per variant and "
             "round (the traced process is the warm-up round). Figures: median over rounds [95 % bootstrap interval]; "
             "ratios to the first variant within each round.", ""]
    for key, title in (("a", "(a) delta tracking"), ("b", "(b) writeback"), ("c_method", "(c) in-place batch copy, timed rounds")):
        m = results.get(key, {})
        m = m.get("method", m)
        if m.get("summary"):
            lines += [f"## {title}: method", "", "| variant | step ms | / first | peak reserved GiB | / first |", "|---|---|---|---|---|"]
            for v, f in m["summary"].items():
                lines.append(f"| {v} | {est_text(f.get('step'))} | {est_text(f.get('step_ratio'))} | "
                             f"{est_text(f.get('reserved'), 2**-30)} | {est_text(f.get('reserved_ratio'))} |")
            lines.append("")
    a = results.get("a", {})
    if a:
        lines += [f"## (a) delta tracking — status {a.get('status')}, backend {a.get('backend')}, {a.get('device')}", "",
                  "| variant | step ms (median) | overhead vs none | transport | slots | piece | copy after | joins waited (of steps) | join wait ms | mirror == device |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v in a.get("step_ms", {}):
            tr = a.get("trackers", {}).get(v, {})
            wait_ms = tr.get("join_wait_s")
            lines.append(
                f"| {v} | {fmt(a.get('step_ms', {}).get(v))} | {pct_text(a.get('overhead_pct_vs_none', {}).get(v))} "
                f"| {tr.get('transport', '-')} | {tr.get('slots', '-') if tr.get('transport') else '-'} "
                f"| {chunk_text(tr.get('chunk_bytes')) if tr.get('transport') else '-'} "
                f"| {tr.get('copy_after', '-') if tr.get('transport') else '-'} "
                f"| {tr.get('joins_waited', '-')} ({tr.get('steps', '-')}) | {fmt(wait_ms * 1e3 if wait_ms is not None else None)} "
                f"| {a.get('mirror_equals_device', {}).get(v, '-')} |"
            )
        lines.append("")
    b = results.get("b", {})
    if b:
        lines += [f"## (b) writeback (bag mode) — status {b.get('status')}, backend {b.get('backend')}", "",
                  f"legacy == precomputed tables: {b.get('legacy_equals_precomputed')}; "
                  f"writeback changes the result vs plain SGD: {b.get('none_differs_from_writeback')}", "",
                  "| variant | step ms | backward GPU ms | backward host ms | backward host ms, GPU drained first |",
                  "|---|---|---|---|---|"]
        for v in ("none", "legacy", "precomputed"):
            lines.append(
                f"| {v} | {fmt(b.get('step_ms', {}).get(v))} | {fmt(b.get('backward_gpu_ms', {}).get(v))} "
                f"| {fmt(b.get('backward_host_ms', {}).get(v))} | {fmt(b.get('backward_host_drained_ms', {}).get(v))} |"
            )
        for key, title in (("window_host_ms_by_stage", "host ms per stage in the timed windows (median)"),
                           ("drained_host_ms_by_stage", "host ms per stage, GPU drained before each step (median)")):
            if b.get(key):
                lines += ["", f"{title}:", "", "| variant | " + " | ".join(STAGES) + " |", "|---" * (len(STAGES) + 1) + "|"]
                for v, per in b[key].items():
                    lines.append(f"| {v} | " + " | ".join(fmt(per.get(st)) for st in STAGES) + " |")
        lines.append("")
    cs, ci = results.get("c_standard", {}), results.get("c_inplace", {})
    if cs or ci:
        lines += [f"## (c) in-place batch copy — status {cs.get('status')}/{ci.get('status')}, "
                  f"batch {gib(cs.get('batch_bytes') or ci.get('batch_bytes'))}", "",
                  "| variant | peak reserved | peak allocated | reserved on memcpy stream | reserved on data_dist | reserved on main |",
                  "|---|---|---|---|---|---|"]
        for name, c in (("standard", cs), ("inplace", ci)):
            per = c.get("reserved_by_stream_at_end", {})
            lines.append(
                f"| {name} | {gib(c.get('peak_reserved'))} | {gib(c.get('peak_allocated'))} | {gib(per.get('memcpy', 0) if per else None)} "
                f"| {gib(per.get('data_dist', 0) if per else None)} | {gib(per.get('main (default)', 0) if per else None)} |"
            )
        if cs.get("peak_reserved") and ci.get("peak_reserved"):
            saved = cs["peak_reserved"] - ci["peak_reserved"]
            mem_s = cs["reserved_by_stream_at_end"].get("memcpy", 0)
            mem_i = ci["reserved_by_stream_at_end"].get("memcpy", 0)
            results["c_summary"] = {
                "peak_reserved_saved_bytes": saved,
                "saved_over_batch": round(saved / cs["batch_bytes"], 3),
                "memcpy_reserved_ratio_inplace_over_standard": round(mem_i / mem_s, 4) if mem_s else None,
            }
            lines += ["", f"peak reserved saved: {gib(saved)} = {results['c_summary']['saved_over_batch']} batches; "
                      f"memcpy-stream reserved in-place/standard = {results['c_summary']['memcpy_reserved_ratio_inplace_over_standard']}"]
        lines.append("")
    lines += ["## files", ""]
    for p, r in results.items():
        for t in ([r.get("trace")] if r.get("trace") else []) + list((r.get("traces") or {}).values()):
            c = t.get("counts") or {}
            lines.append(f"- {t['file']} ({t['bytes_gz']} B gz; {c.get('cuda_sync')} cuda_sync, {c.get('memory')} [memory] events)")
        if r.get("snapshot"):
            lines.append(f"- {r['snapshot']['file']} ({r['snapshot']['bytes']} B, {r['snapshot']['bytes_gz']} B gz)")
        if r.get("status") not in ("ok", None):
            lines.append(f"- part {p}: {r.get('status')}: {r.get('error', '')}")
    return results, "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------
# afterwards, on a CPU with tracekit installed: what tracekit says about the traces
# ------------------------------------------------------------------------------------------
PAIRS = {
    "delta": ["issue5_delta_none", "issue5_delta_blocking", "issue5_delta_async", "issue5_delta_async_memcpy",
              "issue5_delta_async_mapped", "issue5_delta_async_1slot", "issue5_delta_async_nochunk",
              "issue5_delta_async_after_fwd"],
    "writeback": ["issue5_writeback_legacy", "issue5_writeback_precomputed"],
    "inplace": ["issue5_inplace_standard", "issue5_inplace_inplace"],
}


def tracekit_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, timeout=600)


def analyze(src: Path, out: Path) -> int:
    """Runs ``tracekit analyze`` on every issue-5 trace under ``src`` (a bench --out folder)
    and ``tracekit compare`` on each before/after group; writes the outputs and a check list
    (sync stalls per step, stalls in the backward phase, bytes reserved per stream) to
    ``out/tracekit/`` and ``out/issue5_tracekit.md``."""
    traces = next((d for d in (src / TRACES, src / "traces") if d.is_dir()), src)
    dest = out / "tracekit"
    dest.mkdir(parents=True, exist_ok=True)
    lines = ["# Issue 5: what tracekit finds in the benchmark's traces", ""]
    found: dict[str, dict] = {}
    for group, stems in PAIRS.items():
        paths = [traces / f"{s}.json.gz" for s in stems if (traces / f"{s}.json.gz").exists()]
        for p in paths:
            stem = p.name[: -len(".json.gz")]
            text = tracekit_cli("analyze", "--no-hta", "--no-cache", str(p))
            (dest / f"{stem}.txt").write_text(text.stdout + text.stderr)
            js = tracekit_cli("analyze", "--no-hta", "--no-cache", "--format", "json", str(p))
            try:
                found[stem] = json.loads(js.stdout)["analyses"][0]
            except Exception as exc:  # noqa: BLE001
                found[stem] = {"error": f"{exc}: {js.stderr[-500:]}"}
        if len(paths) >= 2:
            cmp = tracekit_cli("compare", "--no-cache", *map(str, paths))
            (dest / f"compare_{group}.txt").write_text(cmp.stdout + cmp.stderr)
            lines += [f"## tracekit compare ({group})", "", "```", (cmp.stdout + cmp.stderr).rstrip(), "```", ""]
    lines += ["## checks", ""]
    for stem, a in found.items():
        if "error" in a:
            lines.append(f"- {stem}: tracekit failed: {a['error']}")
            continue
        sy = a.get("syncs") or {}
        steps = (a.get("steps") or {}).get("steps") or []
        per_step = {int(r["step"]): int(r["count"]) for r in sy.get("by_step", [])}
        by_phase = {r["phase"]: (int(r["count"]), int(r["total_ns"])) for r in sy.get("by_phase", [])}
        sites = [f"{r['call_site']} x{r['count']}" for r in sy.get("by_call_site", [])][:4]
        lines.append(
            f"- {stem}: {len(steps)} steps; sync stalls {sy.get('count')} ({sy.get('total_ns', 0) / 1e6:.3f} ms); "
            f"per step {per_step}; by phase {by_phase}; call sites {sites}"
        )
        snap = a.get("snapshot")
        if snap:
            lines.append(f"  snapshot: {json.dumps(snap, default=str)[:800]}")
    lines += ["", *issue_checks(found)]
    md = "\n".join(lines) + "\n"
    (out / "issue5_tracekit.md").write_text(md)
    write_json(out / "issue5_tracekit.json", found)
    print(md)
    return 0


BENCH_SYNC = "cudaDeviceSynchronize"
"""the benchmark's own drains (``torch.cuda.synchronize``); the runtime never calls it"""


def issue_checks(found: dict[str, dict]) -> list[str]:
    """The issue's three tracekit checks, each with its figures and a verdict:
    delta tracking: a blocking copy/sync in every step for blocking, none for async (the
    benchmark's own ``cudaDeviceSynchronize`` at the end of the profiled window left out);
    writeback: sync stalls in the backward phase > 0 for legacy, 0 for precomputed;
    in-place copy: the snapshot beside each trace, bytes reserved per stream."""

    def stalls(stem: str) -> list[dict] | None:
        a = found.get(stem)
        if not a or "error" in a:
            return None
        return [s for s in (a.get("syncs") or {}).get("stalls", []) if s["name"] != BENCH_SYNC]

    def steps(stem: str) -> list[int]:
        return [int(s["step"]) for s in ((found.get(stem) or {}).get("steps") or {}).get("steps", [])]

    out = ["## issue 5 checks (the benchmark's own cudaDeviceSynchronize left out)", ""]
    for stem in PAIRS["delta"]:
        st = stalls(stem)
        if st is None:
            continue
        per = {k: sum(1 for s in st if s["step"] == k) for k in steps(stem)}
        want = "every step" if stem.endswith("blocking") else "no step"
        ok = all(per.values()) if stem.endswith("blocking") else not any(per.values())
        if stem.endswith("none"):
            want, ok = "no step", not any(per.values())
        out.append(f"- {stem}: blocking copies/syncs per profiled step {per} (want: in {want}) -> {'OK' if ok else 'NOT MET'}")
    for stem in PAIRS["writeback"]:
        st = stalls(stem)
        if st is None:
            continue
        bwd = [s for s in st if s["phase"] == "backward"]
        ok = (len(bwd) > 0) if stem.endswith("legacy") else (len(bwd) == 0)
        out.append(
            f"- {stem}: sync stalls in the backward phase {len(bwd)} ({sum(s['dur_ns'] for s in bwd) / 1e6:.3f} ms CPU) "
            f"(want: {'> 0' if stem.endswith('legacy') else '0'}) -> {'OK' if ok else 'NOT MET'}"
        )
    for stem in PAIRS["inplace"]:
        a = found.get(stem)
        if not a or "error" in a:
            continue
        snap = a.get("snapshot")
        if not snap:
            out.append(f"- {stem}: no snapshot found beside the trace")
            continue
        per = ", ".join(
            f"stream {r['stream']}{' (main)' if r['is_main'] else ''}: {r['reserved'] / 2**30:.3f} GiB"
            for r in snap.get("streams", [])
        )
        out.append(
            f"- {stem}: snapshot {Path(snap['source']).name}: reserved {snap['reserved'] / 2**30:.3f} GiB; per stream {per}; "
            f"off the main stream {snap['reserved_off_main'] / 2**30:.3f} GiB"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_issue5_out"))
    ap.add_argument("--parts", default="a,b,c", help="comma-separated: a, b, c")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke run)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting parts after this many seconds")
    ap.add_argument("--analyze", metavar="DIR", help="run tracekit on the traces of an earlier --out DIR (CPU)")
    ap.add_argument("--part", help=argparse.SUPPRESS)  # internal: run one part in this process
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.analyze:
        return analyze(Path(args.analyze), out)
    if args.part:
        return run_part(args.part, out, args.quick)
    parts = []
    for p in args.parts.split(","):
        if p.strip() != "c":
            parts.append(p.strip())
            continue
        # the traced processes (the method's warm-up round), then the timed rounds, one process
        # per variant and round (a fresh allocator each), in mirrored pairs of orders
        parts += ["c_standard", "c_inplace"]
        orders = method.round_orders(["standard", "inplace"], config(args.quick or not torch.cuda.is_available())["c_rounds"])
        parts += [f"c_{v}_r{k}" for k, order in enumerate(orders, start=1) for v in order]
    wall = {}
    deadline = time.perf_counter() + args.budget_s
    for p in parts:
        left = deadline - time.perf_counter()
        if left < 20:
            print(f"[bench.fixes] part {p} skipped: time budget spent", flush=True)
            write_json(out / f"issue5_{p}.json", {"part": p, "status": "skipped (time budget)"})
            continue
        timeout = min(PART_TIMEOUT_S["c_timed" if "_r" in p else p], left - 5)
        cmd = module_command("bench.fixes", "--out", str(out), "--part", p, *(["--quick"] if args.quick else []))
        t0 = time.perf_counter()
        print(f"[bench.fixes] part {p} (timeout {timeout:.0f} s) ...", flush=True)
        try:
            proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, env=repo_env())
            tail = (proc.stdout + proc.stderr)[-3000:]
            if proc.returncode != 0:
                print(f"[bench.fixes] part {p} exited {proc.returncode}:\n{tail}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"[bench.fixes] part {p} timed out after {timeout:.0f} s (partial results kept)", flush=True)
        wall[p] = round(time.perf_counter() - t0, 1)
        print(f"[bench.fixes] part {p} done in {wall[p]} s", flush=True)
    try:
        results, md = summarize(out, parts, wall)
    except Exception:  # noqa: BLE001 - never lose the per-part results to a bug in the summary
        results = {p: json.loads((out / f"issue5_{p}.json").read_text()) for p in parts if (out / f"issue5_{p}.json").exists()}
        md = "summary failed:\n" + traceback.format_exc()
    write_json(out / "issue5_results.json", results)
    (out / "issue5_results.md").write_text(md)
    try:
        write_commit(out, results, md, quick=args.quick)
    except Exception:  # noqa: BLE001 - the results above are kept whatever happens here
        print("[bench.fixes] commit files failed:\n" + traceback.format_exc(), flush=True)
    print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
