"""Does explain warn where its estimated untraced step rests on time the model does not explain?
Question: the raw estimate is the trace's graph with the profiler's host cost taken out,
replayed; time on the critical path the model does not explain (category ``unexplained``) is kept
whole there, so such an estimate can stay at or above the traced step although many ms of host
time came out. Which rule on what a trace alone gives (traced step, estimate, host time taken
out, the unexplained share of the estimated critical path) flags the estimates off by more than
10 % of the measured untraced step, and how many within 10 % does it flag falsely?

For each set (``--set NAME=DIR``) every trace whose run wrote its untraced step beside it
(``bench.overhead_fit.find_runs``), as explain reads it by default (``tracekit.analyses.explain.
view_graph``: the default model, no step given): the figures above over the counted steps, the
measured untraced step, the error (estimate / measured - 1), and whether the range warning
(``overhead.HOST_DECIDES``) already comes with it. A run of a later set already in an earlier one
(the same path from ``sample_traces/`` on and rank) is left out of the later one. The rule
(``overhead.unexplained_kept``) is judged per set with the thresholds of the code; ``--grid``
also tries the thresholds' grid on the sets of ``--fit`` (the choice) and reports, per setting,
the flags on those sets (the trade-off it was chosen from). ``--joined`` also judges every rank of a
complete job (its folder holds all its ranks) on the job's graph, as ``tracekit explain DIR``
reads it (``tracekit.ranks.job.joined_estimate``: the rank's step with every rank's overhead
out, its range where the profiler's cost decides it, the rule on the job's critical path).

    python -m bench.unexplained_kept --set h3=/work/.heldout3/tree/sample_traces ... \\
        --set tree=sample_traces --fit h3,h4,h5,h6 [--grid] [--joined] [--out bench/results]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from bench import overhead_fit as of
from bench.common import named_dirs, stamp_and_report
from bench.common.joined import complete_job

OFF = 0.10
"""An estimate off by more than this share of the measured untraced step."""
GRID = {"unexplained": (0.05, 0.10, 0.15, 0.20), "taken": (0.05, 0.10, 0.15),
        "followed": (0.3, 0.5, 0.7), "above": (0.05, 1.0)}
"""The thresholds tried with ``--grid`` (``above`` 1.0: the estimate-above-traced clause off)."""


def figures(run) -> dict | None:
    """``traced_ms, estimate_ms, taken_ms, unexplained_share, measured_ms`` of ``run`` as explain
    reads it by default; None where it has no host calls (no estimate)."""
    from tracekit import steps as steps_mod
    from tracekit.analyses import explain as ex
    from tracekit.beside import per_step
    from tracekit.frames import column
    from tracekit.graph import critical as cr
    from tracekit.graph import whatif as wi
    from tracekit.graph.model import UNEXPLAINED
    from tracekit.phases import default_rules
    from tracekit.trace import load

    rules = default_rules()
    ts = load(run.trace, progress=False)
    trace = ts.rank(run.rank) if run.rank in ts.ranks else ts.traces[0]
    measured, _ = per_step(run.found, steps_mod.compute(trace, rules).source)
    _, g, est = ex.view_graph(trace, rules, ex.ExplainConfig())
    if est is None:
        return None
    win = cr.step_windows(g)
    path = cr.step_paths(g, windows=win)
    counted = column(win, "step", np.int64)[wi.counted_steps(win)]
    on = np.isin(column(path, "step", np.int64), counted)
    dur = column(path, "dur", np.int64)[on]
    unx = int(dur[column(path, "category", object)[on] == UNEXPLAINED].sum())
    return {"traced_ms": est.traced_step_ns / 1e6, "estimate_ms": est.untraced_step_ns / 1e6,
            "taken_ms": sum(est.host_ns_per_step.values()) / 1e6,
            "unexplained_share": unx / dur.sum() if dur.sum() else 0.0, "measured_ms": measured,
            "range_warned": est.range_ns is not None}


def joined_figures(folder: str) -> dict[int, dict]:
    """Per rank of the job in ``folder``: its step on the job's graph (every rank's estimated
    untraced graph joined at the collectives, as ``tracekit explain DIR`` reads it) and what
    warns on it (``tracekit.ranks.job.joined_estimate``): ``joined_ms, joined_range_warned,
    joined_flagged, joined_unexplained_share``; empty without the job's graph."""
    from tracekit.ranks import JobConfig, analyze_job
    from tracekit.ranks.job import joined_estimate

    rep = analyze_job(folder, workers=1, use_cache=False, with_hta=False, whole=False,
                      config=JobConfig(balance_what_if=False))
    g = (rep.job or {}).get("graph")
    out = {}
    for x in (g or {}).get("ranks") or []:
        u = joined_estimate(g, int(x["rank"]), rep.ranks)
        if u is None:
            continue
        out[int(x["rank"])] = {"joined_ms": u["step_ns"] / 1e6,
                               "joined_range_warned": u["range_ns"] is not None,
                               "joined_flagged": u["kept"] is not None,
                               "joined_unexplained_share": u["unexplained_share"]}
    return out


