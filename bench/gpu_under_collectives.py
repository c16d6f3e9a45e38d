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

With ``--fix-moves DIR...`` (folders of "before" rank traces, SparseDist): could a term for
that slowdown move a fix's prediction? Per rank, over the counted steps, estimated untraced
view (the graph explain reads): the compute kernel time under a communication kernel of its
device in the model's replay of the unchanged graph and in the fix's contention-aware replay
(``--fix``, FusedSparseDist by default: what it moves under or out from under a collective),
the fix's predicted saving on the rank alone, and the same kernels measured *in the trace
itself*: each compute kernel at least half under a communication kernel against the median
of the kernels of its name that ran beside none (the slowdown a term would read from the
trace; one name runs several shapes, so this is what the trace lets one read, not a clean
measure).

    python -m bench.gpu_under_collectives REFERENCE_TRACE:JOB_DIR... [--fix-moves DIR...]
        [--fix ID] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone

from bench.common import write_result

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


def _comm_cover(g, s, e, comp, comm):
    """Per node of ``comp``: how much of it communication kernels of ``comm`` cover (one
    device per trace)."""
    from tracekit import intervals

    u = intervals.union(s[comm], e[comm])
    return intervals.covered_in_windows(u, s[comp], e[comp])


def fix_moves(path: str, fix: str = "fused_sparse_dist") -> dict:
    """One "before" rank trace: what the fix moves under collectives (module docstring), ns
    per counted step."""
    import numpy as np
    import pandas as pd

    from tracekit.analyses import explain
    from tracekit.graph import critical as cr
    from tracekit.graph import whatif as wi
    from tracekit.graph.model import COMMUNICATION
    from tracekit.phases import default_rules
    from tracekit.trace import load

    trace = load(path, progress=False).traces[0]
    rules = default_rules()
    g = explain.view_graph(trace, rules)[1]
    win = cr.step_windows(g)
    keep = wi.counted_steps(win)
    n = max(int(keep.sum()), 1)
    counted = np.isin(g.step, win["step"].to_numpy()[keep])
    comm = g.kernels & (g.category.astype(str) == COMMUNICATION)
    comp = g.kernels & ~comm & counted
    base = wi.base_schedule(g, win)
    row = {"trace": path, "steps": n, "communication_ns_per_step": float(g.dur[comm & counted].sum()) / n,
           "under_base_ns_per_step": float(_comm_cover(g, base.start, base.end, comp, comm).sum()) / n,
           "under_fix_ns_per_step": None, "saving_ns": None}
    got = [f for f in explain.detect_fixes(trace, g, rules, explain.ExplainConfig().fixes) if f.id == fix]
    if got and got[0].applies and got[0].change is not None:
        sch = wi.schedule(g, got[0].change, windows=win, contention=True)
        row["under_fix_ns_per_step"] = float(_comm_cover(g, sch.start, sch.end, comp, comm).sum()) / n
        row["saving_ns"] = wi.predict(g, got[0].change, windows=win).saving_ns
    # in the trace itself: kernels at least UNDER under a collective against their name's
    # median beside none
    ids = np.flatnonzero(g.kernels & ~comm)
    d = g.dur[ids].astype(float)
    share = _comm_cover(g, g.start, g.end, g.kernels & ~comm, comm) / np.maximum(d, 1)
    t = pd.DataFrame({"name": g.name[ids].astype(str), "dur": d, "share": share})
    ref = t[t["share"] == 0].groupby("name")["dur"].median()
    m = t[t["share"] >= UNDER].assign(ref=lambda x: x["name"].map(ref)).dropna()
    row["in_trace_matched"] = int(len(m))
    row["in_trace_slowdown"] = float(m["dur"].sum() / m["ref"].sum() - 1) if len(m) else None
    return row


