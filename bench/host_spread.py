"""Does anything a trace records track how fast its process ran untraced? Question: the runtime's
1-GPU runs of one preset and variant, each in its own process (the default options and the
option sets of ``profiler_1gpu``), measured untraced steps that differ by up to 40 %; does a
trace-side figure follow the overhead model's error on them (the estimate / measured untraced
step - 1), so that a term could read it?

Per run (``bench.overhead_fit``'s runs of the sets given, 1 GPU, the runtime's): the measured
untraced step and its host time (``metrics.json``'s ``trace_run.host_step_ms``), the model's
estimate and error, and figures of the trace, none of which the model reads but the first:

- ``launch_us``: the launch calls' traced duration (the model's host speed, ``launch_duration``);
- ``launch_p50_us``: their median (the queued launches included);
- ``leaf_op_us``: the median duration of the CPU ops that hold no other op and no runtime call
  (a leaf's own work, its profiler callbacks at its two ends mostly outside its span);
- ``threads``: the host threads with recorded events;
- ``gap_us``: the median host time between two runtime calls of the main thread, less the events
  recorded between them (the Python and dispatch between launches);
- ``calls``: runtime calls per step.

The error is the residual the model leaves: a figure that tracks it (Spearman's rank
correlation over the runs whose estimate the profiler's cost decides, ``HOST_DECIDES``; and,
within each preset and variant of several processes, whether it orders the processes as their
untraced steps) could be a term; none does if every |rho| stays small.

    python -m bench.host_spread --set h3=/work/.heldout3/tree/sample_traces ... --set tree=sample_traces [--out bench/results]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

import numpy as np

from bench import overhead_fit as of
from bench.common import named_dirs, stamp_and_report

FIGURES = ("launch_us", "launch_p50_us", "leaf_op_us", "threads", "gap_us", "calls")


def figures(run) -> dict:
    """The trace's figures of ``run`` (module docstring)."""
    from tracekit.graph import overhead as oh
    from tracekit.graph.model import NodeKind
    from tracekit.trace import load
    from tracekit.trace.model import Kind

    g = run.graph
    ts = load(run.trace, progress=False)
    tr = ts.rank(run.rank) if run.rank in ts.ranks else ts.traces[0]
    kind = tr.column("kind")
    t0 = tr.column("ts", np.int64)
    t1 = t0 + tr.column("dur", np.int64)
    tid = tr.column("tid", np.int64)
    calls = np.flatnonzero((g.kind == NodeKind.CALL) & np.isin(g.name.astype(str), oh.SPEED_CALLS))
    p25 = oh.launch_duration(g)
    # leaf ops: CPU ops with no CPU op or runtime call starting inside them on their thread
    ops = np.flatnonzero(kind == int(Kind.CPU_OP))
    inner = np.flatnonzero(np.isin(kind, (int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.DRIVER))))
    leaf = []
    for th in np.unique(tid[ops]):
        o = ops[tid[ops] == th]
        i = inner[tid[inner] == th]
        st = np.sort(t0[i])
        # events starting strictly inside (after the op's start, before its end)
        a = np.searchsorted(st, t0[o], side="right")
        b = np.searchsorted(st, t1[o], side="left")
        leaf.append((t1[o] - t0[o])[b <= a])
    leaf = np.concatenate(leaf) if leaf else np.zeros(0)
    threads = int(np.unique(tid[np.isin(kind, (int(Kind.CPU_OP), int(Kind.RUNTIME),
                                              int(Kind.ANNOTATION)))]).size)
    # the main thread: the one with the most runtime calls
    rt = np.flatnonzero(np.isin(kind, (int(Kind.RUNTIME), int(Kind.DRIVER))))
    gap = None
    if rt.size > 1:
        main = np.bincount(np.unique(tid[rt], return_inverse=True)[1]).argmax()
        th = np.unique(tid[rt])[main]
        r = rt[tid[rt] == th]
        r = r[np.argsort(t0[r])]
        between = t0[r[1:]] - t1[r[:-1]]
        gap = float(np.median(between[between >= 0])) / 1e3 if (between >= 0).any() else None
    nsteps = max(1, len(run.windows))
    return {"launch_us": None if p25 is None else p25 / 1e3,
            "launch_p50_us": float(np.median(g.dur[calls])) / 1e3 if calls.size else None,
            "leaf_op_us": float(np.median(leaf)) / 1e3 if leaf.size else None,
            "threads": threads, "gap_us": gap, "calls": float(rt.size) / nsteps}


