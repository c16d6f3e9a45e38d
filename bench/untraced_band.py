"""The range of the estimated untraced step where the profiler's cost decides it
(``tracekit.graph.overhead.UNTRACED_BAND``). Question: on the runs where the estimate is well
under the traced step (the host bounds the traced step and the model's correction sets the
estimate), how far off is it, and does a band read on some sets of runs hold on another?

Reads result files, not traces: the rows of ``bench.overhead_loso`` (``--loso``: each run of
the sets it left out, with the model's estimate, ``--column``: ``rule_only``, the model of
2026-11-28) and of ``bench.overhead_fit`` (``--fit SET=FILE``: its judged rows, the raw
estimate). A run counts where its estimate is at least ``HOST_DECIDES`` under its traced step.
The band: the 10th and 90th percentile of the error (estimate / measured - 1) over every set;
judged leave one set out (each set's band from the others, the share of its runs inside).

    python -m bench.untraced_band --loso bench/results/overhead-loso-20261128-0606.json \\
        --fit h7=bench/results/overhead-fit-20261128-0629-holdout7.json [--out bench/results]

``--by-options``: the runs taken with the slow-host rule's options (``with_modules`` /
``with_flops``; every such run judged is TorchRec's benchmark's, told by its path, as the result
rows do not carry the trace's options) and the others apart: each kind's band, judged leave one
set out against the pooled band read the same way (``overhead.UNTRACED_BAND_SLOW_HOST``).

``--pace FILE`` (a ``bench.overhead_job_pace`` result): the runs it judged take its estimates
of the model now (``DEFAULT_MODEL``): its jobs' ranks at the K the model holds
(``job_launch_ref_ns`` over ``launch_ref_ns``), its TorchRec ranks of jobs not all in their folder
(``--others``) their model-now estimates (nothing else moves); a run is matched by its set, its path from ``sample_traces/`` on and its rank. A rank
of a job taken with the slow-host rule's options (``world_size`` 2 or more, TorchRec's) that the
file does not hold is left out (its estimate under the model now is not known: its traces are
gone), and the runner says how many.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import stamp_and_report

QUANTILES = (0.10, 0.90)


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (the sorted value at ``int(q * n)``, clipped)."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def rows_from(loso: dict | None, fits: dict[str, dict], column: str) -> list[dict]:
    """``{set, run, traced_ms, measured_ms, estimate_ms}`` per judged run of the files."""
    out = []
    for r in (loso or {}).get("rows", []):
        out.append({"set": r["left_out"], "run": f"{r['run']} rank {r['rank']}",
                    "traced_ms": r["traced_ms"], "measured_ms": r["measured_untraced_ms"],
                    "estimate_ms": r[f"{column}_ms"]})
    for name, doc in fits.items():
        for r in doc.get("rows", []):
            if r.get("set") != "judge":
                continue
            out.append({"set": name, "run": f"{r['run']} rank {r['rank']}",
                        "traced_ms": r["traced_ms"], "measured_ms": r["measured_untraced_ms"],
                        "estimate_ms": r["raw_estimated_untraced_ms"]})
    return out


def _tail(run: str) -> str:
    """A result row's run from ``sample_traces/`` on, without its rank's suffix."""
    run = run.split(" rank ")[0]
    i = run.find("sample_traces/")
    return run[i:] if i >= 0 else run


def _set_of(run: str, sets: dict[str, str]) -> str:
    """The set of a ``bench.overhead_job_pace`` row: the folder before ``: `` in its run names
    one of ``sets``' folders; none: the tree."""
    head = run.split(": ")[0] if ": " in run else None
    if head is None:
        return "tree"
    return next((n for n, root in sets.items() if f"/{head}/" in f"/{root}/"), head)


def with_pace(rows: list[dict], pace: dict, k: float) -> tuple[list[dict], dict]:
    """``rows`` with the estimates of ``pace`` (a ``bench.overhead_job_pace`` result) where it
    judged the run (its jobs at ``k`` on the job's graph; its other runs' model-now estimates,
    each on its own trace, for TorchRec's ranks of jobs not all in their folder only: the result
    files judge those on their own trace too, and the job pace moves nothing else); the slow-host
    rule's ranks of jobs it did not judge left out. Also ``{"replaced", "left_out"}``."""
    sets = pace.get("sets") or {}
    est = {}
    for r in pace.get("rows", []):
        if abs(float(r["k"]) - k) < 1e-9:
            est[(_set_of(r["run"], sets), _tail(r["run"]), int(r["rank"]))] = r["estimate_ms"]
    for name, d in (pace.get("others") or {}).items():
        for r in d.get("rows", []):  # on its own trace: TorchRec's ranks of jobs not all there
            if slow_host_run(r["run"]) and r.get("kind", "").endswith("GPUs"):
                est[(name, _tail(r["run"]), int(r["rank"]))] = r["now_ms"]
    out, replaced, left = [], 0, []
    for r in rows:
        rank = int(r["run"].rsplit(" rank ", 1)[1]) if " rank " in r["run"] else 0
        key = (r["set"], _tail(r["run"]), rank)
        if key in est:
            out.append(dict(r, estimate_ms=est[key]))
            replaced += 1
        elif slow_host_run(r["run"]) and "torchrec_1gpu/" not in r["run"]:
            left.append(f"{r['set']}: {key[1]} rank {rank}")
        else:
            out.append(r)
    return out, {"replaced": replaced, "left_out": left}


