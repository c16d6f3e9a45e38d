"""Where a pipeline's host time goes: one preset's variants under cProfile, compared by function.

A question about a host-bound step (``multitask_b4k``: "GPU waited for host" 100 %), where a
variant's extra host work is its extra step time: which calls make FusedSparseDist's step ~1 %
longer than SparseDist's (d124cf4:bench/NOTES-pipelines.md, "2026-11-24 session 4" and "session 5")?

Rounds of interleaved runs (the variants in a rotated order each round), each run once without
the profiler (its median step time, for the ratio to the reference variant) and once under
``cProfile`` (the main thread's time by function: Python functions and the C functions they call,
torch's ops and the CUDA runtime's wrappers among them; autograd's backward runs on its device
thread, which the main thread waits for inside ``run_backward``). Per variant: host ms per step by
function, summed over the rounds' profiled runs and divided by their steps; printed as the
functions whose time differs most from the reference variant's, with their calls per step.

    python -m bench.pipelines_host_profile --preset multitask_b4k --variants sparse,fused,fused_current_stream --out DIR

Writes ``DIR/hostprof.json`` (every function's per-step time and calls per variant, the step
times) and ``DIR/hostprof.md`` (the table). Not a results file of record: the profiler slows
every Python call, so only differences between variants mean something.
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime
import json
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.pipelines import PRESETS, VARIANTS, run_config
from bench.common.host import host_probe, quiet_gc
from runtime.data import SyntheticLoader
from runtime.session import Session


def _label(func: tuple) -> str:
    """``file:line(name)`` as pstats writes it, the file shortened to its last two parts."""
    file, line, name = func
    if file == "~":
        return name
    return f"{'/'.join(Path(file).parts[-2:])}:{line}({name})"


def profile_run(session: Session, loader: SyntheticLoader, cfg) -> tuple[dict, int]:  # noqa: ANN001
    """{function: (calls, seconds of its own time)} over one run of ``cfg``, and its steps."""
    prof = cProfile.Profile()
    batches = loader.first(cfg.total_steps)
    with quiet_gc():
        prof.enable()
        session.run(cfg, batches, progress=False)
        prof.disable()
    stats = pstats.Stats(prof).stats  # func -> (primitive calls, calls, tottime, cumtime, callers)
    return {_label(f): (v[1], v[2]) for f, v in stats.items()}, cfg.total_steps


def timed_run(session: Session, loader: SyntheticLoader, cfg) -> float:  # noqa: ANN001
    """The median timed step (ms) of one run of ``cfg`` without the profiler."""
    with quiet_gc():
        run = session.run(cfg, loader.first(cfg.total_steps), progress=False)
    lo, hi = run.timed
    return statistics.median(run.step_ms_all[lo:hi])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="multitask_b4k", choices=sorted(PRESETS))
    ap.add_argument("--variants", default="sparse,fused,fused_current_stream",
                    help="comma-separated; the first is the reference")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=24, help="timed steps per run")
    ap.add_argument("--top", type=int, default=30, help="functions listed per variant")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", default="hostprof_out")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or len(variants) < 2:
        ap.error(f"--variants: two or more of {sorted(VARIANTS)} (unknown: {unknown})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = PRESETS[args.preset]
    cfgs = {v: run_config(spec, v, device=args.device, warmup=spec["warmup"], timed=args.steps, profile=0,
                       out=out / v, seed=0) for v in variants}
    first = cfgs[variants[0]]
    longest = max(c.total_steps for c in cfgs.values())
    loader = SyntheticLoader(dataclasses.replace(first.data, num_batches=longest))
    session = Session(first)
    for v in variants:  # a discarded warm-up run each (the TBE extension, the allocator, cuBLAS)
        timed_run(session, loader, cfgs[v])

    per: dict[str, dict[str, list[float]]] = {v: {} for v in variants}  # func -> [calls, seconds]
    steps = dict.fromkeys(variants, 0)
    step_ms: dict[str, list[float]] = {v: [] for v in variants}
    probes = []
    t0 = time.perf_counter()
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        probes.append(host_probe())
        for v in order:
            step_ms[v].append(timed_run(session, loader, cfgs[v]))
            funcs, n = profile_run(session, loader, cfgs[v])
            steps[v] += n
            acc = per[v]
            for f, (calls, secs) in funcs.items():
                a = acc.setdefault(f, [0.0, 0.0])
                a[0] += calls
                a[1] += secs
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{v} {step_ms[v][-1]:.3f} ms" for v in variants),
              flush=True)

    ref = variants[0]
    # per step: ms of own time and calls, by function
    norm = {v: {f: (a[0] / steps[v], 1e3 * a[1] / steps[v]) for f, a in per[v].items()} for v in variants}
    ratios = {v: statistics.median(b / a for a, b in zip(step_ms[ref], step_ms[v])) for v in variants}
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc = {"device": device, "date_utc": date, "torch": torch.__version__, "preset": args.preset, "variants": variants, "rounds": args.rounds, "timed_steps": args.steps,
           "host_probe_us": probes, "wall_s": round(time.perf_counter() - t0, 1), "step_ms": step_ms,
           "ratio_to_reference": ratios,
           "profiled_host_ms_per_step": {v: sum(ms for _, ms in norm[v].values()) for v in variants},
           "functions": norm}
    (out / "hostprof.json").write_text(json.dumps(doc, indent=1))
    lines = [f"# Host time by function, {args.preset}, {args.rounds} rounds x {len(variants)} variants "
             f"(runs of {args.steps} timed steps; host probe {statistics.median(probes):.3f} us/op)", "",
             f"{device}, torch {torch.__version__}, {date}", ""]
    lines.append("| variant | step ms without the profiler (median of rounds) | / " + ref +
                 " (median of rounds) | profiled host ms per step (all functions' own time) |")
    lines.append("|---|---|---|---|")
    for v in variants:
        lines.append(f"| {v} | {statistics.median(step_ms[v]):.3f} | {ratios[v]:.4f} | "
                     f"{doc['profiled_host_ms_per_step'][v]:.3f} |")
    for v in variants[1:]:
        names = set(norm[v]) | set(norm[ref])
        diff = sorted(names, key=lambda f: -abs(norm[v].get(f, (0, 0))[1] - norm[ref].get(f, (0, 0))[1]))
        lines += ["", f"## {v} against {ref}: own time per step (us), largest differences first", "",
                  f"| function | {ref} us | {v} us | difference us | {ref} calls | {v} calls |", "|---|---|---|---|---|---|"]
        for f in diff[:args.top]:
            (cr, mr), (cv, mv) = norm[ref].get(f, (0, 0)), norm[v].get(f, (0, 0))
            lines.append(f"| `{f}` | {1e3 * mr:.1f} | {1e3 * mv:.1f} | {1e3 * (mv - mr):+.1f} | {cr:.1f} | {cv:.1f} |")
    (out / "hostprof.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
