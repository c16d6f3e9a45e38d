"""What holds GPU work later than the model allows? (issue 24: the replay of unchanged
FusedSparseDist GPU-bound traces runs 4.6-10.2 % fast, and explain warns "GPU work that
started later than its launch, its stream and its waits allow")

For each trace (every rank of a folder), over its counted steps (all but the first), traced
view (as ``bench.explain_replay`` replays it): the *late starts*, each GPU activity's
unexplained time (``tracekit.graph``: how much later than its launch plus the launch latency,
its stream's previous activity and its waits it started), per step, split by what the other
streams of its device ran meanwhile:

- *beside compute*: a compute kernel of another stream ran over it (a kernel that holds the
  SMs keeps the late one's blocks out: contention between compute kernels);
- *beside communication only*: only a communication (NCCL) kernel ran there (the term the
  model lacks if a waiting collective held the late one back);
- *beside nothing*: no other stream ran (the GPU idle in the trace: something the trace does
  not show).

A late start's time under both a compute and a communication kernel counts as *beside
compute*. The steps' traced mean and the model's replayed mean are beside it (the replay
leaves the late starts out), and what the block-level contention model (``tracekit.graph.
blocks``) says of them: the kernels' waits for SMs another stream's kernel holds in the model's
replay (each run of kernels once, ``blocks.carried``), and the replay with those waits added
(its error against the traced steps).

    python -m bench.late_starts TRACE_OR_DIR... [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
import platform
import sys
import time
from datetime import datetime, timezone

from bench.common import write_result


def measure(path: str) -> list[dict]:
    """One row per rank of ``path`` (module docstring): ms per counted step."""
    import numpy as np

    from tracekit import intervals
    from tracekit.analyses import explain
    from tracekit.graph import blocks
    from tracekit.graph import critical as cr
    from tracekit.graph import whatif as wi
    from tracekit.graph.model import COMMUNICATION, NodeKind
    from tracekit.phases import default_rules
    from tracekit.trace import load

    rows = []
    config = explain.ExplainConfig(untraced=False)
    for trace in load(path, progress=False).traces:
        g = explain.view_graph(trace, default_rules(), config)[0]
        win = cr.step_windows(g)
        keep = wi.counted_steps(win)
        n = int(keep.sum())
        counted = np.isin(g.step, win["step"].to_numpy()[keep])
        gpu = g.kind == NodeKind.GPU
        comm = g.kernels & (g.category.astype(str) == COMMUNICATION)
        comp = g.kernels & ~comm
        dev = g.lanes["device"].to_numpy(np.int64)[g.lane]
        late = np.flatnonzero(gpu & counted & (g.unexplained > 0))
        out = {"compute": 0, "communication": 0, "nothing": 0}
        for d in np.unique(dev[late]):
            mine = late[dev[late] == d]
            s, e = g.start[mine] - g.unexplained[mine], g.start[mine]
            for ln in np.unique(g.lane[mine]):
                at = g.lane[mine] == ln
                other = (dev == d) & (g.lane != ln)
                uc = intervals.union(g.start[other & comp], g.end[other & comp])
                ua = intervals.union(g.start[other & (comp | comm)], g.end[other & (comp | comm)])
                c = intervals.covered_in_windows(uc, s[at], e[at])
                a = intervals.covered_in_windows(ua, s[at], e[at])
                out["compute"] += int(c.sum())
                out["communication"] += int((a - c).sum())
                out["nothing"] += int((e[at] - s[at] - a).sum())
        base = wi.base_schedule(g, win)
        o = (win["end"] - win["start"]).to_numpy(np.int64)[keep]
        r = wi.aligned(win, base.windows)[keep]
        waits_ms = blocks_ms = None
        w = wi.block_waits(g, base)
        if w is not None and n:
            w = blocks.carried(np.where(g.kernels, w, 0.0), base.plan.lane, gpu, base.start, base.end)
            w[: base.plan.pin + 1] = 0.0
            s2, e2 = wi.replay_queued(g, replace(base.plan, dur=base.plan.dur + np.round(w).astype(np.int64)))
            waits_ms = float(w[counted].sum()) / n / 1e6
            blocks_ms = float(wi.aligned(win, cr.step_windows(g, s2, e2))[keep].mean()) / 1e6
        rows.append({"trace": path, "rank": int(trace.rank), "steps": n,
                     "traced_ms": float(o.mean()) / 1e6 if n else None,
                     "replayed_ms": float(r.mean()) / 1e6 if n else None,
                     "late_ms": {k: v / max(n, 1) / 1e6 for k, v in out.items()},
                     "block_waits_ms": waits_ms, "replayed_blocks_ms": blocks_ms})
    return rows


def render(rows: list[dict], command: str, secs: float) -> str:
    out = [f"# Late starts of GPU work, by what ran beside them "
           f"({datetime.now(timezone.utc).isoformat(timespec='seconds')})", "",
           f"Command: `{command}` ({secs:.1f} s on {platform.node()}).", "",
           "Per counted step, traced view: the steps' traced and replayed mean, and the GPU "
           "activities' late starts (started later than their launch, stream and waits allow: "
           "the replay leaves them out) by what other streams of the device ran meanwhile.", "",
           "| trace | rank | steps | traced ms | replayed ms | error | late: beside compute ms | "
           "beside communication only ms | beside nothing ms | block model: waits ms | replay with "
           "them: ms, error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lt = r["late_ms"]
        err = "-" if not r["traced_ms"] else f"{100 * (r['replayed_ms'] / r['traced_ms'] - 1):+.2f} %"
        f = (lambda v: "-" if v is None else f"{v:.3f}")
        bw, rb = r.get("block_waits_ms"), r.get("replayed_blocks_ms")
        berr = "-" if rb is None or not r["traced_ms"] else \
            f"{f(rb)}, {100 * (rb / r['traced_ms'] - 1):+.2f} %"
        out.append(f"| {r['trace']} | {r['rank']} | {r['steps']} | {f(r['traced_ms'])} | "
                   f"{f(r['replayed_ms'])} | {err} | {lt['compute']:.3f} | {lt['communication']:.3f} | "
                   f"{lt['nothing']:.3f} | {f(bw)} | {berr} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.late_starts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", help="trace files or folders of rank traces")
    ap.add_argument("--out", default=None, help="write late-starts-<time>.md/.json there")
    args = ap.parse_args(argv)
    from tracekit._files import trace_files_in
    from tracekit.errors import TracekitError

    paths = []
    for p in args.traces:
        if os.path.isdir(p):
            paths += sorted(trace_files_in(p))
        elif os.path.isfile(p):
            paths.append(p)
        else:
            print(f"bench.late_starts: {p!r}: no such trace file or folder", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    try:
        rows = [r for p in paths for r in measure(p)]
    except TracekitError as exc:
        print(f"bench.late_starts: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    command = "python -m bench.late_starts " + " ".join(
        args.traces + (["--out", args.out] if args.out else []))
    text = render(rows, command, secs)
    print(text)
    if args.out:
        base = write_result(args.out, "late-starts", text, {"rows": rows}, command=command, seconds=secs)
        print(f"wrote {base}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
