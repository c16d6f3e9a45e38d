"""Does the block-level contention model predict FusedSparseDist better than the overlap model?
(issue 24: every GPU-bound FusedSparseDist pair over-predicts, 1.1-2.1 times the measured saving)

The contention-aware replay (``tracekit.graph.whatif``) charges a kernel the overlap it gains
beside other streams' kernels (``CONTENTION_MODEL = "overlap"``); the block-level model
(``"blocks"``, ``tracekit.graph.blocks``) charges it the longer of that and the wait for SMs a
kernel of another stream holds (each kernel's blocks and waves from the trace's launch
configuration and ``deviceProperties``), with the streams' priorities honoured or not
(``blocks.HONOUR_PRIORITIES``), or the sum of the two (``"blocks+overlap"``). For each FusedSparseDist pair of the manifests, raw (no untraced
input), as ``bench.explain_proof`` predicts it: a pair whose "before" folder holds every rank of
its job on the job's graph (the fix on every rank, ``bench/common/joined.py``), any other from
its trace alone (explain's finding); against the measured saving and the proof's tolerance
(``bench.explain_proof.judge_time``: +-25 % of it or +-2 % of the step). A manifest given as
``PATH:judged`` is marked judged (a set the model was not fitted on), else fitted.

    python -m bench.contention_model MANIFEST[:judged]... [--out bench/results]
    python -m bench.contention_model --cost TRACE [--rounds 5]

``--cost``: what the block-level model costs explain: ``tracekit.analyses.explain.compute`` on
TRACE (loaded once; its findings' replays and what-ifs) with each model in turn, interleaved
over the rounds, CPU seconds of this process; per round the ratio to the overlap model's (the
baseline), their median and range.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.common import model_table, write_result

MODELS = (("overlap", "overlap", True), ("blocks", "blocks", False),
          ("blocks+priorities", "blocks", True), ("blocks+overlap", "blocks+overlap", False))
"""(label, ``whatif.CONTENTION_MODEL``, ``blocks.HONOUR_PRIORITIES``) of each model judged."""


def pairs_of(manifest: str, judged: bool) -> list[dict]:
    """The manifest's FusedSparseDist pairs whose "before" trace is in the tree."""
    from bench.common.joined import complete_job
    from bench.explain_proof import judge_time, measured

    with open(manifest) as fh:
        doc = json.load(fh)
    base = os.path.dirname(os.path.abspath(manifest))
    out = []
    for p in doc.get("pairs", []):
        trace = os.path.join(base, (p.get("before") or {}).get("trace") or "")
        if p.get("fix") != "fused_sparse_dist" or not os.path.isfile(trace):
            continue
        step, meas, lo, hi = measured(p, base)
        folder = complete_job(trace)
        out.append({"manifest": manifest, "judged": judged, "name": p["name"],
                    "trace": os.path.relpath(trace),
                    "folder": None if folder is None else os.path.relpath(folder),
                    "step_ms": step, "measured_ms": meas, "lo": lo, "hi": hi,
                    "tolerance_ms": judge_time(None, meas, step)[1]})
    return out


def predict(pair: dict) -> float | None:
    """The fix's raw saving (ms) with the models as set now."""
    if pair["folder"] is not None:
        from bench.common.joined import joined_fix

        got = joined_fix(pair["folder"], "fused_sparse_dist")
        return None if got is None else got["saving_ms"]
    from tracekit.analyses import explain
    from tracekit.phases import default_rules
    from tracekit.trace import load

    trace = load(pair["trace"], progress=False).traces[0]
    r = explain.compute(trace, default_rules(),
                        config=explain.ExplainConfig(generic_findings=False))
    got = [f for f in r.findings if f["id"] == "fused_sparse_dist"]
    return (got[0]["saving_ns"] or 0.0) / 1e6 if got else 0.0


def measure(pairs: list[dict]) -> list[dict]:
    from bench.explain_proof import judge_time
    from tracekit.graph import blocks
    from tracekit.graph import whatif as wi

    kept = wi.CONTENTION_MODEL, blocks.HONOUR_PRIORITIES
    rows = []
    try:
        for p in pairs:
            preds = {}
            for label, model, prio in MODELS:
                wi.CONTENTION_MODEL, blocks.HONOUR_PRIORITIES = model, prio
                preds[label] = predict(p)
            within = {k: judge_time(v, p["measured_ms"], p["step_ms"])[0] for k, v in preds.items()}
            err = {k: None if v is None else abs(v - p["measured_ms"]) for k, v in preds.items()}
            rows.append(dict(p, predicted_ms=preds, within=within, abs_error_ms=err))
            print(f"{p['name']}: measured {p['measured_ms']:.3f}, " +
                  ", ".join(f"{k} {v:.3f}" for k, v in preds.items() if v is not None),
                  file=sys.stderr, flush=True)
    finally:
        wi.CONTENTION_MODEL, blocks.HONOUR_PRIORITIES = kept
    return rows


def summary(rows: list[dict]) -> dict:
    """Per set (fitted / judged) and model: pairs within, and the mean |error| over the pairs
    the fix helped (a measured saving over their tolerance: the GPU-bound ones)."""
    out = {}
    for judged in (False, True):
        mine = [r for r in rows if r["judged"] == judged]
        helped = [r for r in mine if r["measured_ms"] > r["tolerance_ms"]]
        out["judged" if judged else "fitted"] = {
            k: {"within": sum(bool(r["within"][k]) for r in mine), "pairs": len(mine),
                "helped": len(helped),
                "mean_abs_error_helped_ms": (sum(r["abs_error_ms"][k] for r in helped) / len(helped)
                                             if helped else None)}
            for k, _, _ in MODELS}
    return out


