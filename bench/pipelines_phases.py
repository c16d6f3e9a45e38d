"""GPU time per phase and per stream of pipeline traces (what bench/NOTES-pipelines.md quotes).

    python -m bench.pipelines_phases OUT/pipelines/{sparse,fused,semi}/trace_rank0.json.gz
    python -m bench.pipelines_phases --window 52 OUT/pipelines/fused/trace_rank0.json.gz

For each trace: per phase (tracekit's phase rules), the GPU busy time and kernel count per batch,
averaged over the batches whose forward and optimizer both lie in the trace, and (for a trace with
``ProfilerStep`` markers) the busy ms of each stream over the whole trace. ``--window B``: every activity that overlaps batch B's optimizer, in time order, with its
stream (shows which stream's kernels wait for which).
"""

from __future__ import annotations

import argparse
import sys


import pandas as pd

from tracekit.phases import activities, default_rules, profiler_steps
from tracekit.trace import load


def phase_table(act: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """Per phase: kernels and busy ms per batch, over the batches inside the trace."""
    # batches whose forward and optimizer both ran inside the trace
    both = set(act.loc[act["phase"] == "forward", "batch"]) & set(act.loc[act["phase"] == "optimizer", "batch"])
    inner = sorted(int(b) for b in both if b >= 0)
    a = act[act["batch"].isin(inner)]
    ms = (a["end"] - a["ts"]) / 1e6
    g = a.assign(ms=ms).groupby("phase").agg(kernels=("ms", "size"), busy_ms=("ms", "sum"))
    return (g / max(len(inner), 1)).round(3), inner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--window", type=int, default=None, help="list the activities around this batch's optimizer")
    args = ap.parse_args()
    rules = default_rules()
    for path in args.traces:
        tr = load(path).traces[0]
        act, _ = activities(tr, rules)
        table, inner = phase_table(act)
        print(f"== {path}: batches {inner}")
        print(table.to_string())
        steps = profiler_steps(tr, rules)
        if len(steps):
            busy = act.assign(ms=(act["end"] - act["ts"]) / 1e6).groupby("stream")["ms"].sum()
            print("busy ms per stream over the trace:", busy.round(3).to_dict())
        if args.window is not None:
            o = act[(act["phase"] == "optimizer") & (act["batch"] == args.window)]
            if o.empty:
                print(f"no optimizer activity of batch {args.window}")
                continue
            t0, t1 = o["ts"].min(), o["end"].max()
            w = act[(act["end"] > t0) & (act["ts"] < t1)]
            for r in w.itertuples():
                print(f"  stream {r.stream:3d} {r.phase:13s} {(r.ts - t0) / 1e3:9.1f} {(r.end - t0) / 1e3:9.1f} us"
                      f"  {r.name[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
