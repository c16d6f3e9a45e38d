"""Proof of `tracekit explain` against the runtime: predicted vs measured savings of each fix.

A manifest names pairs the runtime ran on a GPU: the "before" trace (the fix off) with its
measured step time (and peak reserved), and the "after" run's measured figures (the fix on).
For each pair this script predicts, from the "before" trace alone, what the fix saves
(`tracekit.analyses.explain`, the finding with the pair's fix id) and compares:

- time fixes: the measured saving (the paired median over the benchmark's rounds, with its 95 %
  interval, where the manifest has them; else before - after) against two predictions: *raw*,
  the finding's saving fraction x the measured "before" step time; and *calibrated*: the
  trace's steps are longer than the timed ones (the profiler's overhead, which is host time: it
  records every op and launch), so the host is first made faster (``host=f`` what-if) until
  the replay's step equals the measured "before" step, and the fix is replayed on top of that.
  Target: within +-25% of the measured saving or +-2% of the step time, whichever is larger,
  judged against the measured median, and also against its interval (the tolerance band around
  the prediction meets it). A pair whose fix does not help is judged the same way (its measured
  saving is ~0, so the prediction must be within 2% of the step time); the verdict column says
  whether the calibrated prediction is "would not help" (under ``tracekit.report.
  NO_HELP_FRACTION`` of the step, as ``tracekit explain`` says it);
- memory fixes: predicted peak reserved against the "after" run's, within +-5%.

For time pairs whose "after" trace is in the manifest, a second table holds the traces
themselves, to tell what the model gets wrong from what the timed runs do differently: traced
step before -> after against the prediction (trace domain), host time on the critical path per
step, the *GPU floor* (the replay with the host 1000x faster: what the GPU side alone allows)
of the "before", of the "before" with the fix (contention-free / contention-aware) and of the
"after", and the untraced steps of the trace runs themselves (``metrics.json`` beside the
trace, ``trace_run.step_ms``).

Manifest: ``bench/common/proof_manifest.py`` writes them (``tracekit-explain-proof/1``, from the GPU
benchmarks); the older hand-written form (paths relative to the manifest's folder)::

    {"device": str, "date": str, "note": str,
     "pairs": [{"name": str, "fix": "fused_sparse_dist"|"async_delta_copy"|
                "precomputed_writeback"|"inplace_batch_copy",
                "before": {"trace": path, "snapshot": path (optional),
                           "step_ms": num|FIGURE, "peak_reserved_bytes": int|FIGURE},
                "after": {"step_ms": num|FIGURE, "peak_reserved_bytes": int|FIGURE}}]}

where a FIGURE read from another JSON file is ``{"file": path, "key": "a.b.c"}`` (a dotted
path into it), so that no figure is copied by hand. ``bench/explain_samples.json`` is such a
manifest (the 2-GPU sample traces).

    python -m bench.common.proof_manifest merge bench/results/proof-h200-DATE.json bench/results/proof-pipelines-1gpu-h200-DATE.json bench/results/proof-issue5-h200-DATE.json
    python -m bench.explain_proof bench/results/proof-h200-DATE.json --out bench/results

Prints the tables (markdown) and, with --out, writes explain-proof-<gpu>-<date>.{md,json} there
(the manifest's device and date; ``--suffix`` appends to the name).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone


TIME_TOLERANCE = 0.25
STEP_TOLERANCE = 0.02
MEMORY_TOLERANCE = 0.05


def figure(value, base: str):
    """A number, or ``{"file", "key"}`` read from that JSON file (dotted key)."""
    if isinstance(value, dict) and "file" in value:
        with open(os.path.join(base, value["file"])) as f:
            doc = json.load(f)
        for part in value["key"].split("."):
            doc = doc[part]
        return float(doc)
    return None if value is None else float(value)


def judge_time(pred_ms: float | None, meas_ms: float, step_ms: float) -> tuple[bool | None, float]:
    """Within +-25% of the measured saving or +-2% of the step time, whichever is larger."""
    tol = max(TIME_TOLERANCE * abs(meas_ms), STEP_TOLERANCE * step_ms)
    if pred_ms is None:
        return None, tol
    return abs(pred_ms - meas_ms) <= tol, tol


def calibrated(g, change, before_ms: float) -> tuple[float, float, float]:
    """(host factor f, saving ms, contention-aware saving ms) of ``change`` on the graph whose
    host is ``f`` times faster, ``f`` chosen so that the replayed step is ``before_ms``."""
    from tracekit.graph import whatif as wi

    def step(f, ch):
        return wi.predict(g, wi.with_host(g, ch, f))

    target = before_ms * 1e6
    lo, hi = 0.25, 8.0
    if step(hi, wi.Change()).predicted_ns > target:
        f = hi  # the trace cannot get that fast by its host alone
    else:
        for _ in range(30):
            mid = (lo * hi) ** 0.5
            if step(mid, wi.Change()).predicted_ns > target:
                lo = mid
            else:
                hi = mid
        f = (lo * hi) ** 0.5
    base, fixed = step(f, wi.Change()), step(f, change)
    return (f, (base.predicted_ns - fixed.predicted_ns) / 1e6,
            (base.predicted_contention_ns - fixed.predicted_contention_ns) / 1e6)


HOST_FLOOR = 1000.0
"""The host factor of the *GPU floor*: the replay with the host this many times faster."""


def measured(pair: dict, base: str) -> tuple[float, float, float | None, float | None]:
    """(before ms, measured saving ms, interval lo, hi): the paired estimate where the manifest
    has one, else before - after (no interval)."""
    before_ms = figure(pair["before"]["step_ms"], base)
    est = (pair.get("measured") or {}).get("step_saving_ms")
    if est:
        return before_ms, float(est["median"]), float(est["lo"]), float(est["hi"])
    return before_ms, before_ms - figure(pair["after"]["step_ms"], base), None, None


def untraced_trace_run(trace_path: str) -> float | None:
    """The median untraced step of the run that wrote the trace (its ``metrics.json``)."""
    m = os.path.join(os.path.dirname(trace_path), "metrics.json")
    if not os.path.isfile(m):
        return None
    with open(m) as f:
        run = json.load(f).get("trace_run") or {}
    steps = run.get("step_ms") or []
    return float(sorted(steps)[len(steps) // 2]) if steps else None


def trace_side(path: str, fix_id: str | None, snapshot=None) -> dict:
    """What one trace says by itself: its explain result, the counted steps' mean (traced), host
    time on the critical path per counted step, its GPU floor (and with the fix, if named)."""
    from tracekit.analyses import explain
    from tracekit.graph import build_graph
    from tracekit.graph import whatif as wi
    from tracekit.phases import default_rules
    from tracekit.trace import load

    rules = default_rules()
    t0 = time.perf_counter()
    trace = load(path, progress=False).traces[0]
    r = explain.compute(trace, rules, snapshot=snapshot)
    g = build_graph(trace, rules)
    keep = wi.counted_steps(r.steps)
    steps = r.steps[keep]
    host = [bd.get("host", 0) for bd in steps["breakdown"]]
    out = {"result": r, "graph": g, "trace": trace,
           # explain's view is the estimated untraced step (no untraced input: raw); the traced
           # step and the estimate are in its overhead object
           "traced_ms": (r.overhead["traced_step_ns"] / 1e6 if r.overhead else
                         float(steps["duration_ns"].mean()) / 1e6 if len(steps) else None),
           "estimated_untraced_ms": r.overhead["untraced_step_ns"] / 1e6 if r.overhead else None,
           "host_path_ms": sum(host) / len(host) / 1e6 if host else None,
           "floor_ms": wi.predict(g, wi.with_host(g, wi.Change(), HOST_FLOOR)).predicted_ns / 1e6,
           "untraced_ms": untraced_trace_run(path), "fix": None}
    if fix_id:
        fixes = [x for x in explain.detect_fixes(trace, g, rules, explain.ExplainConfig().fixes,
                                                 snapshot=snapshot) if x.id == fix_id]
        fix = fixes[0] if fixes and fixes[0].applies and fixes[0].change is not None else None
        out["fix"] = fix
        if fix is not None:
            p = wi.predict(g, wi.with_host(g, fix.change, HOST_FLOOR))
            out["floor_fix_ms"] = p.predicted_ns / 1e6
            out["floor_fix_contention_ms"] = p.predicted_contention_ns / 1e6
    out["secs"] = time.perf_counter() - t0
    return out


def run_pair(pair: dict, base: str) -> dict:
    from tracekit.analyses.snapshot import compute_snapshot
    from tracekit.report import NO_HELP_FRACTION

    b, a = pair["before"], pair["after"]
    snap = compute_snapshot(os.path.join(base, b["snapshot"])) if b.get("snapshot") else None
    bs = trace_side(os.path.join(base, b["trace"]), pair["fix"], snap)
    r = bs["result"]
    found = [f for f in r.findings if f["id"] == pair["fix"]]
    f = found[0] if found else None
    row = {"name": pair["name"], "fix": pair["fix"], "applies": f is not None,
           "bound": r.bound, "bound_share": r.bound_share, "explain_s": round(bs["secs"], 2)}
    if pair["fix"] == "inplace_batch_copy":
        meas = figure(a.get("peak_reserved_bytes"), base)
        before = figure(b.get("peak_reserved_bytes"), base)
        pred = f.get("predicted_peak_reserved_bytes") if f else None
        row.update(kind="memory", before_peak_reserved=before, measured_peak_reserved=meas,
                   predicted_peak_reserved=pred,
                   error=(pred - meas) / meas if pred is not None and meas else None)
        row["ok"] = None if row["error"] is None else abs(row["error"]) <= MEMORY_TOLERANCE
        return row
    before_ms, meas, lo, hi = measured(pair, base)
    frac = f["saving_fraction"] if f else 0.0
    cfrac = f["saving_contention_fraction"] if f else 0.0
    pred = frac * before_ms if frac is not None else None
    cpred = cfrac * before_ms if cfrac is not None else None
    ok, tol = judge_time(pred, meas, before_ms)
    cok, _ = judge_time(cpred, meas, before_ms)
    fcal = kal = kcal = None
    if f is not None and bs["fix"] is not None:
        fcal, kal, kcal = calibrated(bs["graph"], bs["fix"].change, before_ms)
    elif f is None:
        kal = kcal = 0.0  # the fix does not apply: nothing to save
    after_ms = figure(a.get("step_ms"), base) if a.get("step_ms") is not None else None
    row.update(kind="time", before_ms=before_ms, after_ms=after_ms, measured_saving_ms=meas,
               measured_lo=lo, measured_hi=hi,
               predicted_saving_ms=pred, predicted_contention_saving_ms=cpred, tolerance_ms=tol,
               trace_step_ms=bs["traced_ms"], ok=ok, ok_contention=cok, host_factor=fcal,
               calibrated_saving_ms=kal, calibrated_contention_saving_ms=kcal,
               ok_calibrated=judge_time(kal, meas, before_ms)[0] if kal is not None else None,
               ok_calibrated_contention=judge_time(kcal, meas, before_ms)[0]
               if kcal is not None else None,
               in_interval_calibrated=in_interval(kal, lo, hi, tol),
               in_interval_calibrated_contention=in_interval(kcal, lo, hi, tol),
               verdict=None if kal is None else ("would not help" if kal < NO_HELP_FRACTION * before_ms
                                                 else f"saves {kal:.3f} ms"),
               evidence=f["evidence"] if f else "the fix does not apply",
               host_path_before_ms=bs["host_path_ms"], floor_before_ms=bs["floor_ms"],
               floor_fix_ms=bs.get("floor_fix_ms"),
               floor_fix_contention_ms=bs.get("floor_fix_contention_ms"),
               untraced_before_ms=bs["untraced_ms"],
               estimated_untraced_before_ms=bs["estimated_untraced_ms"],
               predicted_traced_after_ms=(bs["traced_ms"] - f["saving_ns"] / 1e6) if f else None,
               predicted_contention_traced_after_ms=(bs["traced_ms"] - f["saving_contention_ns"] / 1e6)
               if f else None)
    if a.get("trace"):
        as_ = trace_side(os.path.join(base, a["trace"]), None)
        row.update(traced_after_ms=as_["traced_ms"], host_path_after_ms=as_["host_path_ms"],
                   floor_after_ms=as_["floor_ms"], untraced_after_ms=as_["untraced_ms"],
                   explain_s=round(bs["secs"] + as_["secs"], 2))
    return row


def in_interval(pred: float | None, lo: float | None, hi: float | None, tol: float) -> bool | None:
    """Whether the prediction's tolerance band meets the measured interval (None without one)."""
    if pred is None or lo is None or hi is None:
        return None
    return pred + tol >= lo and pred - tol <= hi


