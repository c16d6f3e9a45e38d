"""Does tracekit's embedding bandwidth, read from a trace alone, agree with the TBE benchmark's
measured bandwidth on the same shapes? (CPU; the inputs come from ``gpu/run_all.sh tbe_bw``.)

    python -m bench.tbe_bw_check DIR [--out bench/results]

``DIR`` holds what ``gpu/tbe_bw.py`` wrote: ``tbe_bw.json`` (per case, the benchmark's figures:
bytes by its model over the time of CUDA events around each repetition) and ``traces/*.json.gz``
(the same kernels, the same shapes, profiled with ``record_shapes=True``). For each case it runs
``tracekit.analyses.embedding_bw`` on the trace and compares, over the traced steps:

- forward: tracekit's GB/s (the forward calls' bytes / their kernels' GPU time) against the
  benchmark's forward GB/s;
- forward + backward + update: tracekit's bytes with the distinct rows the traced input set
  touches (``traced_set.unique_rows``, counted on the GPU: the trace cannot hold it) over the
  forward and backward kernels' GPU time, against the benchmark's training GB/s; and tracekit's
  own figure from the trace alone, which counts one row per lookup (an upper bound).

A case agrees when the ratio tracekit / benchmark is within ``TOLERANCE``. Prints a table and
writes ``tbe-bw-check-<device>-<date>.md`` and ``.json`` under ``--out``; exit 1 when a case
does not agree, 2 when the inputs cannot be read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TOLERANCE = 0.10
"""|tracekit / benchmark - 1| a case may differ by."""


def case_figures(result, traced_unique: int) -> dict:
    """tracekit's figures of one traced case: from ``embedding_bw``'s result, with the traced
    set's distinct rows put in for the backward's row count."""
    calls = result.calls[result.calls["status"] == "ok"]
    fwd = calls[calls["direction"] == "forward"]
    bwd = calls[calls["direction"] == "backward"]
    out = {"forward_calls": len(fwd), "backward_calls": len(bwd), "device": result.device,
           "peak_gbps": result.peak_gbps}
    if len(fwd):
        out["forward_GBps"] = float(fwd["bytes"].sum() / fwd["gpu_ns"].sum())
        out["forward_ms_per_call"] = float(fwd["gpu_ns"].mean() / 1e6)
    if len(fwd) and len(bwd):
        bwd_bytes = float((bwd["fixed_bytes"] + bwd["row_bytes"] * traced_unique).sum())
        t = float(fwd["gpu_ns"].sum() + bwd["gpu_ns"].sum())
        out["train_GBps"] = (float(fwd["bytes"].sum()) + bwd_bytes) / t
        out["train_GBps_upper"] = float(fwd["bytes"].sum() + bwd["bytes"].sum()) / t
        out["backward_ms_per_call"] = float(bwd["gpu_ns"].mean() / 1e6)
        out["backward_share_upper"] = float(bwd["share"].mean())
    return out


def check(directory: Path) -> dict:
    """Every case of ``directory/tbe_bw.json`` with tracekit's figures and the ratios."""
    from tracekit.analyses import embedding_bw
    from tracekit.phases import default_rules
    from tracekit.trace import load

    bench = json.loads((directory / "tbe_bw.json").read_text())
    rows = []
    for c in bench["cases"]:
        if "error" in c:
            rows.append({"case": c["case"], "error": c["error"]})
            continue
        trace = load(str(directory / c["trace"]), use_cache=False).traces[0]
        res = embedding_bw.compute(trace, default_rules())
        tk = case_figures(res, c["traced_set"]["unique_rows"])
        row = {"case": c["case"], "bench_forward_GBps": c["forward_GBps"],
               "bench_train_GBps": c["train_GBps"], "bench_forward_ms": c.get("forward_ms"),
               "bench_train_ms": c.get("train_ms"),
               **{f"tracekit_{k}": v for k, v in tk.items()}}
        for what in ("forward", "train"):
            got, want = tk.get(f"{what}_GBps"), c[f"{what}_GBps"]
            row[f"{what}_ratio"] = got / want if got and want else None
            row[f"{what}_agrees"] = (row[f"{what}_ratio"] is not None
                                     and abs(row[f"{what}_ratio"] - 1) <= TOLERANCE)
        rows.append(row)
    return {"device": bench["device"], "date": bench["date"], "torch": bench.get("torch"),
            "copy_GBps": bench.get("copy_GBps"), "tolerance": TOLERANCE, "cases": rows}


def _f(v, fmt: str = "{:.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def markdown(rep: dict) -> str:
    lines = [f"# tracekit's embedding bandwidth vs the TBE benchmark: {rep['device']}, {rep['date']}",
             "",
             f"torch {rep['torch']}; device-to-device copy {_f(rep['copy_GBps'])} GB/s. Benchmark: "
             "bytes by bench.tbe's model over CUDA-event time (median); tracekit: the same trace's "
             "bytes from the recorded shapes over its kernels' GPU time; training with the traced "
             "set's distinct rows (tracekit alone: one row per lookup, an upper bound). Agrees: "
             f"within ±{100 * rep['tolerance']:.0f} %. \"fwd ms\": the benchmark's time per forward call "
             "(CUDA events around the call: its host work and launches included) and the forward "
             "kernels' GPU time per call in the trace.", "",
             "| case | fwd GB/s bench | fwd GB/s tracekit | ratio | fwd ms bench / kernels | train GB/s "
             "bench | train GB/s tracekit | ratio | tracekit alone (upper) | agrees |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep["cases"]:
        if "error" in r:
            lines.append(f"| {r['case']} | error: {r['error'][:80]} ||||||||| no |")
            continue
        ok = "yes" if r["forward_agrees"] and r["train_agrees"] else "NO"
        lines.append(
            f"| {r['case']} | {_f(r['bench_forward_GBps'])} | {_f(r.get('tracekit_forward_GBps'))} | "
            f"{_f(r['forward_ratio'], '{:.3f}')} | {_f(r.get('bench_forward_ms'), '{:.3f}')} / "
            f"{_f(r.get('tracekit_forward_ms_per_call'), '{:.3f}')} | {_f(r['bench_train_GBps'])} | "
            f"{_f(r.get('tracekit_train_GBps'))} | {_f(r['train_ratio'], '{:.3f}')} | "
            f"{_f(r.get('tracekit_train_GBps_upper'))} | {ok} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path, help="gpu/tbe_bw.py's output (tbe_bw.json, traces/)")
    ap.add_argument("--out", type=Path, default=None, help="write the .md and .json here")
    args = ap.parse_args()
    try:
        rep = check(args.directory)
    except (OSError, ValueError, KeyError) as e:
        print(f"tbe_bw_check: cannot read {args.directory}: {e}", file=sys.stderr)
        return 2
    text = markdown(rep)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        dev = re.sub(r"[^a-z0-9]+", "", rep["device"].lower().replace("nvidia", ""))
        stamp = re.sub(r"[^0-9]", "", rep["date"])[:12]
        stem = args.out / f"tbe-bw-check-{dev}-{stamp[:8]}-{stamp[8:12]}"
        stem.with_suffix(".md").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(rep, indent=1))
        print(f"wrote {stem}.md and .json")
    bad = [r for r in rep["cases"] if not (r.get("forward_agrees") and r.get("train_agrees"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
