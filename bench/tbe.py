"""Speed of the TBE CUDA kernels vs FBGEMM's TBE and vs what a PyTorch user writes without them
(GPU only).

    python3 -m bench.tbe --out "$OUT"            # every case below, ~4 min on an H200
    python3 -m bench.tbe --out "$OUT" --quick    # D=128, B=65536 only (the target shape)

Writes ``bench_tbe.json`` and ``bench_tbe.md`` under --out after every case (partial results
survive a crash or the time budget).

Cases (issues 3 and 12): 26 tables x 1M rows, D in {64, 128, 256}, B in {16384, 65536}, bag
lengths uniform in [1, 59] (pooling factor 30 on average), indices uniform or Zipf(1.1) (hot
ranks scattered over the table), int64 indices, SUM pooling; fp32 weights everywhere, both
optimizers (EXACT_SGD, EXACT_ROWWISE_ADAGRAD) at the headline shape D=128, B=65536 (uniform and
Zipf), SGD elsewhere; fp16 weights at the headline shape. For each: forward, and
forward+backward+update, same inputs, same run.

Contenders:
- ours ("auto": the variants ``runtime.kernels.cuda.DISPATCH`` picks for the case's shape
  class), every forward variant (forward timing) and every backward variant (training timing,
  "auto+NAME": the class's forward with backward NAME), and the first version (v1 forward + v1
  backward) for the before/after; ``TBE_SKIP_VARIANTS=v2p`` (comma-separated names,
  ``fwd:``/``bwd:`` prefix for one direction) leaves variants out, so a crashing one cannot
  poison the CUDA context for the rest;
- FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen`` (when ``fbgemm_gpu`` imports; it does not on
  CI or a machine without it: the bench says so and goes on): FBGEMM's defaults (bounds check
  WARNING, its v1 forward, non-deterministic long-segment backward) except stochastic rounding,
  off so that fp16 tables can be compared; weights copied from ours, so both start from equal
  tables;
- the PyTorch baseline (headline shape only unless --torch-baseline all): one
  ``nn.EmbeddingBag(sparse=True)`` per table, outputs concatenated, then ``torch.optim.SGD`` /
  ``torch.optim.Adagrad``.

Agreement (every case, FBGEMM vs ours): forward outputs max|a-b|/max|b| <= 1e-6; tables (and
the rowwise-Adagrad state) after one step from equal tables <= 1e-5 (fp32) or one fp16 ulp,
2^-10 (fp16 tables: both round to nearest). Every kernel variant of ours gives bit-identical
outputs and tables (checked on the first set of each case; training only where the tables fit
twice, D <= 128).

Timing: CUDA events around each repetition, median over the repetitions; three input sets
rotate; warm-up first. Forward-only timings run under ``torch.no_grad()``. The ratio tables
give FBGEMM's time / ours (>= 1: ours is at least as fast). The report ends with the dispatch
table this run's times recommend (per shape class, the variant with the smallest geometric mean
of time / the case's fastest time, over the class's cases and optimizers), as lines to paste
into ``DISPATCH`` in runtime/kernels/cuda.py, and the ratios to FBGEMM that table would give.

Bytes that must move (a lower bound, so the bandwidth figures are conservative):
  forward  = N*D*s (one row read per lookup, s = bytes per weight) + B*T*D*4 (output written)
             + N*8 + (T*B+1)*8
  update   = B*T*D*4 (grad_output read once) + 2*U*D*s (each updated row read and written)
             [+ 2*U*4 rowwise-Adagrad state read and written] + N*8 + (T*B+1)*8
  fwd+bwd+update = forward + update;   N = lookups, U = distinct rows the batch touches.
Effective bandwidth = bytes / time; it is compared with the device-to-device copy bandwidth
measured in the same run (2 * bytes of a 4 GiB ``copy_`` / its time: a read and a write).
With Zipf indices, repeated rows hit in L2, so the "effective" figure can exceed the copy
bandwidth; the uniform shapes are the honest DRAM test.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch


from runtime.embedding import OptimizerConfig, OptimType, Pooling, TableBatchedEmbedding, TableConfig
from runtime.kernels import fbgemm

DEV = torch.device("cuda")
T = 26
ROWS = 1_000_000
LR = 0.01
EPS = 1e-8
N_SETS = 3
FWD_TOL = 1e-6
TABLE_TOL = {torch.float32: 1e-5, torch.float16: 2.0**-10}
HEADLINE = (128, 65536)
PRECISION = {"fp32": torch.float32, "fp16": torch.float16}
V1 = ("v1", "v1")  # (forward, backward) variants of the first version


def zipf_ids(n: int, rows: int, a: float) -> torch.Tensor:
    k = torch.arange(1, rows + 1, device=DEV, dtype=torch.float64)
    p = k.pow(-a)
    ranks = torch.multinomial((p / p.sum()).float(), n, replacement=True)
    return torch.randperm(rows, device=DEV)[ranks]


def make_set(batch: int, dist: str):
    """(indices (N,), offsets (T*B+1,), per-table (indices, offsets) views for the baseline, U)."""
    lengths = torch.randint(1, 60, (T * batch,), device=DEV)
    offsets = torch.zeros(T * batch + 1, dtype=torch.int64, device=DEV)
    offsets[1:] = torch.cumsum(lengths, 0)
    starts = offsets[::batch].tolist()
    parts = []
    for t in range(T):
        n = starts[t + 1] - starts[t]
        parts.append(zipf_ids(n, ROWS, 1.1) if dist == "zipf" else torch.randint(0, ROWS, (n,), device=DEV))
    indices = torch.cat(parts)
    per_table = [(parts[t], offsets[t * batch : (t + 1) * batch] - starts[t]) for t in range(T)]
    unique = sum(int(torch.unique(p).numel()) for p in parts)
    return indices, offsets, per_table, unique


def time_reps(fn, sets, *, reps: int, warmup: int = 2, max_s: float = 4.0) -> list[float]:
    """Milliseconds per repetition (CUDA events), rotating the input sets."""
    for i in range(warmup):
        fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    times = []
    t_start = time.perf_counter()
    for i in range(reps):
        s = sets[i % len(sets)]
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn(s)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
        if time.perf_counter() - t_start > max_s and len(times) >= 3:
            break
    return times


def kernel_breakdown(fn, s, top: int = 12) -> list[dict]:
    """GPU time per kernel name (microseconds) of one call of fn(s), under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(s)
        torch.cuda.synchronize()
    rows = [
        {"kernel": e.key[:160], "us": round(e.self_device_time_total, 1), "calls": e.count}
        for e in prof.key_averages()
        if e.self_device_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["us"])[:top]


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s (read + write bytes over time)."""
    n = 4 * 2**30 // 4
    src = torch.empty(n, device=DEV).uniform_()
    dst = torch.empty_like(src)
    ts = time_reps(lambda _: dst.copy_(src), [None], reps=20, warmup=3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / (statistics.median(ts) / 1e3) / 1e9


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (float64 on the device; NaN counts as infinite)."""
    diff = (got.double() - want.double()).abs().nan_to_num(nan=float("inf")).max()
    return float(diff / want.double().abs().max().clamp(min=1e-30))