def mark(rows: list[dict], decides: float) -> None:
    """Each row's ``error`` (estimate / measured - 1) and whether the profiler's cost decides its
    estimate (``decided``: at least ``decides`` under the traced step)."""
    for r in rows:
        r["error"] = r["estimate_ms"] / r["measured_ms"] - 1
        r["decided"] = r["estimate_ms"] <= (1 - decides) * r["traced_ms"]


def band(rows: list[dict], decides: float) -> dict:
    """The runs the profiler's cost decides, their errors' band, and leave one set out."""
    mark(rows, decides)
    on = [r for r in rows if r["decided"]]
    sets = list(dict.fromkeys(r["set"] for r in rows))
    doc = {"runs": len(rows), "decided": len(on),
           "band": [quantile([r["error"] for r in on], q) for q in QUANTILES] if on else None,
           "within_10_decided": sum(abs(r["error"]) <= 0.10 for r in on),
           "within_10_rest": sum(abs(r["error"]) <= 0.10 for r in rows if not r["decided"]),
           "left_out": {}}
    for s in sets:
        train = [r["error"] for r in on if r["set"] != s]
        test = [r for r in on if r["set"] == s]
        if not train or not test:
            continue
        lo, hi = (quantile(train, q) for q in QUANTILES)
        doc["left_out"][s] = {"band": [lo, hi], "runs": len(test),
                              "inside": sum(lo <= r["error"] <= hi for r in test),
                              "within_10": sum(abs(r["error"]) <= 0.10 for r in test)}
    return doc


def slow_host_run(run: str) -> bool:
    """Whether a result row's run was taken with the slow-host rule's options: TorchRec's
    benchmark's traces (``torchrec_<N>gpu/...``), the only ones judged with them."""
    return "torchrec" in run


def by_options(rows: list[dict], decides: float) -> dict:
    """Per kind (``slow_host``: ``slow_host_run``), its band over every set and, leaving one set
    out, its runs inside the kind's band and inside the pooled band read on the same sets."""
    mark(rows, decides)
    decided = [r for r in rows if r["decided"]]
    out = {}
    for kind in (True, False):
        on = [r for r in decided if slow_host_run(r["run"]) == kind]
        if not on:
            continue
        errs = [r["error"] for r in on]
        d = {"runs": len(on), "band": [quantile(errs, q) for q in QUANTILES],
             "median": quantile(errs, 0.5), "left_out": {}}
        for s in dict.fromkeys(r["set"] for r in on):
            test = [r["error"] for r in on if r["set"] == s]
            own = [r["error"] for r in on if r["set"] != s]
            pool = [r["error"] for r in decided if r["set"] != s]
            if not own or not pool:
                continue
            lo, hi = (quantile(own, q) for q in QUANTILES)
            plo, phi = (quantile(pool, q) for q in QUANTILES)
            ratio = quantile([1 + e for e in own], 0.5)  # the other sets' estimate / measured
            d["left_out"][s] = {"runs": len(test), "band": [lo, hi],
                                "inside": sum(lo <= e <= hi for e in test),
                                "inside_pooled": sum(plo <= e <= phi for e in test),
                                "within_10": sum(abs(e) <= 0.10 for e in test),
                                "ratio": ratio,
                                "within_10_divided": sum(abs((1 + e) / ratio - 1) <= 0.10
                                                         for e in test)}
        out["slow_host" if kind else "other"] = d
    return out


