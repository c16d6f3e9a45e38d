"""Does a rank of a job run its untraced host at a job's pace, not a lone process's? Question:
on the jobs whose traces the profiler's options slowed (``with_modules``/``with_flops``:
TorchRec's benchmark, where ``host_factor`` makes the rest of the host as much faster untraced
as its launch calls ran slower than the fitted host's), does reading that factor against a
slower reference for the ranks of a job (``OverheadModel.job_launch_ref_ns``: the fitted host's
launch call x K) bring the job's estimated untraced step closer to the measured one, on sets of
runs it was not chosen on?

For each set (``--set NAME=DIR``, as ``bench.overhead_loso`` takes them) every folder holding
every rank of such a job; for each K of ``--k`` the ranks' estimates on the job's graph
(``bench.common.joined``: every rank's overhead out) with the default model but
``job_launch_ref_ns = ((2, ref x K), (4, ref x K))``, against each rank's measured untraced step.
Leave one set out: K chosen on the other sets (the most ranks within +-10 %, the smallest K on a
tie), judged on the set left out, against K = 1 (no job pace: every rank brought to the fitted
host's pace, the model before 2026-11-28 14:00). Also every set's and all sets' ranks together
per K: within, median |error| and the median signed error (the K a set wants where it crosses 0).

``--earlier FILE``: an earlier result of this runner whose sets' traces are no longer on this
machine (the released held-out sets 5-7 did not outlive their machines): its rows for the sets
not given with ``--set`` join the table and the leave-one-set-out, at the K values both runs
have. The two must agree where they meet: every rank of a set both hold (the tree) within 0.002
of the same error at every shared K, else the runner stops (the model changed in between).

``--others``: beside the jobs, every other run of the sets given with ``--set`` (TorchRec's 1-GPU
runs and ranks of jobs not all in their folder, the runtime's runs of every option set and
world size), each on its own trace, with no job pace (K = 1) and with the model now
(``DEFAULT_MODEL``): per kind, within +-10 % and median |error|, and how many estimates moved;
and each set's host pace: the median launch call (``overhead.launch_duration``) of the runtime's
1-GPU runs with the default options, of TorchRec's 1-GPU runs, and of the ranks of its jobs.

    python -m bench.overhead_job_pace --set h5=/work/.heldout5/tree/sample_traces ... --set tree=sample_traces [--k 1,1.18,1.42,1.7] [--earlier EARLIER.json] [--others] [--out bench/results]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

from bench import overhead_fit as of
from bench.common import named_dirs, stamp_and_report

TARGET = of.TARGET


def jobs(name: str, root: str) -> dict[str, list]:
    """The folders of ``root`` holding every rank of a job whose traces say ``with_modules`` or
    ``with_flops``, each with its ranks' runs (prepared: their measured untraced step)."""
    runs = [r for r in of.find_runs([root]) if r.gpus > 1]
    out = {}
    for folder, rs in of.job_folders(runs).items():
        for r in rs:
            of.prepare(r)
        if any(r.counts.modules_recorded or r.counts.flops_recorded for r in rs):
            out[folder] = sorted(rs, key=lambda r: r.rank)
    return out


def judge(folders: dict[str, list], k: float) -> list[dict]:
    """Per rank of each job: its estimate on the job's graph with the job's pace ``k``."""
    from bench.common.joined import joined_ms
    from tracekit.graph import overhead as oh

    ref = oh.DEFAULT_MODEL.launch_ref_ns
    model = replace(oh.DEFAULT_MODEL, job_launch_ref_ns=() if k == 1.0 else
                    ((2, ref * k), (4, ref * k)))
    rows = []
    for folder, rs in folders.items():
        got = joined_ms(folder, model)
        for r in rs:
            ms = got.get(r.rank)
            if ms is None:
                continue
            rows.append({"run": r.name, "rank": r.rank, "gpus": r.gpus, "k": k,
                         "measured_ms": r.untraced_ms, "estimate_ms": ms,
                         "error": ms / r.untraced_ms - 1})
    return rows


def kind(r) -> str:
    who = "TorchRec" if r.preset == "torchrec" else "runtime"
    return f"{who}, {r.gpus} GPU{'s' if r.gpus > 1 else ''}"