def as_joined(r: dict) -> dict | None:
    """A row's figures on the job's graph, as a row ``tally`` reads (None: not a rank of a
    complete job)."""
    if "joined_ms" not in r:
        return None
    return {"error": r["joined_ms"] / r["measured_ms"] - 1,
            "range_warned": r["joined_range_warned"], "flagged": r["joined_flagged"]}


def fires(r: dict, unexplained: float, taken: float, followed: float, above: float) -> bool:
    """``overhead.unexplained_kept``'s rule with these thresholds (for the grid)."""
    t, e, k = r["traced_ms"], r["estimate_ms"], r["taken_ms"]
    if t <= 0 or k <= 0:
        return False
    kept = r["unexplained_share"] >= unexplained and k >= taken * t and (t - e) / k < followed
    return bool(kept or (e > t and k >= above * t))


def tally(rows: list[dict], flag) -> dict:
    off = [r for r in rows if abs(r["error"]) > OFF]
    ok = [r for r in rows if abs(r["error"]) <= OFF]
    silent = [r for r in off if not r["range_warned"]]
    return {"runs": len(rows), "off": len(off), "off_flagged": sum(map(flag, off)),
            "silent_off": len(silent), "silent_off_flagged": sum(map(flag, silent)),
            "within": len(ok), "within_flagged": sum(map(flag, ok))}


def _counts_row(name: str, t: dict) -> str:
    """One row of the counts tables (``tally``'s figures)."""
    return (f"| {name} | {t['runs']} | {t['off']} | {t['off_flagged']} | {t['silent_off']} | "
            f"{t['silent_off_flagged']} | {t['within']} | {t['within_flagged']} |")


