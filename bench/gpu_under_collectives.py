"""Under the profiler, what slows a job's GPU work? (issue 24: the overhead model has no
GPU-side term; the 4-GPU `dense_b8k` job's traced GPU step was 19.263 ms against 15.094 untraced)

For each rank trace of a job, over its counted steps (all but the first), traced view: its
compute kernels (NCCL's left out) matched by name with the same kernels of a one-GPU reference
trace of the same preset (the median duration of each name there); the extra time each took
against the reference, split by whether at least half of the kernel ran under a communication
(NCCL) kernel of its device or not; and the rank's communication kernel time per step (mostly
the time its collectives waited for the other ranks, whose hosts the profiler slowed). A kernel
under a waiting NCCL kernel shares the SMs with it: if the profiler slowed the GPU itself, the
kernels that run alone would be as slow; if the waits do it, only those under a collective.

    python -m bench.gpu_under_collectives REFERENCE_TRACE:JOB_DIR... [--out bench/results]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone

UNDER = 0.5
"""A kernel is *under* a collective when at least this share of it ran beside a
communication kernel of its device."""


def kernels(path: str):
    """(table of the counted steps' GPU kernels: name, start, end, communication; counted
    steps) of one trace, traced view."""
    import numpy as np
    import pandas as pd

    from tracekit.analyses import explain
    from tracekit.graph import critical as cr
    from tracekit.graph import whatif as wi
    from tracekit.graph.model import COMMUNICATION, COMPUTE
    from tracekit.phases import default_rules
    from tracekit.trace import load

    trace = load(path, progress=False).traces[0]
    g = explain.view_graph(trace, default_rules(), explain.ExplainConfig(untraced=False))[0]
    win = cr.step_windows(g)
    keep = wi.counted_steps(win)
    cat = g.category.astype(str)
    comm = cat == COMMUNICATION
    k = g.kernels & (comm | np.char.startswith(cat, COMPUTE)) & \
        np.isin(g.step, win["step"].to_numpy()[keep])
    ids = np.flatnonzero(k)
    return pd.DataFrame({"name": g.name[ids].astype(str), "start": g.start[ids].astype(np.int64),
                         "end": g.end[ids].astype(np.int64), "comm": comm[ids]}), int(keep.sum())


def under_share(t) -> "np.ndarray":
    """Per compute kernel of ``t``: the share of it that ran beside a communication kernel."""
    import numpy as np

    comp, comm = t[~t["comm"]], t[t["comm"]].sort_values("start")
    cs, ce = comm["start"].to_numpy(), comm["end"].to_numpy()
    out = np.zeros(len(comp))
    for i, (s, e) in enumerate(zip(comp["start"].to_numpy(), comp["end"].to_numpy())):
        ov = np.clip(np.minimum(e, ce) - np.maximum(s, cs), 0, None).sum()
        out[i] = ov / (e - s) if e > s else 0.0
    return out


def measure(reference: str, path: str) -> dict:
    """One rank against the reference, per counted step (module docstring)."""
    ref, _ = kernels(reference)
    ref = ref[~ref["comm"]]
    med = (ref["end"] - ref["start"]).groupby(ref["name"]).median()
    t, n = kernels(path)
    comp = t[~t["comm"]].assign(under=under_share(t))
    comp = comp.assign(dur=comp["end"] - comp["start"], ref=comp["name"].map(med))
    comp = comp.dropna(subset=["ref"])
    comp = comp.assign(extra=comp["dur"] - comp["ref"])
    u = comp["under"] >= UNDER
    n = max(n, 1)

    def part(sel) -> dict:
        ref_ns = float(comp.loc[sel, "ref"].sum())
        extra = float(comp.loc[sel, "extra"].sum())
        return {"kernels_per_step": float(sel.sum()) / n, "extra_ns_per_step": extra / n,
                "extra_fraction": extra / ref_ns if ref_ns > 0 else None}

    comm = t[t["comm"]]
    return {"trace": path, "steps": n, "matched_per_step": len(comp) / n,
            "communication_ns_per_step": float((comm["end"] - comm["start"]).sum()) / n,
            "under": part(u), "alone": part(~u)}


def render(rows: list[dict], command: str, secs: float) -> str:
    def ms(v):
        return "-" if v is None else f"{v / 1e6:.3f}"

    def pct(v):
        return "-" if v is None else f"{100 * v:+.1f} %"

    out = [f"# Compute kernels under collectives ({datetime.now(timezone.utc).isoformat(timespec='seconds')})",
           "", f"Command: `{command}` ({secs:.1f} s on {platform.node()}).", "",
           f"Per counted step of each rank trace, traced: its compute kernels against the same "
           f"kernels of the one-GPU reference (the same preset; each name's median duration there), "
           f"those at least {100 * UNDER:.0f} % under a communication kernel of their device and "
           "the others: their number, the time they took beyond the reference (ms) and that as a "
           "share of the reference's; and the rank's communication kernel time.", "",
           "| trace (its reference) | communication ms | under a collective: kernels, extra ms, extra | alone: "
           "kernels, extra ms, extra |", "|---|---|---|---|"]
    for r in rows:
        u, a = r["under"], r["alone"]
        ref = "/".join(r["reference"].replace(os.sep, "/").split("/")[-3:-1])
        out.append(f"| {r['trace']} ({ref}) | "
                   f"{ms(r['communication_ns_per_step'])} | "
                   f"{u['kernels_per_step']:.0f}, {ms(u['extra_ns_per_step'])}, {pct(u['extra_fraction'])} | "
                   f"{a['kernels_per_step']:.0f}, {ms(a['extra_ns_per_step'])}, {pct(a['extra_fraction'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_under_collectives", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", nargs="+", metavar="REFERENCE_TRACE:JOB_DIR",
                    help="a one-GPU trace of a preset and a folder of rank traces of the same preset")
    ap.add_argument("--out", default=None, help="write gpu-under-collectives-<time>.md/.json there")
    args = ap.parse_args(argv)
    work = []
    for spec in args.jobs:
        ref, _, d = spec.partition(":")
        paths = [p for p in sorted(glob.glob(os.path.join(d, "*rank*.json*")))
                 if p.endswith((".json", ".json.gz"))]
        if not d or not os.path.isfile(ref) or not paths:
            print(f"bench.gpu_under_collectives: {spec!r}: no reference trace or no rank trace "
                  "in the folder (REFERENCE_TRACE:JOB_DIR)", file=sys.stderr)
            return 2
        work += [(ref, p) for p in paths]
    from tracekit.errors import TracekitError

    t0 = time.perf_counter()
    try:
        rows = [dict(measure(ref, p), reference=ref) for ref, p in work]
    except TracekitError as exc:
        print(f"bench.gpu_under_collectives: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    command = "python -m bench.gpu_under_collectives " + " ".join(
        args.jobs + (["--out", args.out] if args.out else []))
    text = render(rows, command, secs)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
        base = os.path.join(args.out, f"gpu-under-collectives-{stamp}")
        with open(base + ".md", "w") as fh:
            fh.write(text)
        with open(base + ".json", "w") as fh:
            json.dump({"command": command, "seconds": secs, "host": platform.node(),
                       "under": UNDER, "rows": rows}, fh, indent=1)
        print(f"wrote {base}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
