"""TorchRec's own training-pipeline benchmark, untraced and traced, on 1 and 4 GPUs: traces and
timings written by code nobody here wrote (issue 24: the profiler-overhead model and explain judged
on them; issue 25: a real TorchRec job of 4 ranks).

    PYTHONPATH=/tmp/site python3 gpu/torchrec_bench.py --out DIR [--budget-s 280] [--plan NAME,NAME...]
    python3 gpu/torchrec_bench.py --list                     # the plan, nothing run

Needs TorchRec 1.6.1 and fbgemm_gpu 1.6.0 importable (``/work/shared/tools/torchrec_wheels.sh``
and ``fbgemm_parts.sh``'s install.sh, into /tmp/site: gpu/run_all.sh part ``torchrec``).

Each plan entry is one run of ``python -m torchrec.distributed.benchmark.benchmark_train_pipeline``
(its command line as TorchRec documents it, flags below) in a process of its own, under a time
limit, in plan order while the budget lasts (an entry starts only if the longest run so far of
its world size fits what is left). TorchRec 1.6.1's benchmark (torchrec/distributed/benchmark/
base.py ``_run_benchmark_core``) builds its TestSparseNN (100 + 100 weighted tables of dim 128,
its planner's table-wise sharding), then:

- **untraced**: ``--num_benchmarks`` iterations, each one pass of the pipeline over
  ``--num_batches`` batches (``pipeline.reset()`` then ``progress`` until the data ends), a
  ``torch.cuda.synchronize()`` between iterations, timed by CUDA events around each iteration
  and ``time.process_time_ns`` (the process's CPU time); with 5 or more the first is dropped; it
  prints (rank 0) the P90 of both;
- **traced**: ``--num_profiles`` more iterations under ``torch.profiler.profile(CPU+CUDA,
  record_shapes=True, profile_memory=True, with_flops=True, with_modules=True, with_stack=
  --export_stacks)``, no schedule, one ``prof.step()`` per iteration (so each ``ProfilerStep#k``
  is one whole pass of ``--num_batches`` batches), written as ``trace-<name>-rank<r>.json.gz``
  (rank 0, or every rank with ``--all_rank_traces=True``).

This driver runs that command unchanged, in a child process of its own (``--child``) that first
wraps the benchmark's ``benchmark_func`` (a module global of benchmark_train_pipeline, looked up
at call time; in the spawned ranks of a 4-GPU run too: they import this file as ``__mp_main__``)
so that each iteration, untraced and traced, is also timed here: CUDA events on the current
stream around it and the host's wall clock (``perf_counter``); with TorchRec's own per-iteration
lists (``gpu_elapsed_time``, ``cpu_elapsed_time``: every value, not only the P90 it prints) and
its memory statistics, into ``timing-<name>-rank<r>.json``. Nothing else of TorchRec is changed.

Writes ``DIR/results.json`` (after every run) and ``DIR/commit/`` laid out as the repository:
``sample_traces/torchrec_<W>gpu/<pipeline>_b<batch>/`` (TorchRec's traces as it names them,
``timing-*.json``, ``benchmark_output.txt``: what TorchRec printed, its results table included,
``README.md``) and ``bench/results/torchrec-<gpu>-<date>-<HHMM>.json``. Traces past
``--traces-max-mb`` in all are deleted (their timings stay; said in the results).

**results.json**: ``device``, ``date_utc``, ``versions`` (torch, CUDA, torchrec, fbgemm_gpu),
``command``, ``runs[i]``: ``{entry, world_size, pipeline, batch_size, num_batches,
num_benchmarks, num_profiles, argv (TorchRec's flags), rc, seconds, dir, traces: [file, bytes,
kept], timing (rank 0's timing file, below), timing_ranks (every rank's), log_tail}``. A timing
file: ``{name, rank, world_size, num_batches, num_benchmarks, num_profiles, iterations:
[{traced (bool), gpu_ms (CUDA events around the pass), host_ms (wall clock of the pass)}],
torchrec_gpu_elapsed_ms, torchrec_cpu_elapsed_ms (TorchRec's own lists: untraced iterations, the
first dropped when there are 5 or more), gpu_mem_stats, torchrec_version, fbgemm_gpu_version}``.
A pass is ``num_batches`` pipeline steps (fill and drain included): a step is a pass over
``num_batches``; the untraced step of a run is the median of its untraced passes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD_ENV = "TRACEKIT_TORCHREC_TIMING_DIR"
"""Set for the child: where the wrapped benchmark_func writes its timing files (the spawned ranks
inherit it)."""

NUM_BATCHES = 8

# name -> (world size, pipeline, batch size per rank, num_benchmarks, num_profiles), in the
# order they run: what the issues need first, then the host-bound batch, SemiSync, and repeats
# of the 1-GPU pair in mirrored order (a spread across processes)
PLAN: dict[str, tuple[int, str, int, int, int]] = {
    "1gpu_sparse_b8192": (1, "sparse", 8192, 8, 2),
    "1gpu_fused_b8192": (1, "fused", 8192, 8, 2),
    "4gpu_sparse_b8192": (4, "sparse", 8192, 8, 1),
    "1gpu_sparse_b1024": (1, "sparse", 1024, 8, 2),
    "1gpu_fused_b1024": (1, "fused", 1024, 8, 2),
    "4gpu_fused_b8192": (4, "fused", 8192, 8, 1),
    "1gpu_semi_b8192": (1, "semi", 8192, 8, 2),
    "1gpu_fused_b8192_r2": (1, "fused", 8192, 8, 2),
    "1gpu_sparse_b8192_r2": (1, "sparse", 8192, 8, 2),
    "2gpu_sparse_b8192": (2, "sparse", 8192, 8, 1),
    "2gpu_fused_b8192": (2, "fused", 8192, 8, 1),
    "2gpu_sparse_b4096": (2, "sparse", 4096, 8, 1),
    "2gpu_fused_b4096": (2, "fused", 4096, 8, 1),
    # held out (2026-11-27, session 5): batch sizes never run, collected before that session's model
    # changes, to judge the overhead model and explain on
    "1gpu_sparse_b4096": (1, "sparse", 4096, 8, 2),
    "1gpu_fused_b4096": (1, "fused", 4096, 8, 2),
    "1gpu_sparse_b16384": (1, "sparse", 16384, 8, 2),
    "1gpu_fused_b16384": (1, "fused", 16384, 8, 2),
    "2gpu_sparse_b2048": (2, "sparse", 2048, 8, 1),
    "2gpu_fused_b2048": (2, "fused", 2048, 8, 1),
    # the same pairs again in mirrored order (a spread across processes)
    "2gpu_fused_b2048_r2": (2, "fused", 2048, 8, 1),
    "2gpu_sparse_b2048_r2": (2, "sparse", 2048, 8, 1),
    "1gpu_fused_b4096_r2": (1, "fused", 4096, 8, 2),
    "1gpu_sparse_b4096_r2": (1, "sparse", 4096, 8, 2),
    # held out (2026-11-28, session 6): batch sizes never run, collected before that session's model
    # changes, each pair twice in mirrored order
    "1gpu_sparse_b2048": (1, "sparse", 2048, 8, 2),
    "1gpu_fused_b2048": (1, "fused", 2048, 8, 2),
    "1gpu_sparse_b12288": (1, "sparse", 12288, 8, 2),
    "1gpu_fused_b12288": (1, "fused", 12288, 8, 2),
    "2gpu_sparse_b6144": (2, "sparse", 6144, 8, 1),
    "2gpu_fused_b6144": (2, "fused", 6144, 8, 1),
    "2gpu_fused_b6144_r2": (2, "fused", 6144, 8, 1),
    "2gpu_sparse_b6144_r2": (2, "sparse", 6144, 8, 1),
    "1gpu_fused_b2048_r2": (1, "fused", 2048, 8, 2),
    "1gpu_sparse_b2048_r2": (1, "sparse", 2048, 8, 2),
    # held out (2026-11-28, session 7): batch sizes never run, collected before that session's model
    # changes, each pair twice in mirrored order
    "1gpu_sparse_b6144": (1, "sparse", 6144, 8, 2),
    "1gpu_fused_b6144": (1, "fused", 6144, 8, 2),
    "1gpu_sparse_b10240": (1, "sparse", 10240, 8, 2),
    "1gpu_fused_b10240": (1, "fused", 10240, 8, 2),
    "2gpu_sparse_b3072": (2, "sparse", 3072, 8, 1),
    "2gpu_fused_b3072": (2, "fused", 3072, 8, 1),
    "2gpu_fused_b3072_r2": (2, "fused", 3072, 8, 1),
    "2gpu_sparse_b3072_r2": (2, "sparse", 3072, 8, 1),
    "1gpu_fused_b6144_r2": (1, "fused", 6144, 8, 2),
    "1gpu_sparse_b6144_r2": (1, "sparse", 6144, 8, 2),
    # held out (2026-11-28, session 8): batch sizes never run, collected before that session's model
    # changes, each pair twice in mirrored order
    "1gpu_sparse_b3072": (1, "sparse", 3072, 8, 2),
    "1gpu_fused_b3072": (1, "fused", 3072, 8, 2),
    "1gpu_sparse_b14336": (1, "sparse", 14336, 8, 2),
    "1gpu_fused_b14336": (1, "fused", 14336, 8, 2),
    "2gpu_sparse_b5120": (2, "sparse", 5120, 8, 1),
    "2gpu_fused_b5120": (2, "fused", 5120, 8, 1),
    "2gpu_fused_b5120_r2": (2, "fused", 5120, 8, 1),
    "2gpu_sparse_b5120_r2": (2, "sparse", 5120, 8, 1),
    "1gpu_fused_b3072_r2": (1, "fused", 3072, 8, 2),
    "1gpu_sparse_b3072_r2": (1, "sparse", 3072, 8, 2),
    # held out (2026-11-28, session 9): batch sizes never run, collected before that session's model
    # changes, each pair twice in mirrored order
    "1gpu_sparse_b2560": (1, "sparse", 2560, 8, 2),
    "1gpu_fused_b2560": (1, "fused", 2560, 8, 2),
    "1gpu_sparse_b7168": (1, "sparse", 7168, 8, 2),
    "1gpu_fused_b7168": (1, "fused", 7168, 8, 2),
    "2gpu_sparse_b7168": (2, "sparse", 7168, 8, 1),
    "2gpu_fused_b7168": (2, "fused", 7168, 8, 1),
    "2gpu_fused_b7168_r2": (2, "fused", 7168, 8, 1),
    "2gpu_sparse_b7168_r2": (2, "sparse", 7168, 8, 1),
    "1gpu_fused_b2560_r2": (1, "fused", 2560, 8, 2),
    "1gpu_sparse_b2560_r2": (1, "sparse", 2560, 8, 2),
    # held out (2026-11-28, session 10): batch sizes never run, collected before that session's model
    # changes: 5120 on 1 GPU (twice, mirrored), 2560 on 2 and 6144 on 4
    "1gpu_sparse_b5120": (1, "sparse", 5120, 8, 2),
    "1gpu_fused_b5120": (1, "fused", 5120, 8, 2),
    "4gpu_sparse_b6144": (4, "sparse", 6144, 8, 1),
    "4gpu_fused_b6144": (4, "fused", 6144, 8, 1),
    "2gpu_sparse_b2560": (2, "sparse", 2560, 8, 1),
    "2gpu_fused_b2560": (2, "fused", 2560, 8, 1),
    "1gpu_fused_b5120_r2": (1, "fused", 5120, 8, 2),
    "1gpu_sparse_b5120_r2": (1, "sparse", 5120, 8, 2),
    # held out (2026-11-28, session 11): batch sizes never run, collected before that session's model
    # changes: 9216 on 1 GPU (twice, mirrored), 3584 on 2 and 4096 on 4
    "1gpu_sparse_b9216": (1, "sparse", 9216, 8, 2),
    "1gpu_fused_b9216": (1, "fused", 9216, 8, 2),
    "4gpu_sparse_b4096": (4, "sparse", 4096, 8, 1),
    "4gpu_fused_b4096": (4, "fused", 4096, 8, 1),
    "2gpu_sparse_b3584": (2, "sparse", 3584, 8, 1),
    "2gpu_fused_b3584": (2, "fused", 3584, 8, 1),
    "1gpu_fused_b9216_r2": (1, "fused", 9216, 8, 2),
    "1gpu_sparse_b9216_r2": (1, "sparse", 9216, 8, 2),
    # held out (2026-11-28, session 12): batch sizes never run, collected before that session's model
    # changes: 11264 on 1 GPU (twice, mirrored), 4608 on 2 and 5120 on 4
    "1gpu_sparse_b11264": (1, "sparse", 11264, 8, 2),
    "1gpu_fused_b11264": (1, "fused", 11264, 8, 2),
    "4gpu_sparse_b5120": (4, "sparse", 5120, 8, 1),
    "4gpu_fused_b5120": (4, "fused", 5120, 8, 1),
    "2gpu_sparse_b4608": (2, "sparse", 4608, 8, 1),
    "2gpu_fused_b4608": (2, "fused", 4608, 8, 1),
    "1gpu_fused_b11264_r2": (1, "fused", 11264, 8, 2),
    "1gpu_sparse_b11264_r2": (1, "sparse", 11264, 8, 2),
}


def torchrec_argv(name: str, entry: tuple[int, str, int, int, int], profile_dir: Path) -> list[str]:
    """TorchRec's flags for one plan entry (cmd_conf: one ``--field=value`` per dataclass field)."""
    world, pipeline, batch, benchmarks, profiles = entry
    argv = [f"--world_size={world}", f"--pipeline={pipeline}", f"--batch_size={batch}", "--num_float_features=10", "--feature_pooling_avg=10", f"--num_batches={NUM_BATCHES}",
            f"--num_benchmarks={benchmarks}", f"--num_profiles={profiles}", f"--profile_dir={profile_dir}", f"--name={name}"]
    if world > 1:
        argv.append("--all_rank_traces=True")
    return argv