def render(doc: dict) -> str:
    out = [f"# Estimates resting on unexplained time ({doc['date_utc']})", "",
           f"Command: `{doc['command']}` ({doc['seconds']} s on {doc['machine']}).", "",
           "The rule (`overhead.unexplained_kept`): unexplained >= "
           f"{doc['rule']['unexplained']:.0%} "
           f"of the estimated critical path, host time taken out >= {doc['rule']['taken']:.0%} of "
           f"the traced step and the estimate fell by < {doc['rule']['followed']:.0%} of it; or "
           f"the estimate above the traced step with >= {doc['rule']['above']:.0%} taken out. "
           f"Chosen on: {', '.join(doc['fit']) or '-'}.", "",
           "| set | runs | off by > 10 % | flagged | of them without the range warning | flagged "
           "| within 10 % | flagged falsely |", "|---|---|---|---|---|---|---|---|"]
    for name, t in doc["sets"].items():
        out.append(_counts_row(name + (" (fit)" if name in doc["fit"] else ""), t))
    for name in ("fit", "judged"):
        t = doc["total"].get(name)
        if t:
            out.append(_counts_row(f"all {name}", t))
    if doc.get("joined"):
        out += ["", "On the job's graph (each rank of a complete job: its step with every rank's "
                "overhead out, `tracekit.ranks.job.joined_estimate`; warned: its range or the "
                "rule on the job's critical path):", "",
                "| set | ranks | off by > 10 % | flagged | of them without the range warning | "
                "flagged | within 10 % | flagged falsely |", "|---|---|---|---|---|---|---|---|"]
        for name, t in doc["joined"].items():
            out.append(_counts_row(name, t))
    out += ["", "Flagged runs:", "", "| set | run | traced ms | estimate ms | taken out ms | "
            "unexplained | measured ms | error |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if r.get("joined_flagged"):
            out.append(f"| {r['set']} | {r['run']} rank {r['rank']}, on the job's graph | "
                       f"{r['traced_ms']:.3f} | {r['joined_ms']:.3f} | {r['taken_ms']:.3f} | "
                       f"{100 * r['joined_unexplained_share']:.1f} % (job's path) | "
                       f"{r['measured_ms']:.3f} | "
                       f"{100 * (r['joined_ms'] / r['measured_ms'] - 1):+.1f} % |")
        if r["flagged"]:
            out.append(f"| {r['set']} | {r['run']} rank {r['rank']} | {r['traced_ms']:.3f} | "
                       f"{r['estimate_ms']:.3f} | {r['taken_ms']:.3f} | "
                       f"{100 * r['unexplained_share']:.1f} % | {r['measured_ms']:.3f} | "
                       f"{100 * r['error']:+.1f} % |")
    if doc.get("grid"):
        out += ["", "The grid on the fit sets (flags of the estimates off / within; the Pareto "
                "front, ties kept):", "",
                "| unexplained | taken | followed | above | off flagged | within flagged |",
                "|---|---|---|---|---|---|"]
        for g in doc["grid"]:
            out.append(f"| {g['unexplained']} | {g['taken']} | {g['followed']} | {g['above']} | "
                       f"{g['off_flagged']} of {g['off']} | {g['within_flagged']} of "
                       f"{g['within']} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from tracekit.graph import overhead as oh

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", default=[], metavar="NAME=DIR", required=True)
    ap.add_argument("--fit", default="", help="the sets the rule was chosen on, comma-separated")
    ap.add_argument("--grid", action="store_true", help="try the thresholds' grid on --fit")
    ap.add_argument("--joined", action="store_true",
                    help="also judge each rank of a complete job on the job's graph")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    specs = named_dirs(args.set)
    if specs is None:
        return 2
    fit = [s for s in args.fit.split(",") if s]
    t0 = time.perf_counter()
    rule = {"unexplained": oh.UNEXPLAINED_KEPT, "taken": oh.TAKEN_MATTERS,
            "followed": oh.FOLLOWED, "above": oh.ABOVE_TAKEN}
    seen, rows, jobs = set(), [], {}
    for name, root in specs:
        for run in of.find_runs([root]):
            key = (run.name.split("sample_traces/")[-1], run.rank)
            if key in seen:
                continue
            seen.add(key)
            f = figures(run)
            if f is None:
                continue
            f |= {"set": name, "run": run.name, "rank": run.rank,
                  "error": f["estimate_ms"] / f["measured_ms"] - 1}
            f["flagged"] = oh.unexplained_kept(f["traced_ms"] * 1e6, f["estimate_ms"] * 1e6,
                                               f["taken_ms"] * 1e6, f["unexplained_share"]) \
                is not None
            folder = complete_job(run.trace) if run.gpus > 1 and args.joined else None
            if folder is not None:
                if folder not in jobs:
                    jobs[folder] = joined_figures(folder)
                f |= jobs[folder].get(run.rank, {})
            rows.append(f)
    if not rows:
        print("unexplained_kept: no trace with its untraced step measured beside it",
              file=sys.stderr)
        return 2
    flag = (lambda r: r["flagged"])
    doc = {"question": "estimates resting on unexplained time", "rule": rule, "fit": fit,
           "sets": {n: tally([r for r in rows if r["set"] == n], flag) for n, _ in specs},
           "total": {}, "joined": {}}
    jr = [dict(j, set=r["set"]) for r in rows if (j := as_joined(r)) is not None]
    for n, _ in specs:
        on = [r for r in jr if r["set"] == n]
        if on:
            doc["joined"][n] = tally(on, flag)
    if jr:
        doc["joined"]["all"] = tally(jr, flag)
    for part, sel in (("fit", lambda r: r["set"] in fit),
                      ("judged", lambda r: r["set"] not in fit)):
        if any(map(sel, rows)):
            doc["total"][part] = tally([r for r in rows if sel(r)], flag)
    if args.grid and fit:
        on = [r for r in rows if r["set"] in fit]
        tried = []
        for u, k, fo, ab in itertools.product(*GRID.values()):
            t = tally(on, lambda r: fires(r, u, k, fo, ab))
            tried.append({"unexplained": u, "taken": k, "followed": fo, "above": ab, **t})
        # the Pareto front (no other setting flags as many off with fewer within, or more off
        # with as few), ties kept
        doc["grid"] = [g for g in tried if not any(
            (h["off_flagged"] >= g["off_flagged"] and h["within_flagged"] < g["within_flagged"]) or
            (h["off_flagged"] > g["off_flagged"] and h["within_flagged"] <= g["within_flagged"])
            for h in tried)]
    doc["rows"] = rows
    stamp_and_report(doc, render, module="bench.unexplained_kept", argv=argv, t0=t0, out_dir=args.out,
                     prefix="unexplained-kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
