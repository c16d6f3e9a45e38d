"""How well does explain's model replay a trace it did not write? (issue 24, item 2)

For each trace: the model's replay of the unchanged dependency graph (delays modelled, not
copied: ``tracekit.graph.model``; the time the model cannot explain left out) against every
counted step as traced (all but the first), as ``tracekit explain`` reports it (the traced view:
no overhead correction). Per trace: the counted steps, their traced and replayed mean, the
median |error| and the worst step's error, whether it meets the target (median |error| <= 3 %,
no step beyond 10 %), and where it does not, what explain's warning says the model lacks. Then
the pooled median |error| over every counted step of every trace.

    python -m bench.explain_replay ['sample_traces/**/*.json.gz' ...] [--out bench/results]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

MEDIAN_TARGET = 0.03
WORST_TARGET = 0.10


def _lacks(warnings) -> str:
    """The part of explain's replay warning that says what the model lacks."""
    for w in warnings:
        if w.startswith("the model's replay of this trace misses"):
            return w.split("the model lacks ", 1)[-1]
    return ""


def measure(path: str) -> list[dict]:
    """One row per rank of ``path``."""
    from tracekit.analyses import explain
    from tracekit.phases import default_rules
    from tracekit.trace import load

    rows = []
    config = explain.ExplainConfig(untraced=False, generic_findings=False)
    for t in load(path, progress=False).traces:
        r = explain.compute(t, default_rules(), config=config)
        st = r.steps.iloc[1:] if len(r.steps) >= 2 else r.steps
        errs = [float(e) for e in st["replay_error"] if e == e]
        rp = r.replay
        rows.append({
            "trace": path, "rank": int(t.rank), "steps": rp.get("steps", 0),
            "traced_ms": float(st["duration_ns"].mean() / 1e6) if len(st) else None,
            "replayed_ms": float(st["replayed_ns"].mean() / 1e6) if len(st) else None,
            "median_abs_error": rp.get("median_abs_error"), "worst_error": rp.get("worst_error"),
            "errors": errs,
            "unexplained_ms": float(st["unexplained_ns"].mean() / 1e6) if len(st) else None,
            "within": (rp.get("steps", 0) > 0 and rp["median_abs_error"] <= MEDIAN_TARGET and
                       abs(rp["worst_error"]) <= WORST_TARGET),
            "lacks": _lacks(r.warnings),
            "launch_latency_us": r.graph["launch_latency_ns"] / 1e3,
            "gap_us": r.graph["gap_ns"] / 1e3, "handoff_us": r.graph["handoff_ns"] / 1e3,
        })
    return rows


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:+.2f}%"


def render(rows: list[dict], command: str, seconds: float) -> str:
    out = [f"# The model's replay against the traced steps ({datetime.now(timezone.utc).isoformat(timespec='seconds')})",
           "", f"Command: `{command}` ({seconds:.1f} s on {platform.node()} ({os.cpu_count()} cores)).", "",
           f"Target (issue 24): median |error| <= {100 * MEDIAN_TARGET:.0f} % and no step beyond "
           f"{100 * WORST_TARGET:.0f} %, else explain warns on the trace saying what the model lacks.", "",
           "| trace | rank | counted steps | traced ms | replayed ms | median \\|error\\| | worst step | unexplained ms/step | within | what the model lacks (explain's warning) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        med = "-" if r["median_abs_error"] is None else f"{100 * r['median_abs_error']:.2f}%"
        out.append(f"| {r['trace']} | {r['rank']} | {r['steps']} | "
                   f"{r['traced_ms']:,.3f} | {r['replayed_ms']:,.3f} | {med} | {_pct(r['worst_error'])} | "
                   f"{r['unexplained_ms']:,.3f} | {'yes' if r['within'] else 'no'} | {r['lacks'] or '-'} |")
    errs = [abs(e) for r in rows for e in r["errors"]]
    meds = [r["median_abs_error"] for r in rows if r["median_abs_error"] is not None]
    within = sum(r["within"] for r in rows)
    out += ["", f"{len(rows)} traces (ranks), {len(errs)} counted steps: pooled median |error| "
                f"{100 * statistics.median(errs):.2f}%; median of the traces' medians "
                f"{100 * statistics.median(meds):.2f}%; within the target: {within} of {len(rows)}; "
                f"every trace outside it warned: {all(r['within'] or r['lacks'] for r in rows)}."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", default=["sample_traces/**/*.json.gz"],
                    help="trace files or glob patterns (** recurses)")
    ap.add_argument("--out", default=None, help="write explain-replay-<date>.{md,json} here")
    args = ap.parse_args(argv)
    paths = sorted({p for pat in args.paths for p in (glob.glob(pat, recursive=True) or [pat])})
    t0 = time.perf_counter()
    rows = [row for p in paths for row in measure(p)]
    seconds = time.perf_counter() - t0
    command = "python -m bench.explain_replay " + " ".join(f"'{p}'" for p in args.paths)
    text = render(rows, command, seconds)
    sys.stdout.write(text)
    if args.out:
        stamp = datetime.now().strftime("%Y%m%d-%H%M")
        base = os.path.join(args.out, f"explain-replay-{stamp}")
        with open(base + ".md", "w") as f:
            f.write(text)
        with open(base + ".json", "w") as f:
            json.dump({"command": command, "seconds": seconds, "machine": platform.node(),
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "median_target": MEDIAN_TARGET, "worst_target": WORST_TARGET,
                       "traces": rows}, f, indent=1)
        print(f"wrote {base}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
