"""The cold figure of several ``bench/load.py`` runs against the same baseline, pooled.

    python -m bench.load_pool bench/results/load-A.json bench/results/load-B.json ... [--target 0.545] [--json OUT]

Each file's pairs (this tree's cold ``--no-hta`` wall over the baseline's, run next to each
other) are one run's rounds; pooled, the median ratio with its 95 % bootstrap interval two ways:
over all pairs, and two-stage (the runs resampled, then their pairs: a machine that was faster in
one run widens the interval instead of counting as more pairs). Also how many of the cold walls
were <= ``--limit`` seconds. Exit 0 when the two-stage interval's upper end is <= ``--target``,
1 when not, 2 on bad input. ``--json OUT`` writes the pooled figure with each run's pairs (its
walls, date, load average and bytecode mode), so that the pool is one results file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


from bench.common.method import Estimate, estimate


def pairs(doc: dict) -> tuple[list[float], list[float]]:
    """(this tree's cold --no-hta walls, the baseline's) of one results document, in run order."""
    s = doc.get("summary", {})
    ours, base = s.get("cold_no_hta_walls_s"), s.get("baseline_cold_no_hta_walls_s")
    if not ours or not base or len(ours) != len(base):
        raise ValueError("no paired cold --no-hta walls (was it run with --baseline?)")
    return [float(x) for x in ours], [float(x) for x in base]


def pool(docs: dict[str, dict]) -> tuple[Estimate, Estimate, list[float]]:
    """Pooled estimate over all pairs, two-stage estimate over the runs, and every wall of ours."""
    ratios, runs, walls = [], [], []
    for name, doc in docs.items():
        ours, base = pairs(doc)
        ratios += [a / b for a, b in zip(ours, base)]
        runs += [name] * len(ours)
        walls += ours
    return estimate(ratios), estimate(ratios, clusters=runs), walls


def pooled_doc(docs: dict[str, dict], flat: Estimate, two_stage: Estimate, walls: list[float],
               target: float, limit: float) -> dict:
    """The pool as one results document: the figure, and each run's pairs to recompute it from."""
    def est(e: Estimate) -> dict:
        return {"n": e.n, "median": e.median, "lo": e.lo, "hi": e.hi}
    runs = []
    for path, doc in docs.items():
        ours, base = pairs(doc)
        runs.append({"file": Path(path).name, "date_utc": doc.get("date_utc"), "trace": doc.get("trace"),
                     "bytecode": doc.get("bytecode"), "loadavg_before": doc.get("loadavg_before"),
                     "loadavg_after": doc.get("loadavg_after"), "machine": doc.get("machine"),
                     "cold_no_hta_walls_s": ours, "baseline_cold_no_hta_walls_s": base,
                     "ratio": est(estimate([a / b for a, b in zip(ours, base)]))})
    return {"what": "cold `tracekit analyze --no-hta` over the baseline's, the runs pooled (bench/load_pool.py)",
            "target_ratio": target, "limit_s": limit,
            "pooled": {"ratio": est(flat), "two_stage": est(two_stage),
                       "walls_within_limit": sum(w <= limit for w in walls), "walls": len(walls),
                       "target_met": two_stage.hi <= target},
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="bench/load.py results files run with --baseline")
    ap.add_argument("--target", type=float, default=0.545, help="ratio to the baseline to stay under (0.6 s of 1.1 s)")
    ap.add_argument("--limit", type=float, default=0.6, help="seconds a cold run should stay under")
    ap.add_argument("--json", type=Path, help="write the pooled figure and each run's pairs here")
    args = ap.parse_args(argv)
    docs = {}
    for path in args.results:
        try:
            docs[path] = json.loads(Path(path).read_text())
            pairs(docs[path])
        except (OSError, ValueError) as e:
            print(f"load_pool: error: {path}: {e}", file=sys.stderr)
            return 2
    for path, doc in docs.items():
        ours, base = pairs(doc)
        e = estimate([a / b for a, b in zip(ours, base)])
        print(f"{Path(path).name:32} {e.n:3d} pairs  ratio {e.median:.3f} [{e.lo:.3f}, {e.hi:.3f}]  "
              f"<= {args.limit:g} s: {sum(w <= args.limit for w in ours)} of {len(ours)}")
    flat, two_stage, walls = pool(docs)
    print(f"pooled: {flat.n} pairs, ratio {flat.median:.3f} [{flat.lo:.3f}, {flat.hi:.3f}]; "
          f"two-stage over {len(docs)} runs [{two_stage.lo:.3f}, {two_stage.hi:.3f}]; "
          f"<= {args.limit:g} s in {sum(w <= args.limit for w in walls)} of {len(walls)} runs; "
          f"target ratio {args.target:g}: {'met' if two_stage.hi <= args.target else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(pooled_doc(docs, flat, two_stage, walls, args.target, args.limit), indent=1) + "\n")
    return 0 if two_stage.hi <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
