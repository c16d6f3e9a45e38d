"""How long does ``tracekit diff A B`` take against one cold ``tracekit analyze``? (issue 26: a
diff of two 50 MB traces in at most 2x one cold analyze)

    python -m bench.diff A B [--rounds 5] [--out bench/results]

Each round, interleaved (``bench.common.method.round_orders``: which runs first alternates), as
separate processes with fresh, empty cache directories (cold: nothing parsed or analysed yet):

- ``analyze``: ``tracekit analyze A --no-hta`` (text to /dev/null): one trace, every section;
- ``diff``: ``tracekit diff A B`` (text to /dev/null): two traces loaded, each one's operators,
  kernels, steps, activities and explain, and the diff.

The figure is the paired ratio diff / analyze per round: its median with a 95 % bootstrap
interval over the rounds; the wall times are printed too (they move with the machine's load,
the ratio much less). Writes ``bench/results/diff-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.common.method import estimate, round_orders

CLI = [sys.executable, "-c", "from tracekit.cli import main; main()"]


def timed(argv: list[str]) -> float:
    """Wall seconds of one tracekit process with a fresh cache directory."""
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        r = subprocess.run([*CLI, *argv, "--cache-dir", cache], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    runs = {"analyze": ["analyze", args.a, "--no-hta"], "diff": ["diff", args.a, args.b]}
    per_round: list[dict[str, float]] = []
    load = [os.getloadavg()[0]]
    for r, order in enumerate(round_orders(list(runs), args.rounds)):
        got = {name: timed(runs[name]) for name in order}
        per_round.append(got)
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in got.items())
              + f"  (diff / analyze {got['diff'] / got['analyze']:.2f}; load {load[-1]:.1f})", flush=True)
    ratio = estimate([x["diff"] / x["analyze"] for x in per_round])
    walls = {k: estimate([x[k] for x in per_round]) for k in runs}
    sizes = {p: os.path.getsize(p) for p in (args.a, args.b)}
    print(f"\ndiff / one cold analyze: median {ratio.median:.2f} [{ratio.lo:.2f}, {ratio.hi:.2f}] over {ratio.n} rounds "
          f"(target <= 2); analyze {walls['analyze'].median:.2f} s, diff {walls['diff'].median:.2f} s; "
          f"load average {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs")
    os.makedirs(args.out, exist_ok=True)
    out = Path(args.out) / f"diff-{datetime.now(timezone.utc):%Y%m%d-%H%M}.json"
    out.write_text(json.dumps({
        "question": "tracekit diff A B against one cold tracekit analyze A --no-hta (issue 26: <= 2x)",
        "a": args.a, "b": args.b, "gz_bytes": sizes, "rounds": per_round,
        "ratio": ratio.to_dict(), "walls_s": {k: v.to_dict() for k, v in walls.items()},
        "load_average": load, "cpus": os.cpu_count(), "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