def entry_dir(name: str, entry: tuple[int, str, int, int, int]) -> str:
    """The sample-trace folder of an entry, relative to the repository (repeats get their own)."""
    world, pipeline, batch = entry[:3]
    suffix = name.rsplit("_", 1)[1] if name.endswith(("_r2", "_r3")) else ""
    return f"sample_traces/torchrec_{world}gpu/{pipeline}_b{batch}" + (f"_{suffix}" if suffix else "")


# ------------------------------------------------------------------------------------------
# the child: TorchRec's benchmark with its iterations timed
# ------------------------------------------------------------------------------------------
def _install_timing(out: Path) -> None:
    """Wraps benchmark_train_pipeline.benchmark_func: each call of the function it benchmarks
    timed (CUDA events and wall clock), TorchRec's own lists kept, one JSON file per rank."""
    import dataclasses
    import logging

    import torch
    from torchrec.distributed.benchmark import benchmark_train_pipeline as btp

    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # TorchRec's result table is logged at INFO
    original = btp.benchmark_func
    if getattr(original, "_tracekit_timed", False):
        return

    def benchmark_func(**kw):  # noqa: ANN003, ANN202 - TorchRec calls it with keywords only
        func, calls = kw["func_to_benchmark"], []

        def timed(*a, **k):  # noqa: ANN002, ANN003, ANN202
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            r = func(*a, **k)
            end.record()
            calls.append((start, end, time.perf_counter() - t0))
            return r

        result = original(**{**kw, "func_to_benchmark": timed})
        torch.cuda.synchronize()
        n = kw["num_benchmarks"]
        doc = {
            "name": kw.get("name"), "rank": kw.get("rank"), "world_size": kw.get("world_size"), "num_batches": NUM_BATCHES,
            "num_benchmarks": n, "num_profiles": kw.get("num_profiles"),
            "iterations": [{"traced": i >= n, "gpu_ms": round(s.elapsed_time(e), 4), "host_ms": round(1e3 * h, 4)}
                           for i, (s, e, h) in enumerate(calls)],
            "torchrec_gpu_elapsed_ms": [round(float(x), 4) for x in result.gpu_elapsed_time.flatten().tolist()],
            "torchrec_cpu_elapsed_ms": [round(float(x), 4) for x in result.cpu_elapsed_time.flatten().tolist()],
        }
        try:
            doc["gpu_mem_stats"] = [dataclasses.asdict(m) for m in result.gpu_mem_stats]
        except Exception as e:  # noqa: BLE001 - informational
            doc["gpu_mem_stats"] = f"unavailable: {e}"
        for mod in ("torchrec", "fbgemm_gpu"):
            try:
                from importlib.metadata import version

                doc[f"{mod}_version"] = version(mod.replace("_", "-") if mod == "fbgemm_gpu" else mod)
            except Exception:  # noqa: BLE001
                doc[f"{mod}_version"] = getattr(sys.modules.get(mod), "__version__", None)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"timing-{kw.get('name')}-rank{kw.get('rank')}.json").write_text(json.dumps(doc, indent=1))
        return result

    benchmark_func._tracekit_timed = True  # type: ignore[attr-defined]
    btp.benchmark_func = benchmark_func


