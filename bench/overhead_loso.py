"""The profiler's overhead model (``tracekit.graph.overhead``) judged leave-one-set-out.
Question: fitted on every set of runs but one, how close is the estimated untraced step to the
measured one on the set left out? And does a change of the model hold on sets it was not
fitted on?

Sets: folders of runs (``--set NAME=DIR``, each a ``sample_traces`` of the repository's layout:
this tree's, or a released held-out set's ``tree/sample_traces``). A trace held by two sets
(the same bytes: the tree keeps some held-out traces) belongs to the first set listed that holds
it: list the tree last. The runs of a set are found as ``bench.overhead_fit`` finds them (a
trace with its run's untraced step beside it).

For each set left out: the model is fitted (``fit``) on the 1-GPU runs of the other sets (the
runtime's, every profiler option set, and TorchRec's benchmark's) and judged on every run of the
left-out set: a 1-GPU run on its own estimate, a rank of a job whose every rank is in its folder
on the job's graph (every rank's overhead out, ``bench.common.joined``), else its own. Beside it
the model *before* (``BEFORE``: the model of the code before this runner, the same on every
set: its costs fitted on the tree's runs alone), its costs with the slow-host rule ``--rule``
(*rule only*: ``DEFAULT_MODEL`` since 2026-11-28, the refit not holding out of the sets it was
fitted on), and the fit on every set (not held out). Rows per kind (runtime / TorchRec, 1, 2, 4 GPUs):
median and worst |error|, within +-10 %.

The fit: the per-term costs (ns) minimising the mean |relative error| of the estimated untraced
step over the fitted runs (a robust loss: the measured untraced steps of one preset vary by up
to 40 % between processes of one host speed, a spread no trace shows): one factor over the prior
(golden-section), then each term whose count varies among the fitted runs on its own, 2 sweeps.
The host speed's reference launch call stays the fitted host's of ``BEFORE`` (4.34 us: the
runtime's 1-GPU runs of every preset, default options, H200), whose pace a host the profiler did
not slow keeps; ``--ref median`` takes the fitted runs' median instead (slow processes and H100
hosts among them), which makes a slow host's ``host_factor`` under ``with_modules`` smaller.

    python -m bench.overhead_loso --set h3=/work/.heldout3/tree/sample_traces ... --set tree=sample_traces [--no-refit] [--out bench/results]

``--no-refit``: the refit column is the model's own costs (the model now with ``--rule``'s
default), no fit run: a new set judged in minutes, not hours.
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

TARGET = of.TARGET
BEFORE = {"cpu_op": 982.0, "runtime": 1833.0, "memory": 513.0, "sync_call": 339.0,
          "python": 1325.0, "shapes": 312.0, "modules": 126.0, "launch_ref": 4338.0}
"""The model before this runner (``DEFAULT_MODEL`` of 2a8e677, fitted on the tree's 1-GPU
``multitask_b32k`` and ``multitask_b4k`` runs), with its slow-host rule ``BEFORE_RULE``."""
BEFORE_RULE = "shapes"
KINDS = ("runtime, 1 GPU", "runtime, 2 GPUs", "runtime, 4 GPUs", "TorchRec, 1 GPU",
         "TorchRec, 2 GPUs", "TorchRec, 4 GPUs")


def kind(r) -> str:
    who = "TorchRec" if r.preset == "torchrec" else "runtime"
    return f"{who}, {r.gpus} GPU{'s' if r.gpus > 1 else ''}"


def load_sets(specs: list[tuple[str, str]]) -> list:
    """Every run of every set, prepared (``bench.overhead_fit.prepare``), tagged ``run.set``; a
    trace (and rank) held by an earlier set is left out of a later one."""
    seen, out = set(), []
    for name, root in specs:
        for r in of.find_runs([root]):
            with open(r.trace, "rb") as f:
                key = (hashlib.md5(f.read()).hexdigest(), r.rank)
            if key in seen:
                continue
            seen.add(key)
            r.set = name
            of.prepare(r)
            out.append(r)
    return out


def _golden(f, lo, hi, iters):
    return of._golden(f, lo, hi, iters)


def fit(runs: list, prior: dict, rule: str, sweeps: int = 2, ref: float | None = None) -> dict:
    """The costs minimising the mean |relative error| over ``runs`` (module docstring), at the
    host speed reference ``ref`` (ns; None: the fitted runs' median launch call)."""
    from tracekit.graph import overhead as oh

    launches = [r.counts.launch_ns for r in runs if r.counts.launch_ns is not None]
    if ref is None:
        ref = statistics.median(launches) if launches else 0.0
    per = np.array([[r.per_step[t] for t in oh.TERMS] for r in runs])
    varied = [t for i, t in enumerate(oh.TERMS)
              if per[:, i].max() > 0 and (per[:, i].max() - per[:, i].min()) > 0.05 * per[:, i].max()]

    def loss(c: dict) -> float:
        return float(np.mean([abs(of.estimate_ms(r, dict(c, launch_ref=ref), rule)
                                  / r.untraced_ms - 1) for r in runs]))

    scale = _golden(lambda k: loss({t: prior[t] * k for t in oh.TERMS}), 0.0, of.MAX_SCALE, 20)
    costs = {t: prior[t] * scale for t in oh.TERMS}
    for _ in range(sweeps):
        for t in varied:
            costs[t] = _golden(lambda v: loss(dict(costs, **{t: v})), 0.0,
                               max(3 * costs[t], 500.0), 14)
    costs["launch_ref"] = ref
    costs["_loss"] = loss(costs)
    costs["_scale"] = scale
    costs["_varied"] = varied
    return costs


_JOINED: dict = {}
"""The job's graph per (folder, costs, rule): a rule that none of a job's traces can trigger
(none records inputs, modules or flops) joins the same graph as no rule."""


def _joined(folder: str, rs: list, costs: dict, rule: str) -> dict[int, float]:
    flagged = any(r.counts.shapes_recorded or r.counts.modules_recorded
                  or getattr(r.counts, "flops_recorded", False) for r in rs)
    key = (folder, tuple(sorted((k, v) for k, v in costs.items() if not k.startswith("_"))),
           rule if flagged else "")
    if key not in _JOINED:
        _JOINED[key] = of.joined_ms(folder, costs, rule)
    return _JOINED[key]


def judge(runs: list, costs: dict, rule: str, join: bool = True) -> dict:
    """Per run (name -> error): the estimate of ``costs`` against the measured untraced step; a
    rank of a complete job on the job's graph."""
    out = {}
    joined = {}
    if join:
        for folder, rs in of.job_folders(runs).items():
            try:
                for rank, ms in _joined(folder, rs, costs, rule).items():
                    joined[(folder, rank)] = ms
            except Exception as e:  # a job the job's graph cannot join: each rank alone
                print(f"  {folder}: not joined ({type(e).__name__}: {e})", file=sys.stderr)
    for r in runs:
        key = (os.path.dirname(os.path.abspath(r.trace)), r.rank)
        ms = joined.get(key)
        own = ms is None
        if own:
            ms = of.estimate_ms(r, costs, rule)
        out[(r.name, r.rank)] = {"estimate_ms": ms, "error": ms / r.untraced_ms - 1,
                                 "joined": not own}
    return out


def summary(runs: list, res: dict) -> dict:
    out = {}
    for k in KINDS:
        e = [abs(res[(r.name, r.rank)]["error"]) for r in runs if kind(r) == k]
        if e:
            out[k] = {"runs": len(e), "median": statistics.median(e), "worst": max(e),
                      "within": sum(x <= TARGET for x in e)}
    e = [abs(v["error"]) for v in res.values()]
    out["all"] = {"runs": len(e), "median": statistics.median(e), "worst": max(e),
                  "within": sum(x <= TARGET for x in e)}
    return out


def fitted_runs(runs: list) -> list:
    return [r for r in runs if r.gpus == 1]


def main(argv=None) -> int:
    from tracekit.graph import overhead as oh

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=DIR",
                    help="a set of runs; list the tree last")
    ap.add_argument("--rule", choices=oh.SLOW_HOST_OPTIONS, default="modules_flops",
                    help="the slow-host rule of the model fitted (OverheadModel.slow_host_by)")
    ap.add_argument("--ref", choices=("fixed", "median"), default="fixed",
                    help="the host speed's reference launch call: BEFORE's (fixed) or the "
                         "fitted runs' median")
    ap.add_argument("--fits", default=None,
                    help="an earlier run's JSON: its costs per left-out set and on every set are "
                         "judged again, not refitted (the same sets and rule)")
    ap.add_argument("--no-refit", action="store_true",
                    help="no fit: the refit column is the model's own costs (BEFORE's, with "
                         "--rule: the model now), so that a new set is judged without the "
                         "hours the refits take")
    ap.add_argument("--no-join", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    specs = named_dirs(args.set)
    if specs is None:
        return 2
    given = None
    if args.fits:
        try:
            with open(args.fits) as f:
                given = json.load(f)
            assert set(given["left_out"]) >= {n for n, _ in specs if n != "tree"}
        except (OSError, ValueError, KeyError, AssertionError, TypeError):
            print(f"--fits {args.fits}: not an overhead_loso result for these sets",
                  file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    runs = load_sets(specs)
    names = [n for n, _ in specs]
    prior = {t: BEFORE[t] for t in oh.TERMS}
    ref = BEFORE["launch_ref"] if args.ref == "fixed" else None
    doc = {"question": "the overhead model fitted on every set but one, judged on the set left "
                       "out (estimated untraced step vs measured)", "target": TARGET,
           "sets": {n: root for n, root in specs}, "rule": args.rule, "ref": args.ref,
           "fits_from": args.fits, "refit": not args.no_refit,
           "before": {"costs_ns": BEFORE, "rule": BEFORE_RULE},
           "runs_per_set": {n: sum(r.set == n for r in runs) for n in names}, "left_out": {}}
    rows = []
    for left in names:
        if left == "tree":
            continue
        test = [r for r in runs if r.set == left]
        train = fitted_runs([r for r in runs if r.set != left])
        if given:
            g = given["left_out"][left]
            costs = dict(g["costs_ns"], _loss=g["fit_loss"])
        elif args.no_refit:
            costs = dict(BEFORE, _loss=None)
        else:
            costs = fit(train, prior, args.rule, ref=ref)
        before = judge(test, BEFORE, BEFORE_RULE, join=not args.no_join)
        rule_only = judge(test, BEFORE, args.rule, join=not args.no_join)
        after = judge(test, costs, args.rule, join=not args.no_join)
        # what holds out of the fit: each term left out, the other rules, on the left-out set's
        # 1-GPU runs (the fitted costs otherwise; no refit)
        one = [r for r in test if r.gpus == 1]
        held = {}
        for name, c, rl in [("after", costs, args.rule)] + \
                [(f"without {t}", dict(costs, **{t: 0.0}), args.rule) for t in oh.TERMS
                 if costs[t] > 0] + \
                [(f"rule '{x}'", costs, x) for x in oh.SLOW_HOST_OPTIONS if x != args.rule]:
            if one:
                held[name] = summary(one, judge(one, c, rl, join=False))["all"]
        doc["left_out"][left] = {"held_1gpu": held,
            "fitted_on": sorted({r.set for r in train}), "fitted_runs": len(train),
            "costs_ns": {k: v for k, v in costs.items() if not k.startswith("_")},
            "fit_loss": costs["_loss"], "before": summary(test, before),
            "rule_only": summary(test, rule_only), "after": summary(test, after)}
        for r in test:
            k = (r.name, r.rank)
            rows.append({"left_out": left, "run": r.name, "rank": r.rank, "kind": kind(r),
                         "option": r.option, "traced_ms": r.traced_ms,
                         "measured_untraced_ms": r.untraced_ms,
                         "before_ms": before[k]["estimate_ms"], "before_error": before[k]["error"],
                         "rule_only_ms": rule_only[k]["estimate_ms"],
                         "rule_only_error": rule_only[k]["error"],
                         "after_ms": after[k]["estimate_ms"], "after_error": after[k]["error"],
                         "joined": after[k]["joined"]})
        print(f"left out {left}: fitted on {len(train)} runs, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    if given:
        a = given["all_sets"]
        costs = dict(a["costs_ns"], _loss=a["fit_loss"], _scale=a["scale"], _varied=a["varied"])
    elif args.no_refit:
        costs = dict(BEFORE, _loss=None, _scale=1.0, _varied=[])
    else:
        costs = fit(fitted_runs(runs), prior, args.rule, ref=ref)
    doc["all_sets"] = {"costs_ns": {k: v for k, v in costs.items() if not k.startswith("_")},
                       "fit_loss": costs["_loss"], "scale": costs["_scale"],
                       "varied": costs["_varied"], "fitted_runs": len(fitted_runs(runs))}
    doc["rows"] = rows
    stamp_and_report(doc, render, module="bench.overhead_loso", argv=argv, t0=t0, out_dir=args.out,
                     prefix="overhead-loso", tag=args.tag)
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _cell(x: dict | None) -> str:
    if not x:
        return "-"
    return f"{100 * x['median']:.1f} % / {100 * x['worst']:.1f} % / {x['within']} of {x['runs']}"


def render(doc: dict) -> str:
    out = [f"# Profiler overhead model, leave one set out ({doc['date_utc']})", "",
           f"Command: `{doc['command']}` ({doc['seconds']} s on {doc['machine']}).", "",
           "Runs per set: " + ", ".join(f"{k} {v}" for k, v in doc["runs_per_set"].items()) + ".",
           "", f"Before: the model of 2a8e677 (slow-host rule `{doc['before']['rule']}`), the same "
           f"on every set. Rule only: its costs with the slow-host rule `{doc['rule']}`. Refit: "
           + (f"fitted on the 1-GPU runs of the other sets (rule `{doc['rule']}`, host speed "
              f"reference {doc['ref']}), judged on the set left out. " if doc.get("refit", True)
              else "none (`--no-refit`): the model's own costs, as rule only (the 'fitted on' "
                   "column names the other sets, not used). ")
           + f"All raw (no untraced input). "
           f"|error| median / worst / within +-{100 * doc['target']:.0f} %:", "",
           "| left out | fitted on (runs) | kind | before | rule only | refit |",
           "|---|---|---|---|---|---|"]
    for left, d in doc["left_out"].items():
        for k in (*KINDS, "all"):
            if k not in d["after"]:
                continue
            out.append(f"| {left} | {', '.join(d['fitted_on'])} ({d['fitted_runs']}) | {k} | "
                       f"{_cell(d['before'].get(k))} | {_cell(d['rule_only'].get(k))} | "
                       f"{_cell(d['after'].get(k))} |")
    out += ["", "Costs fitted with each set left out, ns (launch_ref: the fitted runs' median "
            "launch call):", "", "| left out | " + " | ".join(doc["before"]["costs_ns"]) + " | mean |err| fitted |",
            "|---|" + "---|" * (len(doc["before"]["costs_ns"]) + 1),
            "| (before) | " + " | ".join(f"{v:,.0f}" for v in doc["before"]["costs_ns"].values()) + " | - |"]
    for left, d in doc["left_out"].items():
        out.append(f"| {left} | " + " | ".join(f"{d['costs_ns'].get(k, 0):,.0f}"
                                               for k in doc["before"]["costs_ns"])
                   + f" | {_pct(d['fit_loss'])} |")
    a = doc["all_sets"]
    out.append("| (every set) | " + " | ".join(f"{a['costs_ns'].get(k, 0):,.0f}"
                                             for k in doc["before"]["costs_ns"])
               + f" | {_pct(a['fit_loss'])} |")
    out += ["", "What holds out of the fit: on each left-out set's 1-GPU runs, the fitted costs with "
            "one term left out (cost 0, no refit) or another slow-host rule; |error| median / "
            "worst / within:", "", "| variant | " + " | ".join(doc["left_out"]) + " |",
            "|---|" + "---|" * len(doc["left_out"])]
    names = list(dict.fromkeys(k for d in doc["left_out"].values() for k in d["held_1gpu"]))
    for n in names:
        out.append(f"| {n} | " + " | ".join(_cell(d["held_1gpu"].get(n))
                                           for d in doc["left_out"].values()) + " |")
    out += ["", f"Every set ({a['fitted_runs']} 1-GPU runs): scale {a['scale']:.3f} over the "
            f"model before, then on their own: {', '.join(a['varied'])}.", "",
            "| left out | run | rank | kind | option | traced ms | measured untraced ms | before ms | "
            "before error | rule only error | refit ms | refit error |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        out.append(f"| {r['left_out']} | {r['run']} | {r['rank']} | {r['kind']} | {r['option']} | "
                   f"{r['traced_ms']:.3f} | {r['measured_untraced_ms']:.3f} | {r['before_ms']:.3f} | "
                   f"{100 * r['before_error']:+.1f}% | {100 * r['rule_only_error']:+.1f}% | {r['after_ms']:.3f}"
                   f"{' (joined)' if r['joined'] else ''} | {100 * r['after_error']:+.1f}% |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
