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
tie), judged on the set left out, against K = 1 (the model now).

    python -m bench.overhead_job_pace --set h5=/work/.heldout5/tree/sample_traces ... --set tree=sample_traces [--k 1,1.18,1.42,1.7] [--out bench/results]
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
    model = oh.DEFAULT_MODEL if k == 1.0 else replace(
        oh.DEFAULT_MODEL, job_launch_ref_ns=((2, ref * k), (4, ref * k)))
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


def within(rows: list[dict]) -> int:
    return sum(abs(r["error"]) <= TARGET for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--k", default="1,1.18,1.42,1.7",
                    help="the job's pace over the fitted host's, comma-separated (1: the model now)")
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
    for name, root in specs:
        folders = jobs(name, root)
        res[name] = {k: judge(folders, k) for k in ks}
        print(f"{name}: {len(folders)} jobs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    names = [n for n, _ in specs if any(res[n][1.0])]
    loso = {}
    for left in names:
        train = [n for n in names if n != left]
        score = {k: sum(within(res[n][k]) for n in train) for k in ks}
        best = min(ks, key=lambda k: (-score[k], k))
        loso[left] = {"k": best, "train_within": score, "runs": len(res[left][1.0]),
                      "now": within(res[left][1.0]), "chosen": within(res[left][best])}
    doc = {"question": "a job's ranks' untraced host pace for host_factor (job_launch_ref_ns)",
           "target": TARGET, "k": ks, "sets": dict(specs),
           "per_set": {n: {str(k): {"runs": len(res[n][k]), "within": within(res[n][k]),
                                    "median": statistics.median([abs(r["error"]) for r in res[n][k]])
                                    if res[n][k] else None}
                           for k in ks} for n in names},
           "leave_one_set_out": loso,
           "rows": [r for n in names for k in ks for r in res[n][k]]}
    stamp_and_report(doc, render, module="bench.overhead_job_pace", argv=argv, t0=t0, out_dir=args.out,
                     prefix="overhead-job-pace")
    return 0


def render(doc: dict) -> str:
    ks = doc["k"]
    out = [f"# A job's ranks' untraced host pace (host_factor), judged leave one set out ({doc['date_utc']})",
           "", f"Command: `{doc['command']}` ({doc['seconds']} s on {doc['machine']}).", "",
           "The jobs recorded with `with_modules`/`with_flops` (TorchRec's benchmark), each rank on "
           "the job's graph; K: the job's pace over the fitted host's (1: the model now). Ranks "
           f"within +-{100 * doc['target']:.0f} % of their measured untraced step (median |error|):", "",
           "| set | " + " | ".join(f"K = {k:g}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for n, d in doc["per_set"].items():
        out.append(f"| {n} | " + " | ".join(
            f"{d[str(k)]['within']} of {d[str(k)]['runs']} ({100 * d[str(k)]['median']:.1f} %)"
            for k in ks) + " |")
    out += ["", "Leave one set out (K chosen on the other sets: the most ranks within, the smallest "
            "K on a tie):", "", "| left out | K chosen | within, the model now | within, K chosen |",
            "|---|---|---|---|"]
    tot = [0, 0, 0]
    for n, d in doc["leave_one_set_out"].items():
        out.append(f"| {n} | {d['k']:g} | {d['now']} of {d['runs']} | {d['chosen']} of {d['runs']} |")
        tot[0] += d["now"]
        tot[1] += d["chosen"]
        tot[2] += d["runs"]
    out += ["", f"In all: the model now {tot[0]} of {tot[2]}, K chosen on the other sets {tot[1]} "
            f"of {tot[2]}.", "", "| run | rank | K | measured ms | estimate ms | error |",
            "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        out.append(f"| {r['run']} | {r['rank']} | {r['k']:g} | {r['measured_ms']:.3f} | "
                   f"{r['estimate_ms']:.3f} | {100 * r['error']:+.1f}% |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