def child(torchrec_flags: list[str]) -> int:
    _install_timing(Path(os.environ[CHILD_ENV]))
    from torchrec.distributed.benchmark import benchmark_train_pipeline as btp

    sys.argv = ["benchmark_train_pipeline", *torchrec_flags]
    btp.main()
    return 0


if os.environ.get(CHILD_ENV) and __name__ == "__mp_main__":  # a spawned rank of a multi-GPU run
    _install_timing(Path(os.environ[CHILD_ENV]))


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
def _device() -> tuple[str, dict]:
    versions: dict = {"python": sys.version.split()[0]}
    try:
        import torch

        versions.update(torch=torch.__version__, cuda=torch.version.cuda)
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        versions["gpus"] = torch.cuda.device_count()
    except Exception as e:  # noqa: BLE001
        name = f"unknown ({e})"
    for mod in ("torchrec", "fbgemm-gpu"):
        try:
            from importlib.metadata import version

            versions[mod.replace("-", "_")] = version(mod)
        except Exception:  # noqa: BLE001
            versions[mod.replace("-", "_")] = None
    return name, versions


def _slug(name: str) -> str:
    words = ["".join(c for c in w if c.isalnum()) for w in name.lower().replace("nvidia", " ").split()]
    return next((w for w in words if w), "cpu")