def others(root: str, done: dict[str, list]) -> tuple[list[dict], dict]:
    """Every run under ``root`` not a rank of ``done``'s jobs, on its own trace, with no job pace
    and with the model now; and the set's host paces (module docstring)."""
    import os

    from tracekit.graph import overhead as oh

    ranks = {(os.path.abspath(r.trace), r.rank) for rs in done.values() for r in rs}
    rows, pace = [], {"runtime, 1 GPU, default options": [], "TorchRec, 1 GPU": [],
                      "TorchRec, ranks of jobs": []}
    for r in of.find_runs([root]):
        key = (os.path.abspath(r.trace), r.rank)
        of.prepare(r)
        launch = r.counts.launch_ns
        if launch is not None:
            if r.preset == "torchrec":
                pace["TorchRec, 1 GPU" if r.gpus == 1 else "TorchRec, ranks of jobs"].append(launch)
            elif r.gpus == 1 and r.option == "default":
                pace["runtime, 1 GPU, default options"].append(launch)
        if key not in ranks:
            ms = {name: estimate_with(r, m) for name, m in (
                ("k1", replace(oh.DEFAULT_MODEL, job_launch_ref_ns=())), ("now", oh.DEFAULT_MODEL))}
            rows.append({"run": r.name, "rank": r.rank, "kind": kind(r), "option": r.option,
                         "measured_ms": r.untraced_ms, "k1_ms": ms["k1"], "now_ms": ms["now"],
                         "k1_error": ms["k1"] / r.untraced_ms - 1,
                         "now_error": ms["now"] / r.untraced_ms - 1})
        r.graph = r.windows = None  # the next run's graph in its place
    return rows, {k: (statistics.median(v) / 1e3 if v else None, len(v)) for k, v in pace.items()}


def estimate_with(run, model) -> float:
    """``run``'s estimated untraced step (ms, the counted steps' mean) under ``model``."""
    from tracekit.graph import overhead as oh
    from tracekit.graph import whatif as wi

    cost = oh.host_cost(None, run.graph, model, run.counts)
    _, rep = oh.untraced_steps(run.graph, cost, run.windows,
                               host_factor=oh.host_factor(run.counts, model))
    keep = wi.counted_steps(run.windows)
    return float(rep[keep].mean()) / 1e6 if keep.any() else 0.0


def within(rows: list[dict]) -> int:
    return sum(abs(r["error"]) <= TARGET for r in rows)


def median_abs(rows: list[dict]) -> float | None:
    return statistics.median([abs(r["error"]) for r in rows]) if rows else None


def median_signed(rows: list[dict]) -> float | None:
    """The median error (signed): which way, and how far, a set's ranks miss at a K."""
    return statistics.median([r["error"] for r in rows]) if rows else None


def summary(rows: list[dict]) -> dict:
    return {"runs": len(rows), "within": within(rows), "median": median_abs(rows),
            "signed": median_signed(rows)}