# ------------------------------------------------------------------------------ contenders
def ours(dim: int, opt: OptimType, dtype: torch.dtype) -> TableBatchedEmbedding:
    cfg = OptimizerConfig(opt, lr=LR, eps=EPS)
    return TableBatchedEmbedding([TableConfig(ROWS, dim) for _ in range(T)], pooling=Pooling.SUM, optimizer=cfg,
                                 weights_dtype=dtype, device=DEV, backend="cuda")


def baseline(dim: int, opt: OptimType):
    embs = torch.nn.ModuleList(
        torch.nn.EmbeddingBag(ROWS, dim, mode="sum", sparse=True, device=DEV) for _ in range(T)
    )
    if opt is OptimType.EXACT_SGD:
        optim = torch.optim.SGD(embs.parameters(), lr=LR)
    else:
        optim = torch.optim.Adagrad(embs.parameters(), lr=LR)
    return embs, optim


def baseline_forward(embs, s):
    return torch.cat([e(idx, off) for e, (idx, off) in zip(embs, s[2])], dim=1)


def variants_ctx(fwd: str | None = None, bwd: str | None = None):
    from runtime.kernels import cuda as kc

    return kc.use_variants(forward=fwd, backward=bwd)


# ------------------------------------------------------------------------------ one case
def bench_case(case: dict, copy_gbs: float, opts: dict) -> dict:
    """Forward and training timings + agreement of one (dim, batch, dist, precision) case."""
    from runtime.kernels import cuda as kc

    dim, batch, dist, prec = case["dim"], case["batch"], case["dist"], case["precision"]
    dtype = PRECISION[prec]
    wbytes = torch.finfo(dtype).bits // 8
    torch.manual_seed(0)
    sets = [make_set(batch, dist) for _ in range(N_SETS)]
    grads = [torch.randn(batch, T * dim, device=DEV) for _ in range(N_SETS)]
    gi = {id(s): g for s, g in zip(sets, grads)}
    n_avg = statistics.mean(s[0].numel() for s in sets)
    u_avg = statistics.mean(s[3] for s in sets)
    idx_bytes = n_avg * 8 + (T * batch + 1) * 8
    fwd_bytes = n_avg * dim * wbytes + batch * T * dim * 4 + idx_bytes
    res = dict(case, lookups=n_avg, unique_rows=u_avg, forward_bytes=fwd_bytes, forward={}, results={},
               agreement={}, variants_identical={})
    fb = opts["fbgemm"]
    default_fwd, default_bwd = kc.dispatch(dtype, dim)  # this shape class's choice ("auto")
    res["auto"] = [default_fwd, default_bwd]
    fwd_variants = kc.forward_variants()  # less $TBE_SKIP_VARIANTS
    bwd_variants = kc.backward_variants()
    profile = (dim, batch, dist, prec) in opts["profile_cases"]

    for oi, opt in enumerate(case["optimizers"]):
        seed = 1000 + oi
        torch.manual_seed(seed)  # ours' initial tables: the same for every module built with this seed
        m = ours(dim, opt, dtype)
        f = fbgemm.like(m) if fb else None
        if oi == 0:
            # ---- forward: agreement, every variant bit-identical, timings
            with torch.no_grad():
                want = m(sets[0][0], sets[0][1])
                for v in fwd_variants:
                    with variants_ctx(fwd=v):
                        res["variants_identical"][f"forward {v}"] = bool(torch.equal(m(sets[0][0], sets[0][1]), want))
                if f is not None:
                    res["agreement"]["forward"] = rel_err(want, f(sets[0][0], sets[0][1]))
                del want
                for v in fwd_variants:
                    with variants_ctx(fwd=v):
                        res["forward"][f"ours {v}"] = statistics.median(time_reps(lambda s: m(s[0], s[1]), sets, reps=30))
                if f is not None:
                    res["forward"]["fbgemm"] = statistics.median(time_reps(lambda s: f(s[0], s[1]), sets, reps=30))
            res["forward"]["ours"] = res["forward"][f"ours {default_fwd}"]
            if opts["torch_baseline"](case):
                embs, _ = baseline(dim, opt)
                with torch.no_grad():
                    res["forward"]["torch"] = statistics.median(
                        time_reps(lambda s: baseline_forward(embs, s), sets, reps=15))
                del embs
                torch.cuda.empty_cache()
            res["forward_GBps"] = fwd_bytes / (res["forward"]["ours"] / 1e3) / 1e9
            res["forward_frac_of_copy"] = res["forward_GBps"] / copy_gbs

        upd_bytes = batch * T * dim * 4 + 2 * u_avg * dim * wbytes + idx_bytes
        if opt is OptimType.EXACT_ROWWISE_ADAGRAD:
            upd_bytes += 2 * u_avg * 4
        r = {"bytes": fwd_bytes + upd_bytes, "ms": {}}

        def step(mod, s):
            mod(s[0], s[1]).backward(gi[id(s)])

        # ---- training: one step from equal tables, ours (default variants) vs FBGEMM
        step(m, sets[0])
        if f is not None:
            step(f, sets[0])
            tol = TABLE_TOL[dtype]
            err_w = max(rel_err(a, b) for a, b in zip(m.split_embedding_weights(), f.split_embedding_weights()))
            r_agree = {"tables": err_w, "tables_ok": err_w <= tol, "tolerance": tol}
            if opt is OptimType.EXACT_ROWWISE_ADAGRAD:
                err_m = max(rel_err(a, b) for a, b in zip(m.split_optimizer_states(), fbgemm.momentum(f)))
                r_agree.update(momentum=err_m, momentum_ok=err_m <= 1e-5)
            res["agreement"][opt.name] = r_agree
            r["ms"]["fbgemm"] = statistics.median(time_reps(lambda s: step(f, s), sets, reps=15))
            if profile:
                r["fbgemm kernels"] = safe_breakdown(lambda s: step(f, s), sets[0])
        f = None  # (the modules hold GBs: drop each before the next is built)
        torch.cuda.empty_cache()
        # ---- every backward variant gives the same tables after that step (where two fit)
        if dim <= 128:
            for v in bwd_variants:
                if v == default_bwd:
                    continue
                torch.manual_seed(seed)
                m2 = ours(dim, opt, dtype)
                with variants_ctx(bwd=v):
                    step(m2, sets[0])
                same = all(torch.equal(a, b) for a, b in zip(m2.split_embedding_weights(), m.split_embedding_weights()))
                same = same and torch.equal(m2.momentum, m.momentum)
                res["variants_identical"][f"{opt.name} backward {v}"] = bool(same)
                del m2
                torch.cuda.empty_cache()
        # ---- training timings
        for fv, bv in [(default_fwd, b) for b in bwd_variants] + [V1]:
            key = "ours v1" if (fv, bv) == V1 else f"ours auto+{bv}"
            if key in r["ms"]:
                continue
            with variants_ctx(fwd=fv, bwd=bv):
                r["ms"][key] = statistics.median(time_reps(lambda s: step(m, s), sets, reps=15))
                if profile and bv in (default_bwd, "v3", "v1"):
                    r[f"{key} kernels"] = safe_breakdown(lambda s: step(m, s), sets[0])
        r["ms"]["ours"] = r["ms"][f"ours auto+{default_bwd}"]
        m = None
        torch.cuda.empty_cache()
        if opts["torch_baseline"](case):
            embs, optim = baseline(dim, opt)

            def step_base(s, embs=embs, optim=optim):
                baseline_forward(embs, s).backward(gi[id(s)])
                optim.step()
                optim.zero_grad(set_to_none=True)

            r["ms"]["torch"] = statistics.median(time_reps(step_base, sets, reps=6, warmup=1, max_s=6.0))
            del embs, optim, step_base
            torch.cuda.empty_cache()
        r["GBps"] = r["bytes"] / (r["ms"]["ours"] / 1e3) / 1e9
        r["frac_of_copy"] = r["GBps"] / copy_gbs
        res["results"][opt.name] = r
    return res