def render_moves(rows: list[dict], fix: str) -> str:
    def ms(v):
        return "-" if v is None else f"{v / 1e6:.3f}"

    out = ["", f"What `{fix}` moves under collectives (each \"before\" rank alone, estimated untraced "
           "view, per counted step): its communication kernel time; its compute kernel time under a "
           "communication kernel in the replay of the unchanged graph and in the fix's "
           "contention-aware replay; the fix's predicted saving on the rank alone; the compute "
           f"kernels at least {100 * UNDER:.0f} % under a collective in the trace against their "
           "name's median beside none (how many, and their slowdown).", "",
           "| trace | communication ms | under a collective: unchanged -> fix ms | moved ms | "
           "saving ms | in the trace: kernels, slowdown |", "|---|---|---|---|---|---|"]
    for r in rows:
        moved = None if r["under_fix_ns_per_step"] is None else \
            r["under_fix_ns_per_step"] - r["under_base_ns_per_step"]
        sl = r["in_trace_slowdown"]
        out.append(f"| {r['trace']} | {ms(r['communication_ns_per_step'])} | "
                   f"{ms(r['under_base_ns_per_step'])} -> {ms(r['under_fix_ns_per_step'])} | "
                   f"{'-' if moved is None else f'{moved / 1e6:+.3f}'} | {ms(r['saving_ns'])} | "
                   f"{r['in_trace_matched']}, {'-' if sl is None else f'{100 * sl:+.1f} %'} |")
    return "\n".join(out) + "\n"


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


def _rank_traces(folder: str) -> list[str]:
    """The rank trace files of a folder (its ``metrics_rank*.json`` left out)."""
    from tracekit._files import trace_files_in

    return sorted(p for p in trace_files_in(folder) if "rank" in os.path.basename(p)) \
        if os.path.isdir(folder) else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_under_collectives", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", nargs="*", metavar="REFERENCE_TRACE:JOB_DIR",
                    help="a one-GPU trace of a preset and a folder of rank traces of the same preset")
    ap.add_argument("--fix-moves", nargs="+", default=[], metavar="DIR",
                    help="folders of \"before\" rank traces: what the fix moves under collectives")
    ap.add_argument("--fix", default="fused_sparse_dist", help="the fix of --fix-moves (an id)")
    ap.add_argument("--out", default=None, help="write gpu-under-collectives-<time>.md/.json there")
    args = ap.parse_args(argv)
    work = []
    for spec in args.jobs:
        ref, _, d = spec.partition(":")
        paths = _rank_traces(d)
        if not d or not os.path.isfile(ref) or not paths:
            print(f"bench.gpu_under_collectives: {spec!r}: no reference trace or no rank trace "
                  "in the folder (REFERENCE_TRACE:JOB_DIR)", file=sys.stderr)
            return 2
        work += [(ref, p) for p in paths]
    moves = []
    for d in args.fix_moves:
        paths = _rank_traces(d)
        if not paths:
            print(f"bench.gpu_under_collectives: --fix-moves {d!r}: no rank trace in the folder",
                  file=sys.stderr)
            return 2
        moves += paths
    if not work and not moves:
        print("bench.gpu_under_collectives: nothing to measure (REFERENCE_TRACE:JOB_DIR or "
              "--fix-moves DIR)", file=sys.stderr)
        return 2
    from tracekit.errors import TracekitError

    t0 = time.perf_counter()
    try:
        rows = [dict(measure(ref, p), reference=ref) for ref, p in work]
        moved = [fix_moves(p, args.fix) for p in moves]
    except TracekitError as exc:
        print(f"bench.gpu_under_collectives: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    command = "python -m bench.gpu_under_collectives " + " ".join(
        args.jobs + (["--fix-moves", *args.fix_moves] if args.fix_moves else []) +
        (["--fix", args.fix] if args.fix != "fused_sparse_dist" else []) +
        (["--out", args.out] if args.out else []))
    text = render(rows, command, secs) + (render_moves(moved, args.fix) if moved else "")
    print(text)
    if args.out:
        base = write_result(args.out, "gpu-under-collectives", text,
                            {"under": UNDER, "rows": rows, "fix": args.fix, "fix_moves": moved},
                            command=command, seconds=secs)
        print(f"wrote {base}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