def render(doc: dict) -> str:
    b = doc["band"]
    out = [f"# The estimated untraced step where the profiler's cost decides it ({doc['date_utc']})",
           "", f"Command: `{doc['command']}` ({doc['seconds']} s on {doc['machine']}).", "",
           f"{doc['runs']} judged traces and ranks; {doc['decided']} with the estimate at least "
           f"{100 * doc['decides']:.0f} % under the traced step (the profiler's cost decides it): "
           f"{doc['within_10_decided']} of them within +-10 % of the measured untraced step "
           f"(the rest: {doc['within_10_rest']} of {doc['runs'] - doc['decided']}).", ""]
    if doc.get("pace"):
        p = doc["pace"]
        out += [f"The model now's estimates from `{p['file']}` (jobs at K = {p['k']:g}): "
                f"{p['replaced']} runs; left out, ranks of TorchRec's jobs it does not hold: "
                f"{len(p['left_out'])}" + (f" ({', '.join(p['left_out'])})" if p["left_out"]
                                           else "") + ".", ""]
    if b:
        out.append(f"Their error (estimate / measured - 1), 10th and 90th percentile over every "
                   f"set: {100 * b[0]:+.1f} % and {100 * b[1]:+.1f} %.")
    out += ["", "Leave one set out (the band from the other sets, the left-out set's runs inside it):",
            "", "| left out | band | inside | within +-10 % |", "|---|---|---|---|"]
    tot = [0, 0]
    for s, d in doc["left_out"].items():
        out.append(f"| {s} | {100 * d['band'][0]:+.1f} % .. {100 * d['band'][1]:+.1f} % | "
                   f"{d['inside']} of {d['runs']} | {d['within_10']} of {d['runs']} |")
        tot[0] += d["inside"]
        tot[1] += d["runs"]
    out += ["", f"In all: {tot[0]} of {tot[1]} inside the band read on the other sets."]
    for kind, d in (doc.get("by_options") or {}).items():
        name = ("taken with the slow-host rule's options (TorchRec's)" if kind == "slow_host"
                else "the others")
        out += ["", f"Runs {name}: {d['runs']}, their error's median {100 * d['median']:+.1f} %, "
                f"band {100 * d['band'][0]:+.1f} % .. {100 * d['band'][1]:+.1f} %; leave one set "
                "out:", "", "| left out | their band | inside it | inside the pooled band | within "
                "+-10 % | the others' estimate / measured | within +-10 % divided by it |",
                "|---|---|---|---|---|---|---|"]
        t = [0, 0, 0, 0, 0]
        for s, x in d["left_out"].items():
            out.append(f"| {s} | {100 * x['band'][0]:+.1f} % .. {100 * x['band'][1]:+.1f} % | "
                       f"{x['inside']} of {x['runs']} | {x['inside_pooled']} of {x['runs']} | "
                       f"{x['within_10']} | {x['ratio']:.3f} | {x['within_10_divided']} |")
            t = [t[0] + x["inside"], t[1] + x["inside_pooled"], t[2] + x["runs"],
                 t[3] + x["within_10"], t[4] + x["within_10_divided"]]
        out += ["", f"In all: {t[0]} of {t[2]} inside their own band, {t[1]} inside the pooled one; "
                f"within +-10 % {t[3]}, divided by the other sets' median ratio {t[4]}."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from tracekit.graph import overhead as oh

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loso", default=None, help="a bench.overhead_loso result (.json)")
    ap.add_argument("--column", default="rule_only", choices=("before", "rule_only", "after"),
                    help="which of its estimates: rule_only is the model of 2026-11-28")
    ap.add_argument("--fit", action="append", default=[], metavar="SET=FILE",
                    help="a bench.overhead_fit result (.json) of a held-out set")
    ap.add_argument("--decides", type=float, default=oh.HOST_DECIDES)
    ap.add_argument("--by-options", action="store_true",
                    help="the slow-host rule's runs (TorchRec's) and the others apart")
    ap.add_argument("--pace", default=None,
                    help="a bench.overhead_job_pace result: its estimates of the model now "
                         "replace the files' (module docstring)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        loso = json.load(open(args.loso)) if args.loso else None
        fits = {}
        for f in args.fit:
            name, _, path = f.partition("=")
            fits[name] = json.load(open(path))
        rows = rows_from(loso, fits, args.column)
        paced = None
        if args.pace:
            d = oh.DEFAULT_MODEL
            k = round(d.job_ref_ns(2) / d.launch_ref_ns, 2) if d.launch_ref_ns else 1.0
            rows, paced = with_pace(rows, json.load(open(args.pace)), k)
            paced["k"] = k
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        print(f"untraced_band: cannot read the result files ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    if not rows:
        print("untraced_band: no judged runs in the files given", file=sys.stderr)
        return 2
    doc = {"question": "the estimate's error where the profiler's cost decides it",
           "decides": args.decides, "column": args.column, **band(rows, args.decides)}
    if paced is not None:
        doc["pace"] = dict(paced, file=args.pace)
    if args.by_options:
        doc["by_options"] = by_options(rows, args.decides)
    doc["rows"] = rows
    stamp_and_report(doc, render, module="bench.untraced_band", argv=argv, t0=t0, out_dir=args.out,
                     prefix="untraced-band")
    return 0


if __name__ == "__main__":
    sys.exit(main())
