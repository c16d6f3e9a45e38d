"""Proof of `tracekit explain` against the runtime: predicted vs measured savings of each fix.

A manifest names pairs the runtime ran on a GPU: the "before" trace (the fix off) with its
measured step time (and peak reserved), and the "after" run's measured figures (the fix on).
For each pair this script predicts, from the "before" trace alone, what the fix saves
(`tracekit.analyses.explain`, the finding with the pair's fix id) and compares:

- time fixes: the measured saving (before - after) against two predictions: *raw*, the
  finding's saving fraction x the measured "before" step time; and *calibrated*: the trace's
  steps are longer than the timed ones (the profiler's overhead, which is host time: it records
  every op and launch), so the host is first made faster (``host=f`` what-if) until the replay's
  step equals the measured "before" step, and the fix is replayed on top of that. Target: within +-25% of the measured saving or +-2% of
  the step time, whichever is larger. A pair whose fix does not help is judged the same way
  (its measured saving is ~0, so the prediction must be within 2% of the step time);
- memory fixes: predicted peak reserved against the "after" run's, within +-5%.

Manifest (JSON; paths relative to the manifest's folder)::

    {"device": str, "date": str, "note": str,
     "pairs": [{"name": str, "fix": "fused_sparse_dist"|"async_delta_copy"|
                "precomputed_writeback"|"inplace_batch_copy",
                "before": {"trace": path, "snapshot": path (optional),
                           "step_ms": num|FIGURE, "peak_reserved_bytes": int|FIGURE},
                "after": {"step_ms": num|FIGURE, "peak_reserved_bytes": int|FIGURE}}]}

where a FIGURE read from another JSON file is ``{"file": path, "key": "a.b.c"}`` (a dotted
path into it), so that no figure is copied by hand. ``bench/explain_samples.json`` is the
manifest of the committed sample traces.

    python bench/explain_proof.py bench/explain_samples.json [--out DIR]

Prints the table (markdown) and, with --out, writes explain-proof-<date>.{md,json} there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


def run_pair(pair: dict, base: str) -> dict:
    from tracekit.analyses import explain
    from tracekit.graph import build_graph
    from tracekit.analyses.snapshot import compute_snapshot
    from tracekit.phases import default_rules
    from tracekit.trace import load

    b, a = pair["before"], pair["after"]
    t0 = time.perf_counter()
    trace = load(os.path.join(base, b["trace"]), progress=False).traces[0]
    snap = compute_snapshot(os.path.join(base, b["snapshot"])) if b.get("snapshot") else None
    r = explain.compute(trace, default_rules(), snapshot=snap)
    secs = time.perf_counter() - t0
    found = [f for f in r.findings if f["id"] == pair["fix"]]
    f = found[0] if found else None
    row = {"name": pair["name"], "fix": pair["fix"], "applies": f is not None,
           "bound": r.bound, "bound_share": r.bound_share, "explain_s": round(secs, 2)}
    if pair["fix"] == "inplace_batch_copy":
        meas = figure(a.get("peak_reserved_bytes"), base)
        before = figure(b.get("peak_reserved_bytes"), base)
        pred = f.get("predicted_peak_reserved_bytes") if f else None
        row.update(kind="memory", before_peak_reserved=before, measured_peak_reserved=meas,
                   predicted_peak_reserved=pred,
                   error=(pred - meas) / meas if pred is not None and meas else None)
        row["ok"] = None if row["error"] is None else abs(row["error"]) <= MEMORY_TOLERANCE
        return row
    before_ms, after_ms = figure(b["step_ms"], base), figure(a["step_ms"], base)
    meas = before_ms - after_ms
    frac = f["saving_fraction"] if f else 0.0
    cfrac = f["saving_contention_fraction"] if f else 0.0
    pred = frac * before_ms if frac is not None else None
    cpred = cfrac * before_ms if cfrac is not None else None
    ok, tol = judge_time(pred, meas, before_ms)
    cok, _ = judge_time(cpred, meas, before_ms)
    fcal = kal = kcal = None
    if f is not None:
        g = build_graph(trace, default_rules())
        fix = [x for x in explain.detect_fixes(trace, g, default_rules(), explain.ExplainConfig().fixes,
                                               snapshot=snap) if x.id == pair["fix"]][0]
        fcal, kal, kcal = calibrated(g, fix.change, before_ms)
    row.update(kind="time", before_ms=before_ms, after_ms=after_ms, measured_saving_ms=meas,
               predicted_saving_ms=pred, predicted_contention_saving_ms=cpred, tolerance_ms=tol,
               trace_step_ms=(f["observed_step_ns"] / 1e6) if f else None, ok=ok,
               ok_contention=cok, host_factor=fcal, calibrated_saving_ms=kal,
               calibrated_contention_saving_ms=kcal,
               ok_calibrated=judge_time(kal, meas, before_ms)[0] if f else None,
               evidence=f["evidence"] if f else "the fix does not apply")
    return row


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
        out += ["| pair | bound (before) | traced step ms | step ms before -> after (timed) | "
                "measured saving ms | predicted, raw: free / contention ms | host factor | "
                "predicted, calibrated: free / contention ms | tolerance ms | within? raw / "
                "calibrated |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in t:
            out.append(f"| {r['name']} | {r['bound'] or '-'} {_fmt(100 * (r['bound_share'] or 0), 0)}% "
                       f"| {_fmt(r['trace_step_ms'])} "
                       f"| {_fmt(r['before_ms'])} -> {_fmt(r['after_ms'])} | "
                       f"{_fmt(r['measured_saving_ms'])} | {_fmt(r['predicted_saving_ms'])} / "
                       f"{_fmt(r['predicted_contention_saving_ms'])} | {_fmt(r['host_factor'], 2)} | "
                       f"{_fmt(r['calibrated_saving_ms'])} / "
                       f"{_fmt(r['calibrated_contention_saving_ms'])} | {_fmt(r['tolerance_ms'])} | "
                       f"{_yes(r['ok'])} / {_yes(r['ok_calibrated'])} |")
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
    ap.add_argument("--out", default=None, help="write explain-proof-<date>.{md,json} here")
    args = ap.parse_args(argv)
    base = os.path.dirname(os.path.abspath(args.manifest))
    with open(args.manifest) as f:
        man = json.load(f)
    rows = [run_pair(p, base) for p in man["pairs"]]
    now = datetime.now(timezone.utc)
    doc = {"device": man.get("device", "?"), "date": man.get("date", now.strftime("%Y-%m-%d")),
           "note": man.get("note", ""), "manifest": args.manifest,
           "command": "python bench/explain_proof.py " + " ".join(argv or sys.argv[1:]),
           "machine": f"{platform.node()} ({os.cpu_count()} cores), run {now:%Y-%m-%d %H:%M} UTC",
           "explain_s_total": sum(r["explain_s"] for r in rows), "rows": rows}
    text = render(doc)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stem = os.path.join(args.out, f"explain-proof-{now:%Y%m%d-%H%M}")
        with open(stem + ".md", "w") as f:
            f.write(text)
        with open(stem + ".json", "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {stem}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