def _fmt(v, digits=3):
    return "-" if v is None else f"{v:,.{digits}f}"


def _pct(v):
    return "-" if v is None else f"{100 * v:+.2f}%"


def _yes(v):
    return "-" if v is None else ("yes" if v else "no")


def render(doc: dict) -> str:
    rows = doc["rows"]
    out = [f"# tracekit explain vs the runtime: {doc['device']}, {doc['date']}", "",
           f"Manifest: `{doc['manifest']}`. {doc.get('note', '')}".strip(), "",
           f"Command: `{doc['command']}` (explain took {doc['explain_s_total']:.1f} s in all, on "
           f"{doc['machine']}).", ""]
    t = [r for r in rows if r["kind"] == "time"]
    if t:
        out += ["Predicted from the \"before\" trace against the timed runs (ms per step; measured: "
                "paired median [95 % interval] over the benchmark's rounds):", "",
                "| pair | bound (before, traced) | step ms before -> after (timed) | measured saving ms | "
                "predicted, raw: free / contention | host factor | predicted, calibrated: free / "
                "contention | tolerance | within? raw / calibrated (median) | calibrated band meets "
                "the interval? free / contention | verdict |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in t:
            interval = f" [{_fmt(r['measured_lo'])}, {_fmt(r['measured_hi'])}]" \
                if r.get("measured_lo") is not None else ""
            out.append(f"| {r['name']} | {r['bound'] or '-'} {_fmt(100 * (r['bound_share'] or 0), 0)}% "
                       f"| {_fmt(r['before_ms'])} -> {_fmt(r['after_ms'])} | "
                       f"{_fmt(r['measured_saving_ms'])}{interval} | {_fmt(r['predicted_saving_ms'])} / "
                       f"{_fmt(r['predicted_contention_saving_ms'])} | {_fmt(r['host_factor'], 2)} | "
                       f"{_fmt(r['calibrated_saving_ms'])} / "
                       f"{_fmt(r['calibrated_contention_saving_ms'])} | {_fmt(r['tolerance_ms'])} | "
                       f"{_yes(r['ok'])} / {_yes(r['ok_calibrated'])} | "
                       f"{_yes(r.get('in_interval_calibrated'))} / "
                       f"{_yes(r.get('in_interval_calibrated_contention'))} | {r.get('verdict') or '-'} |")
        out.append("")
        tt = [r for r in t if r.get("traced_after_ms") is not None]
        if tt:
            out += ["The traces themselves (ms per step, the steps after the first; GPU floor: "
                    f"the replay with the host {HOST_FLOOR:g}x faster):", "",
                    "| pair | traced before -> after | predicted traced after: free / contention | "
                    "host on the critical path before -> after | GPU floor before -> after | "
                    "GPU floor before + fix: free / contention | trace runs untraced before -> after |",
                    "|---|---|---|---|---|---|---|"]
            for r in tt:
                out.append(f"| {r['name']} | {_fmt(r['trace_step_ms'])} -> {_fmt(r['traced_after_ms'])} | "
                           f"{_fmt(r['predicted_traced_after_ms'])} / "
                           f"{_fmt(r['predicted_contention_traced_after_ms'])} | "
                           f"{_fmt(r['host_path_before_ms'])} -> {_fmt(r['host_path_after_ms'])} | "
                           f"{_fmt(r['floor_before_ms'])} -> {_fmt(r['floor_after_ms'])} | "
                           f"{_fmt(r['floor_fix_ms'])} / {_fmt(r['floor_fix_contention_ms'])} | "
                           f"{_fmt(r['untraced_before_ms'])} -> {_fmt(r['untraced_after_ms'])} |")
            out.append("")
    m = [r for r in rows if r["kind"] == "memory"]
    if m:
        out += ["| pair | peak reserved before | measured after | predicted | error | within 5%? |",
                "|---|---|---|---|---|---|"]
        for r in m:
            gib = (lambda b: "-" if b is None else f"{b / 2**30:.3f} GiB")
            out.append(f"| {r['name']} | {gib(r['before_peak_reserved'])} | "
                       f"{gib(r['measured_peak_reserved'])} | {gib(r['predicted_peak_reserved'])} | "
                       f"{_pct(r['error'])} | "
                       f"{_yes(r['ok'])} |")
        out.append("")
    for r in t:
        out.append(f"- {r['name']}: {r['evidence']}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--out", default=None, help="write explain-proof-<gpu>-<date>.{md,json} here")
    ap.add_argument("--suffix", default="", help="appended to the results' file name")
    args = ap.parse_args(argv)
    base = os.path.dirname(os.path.abspath(args.manifest))
    with open(args.manifest) as f:
        man = json.load(f)
    rows = [run_pair(p, base) for p in man["pairs"]]
    now = datetime.now(timezone.utc)
    doc = {"device": man.get("device", "?"), "date": man.get("date", now.strftime("%Y-%m-%d")),
           "note": man.get("note", ""), "manifest": args.manifest,
           "command": "python -m bench.explain_proof " + " ".join(argv or sys.argv[1:]),
           "machine": f"{platform.node()} ({os.cpu_count()} cores), run {now:%Y-%m-%d %H:%M} UTC",
           "explain_s_total": sum(r["explain_s"] for r in rows), "rows": rows}
    text = render(doc)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        from bench.common.proof_manifest import device_slug

        stem = os.path.join(args.out, f"explain-proof-{device_slug(doc['device'])}-"
                                      f"{doc['date'].replace('-', '')}{args.suffix}")
        with open(stem + ".md", "w") as f:
            f.write(text)
        with open(stem + ".json", "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {stem}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