def safe_breakdown(fn, s) -> list[dict]:
    try:  # where the step's time goes, kernel by kernel (one profiled step)
        return kernel_breakdown(fn, s)
    except Exception as e:  # the profiler is a diagnostic: never lose the timings to it
        return [{"error": f"{type(e).__name__}: {e}"}]


# ------------------------------------------------------------------------------ report
def ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}" if num and den else "–"


def best_ratio(times: dict) -> str:
    """FBGEMM's time / the fastest of our variants in ``times`` ('ours X' keys), with X."""
    ours = {k[5:]: v for k, v in times.items() if k.startswith("ours ")}
    if not ours or not times.get("fbgemm"):
        return "–"
    name = min(ours, key=ours.get)
    return f"{times['fbgemm'] / ours[name]:.2f} ({name})"


def markdown(report: dict) -> str:
    fb = report.get("fbgemm")
    lines = [
        f"# TBE benchmark: {report['device']}, {report['date']}",
        "",
        f"torch {report['torch']}, CUDA {report['cuda']}; FBGEMM: {fb or 'not available (' + report['fbgemm_why'] + ')'}; "
        f"device-to-device copy bandwidth {report['copy_GBps']:.0f} GB/s (read+write). 26 tables x 1M rows, "
        f"pooling factor 30, SUM, int64 indices. Ours = \"auto\": the variants runtime.kernels.cuda.DISPATCH picks "
        f"for the case's class (the case's \"auto\" column below); auto+NAME = that forward with backward NAME; "
        f"v1 = the first version. Variants left out: {report.get('skipped_variants') or 'none'}.",
        "",
        "## FBGEMM's time / ours (>= 1.00: ours at least as fast)",
        "",
        "| D | B | ids | weights | forward | fwd+bwd+update SGD | rowwise Adagrad | v1: forward | v1: SGD | v1: Adagrad |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(s, opt, key):
        return s.get("results", {}).get(opt, {}).get("ms", {}).get(key)

    for s in report["cases"]:
        head = f"| {s['dim']} | {s['batch']} | {s['dist']} | {s['precision']} |"
        if "error" in s:
            lines.append(f"{head} error: {s['error'][:100]} |")
            continue
        fw = s["forward"]
        cells = [ratio(fw.get("fbgemm"), fw.get("ours"))]
        cells += [ratio(ms(s, o, "fbgemm"), ms(s, o, "ours")) for o in ("EXACT_SGD", "EXACT_ROWWISE_ADAGRAD")]
        cells += [ratio(fw.get("fbgemm"), fw.get("ours v1"))]
        cells += [ratio(ms(s, o, "fbgemm"), ms(s, o, "ours v1")) for o in ("EXACT_SGD", "EXACT_ROWWISE_ADAGRAD")]
        lines.append(f"{head} {' | '.join(cells)} |")

    lines += ["", "## FBGEMM's time / ours with the fastest variant of each column (which one)", "",
              "| D | B | ids | weights | forward | fwd+bwd+update SGD | rowwise Adagrad |", "|---|---|---|---|---|---|---|"]
    for s in report["cases"]:
        if "error" in s:
            continue
        cells = [best_ratio(s["forward"])]
        cells += [best_ratio(s.get("results", {}).get(o, {}).get("ms", {})) for o in ("EXACT_SGD", "EXACT_ROWWISE_ADAGRAD")]
        lines.append(f"| {s['dim']} | {s['batch']} | {s['dist']} | {s['precision']} | {' | '.join(cells)} |")

    lines += ["", "## Times (ms, median)", "",
              "| D | B | ids | weights | auto | what | " + " | ".join(report["columns"]) + " |",
              "|---|---|---|---|---|---|" + "---|" * len(report["columns"])]
    for s in report["cases"]:
        if "error" in s:
            continue
        rows = [("forward", s["forward"])] + [(o, r["ms"]) for o, r in s["results"].items()]
        auto = "+".join(s.get("auto", []))
        for what, d in rows:
            cells = [f"{d[c]:.3f}" if c in d else "–" for c in report["columns"]]
            lines.append(f"| {s['dim']} | {s['batch']} | {s['dist']} | {s['precision']} | {auto} | {what} | "
                         f"{' | '.join(cells)} |")
    lines += recommended_dispatch(report)

    lines += ["", "## Bandwidth of ours (bytes that must move / time)", "",
              "| D | B | ids | weights | fwd GB/s | % copy | optimizer | fwd+bwd+upd GB/s | % copy | speed-up vs torch |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in report["cases"]:
        for opt, r in s.get("results", {}).items():
            lines.append(
                f"| {s['dim']} | {s['batch']} | {s['dist']} | {s['precision']} | {s['forward_GBps']:.0f} | "
                f"{100 * s['forward_frac_of_copy']:.0f}% | {opt} | {r['GBps']:.0f} | {100 * r['frac_of_copy']:.0f}% | "
                f"{ratio(r['ms'].get('torch'), r['ms']['ours'])} (fwd {ratio(s['forward'].get('torch'), s['forward']['ours'])}) |")

    lines += ["", "## Agreement", "",
              "FBGEMM vs ours: forward max|a-b|/max|b| (<= 1e-6); tables (rowwise-Adagrad state) after one step "
              "from equal tables (<= 1e-5 fp32, <= 2^-10 fp16). Variants: every kernel variant of ours bit-identical "
              "to the default.", "",
              "| D | B | ids | weights | forward | tables after one step | variants identical |", "|---|---|---|---|---|---|---|"]
    for s in report["cases"]:
        if "error" in s:
            continue
        ag = s.get("agreement", {})
        fwd = f"{ag['forward']:.1e} {'ok' if ag['forward'] <= FWD_TOL else 'FAIL'}" if "forward" in ag else "–"
        tabs = []
        for o in ("EXACT_SGD", "EXACT_ROWWISE_ADAGRAD"):
            if o in ag:
                a = ag[o]
                t = f"{o}: {a['tables']:.1e} {'ok' if a['tables_ok'] else 'FAIL'}"
                if "momentum" in a:
                    t += f", state {a['momentum']:.1e} {'ok' if a['momentum_ok'] else 'FAIL'}"
                tabs.append(t)
        vi = s.get("variants_identical", {})
        bad = [k for k, v in vi.items() if not v]
        var = f"all {len(vi)} yes" if vi and not bad else ("NO: " + ", ".join(bad) if bad else "–")
        lines.append(f"| {s['dim']} | {s['batch']} | {s['dist']} | {s['precision']} | {fwd} | {'; '.join(tabs) or '–'} | {var} |")

    for s in report["cases"]:
        for opt, r in s.get("results", {}).items():
            for key, val in r.items():
                if key.endswith("kernels") and val:
                    lines += ["", f"Kernels of one fwd+bwd+update step, {key[:-8] or 'ours'}, D={s['dim']} B={s['batch']} "
                                  f"{s['dist']} {s['precision']} {opt}:", ""]
                    lines += [f"- {k.get('us', '?')} us  x{k.get('calls', '?')}  {k.get('kernel', k.get('error'))}"
                              for k in val]
    if report.get("skipped"):
        lines += ["", "Skipped (time budget): " + "; ".join(report["skipped"])]
    return "\n".join(lines) + "\n"


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def recommend(report: dict) -> dict:
    """Per shape class ("fp32"/"16-bit", dim bucket) of the run's cases: the forward variant and
    the backward variant with the smallest geometric mean, over the class's cases (and
    optimizers), of time / the fastest variant's time in that case; each with that mean and the
    runner-up's. Backward times are training steps with the case's "auto" forward, the same for
    every backward variant, so the ranking does not depend on it."""
    from runtime.kernels import cuda as kc

    by_class: dict[tuple[str, int], dict[str, list]] = {}
    for s in report["cases"]:
        if "error" in s:
            continue
        key = kc.shape_class(PRECISION[s["precision"]], s["dim"])
        c = by_class.setdefault(key, {"fwd": [], "bwd": []})
        c["fwd"].append({k[5:]: v for k, v in s["forward"].items() if k.startswith("ours ") and k != "ours auto"})
        for r in s["results"].values():
            c["bwd"].append({k[10:]: v for k, v in r["ms"].items() if k.startswith("ours auto+")})
    out = {}
    for key, c in sorted(by_class.items()):
        pick = {}
        for side, runs in c.items():
            names = set.intersection(*(set(r) for r in runs)) if runs else set()
            score = {n: _geomean([r[n] / min(r.values()) for r in runs]) for n in names}
            ranked = sorted(score, key=score.get)
            if ranked:
                pick[side] = (ranked[0], score[ranked[0]], ranked[1] if len(ranked) > 1 else None,
                              score[ranked[1]] if len(ranked) > 1 else None)
        if len(pick) == 2:
            out[key] = pick
    return out


def recommended_dispatch(report: dict) -> list[str]:
    """Markdown: the DISPATCH lines this run recommends, and FBGEMM's time / ours per case with
    them (forward: the chosen forward's time; training: the chosen backward's step with the
    case's auto forward, minus that forward's time plus the chosen one's)."""
    rec = recommend(report)
    if not rec:
        return []
    lines = ["", "## Dispatch table this run recommends", "",
             "Per shape class: the variant with the smallest geometric mean of time / the fastest variant's time over "
             "the class's cases (and optimizers), that mean, and the runner-up. Lines for `DISPATCH` in "
             "runtime/kernels/cuda.py:", "", "```python"]
    for (w, b), p in rec.items():
        (f, fs, f2, f2s), (bw, bs, b2, b2s) = p["fwd"], p["bwd"]
        lines.append(f'    ("{w}", {b}): ("{f}", "{bw}"),  # fwd {fs:.3f} (next {f2} {f2s or 0:.3f}), '
                     f'bwd {bs:.3f} (next {b2} {b2s or 0:.3f})')
    lines += ["```", "", "FBGEMM's time / ours with that table:", "",
              "| D | B | ids | weights | forward | fwd+bwd+update SGD | rowwise Adagrad |", "|---|---|---|---|---|---|---|"]
    from runtime.kernels import cuda as kc

    for s in report["cases"]:
        key = kc.shape_class(PRECISION[s["precision"]], s["dim"]) if "error" not in s else None
        if key not in rec:
            continue
        f, bw = rec[key]["fwd"][0], rec[key]["bwd"][0]
        fw = s["forward"]
        t_f = fw.get(f"ours {f}")
        cells = [ratio(fw.get("fbgemm"), t_f)]
        for o in ("EXACT_SGD", "EXACT_ROWWISE_ADAGRAD"):
            ms = s.get("results", {}).get(o, {}).get("ms", {})
            step = ms.get(f"ours auto+{bw}")
            auto_f = fw.get(f"ours {s['auto'][0]}")
            cells.append(ratio(ms.get("fbgemm"), step - auto_f + t_f if step and auto_f and t_f else None))
        lines.append(f"| {s['dim']} | {s['batch']} | {s['dist']} | {s['precision']} | {' | '.join(cells)} |")
    return lines


def cases(quick: bool) -> list[dict]:
    """Every case, the issue's rows and fp16 first (the budget may cut the tail)."""
    sgd, both = [OptimType.EXACT_SGD], [OptimType.EXACT_SGD, OptimType.EXACT_ROWWISE_ADAGRAD]

    def c(d, b, dist, prec="fp32", o=sgd):
        return {"dim": d, "batch": b, "dist": dist, "precision": prec, "optimizers": o}

    out = [c(128, 65536, "uniform", o=both), c(128, 65536, "zipf", o=both)]
    if quick:
        return out
    out += [c(64, 16384, "uniform"), c(128, 16384, "uniform"), c(256, 65536, "uniform"),
            c(128, 65536, "uniform", "fp16", both), c(128, 65536, "zipf", "fp16", both)]
    done = {(x["dim"], x["batch"], x["dist"]) for x in out}
    out += [c(d, b, dist) for d in (64, 128, 256) for b in (16384, 65536) for dist in ("uniform", "zipf")
            if (d, b, dist) not in done]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="directory for the results")
    ap.add_argument("--quick", action="store_true", help="only D=128, B=65536 (uniform and Zipf, fp32)")
    ap.add_argument("--budget-s", type=float, default=250.0, help="start no new case after this many seconds")
    ap.add_argument("--no-fbgemm", action="store_true", help="leave FBGEMM out even when it imports")
    ap.add_argument("--torch-baseline", choices=("headline", "all", "none"), default="headline",
                    help="cases that also time the nn.EmbeddingBag baseline (headline: D=128, B=65536, fp32)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench.tbe: needs a CUDA GPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    from runtime.kernels import cuda as kc

    kc.load()  # compile (or reuse the cache) before any timing
    print(f"kernels ready after {time.perf_counter() - t0:.1f} s", flush=True)
    fb_ok, fb_info = (False, "--no-fbgemm") if args.no_fbgemm else fbgemm.available()
    print(f"FBGEMM: {fb_info if fb_ok else 'not available, going on without it (' + fb_info + ')'}", flush=True)
    report = {
        "device": torch.cuda.get_device_name(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "fbgemm": fb_info if fb_ok else None,
        "fbgemm_why": None if fb_ok else fb_info,
        "dispatch": {f"{w} {b}": list(v) for (w, b), v in kc.DISPATCH.items()},
        "skipped_variants": os.environ.get("TBE_SKIP_VARIANTS", ""),
        "columns": ["ours", "fbgemm", "torch", "ours v1"] + [f"ours {v}" for v in kc.forward_variants() if v != "v1"]
        + [f"ours auto+{v}" for v in kc.backward_variants()],
        "copy_GBps": copy_bandwidth(),
        "cases": [],
    }
    print(f"copy bandwidth {report['copy_GBps']:.0f} GB/s", flush=True)
    headline = lambda c: (c["dim"], c["batch"]) == HEADLINE and c["precision"] == "fp32"  # noqa: E731
    opts = {
        "fbgemm": fb_ok,
        "torch_baseline": {"headline": headline, "all": lambda c: True, "none": lambda c: False}[args.torch_baseline],
        # the two shapes to attack first: kernel breakdown of one step of each contender
        "profile_cases": {(128, 65536, "zipf", "fp32"), (64, 16384, "uniform", "fp32"), (128, 65536, "uniform", "fp32"),
                          (256, 65536, "uniform", "fp32"), (64, 65536, "zipf", "fp32")},
    }
    for case in cases(args.quick):
        name = f"D={case['dim']} B={case['batch']} {case['dist']} {case['precision']}"
        if time.perf_counter() - t0 > args.budget_s:
            report.setdefault("skipped", []).append(name)
            continue
        ts = time.perf_counter()
        try:
            res = bench_case(case, report["copy_GBps"], opts)
        except Exception as e:  # keep going: one failing case must not lose the others
            traceback.print_exc()
            res = {k: case[k] for k in ("dim", "batch", "dist", "precision")}
            res["error"] = f"{type(e).__name__}: {e}"
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
        res["optimizers"] = [o.name for o in case["optimizers"]]
        res["wall_s"] = time.perf_counter() - ts
        report["cases"].append(res)
        print(f"{name}: {res['wall_s']:.1f} s", json.dumps({k: res.get(k) for k in ("forward", "agreement", "error")}),
              flush=True)
        (out / "bench_tbe.json").write_text(json.dumps(report, indent=1, default=str))
        (out / "bench_tbe.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