def earlier_rows(path: str, ks: list[float], res: dict) -> tuple[dict, dict] | None:
    """``(per set: {k: rows}, the sets' folders)`` of an earlier result at the K values of
    ``ks`` it has, for the sets ``res`` does not hold; None (after one line on stderr) where the
    file is not such a result or disagrees with ``res`` on a set both hold."""
    import json

    try:
        with open(path) as f:
            doc = json.load(f)
        rows, sets = doc["rows"], doc["sets"]
        had = {float(k) for k in doc["k"]}
    except (OSError, ValueError, KeyError, TypeError):
        print(f"--earlier {path}: not a result of bench.overhead_job_pace", file=sys.stderr)
        return None
    shared = [k for k in ks if k in had]
    out: dict = {}
    for r in rows:
        head = r["run"].split(": ")[0] if ": " in r["run"] else None
        name = "tree" if head is None else next(
            (n for n, root in sets.items() if f"/{head}/" in f"/{root}/"), head)
        out.setdefault(name, {}).setdefault(float(r["k"]), []).append(r)
    for name in set(out) & set(res):
        for k in shared:
            now = {(r["run"], r["rank"]): r["error"] for r in res[name][k]}
            then = {(r["run"], r["rank"]): r["error"] for r in out[name].get(k, [])}
            if set(now) != set(then) or any(abs(now[x] - then[x]) > 0.002 for x in now):
                print(f"--earlier {path}: set {name} at K = {k:g} differs from this run's "
                      "(the model changed in between): not joined", file=sys.stderr)
                return None
    keep = {n: {k: out[n].get(k, []) for k in shared} for n in out if n not in res}
    return keep, {n: sets[n] for n in keep if n in sets}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--k", default="1,1.18,1.42,1.7",
                    help="the job's pace over the fitted host's, comma-separated (1: the model now)")
    ap.add_argument("--earlier", default=None,
                    help="an earlier result of this runner: its sets not given here join the "
                         "table at the K values both have (module docstring)")
    ap.add_argument("--others", action="store_true",
                    help="every other run of the sets given, with no job pace and the model now "
                         "(module docstring)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        ks = sorted({float(x) for x in args.k.split(",")} | {1.0})
    except ValueError:
        print(f"--k {args.k}: not numbers separated by commas", file=sys.stderr)
        return 2
    specs = named_dirs(args.set)
    if specs is None:
        return 2
    t0 = time.perf_counter()
    res: dict[str, dict[float, list]] = {}
    rest: dict[str, dict] = {}
    for name, root in specs:
        folders = jobs(name, root)
        res[name] = {k: judge(folders, k) for k in ks}
        print(f"{name}: {len(folders)} jobs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        if args.others:
            rows, pace = others(root, folders)
            rest[name] = {"rows": rows, "pace_us": pace}
            print(f"{name}: {len(rows)} other runs, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr)
    sets = dict(specs)
    if args.earlier:
        got = earlier_rows(args.earlier, ks, res)
        if got is None:
            return 2
        old, old_sets = got
        ks = [k for k in ks if all(k in v for v in old.values())]
        res = {**old, **res}
        sets = {**old_sets, **sets}
        specs = [(n, sets.get(n, args.earlier)) for n in old] + specs
    names = [n for n, _ in specs if any(res[n][1.0])]
    loso = {}
    for left in names:
        train = [n for n in names if n != left]
        score = {k: sum(within(res[n][k]) for n in train) for k in ks}
        best = min(ks, key=lambda k: (-score[k], k))
        loso[left] = {"k": best, "train_within": score, "runs": len(res[left][1.0]),
                      "now": within(res[left][1.0]), "chosen": within(res[left][best]),
                      "now_median": median_abs(res[left][1.0]),
                      "chosen_median": median_abs(res[left][best])}
    doc = {"question": "a job's ranks' untraced host pace for host_factor (job_launch_ref_ns)",
           "target": TARGET, "k": ks, "sets": sets, "earlier": args.earlier,
           "per_set": {n: {str(k): summary(res[n][k]) for k in ks} for n in names},
           "all_sets": {str(k): summary([r for n in names for r in res[n][k]]) for k in ks},
           "leave_one_set_out": loso, "model_now_job_launch_ref_ns": [
               list(x) for x in _default_job_pace()],
           "others": {n: {"pace_us": d["pace_us"], "kinds": other_kinds(d["rows"]),
                          "rows": d["rows"]} for n, d in rest.items()},
           "rows": [r for n in names for k in ks for r in res[n][k]]}
    stamp_and_report(doc, render, module="bench.overhead_job_pace", argv=argv, t0=t0, out_dir=args.out,
                     prefix="overhead-job-pace")
    return 0


def _default_job_pace() -> tuple:
    from tracekit.graph import overhead as oh

    return oh.DEFAULT_MODEL.job_launch_ref_ns


def other_kinds(rows: list[dict]) -> dict:
    """Per kind: runs, within and median |error| with no job pace and with the model now, and
    how many estimates moved (by more than 1 us)."""
    out = {}
    for k in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == k]
        out[k] = {"runs": len(rs),
                  "k1_within": sum(abs(r["k1_error"]) <= TARGET for r in rs),
                  "now_within": sum(abs(r["now_error"]) <= TARGET for r in rs),
                  "k1_median": statistics.median([abs(r["k1_error"]) for r in rs]),
                  "now_median": statistics.median([abs(r["now_error"]) for r in rs]),
                  "moved": sum(abs(r["now_ms"] - r["k1_ms"]) > 1e-3 for r in rs)}
    return out


def render(doc: dict) -> str:
    ks = doc["k"]
    out = [f"# A job's ranks' untraced host pace (host_factor), judged leave one set out ({doc['date_utc']})",
           "", f"Command: `{doc['command']}` ({doc['seconds']} s on {doc['machine']}).", "",
           "The jobs recorded with `with_modules`/`with_flops` (TorchRec's benchmark), each rank on "
           "the job's graph; K: the job's pace over the fitted host's (1: none, every rank brought "
           "to the fitted host's pace). "
           + (f"Sets not given with --set: their rows from `{doc['earlier']}` (their traces gone; "
              "the sets both hold agree). " if doc.get("earlier") else "") + "Ranks "
           f"within +-{100 * doc['target']:.0f} % of their measured untraced step (median |error|):", "",
           "| set | " + " | ".join(f"K = {k:g}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for n, d in doc["per_set"].items():
        out.append(f"| {n} | " + " | ".join(
            f"{d[str(k)]['within']} of {d[str(k)]['runs']} ({100 * d[str(k)]['median']:.1f} %)"
            for k in ks) + " |")
    if doc.get("all_sets"):
        a = doc["all_sets"]
        out.append("| all sets | " + " | ".join(
            f"{a[str(k)]['within']} of {a[str(k)]['runs']} ({100 * a[str(k)]['median']:.1f} %)"
            for k in ks) + " |")
        out += ["", "Their median error (signed: under is negative), the K each set wants where it "
                "crosses 0:", "", "| set | " + " | ".join(f"K = {k:g}" for k in ks) + " |",
                "|---|" + "---|" * len(ks)]
        for n, d in list(doc["per_set"].items()) + [("all sets", a)]:
            out.append(f"| {n} | " + " | ".join(
                "-" if d[str(k)].get("signed") is None else f"{100 * d[str(k)]['signed']:+.1f} %"
                for k in ks) + " |")
    out += ["", "Leave one set out (K chosen on the other sets: the most ranks within, the smallest "
            "K on a tie):", "", "| left out | K chosen | within (median |error|), K = 1 | within "
            "(median |error|), K chosen |", "|---|---|---|---|"]
    tot = [0, 0, 0]

    def med(x):
        return "-" if x is None else f"{100 * x:.1f} %"

    for n, d in doc["leave_one_set_out"].items():
        out.append(f"| {n} | {d['k']:g} | {d['now']} of {d['runs']} ({med(d.get('now_median'))}) | "
                   f"{d['chosen']} of {d['runs']} ({med(d.get('chosen_median'))}) |")
        tot[0] += d["now"]
        tot[1] += d["chosen"]
        tot[2] += d["runs"]
    out += ["", f"In all: K = 1 {tot[0]} of {tot[2]}, K chosen on the other sets {tot[1]} "
            f"of {tot[2]}."]
    if doc.get("others"):
        pace = doc.get("model_now_job_launch_ref_ns") or []
        out += ["", "Every other run of the sets given with --set, each on its own trace: no job "
                "pace (K = 1) and the model now (job_launch_ref_ns "
                + (", ".join(f"{int(n)} ranks: {ns / 1e3:.2f} us" for n, ns in pace) or "none")
                + "); within +-10 % (median |error|):", "",
                "| set | kind | runs | K = 1 | model now | estimates moved |", "|---|---|---|---|---|---|"]
        for n, d in doc["others"].items():
            for k, x in d["kinds"].items():
                out.append(f"| {n} | {k} | {x['runs']} | {x['k1_within']} ({med(x['k1_median'])}) | "
                           f"{x['now_within']} ({med(x['now_median'])}) | {x['moved']} |")
        out += ["", "Each set's host pace, the median launch call (us; runs read):", "",
                "| set | " + " | ".join(next(iter(doc["others"].values()))["pace_us"]) + " |",
                "|---|" + "---|" * len(next(iter(doc["others"].values()))["pace_us"])]
        for n, d in doc["others"].items():
            out.append(f"| {n} | " + " | ".join("-" if v is None else f"{v:.2f} ({c})"
                                               for v, c in d["pace_us"].values()) + " |")
        out += ["", "| set | run | rank | kind | option | measured ms | K = 1 ms | error | model now ms "
                "| error |", "|---|---|---|---|---|---|---|---|---|---|"]
        for n, d in doc["others"].items():
            for r in d["rows"]:
                out.append(f"| {n} | {r['run']} | {r['rank']} | {r['kind']} | {r['option']} | "
                           f"{r['measured_ms']:.3f} | {r['k1_ms']:.3f} | {100 * r['k1_error']:+.1f}% | "
                           f"{r['now_ms']:.3f} | {100 * r['now_error']:+.1f}% |")
    out += ["", "| run | rank | K | measured ms | estimate ms | error |",
            "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        out.append(f"| {r['run']} | {r['rank']} | {r['k']:g} | {r['measured_ms']:.3f} | "
                   f"{r['estimate_ms']:.3f} | {100 * r['error']:+.1f}% |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