CURRENT: list = [None]
"""The child running now (killed with its tree on SIGTERM)."""


def _kill_tree(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def _on_term(*_) -> None:  # noqa: ANN002
    if CURRENT[0] is not None:
        _kill_tree(CURRENT[0])
    raise SystemExit(143)


def run_plan(args) -> int:  # noqa: ANN001
    names = list(PLAN) if not args.plan else [n.strip() for n in args.plan.split(",") if n.strip()]
    bad = [n for n in names if n not in PLAN]
    if bad:
        print(f"torchrec_bench: error: unknown plan entries {bad} (known: {', '.join(PLAN)})", file=sys.stderr)
        return 2
    out = Path(args.out)
    commit = out / "commit"
    t0 = time.perf_counter()
    now = datetime.datetime.now(datetime.timezone.utc)
    device, versions = _device()
    tag = f"{_slug(device)}-{args.date or now.strftime('%Y%m%d')}" + ("" if args.date else now.strftime("-%H%M"))
    doc = {"title": f"TorchRec {versions.get('torchrec')} benchmark_train_pipeline on {device}", "device": device,
           "date_utc": now.isoformat(timespec="seconds"), "versions": versions,
           "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "budget_s": args.budget_s, "tag": tag, "runs": [],
           "skipped": []}
    longest: dict[int, float] = {}
    signal.signal(signal.SIGTERM, _on_term)

    def publish() -> None:
        doc["total_s"] = round(time.perf_counter() - t0, 1)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(doc, indent=1))
        res = commit / "bench" / "results"
        res.mkdir(parents=True, exist_ok=True)
        (res / f"torchrec-{tag}.json").write_text(json.dumps(doc, indent=1) + "\n")

    try:
        for name in names:
            entry = PLAN[name]
            world = entry[0]
            left = args.budget_s - (time.perf_counter() - t0)
            need = longest.get(world, args.first_run_s * (2 if world > 1 else 1))
            gpus = _gpu_count() if args.gpus is None else args.gpus
            if world > gpus:
                doc["skipped"].append({"entry": name, "why": f"{world} GPUs needed, {gpus} here"})
                continue
            if need > left:
                doc["skipped"].append({"entry": name, "why": f"budget: {left:.0f} s left, a run of {world} GPU(s) took {need:.0f} s"})
                continue
            rel = entry_dir(name, entry)
            folder = commit / rel
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            argv = torchrec_argv(name, entry, folder)
            env = {**os.environ, CHILD_ENV: str(folder)}
            t = time.perf_counter()
            print(f"[torchrec {t - t0:6.1f}s] {name}: {' '.join(argv)} (limit {min(left, args.run_limit_s):.0f} s)", file=sys.stderr, flush=True)
            log = folder / "benchmark_output.txt"
            with open(log, "w") as f:
                # a session of its own: on a time limit (ours or the part's SIGTERM) the whole tree
                # goes, TorchRec's spawned ranks included
                CURRENT[0] = p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", "--", *argv], env=env,
                                                  stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    rc = p.wait(timeout=min(left, args.run_limit_s))
                except subprocess.TimeoutExpired:
                    _kill_tree(p)
                    rc = 124
                CURRENT[0] = None
            secs = time.perf_counter() - t
            longest[world] = max(longest.get(world, 0.0), secs)
            run = {"entry": name, "world_size": world, "pipeline": entry[1], "batch_size": entry[2], "num_batches": NUM_BATCHES,
                   "num_benchmarks": entry[3], "num_profiles": entry[4], "argv": argv, "rc": rc, "seconds": round(secs, 1), "dir": rel,
                   "log_tail": log.read_text(errors="replace")[-3000:]}
            timings = sorted(folder.glob("timing-*-rank*.json"), key=lambda p: int(p.stem.rsplit("rank", 1)[1]))
            run["timing_ranks"] = [json.loads(p.read_text()) for p in timings]
            run["timing"] = run["timing_ranks"][0] if run["timing_ranks"] else None
            traces = sorted(folder.glob("trace-*.json.gz"))
            total = sum(p.stat().st_size for p in commit.rglob("trace-*.json.gz"))
            run["traces"] = []
            for p in traces:
                kept = "kept"
                if args.traces_max_mb and total > args.traces_max_mb * 2**20:
                    kept = f"dropped: the traces passed {args.traces_max_mb:g} MiB in all"
                    total -= p.stat().st_size
                run["traces"].append({"file": p.name, "bytes": p.stat().st_size, "kept": kept})
                if kept != "kept":
                    p.unlink()
            doc["runs"].append(run)
            write_readme(folder, run, doc)
            it = (run["timing"] or {}).get("iterations") or []
            un = [i["gpu_ms"] for i in it if not i["traced"]][1:]
            tr = [i["gpu_ms"] for i in it if i["traced"]]
            print(f"[torchrec {time.perf_counter() - t0:6.1f}s] {name}: rc {rc} in {secs:.0f} s; untraced passes {un} ms, traced {tr} ms; "
                  f"traces {[(x['file'], x['bytes'], x['kept']) for x in run['traces']]}", file=sys.stderr, flush=True)
            publish()
    finally:  # also on SIGTERM: what ran so far
        publish()
    return 0 if all(r["rc"] == 0 for r in doc["runs"]) and doc["runs"] else 1


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def write_readme(folder: Path, run: dict, doc: dict) -> None:
    t = run.get("timing") or {}
    it = t.get("iterations") or []
    lines = [f"# TorchRec benchmark_train_pipeline: {run['pipeline']}, batch {run['batch_size']} per rank, "
             f"{run['world_size']} GPU(s)", "",
             f"Run by `gpu/torchrec_bench.py` on {doc['date_utc']}, {doc['device']}, torch {doc['versions'].get('torch')}, "
             f"torchrec {doc['versions'].get('torchrec')}, fbgemm_gpu {doc['versions'].get('fbgemm_gpu')}: "
             f"`python -m torchrec.distributed.benchmark.benchmark_train_pipeline {' '.join(run['argv'])}` (rc {run['rc']}).", "",
             f"Each iteration is one pass of the pipeline over {run['num_batches']} batches; {run['num_benchmarks']} untraced "
             f"(TorchRec's own timing; the first dropped by TorchRec when 5 or more), then {run['num_profiles']} traced "
             "(record_shapes, profile_memory, with_flops, with_modules; one `ProfilerStep` per pass).", "",
             "| iteration | traced | GPU ms (CUDA events) | host ms (wall) |", "|---|---|---|---|"]
    lines += [f"| {i} | {x['traced']} | {x['gpu_ms']} | {x['host_ms']} |" for i, x in enumerate(it)]
    lines += ["", f"TorchRec's own lists (untraced): GPU {t.get('torchrec_gpu_elapsed_ms')} ms, CPU (process time) "
              f"{t.get('torchrec_cpu_elapsed_ms')} ms. Traces: " + ", ".join(f"`{x['file']}` ({x['bytes']} bytes, {x['kept']})"
                                                                          for x in run.get("traces", [])) + ".",
              "`benchmark_output.txt`: what TorchRec printed (its results table at the end); `timing-*-rank<r>.json`: "
              "every iteration timed (gpu/torchrec_bench.py's docstring)."]
    (folder / "README.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        flags = sys.argv[3:] if len(sys.argv) > 2 and sys.argv[2] == "--" else sys.argv[2:]
        return child(flags)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--plan", default=None, help="entries to run, comma-separated, in that order (default: all of PLAN)")
    ap.add_argument("--budget-s", type=float, default=280.0, help="seconds for all the runs")
    ap.add_argument("--run-limit-s", type=float, default=150.0, help="one run's time limit")
    ap.add_argument("--first-run-s", type=float, default=30.0, help="a 1-GPU run's expected time before "
                    "one ran (twice that for more GPUs)")
    ap.add_argument("--traces-max-mb", type=float, default=28.0, help="traces kept in all (later ones are deleted)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs the plan may use (default: all this machine has); "
                    "entries of more are skipped")
    ap.add_argument("--date", default=None)
    ap.add_argument("--list", action="store_true", help="print the plan and TorchRec's flags, run nothing")
    args = ap.parse_args()
    if args.list:
        for n, e in PLAN.items():
            print(n, entry_dir(n, e), " ".join(torchrec_argv(n, e, Path("<dir>"))))
        return 0
    if not args.out:
        print("torchrec_bench: error: --out (or $OUT) is needed", file=sys.stderr)
        return 2
    return run_plan(args)


if __name__ == "__main__":
    sys.exit(main())
