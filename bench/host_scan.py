"""Where does the host's speed move? A scan of every CPU this process may use (GPU machine or any
Linux host; no GPU needed). Answers the questions of d124cf4:bench/NOTES-pipelines.md, "The host" (git history):

1. **Timeline**: for ``--seconds``, every CPU probed in turn (the main thread pinned there, then
   :func:`bench.host.host_probe`): is a slow spell one CPU's or every CPU's at once?
2. **Hidden siblings**: a busy process pinned to CPU c, the probe on every other CPU d: a d
   that slows by more than ``--sibling-slowdown`` while c spins shares c's core even where
   ``/sys/.../thread_siblings_list`` (a VM's view) names no sibling.
3. **Our own threads**: torch's intra-op threads after a parallel CPU op (they spin for a while
   on the other CPUs): the main CPU's probe right after one, and 0.05-0.8 s later.

    python -m bench.host_scan --seconds 30 --out /tmp/scan.json

Writes a JSON document (every sample) and prints a summary.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path


from bench.common.host import cpu_model, host_probe


def _pin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


def _spin(cpu: int, stop) -> None:  # noqa: ANN001
    _pin(cpu)
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


def probe_on(cpu: int, ops: int) -> float:
    _pin(cpu)
    return host_probe(ops)


def timeline(cpus: list[int], seconds: float, ops: int) -> list[dict]:
    out = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sweep = {"t": round(time.perf_counter() - t0, 3), "us": {}}
        for c in cpus:
            sweep["us"][c] = round(probe_on(c, ops), 3)
        out.append(sweep)
    return out


def siblings(cpus: list[int], ops: int, repeats: int) -> dict:
    base = {d: statistics.median(probe_on(d, ops) for _ in range(repeats)) for d in cpus}
    slow: dict[int, dict[int, float]] = {}
    ctx = mp.get_context("fork")
    for c in cpus:
        stop = ctx.Event()
        p = ctx.Process(target=_spin, args=(c, stop), daemon=True)
        p.start()
        time.sleep(0.05)
        slow[c] = {}
        for d in cpus:
            if d == c:
                continue
            slow[c][d] = round(statistics.median(probe_on(d, ops) for _ in range(repeats)) / base[d], 3)
        stop.set()
        p.join(5)
    return {"base_us": {d: round(v, 3) for d, v in base.items()}, "slowdown": slow}


def intra_op(cpus: list[int], ops: int) -> dict:
    import torch

    main = cpus[-1]
    others = set(cpus) - {main}
    _pin(main)
    res = {"threads": torch.get_num_threads(), "delays": {}}
    a = torch.randn(2048, 2048)
    for delay in (0.0, 0.05, 0.2, 0.8):
        vals = []
        for _ in range(3):
            # the parallel op's threads on the other CPUs (as HostPin puts them), then the probe
            os.sched_setaffinity(0, others)
            (a @ a).sum()
            _pin(main)
            time.sleep(delay)
            vals.append(host_probe(ops))
            time.sleep(1.0)
        res["delays"][delay] = [round(v, 3) for v in vals]
    res["idle"] = round(statistics.median(host_probe(ops) for _ in range(5)), 3)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sibling-slowdown", type=float, default=1.2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    doc = {"cpus": cpus, "cpu_model": cpu_model()}
    t = time.perf_counter()
    doc["siblings"] = siblings(cpus, args.ops, args.repeats)
    doc["intra_op"] = intra_op(cpus, args.ops)
    doc["timeline"] = timeline(cpus, args.seconds, args.ops)
    doc["scan_s"] = round(time.perf_counter() - t, 1)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    for line in summary(doc, args.sibling_slowdown):
        print(line)
    return 0


def summary(doc: dict, threshold: float) -> list[str]:
    lines = [f"CPUs {doc['cpus']} ({doc['cpu_model']}), scan {doc['scan_s']} s"]
    sib = doc["siblings"]
    pairs = sorted({tuple(sorted((int(c), int(d)))) for c, row in sib["slowdown"].items() for d, r in row.items() if r >= threshold})
    lines.append(f"idle probe us/op per CPU: {sib['base_us']}")
    lines.append(f"pairs slowed >= {threshold}x by a busy partner (hidden SMT siblings): {pairs or 'none'}")
    worst = max((r, c, d) for c, row in sib["slowdown"].items() for d, r in row.items())
    lines.append(f"largest slowdown: CPU {worst[2]} while CPU {worst[1]} spins: {worst[0]}x")
    io = doc["intra_op"]
    lines.append(f"intra-op threads {io['threads']}: main CPU's probe after a parallel op, by delay (s): {io['delays']}; idle {io['idle']}")
    tl = doc["timeline"]
    per_cpu = {c: [s["us"][c] for s in tl] for c in doc["cpus"]}
    lines.append("timeline per CPU (median / min / max us/op): " + ", ".join(
        f"{c}: {statistics.median(v):.2f}/{min(v):.2f}/{max(v):.2f}" for c, v in per_cpu.items()))
    sweeps = [statistics.median(s["us"].values()) for s in tl]
    lines.append(f"sweeps {len(tl)}: median over CPUs per sweep min {min(sweeps):.2f} median {statistics.median(sweeps):.2f} max {max(sweeps):.2f}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