def spearman(x: list[float], y: list[float], least: int = 4) -> float | None:
    """Spearman's rank correlation (average ranks for ties), None under ``least`` pairs."""
    if len(x) < least:
        return None

    def ranks(v):
        v = np.asarray(v, float)
        o = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[o] = np.arange(len(v))
        for u in np.unique(v):
            m = v == u
            r[m] = r[m].mean()
        return r

    a, b = ranks(x), ranks(y)
    if a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def main(argv=None) -> int:
    from tracekit.graph import overhead as oh

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    specs = named_dirs(args.set)
    if specs is None:
        return 2
    t0 = time.perf_counter()
    model = {**{t: oh.DEFAULT_MODEL.cost(t) for t in oh.TERMS},
             "launch_ref": oh.DEFAULT_MODEL.launch_ref_ns}
    seen, rows = set(), []
    for name, root in specs:
        for r in of.find_runs([root]):
            if r.gpus != 1 or r.preset == "torchrec":
                continue
            with open(r.trace, "rb") as f:
                key = hashlib.md5(f.read()).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            of.prepare(r)
            est = of.estimate_ms(r, model)
            host = None
            meta = os.path.join(os.path.dirname(r.trace), "metrics.json")
            if os.path.isfile(meta):
                with open(meta) as f:
                    hs = (json.load(f).get("trace_run") or {}).get("host_step_ms")
                host = statistics.median(hs) if hs else None
            rows.append({"set": name, "run": r.name, "preset": r.preset, "variant": r.variant,
                         "option": r.option, "traced_ms": r.traced_ms,
                         "measured_ms": r.untraced_ms, "host_ms": host, "estimate_ms": est,
                         "error": est / r.untraced_ms - 1,
                         "decided": est <= (1 - oh.HOST_DECIDES) * r.traced_ms, **figures(r)})
        print(f"{name}: {len(rows)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    on = [r for r in rows if r["decided"]]
    corr = {}
    for f in FIGURES:
        pts = [(r[f], r["error"]) for r in on if r[f] is not None]
        corr[f] = spearman([p[0] for p in pts], [p[1] for p in pts])
    groups = {}
    for r in rows:
        groups.setdefault((r["set"], r["preset"], r["variant"]), []).append(r)
    within = {}
    for k, rs in groups.items():
        if len(rs) < 3:
            continue
        ms = [r["measured_ms"] for r in rs]
        within["/".join(k)] = {
            "processes": len(rs), "untraced_min_ms": min(ms), "untraced_max_ms": max(ms),
            "spread": max(ms) / min(ms) - 1,
            "rho_untraced": {f: spearman([r[f] for r in rs if r[f] is not None],
                                         [r["measured_ms"] for r in rs if r[f] is not None], 3)
                             for f in FIGURES},
            "rho_error": {f: spearman([r[f] for r in rs if r[f] is not None],
                                      [r["error"] for r in rs if r[f] is not None], 3)
                          for f in FIGURES}}
    doc = {"question": "does a trace figure track the untraced speed the model misses",
           "sets": dict(specs), "runs": len(rows), "decided": len(on), "rho_error_decided": corr,
           "groups": within, "rows": rows}
    stamp_and_report(doc, render, module="bench.host_spread", argv=argv, t0=t0, out_dir=args.out,
                     prefix="host-spread")
    return 0


def _ms(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _r(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


def render(doc: dict) -> str:
    out = [f"# What tracks a process's untraced speed? ({doc['date_utc']})", "",
           f"Command: `{doc['command']}` ({doc['seconds']} s on {doc['machine']}).", "",
           f"{doc['runs']} 1-GPU runs of the runtime; {doc['decided']} whose estimate the "
           "profiler's cost decides. Spearman's rho of each trace figure with the model's error "
           "(estimate / measured untraced - 1) over those:", "",
           "| figure | rho with the error |", "|---|---|"]
    for f in FIGURES:
        out.append(f"| {f} | {_r(doc['rho_error_decided'][f])} |")
    sp = [d for d in doc["groups"].values() if d["spread"] > 0.10]
    out += ["", f"Presets and variants of 3 or more processes: {len(sp)} of {len(doc['groups'])} "
            "spread their untraced steps over 10 %. Their spread and rho of each figure with the "
            "untraced step (and with the error) across the processes (3 processes: rho is -1, "
            "-0.5, 0.5 or 1):",
            "", "| set/preset/variant | processes | untraced ms | spread | "
            + " | ".join(FIGURES) + " |", "|---|---|---|---|" + "---|" * len(FIGURES)]
    for k, d in doc["groups"].items():
        out.append(f"| {k} | {d['processes']} | {d['untraced_min_ms']:.3f}-{d['untraced_max_ms']:.3f} | "
                   f"{100 * d['spread']:.1f} % | " + " | ".join(
                       f"{_r(d['rho_untraced'][f])} ({_r(d['rho_error'][f])})" for f in FIGURES) + " |")
    out += ["", "| set | run | option | traced ms | untraced ms | host ms | estimate ms | error | "
            + " | ".join(FIGURES) + " |", "|---|---|---|---|---|---|---|---|" + "---|" * len(FIGURES)]
    for r in doc["rows"]:
        out.append(f"| {r['set']} | {r['run']} | {r['option']} | {r['traced_ms']:.3f} | "
                   f"{r['measured_ms']:.3f} | {_ms(r['host_ms'])} | "
                   f"{r['estimate_ms']:.3f} | {100 * r['error']:+.1f}% | " + " | ".join(
                       "-" if r[f] is None else f"{r[f]:.2f}" for f in FIGURES) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