def render(rows: list[dict], summ: dict, command: str, secs: float) -> str:
    keys = [k for k, _, _ in MODELS]
    out = model_table(
        "The block-level contention model against the overlap model", command, secs,
        "FusedSparseDist's saving (ms per step) predicted raw (no untraced input; on the job's "
        "graph where every rank of the job is in the tree) with each model, against the "
        "measured saving; within: +-25 % of it or +-2 % of the step.", "set", rows, keys, keys,
        lambda r: f"{os.path.basename(r['manifest'])}{' (judged)' if r['judged'] else ''} | "
                  f"{r['name']}{' (job)' if r['folder'] else ''}")
    for which, by in summ.items():
        if not any(v["pairs"] for v in by.values()):
            continue
        out.append(f"- {which}: " + "; ".join(
            f"{k} {v['within']} of {v['pairs']} within, mean |error| "
            + ("-" if v["mean_abs_error_helped_ms"] is None else f"{v['mean_abs_error_helped_ms']:.3f} ms")
            + f" over the {v['helped']} pairs the fix helped" for k, v in by.items()))
    return "\n".join(out) + "\n"


def cost(trace_path: str, rounds: int) -> dict:
    """CPU seconds of explain on the trace with each model, interleaved (module docstring)."""
    import statistics

    from tracekit.analyses import explain
    from tracekit.graph import blocks
    from tracekit.graph import whatif as wi
    from tracekit.phases import default_rules
    from tracekit.trace import load

    trace = load(trace_path, progress=False).traces[0]
    rules = default_rules()
    kept = wi.CONTENTION_MODEL, blocks.HONOUR_PRIORITIES
    secs = {label: [] for label, _, _ in MODELS[:2]}
    try:
        for r in range(rounds + 1):  # the first round warms up (the graph, the view)
            for label, model, prio in (MODELS[:2] if r % 2 == 0 else MODELS[1::-1]):
                wi.CONTENTION_MODEL, blocks.HONOUR_PRIORITIES = model, prio
                t0 = time.process_time()
                explain.compute(trace, rules)
                if r:
                    secs[label].append(time.process_time() - t0)
    finally:
        wi.CONTENTION_MODEL, blocks.HONOUR_PRIORITIES = kept
    ratio = [b / a for a, b in zip(secs["overlap"], secs["blocks"])]
    return {"trace": trace_path, "events": int(len(trace.events)), "rounds": rounds,
            "cpu_s": secs, "ratio": ratio, "ratio_median": statistics.median(ratio),
            "ratio_range": [min(ratio), max(ratio)], "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.contention_model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifests", nargs="*", help="proof manifests; PATH:judged marks a judged set")
    ap.add_argument("--out", default=None, help="write contention-model-<time>.md/.json there")
    ap.add_argument("--cost", default=None, metavar="TRACE", help="what the model costs explain on TRACE")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    from tracekit.errors import TracekitError

    if args.cost is not None:
        if not os.path.isfile(args.cost) or args.rounds < 1:
            print(f"bench.contention_model: --cost {args.cost!r}: no such trace file (or --rounds < 1)",
                  file=sys.stderr)
            return 2
        try:
            got = cost(args.cost, args.rounds)
        except TracekitError as exc:
            print(f"bench.contention_model: {exc}", file=sys.stderr)
            return 2
        print(f"{got['trace']} ({got['events']:,} events), explain CPU s, overlap model: " +
              ", ".join(f"{v:.2f}" for v in got["cpu_s"]["overlap"]) + "; blocks: " +
              ", ".join(f"{v:.2f}" for v in got["cpu_s"]["blocks"]) +
              f"; ratio blocks / overlap median {got['ratio_median']:.3f} "
              f"[{got['ratio_range'][0]:.3f}, {got['ratio_range'][1]:.3f}], load {got['load']:.1f}")
        return 0
    if not args.manifests:
        print("bench.contention_model: give proof manifests, or --cost TRACE", file=sys.stderr)
        return 2

    pairs = []
    try:
        for m in args.manifests:
            path, _, tag = m.partition(":")
            if tag not in ("", "judged"):
                print(f"bench.contention_model: {m!r}: expected PATH or PATH:judged", file=sys.stderr)
                return 2
            pairs += pairs_of(path, tag == "judged")
    except (OSError, ValueError, KeyError, TracekitError) as exc:
        print(f"bench.contention_model: cannot read a manifest: {exc}", file=sys.stderr)
        return 2
    if not pairs:
        print("bench.contention_model: no FusedSparseDist pair whose trace is in the tree",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        rows = measure(pairs)
    except TracekitError as exc:
        print(f"bench.contention_model: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    summ = summary(rows)
    command = "python -m bench.contention_model " + " ".join(
        args.manifests + (["--out", args.out] if args.out else []))
    text = render(rows, summ, command, secs)
    print(text)
    if args.out:
        base = write_result(args.out, "contention-model", text, {"rows": rows, "summary": summ},
                            command=command, seconds=secs)
        print(f"wrote {base}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
