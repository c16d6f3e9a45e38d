"""Our TBE kernels at a few of the TBE benchmark's shapes: traced with shapes, and timed as the
benchmark times them, so that tracekit's embedding-bandwidth estimate (from the trace alone) can
be checked against the benchmark's measured bandwidth (``python -m bench.tbe_bw_check``, on CPU).

    OUT=/some/dir PYTHONPATH=. python gpu/tbe_bw.py    # gpu/run_all.sh tbe_bw; ~60 s on an H200

For each case (26 tables x 1M rows, pooling factor 30, int64 indices, SUM, as ``bench.tbe``):

- measured, the benchmark's way (its own functions: ``make_set``, ``time_reps``, ``ours``):
  forward under ``no_grad`` and forward + backward + fused update, CUDA events around each
  repetition, median, three input sets rotating; bytes by the benchmark's model (distinct rows
  ``U`` counted on the device, per set); GB/s = bytes / median time;
- traced: ``PROFILED_STEPS`` forward + backward steps on input set 0 under ``torch.profiler``
  with ``record_shapes=True`` (CPU + CUDA, ``ProfilerStep#N``), written gzipped as
  ``traces/<case>.json.gz``; set 0's ``N`` and ``U`` go in the results for the check.

Writes ``tbe_bw.json`` (device, date, torch, copy bandwidth, every case's figures and trace
path) after every case.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from bench import tbe as bt  # the benchmark's own functions: same inputs, same timing
from runtime.embedding import OptimType

PROFILED_STEPS = 3
CASES = (  # (dim, batch, dist, precision, optimizer): a subset of bench.tbe.cases()
    (128, 65536, "uniform", "fp32", "EXACT_ROWWISE_ADAGRAD"),
    (128, 65536, "uniform", "fp32", "EXACT_SGD"),
    (64, 16384, "uniform", "fp32", "EXACT_SGD"),
    (256, 65536, "uniform", "fp32", "EXACT_SGD"),
    (128, 65536, "uniform", "fp16", "EXACT_ROWWISE_ADAGRAD"),
    (128, 65536, "zipf", "fp32", "EXACT_SGD"),
)


def run_case(dim: int, batch: int, dist: str, prec: str, opt_name: str, traces: Path) -> dict:
    dtype = bt.PRECISION[prec]
    wbytes = torch.finfo(dtype).bits // 8
    opt = OptimType[opt_name]
    torch.manual_seed(0)
    sets = [bt.make_set(batch, dist) for _ in range(bt.N_SETS)]
    grads = [torch.randn(batch, bt.T * dim, device=bt.DEV) for _ in range(bt.N_SETS)]
    gi = {id(s): g for s, g in zip(sets, grads)}
    # the benchmark's byte model (bench.tbe.bench_case), over the sets it rotates
    n_avg = statistics.mean(s[0].numel() for s in sets)
    u_avg = statistics.mean(s[3] for s in sets)
    idx_bytes = n_avg * 8 + (bt.T * batch + 1) * 8
    fwd_bytes = n_avg * dim * wbytes + batch * bt.T * dim * 4 + idx_bytes
    upd_bytes = batch * bt.T * dim * 4 + 2 * u_avg * dim * wbytes + idx_bytes
    if opt is OptimType.EXACT_ROWWISE_ADAGRAD:
        upd_bytes += 2 * u_avg * 4
    m = bt.ours(dim, opt, dtype)
    with torch.no_grad():
        fwd_ms = statistics.median(bt.time_reps(lambda s: m(s[0], s[1]), sets, reps=30))

    def step(s):
        m(s[0], s[1]).backward(gi[id(s)])

    train_ms = statistics.median(bt.time_reps(step, sets, reps=15))
    name = f"D{dim}_B{batch}_{dist}_{prec}_{opt_name.lower()}"
    path = traces / f"{name}.json.gz"
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=PROFILED_STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(1 + PROFILED_STEPS):  # ProfilerStep#N needs a schedule
            step(sets[0])
            torch.cuda.synchronize()
            prof.step()
    s0 = sets[0]
    res = {
        "case": name, "dim": dim, "batch": batch, "dist": dist, "precision": prec,
        "optimizer": opt_name, "tables": bt.T, "rows": bt.ROWS, "weights_bytes": wbytes,
        "lookups": n_avg, "unique_rows": u_avg, "forward_bytes": fwd_bytes,
        "update_bytes": upd_bytes, "forward_ms": fwd_ms, "train_ms": train_ms,
        "forward_GBps": fwd_bytes / (fwd_ms / 1e3) / 1e9,
        "train_GBps": (fwd_bytes + upd_bytes) / (train_ms / 1e3) / 1e9,
        "trace": str(path.relative_to(traces.parent)),
        "traced_set": {"lookups": int(s0[0].numel()), "unique_rows": int(s0[3])},
        "traced_steps": PROFILED_STEPS,
    }
    del m
    torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "tbe_bw_out"))
    ap.add_argument("--budget-s", type=float, default=75.0, help="start no new case after this")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("tbe_bw: needs a CUDA GPU", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out = Path(args.out)
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    from runtime.kernels import cuda as kc

    kc.load()
    print(f"kernels ready after {time.perf_counter() - t0:.1f} s", flush=True)
    report = {
        "device": torch.cuda.get_device_name(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "copy_GBps": bt.copy_bandwidth(), "cases": [], "skipped": [],
    }
    print(f"copy bandwidth {report['copy_GBps']:.0f} GB/s", flush=True)
    for case in CASES:
        if time.perf_counter() - t0 > args.budget_s:
            report["skipped"].append(list(case))
            continue
        ts = time.perf_counter()
        try:
            res = run_case(*case, traces)
        except Exception as e:  # one failing case must not lose the others
            traceback.print_exc()
            res = {"case": list(case), "error": f"{type(e).__name__}: {e}"}
            torch.cuda.empty_cache()
        res["wall_s"] = round(time.perf_counter() - ts, 1)
        report["cases"].append(res)
        print(json.dumps({k: res.get(k) for k in ("case", "forward_GBps", "train_GBps", "wall_s",
                                                  "error")}), flush=True)
        (out / "tbe_bw.json").write_text(json.dumps(report, indent=1))
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
