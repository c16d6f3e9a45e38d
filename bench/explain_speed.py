"""What does ``tracekit explain`` cost on a large trace, against a cold ``analyze --no-hta``?
(issue 24: at most 1.5x, peak RSS at most 1.5 GB; warm at most 1 s.)

Each measurement is a fresh process (``python -m tracekit.cli``), its wall time and peak RSS
(``os.wait4``'s rusage), in rounds that interleave the commands:

- ``analyze``: ``tracekit analyze TRACE --no-hta --format json`` with no cache (the baseline);
- ``explain``: ``tracekit explain TRACE --format json`` with no cache (cold: the trace parsed,
  explain without an HTA section);
- ``warm``: ``tracekit explain TRACE`` again on a cache it filled (the report cache);
- ``step``: ``tracekit explain TRACE --step N`` on a warm trace cache (explain's own work: the
  graph, the model's replays, the what-ifs, the step's path; the other sections not run).

Per round the ratio explain / analyze; the medians, their spread (min-max over rounds) and the
load average at the start.

``--against DIR`` (a checkout of main, its C extensions built: ``/work/main``): in every round the
three explain commands run from that tree too (``PYTHONPATH=DIR``, a cache of its own), right
after this tree's, and the rounds give the ratios of their CPU seconds (user + system of the
process), this tree / that one (cold, warm, ``--step``), with their spread: a change's cost
against main measured in the same run, under the same load (on a shared machine the wall time
follows the load; the CPU time much less).

    python -m bench.explain_speed TRACE [--repeat 3] [--step N] [--against DIR] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone


def _run(args: list[str], env: dict) -> tuple[float, float, float]:
    """(wall s, peak RSS MB, CPU s: user + system) of ``python -m tracekit.cli ARGS`` in a
    process of its own."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "tracekit.cli", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"tracekit {' '.join(args)} failed ({p.returncode}): {err[-500:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


LABEL = {"explain": "cold", "warm": "warm", "step": "--step"}


def tree_env(base: dict, tree: str | None, cache: str) -> dict:
    """``base`` with ``tracekit`` imported from ``tree`` (None: this process's path) and the
    cache in ``cache``."""
    env = {**base, "TRACEKIT_CACHE_DIR": cache}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [base.get("PYTHONPATH")])])
    return env


def _explains(trace: str, env: dict, cache: str, step: int) -> dict:
    """Cold explain (no cache), warm (a cache it filled) and ``--step``: (wall s, peak MB) each."""
    shutil.rmtree(cache, ignore_errors=True)
    e = _run(["explain", trace, "--format", "json", "--no-cache"], env)
    _run(["explain", trace, "--format", "json"], env)  # fills the caches
    w = _run(["explain", trace, "--format", "json"], env)
    s = _run(["explain", trace, "--format", "json", "--step", str(step)], env)
    return {"explain": e, "warm": w, "step": s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--step", type=int, default=None, help="the step --step asks for (default: "
                    "the last but one of the trace's)")
    ap.add_argument("--against", default=None, metavar="DIR",
                    help="a checkout of main (its C extensions built): every round runs its "
                         "explain too, and the ratios this tree / DIR are reported")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not os.path.isfile(args.trace):
        print(f"explain_speed: {args.trace}: no such file", file=sys.stderr)
        return 2
    if args.against is not None and not os.path.isfile(
            os.path.join(args.against, "tracekit", "__init__.py")):
        print(f"explain_speed: --against {args.against}: not a checkout holding tracekit/",
              file=sys.stderr)
        return 2
    base = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    work = tempfile.mkdtemp(prefix="explain-speed-")
    cache = os.path.join(work, "cache")
    env = tree_env(base, None, cache)
    other_cache = os.path.join(work, "cache-against")
    other = tree_env(base, os.path.abspath(args.against), other_cache) if args.against else None
    load = os.getloadavg()
    rows = []
    try:
        step = args.step
        if step is None:
            out = subprocess.run([sys.executable, "-m", "tracekit.cli", "explain", args.trace,
                                  "--format", "json", "--no-cache"], capture_output=True,
                                 text=True, env=env, check=True).stdout
            steps = [s["step"] for s in json.loads(out)["explain"][0]["steps"]]
            step = steps[-2] if len(steps) > 1 else steps[-1]
        for r in range(args.repeat):
            a = _run(["analyze", args.trace, "--no-hta", "--format", "json", "--no-cache"], env)
            mine = _explains(args.trace, env, cache, step)
            e, w, s = mine["explain"], mine["warm"], mine["step"]
            row = {"round": r, "analyze_s": a[0], "analyze_rss_mb": a[1],
                   "explain_s": e[0], "explain_rss_mb": e[1], "warm_s": w[0],
                   "warm_rss_mb": w[1], "step_s": s[0], "step_rss_mb": s[1],
                   "ratio": e[0] / a[0]}
            line = (f"round {r}: analyze --no-hta {a[0]:.2f} s ({a[1]:,.0f} MB), explain {e[0]:.2f} s "
                    f"({e[1]:,.0f} MB): {e[0] / a[0]:.3f}x; warm explain {w[0]:.2f} s; "
                    f"explain --step {step} {s[0]:.2f} s ({s[1]:,.0f} MB)")
            if other is not None:
                them = _explains(args.trace, other, other_cache, step)
                for k in ("explain", "warm", "step"):
                    row[f"{k}_cpu_s"] = mine[k][2]
                    row[f"against_{k}_cpu_s"] = them[k][2]
                    row[f"against_{k}_rss_mb"] = them[k][1]
                    row[f"{k}_vs_against"] = mine[k][2] / them[k][2]
                line += (f"; CPU s this tree / {args.against}: explain {mine['explain'][2]:.2f} / "
                         f"{them['explain'][2]:.2f} ({row['explain_vs_against']:.3f}x), warm "
                         f"{mine['warm'][2]:.2f} / {them['warm'][2]:.2f} "
                         f"({row['warm_vs_against']:.3f}x), --step {mine['step'][2]:.2f} / "
                         f"{them['step'][2]:.2f} ({row['step_vs_against']:.3f}x)")
            rows.append(row)
            print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(k):
        v = [r[k] for r in rows]
        return statistics.median(v), min(v), max(v)

    summary = {k: med(k) for k in rows[0] if k != "round"}
    size = os.path.getsize(args.trace)
    against = f" --against {args.against}" if args.against else ""
    text = [f"# explain's cost on {args.trace} ({size / 2**20:,.1f} MB gz) "
            f"({datetime.now(timezone.utc).isoformat(timespec='seconds')})", "",
            f"Command: `python -m bench.explain_speed {args.trace} --repeat {args.repeat}{against}` on "
            f"{platform.node()} ({os.cpu_count()} cores), load average at the start "
            f"{load[0]:.2f}, {args.repeat} rounds, each command a fresh process.", "",
            "| figure | median | min-max |", "|---|---|---|"]
    for k, unit in (("analyze_s", "s"), ("explain_s", "s"), ("ratio", "x"), ("warm_s", "s"),
                    ("step_s", "s"), ("analyze_rss_mb", "MB"), ("explain_rss_mb", "MB"),
                    ("step_rss_mb", "MB")):
        m, lo, hi = summary[k]
        text.append(f"| {k} | {m:,.3f} {unit} | {lo:,.3f}-{hi:,.3f} |")
    if args.against:
        for k in ("explain", "warm", "step"):
            for key, unit in ((f"{k}_cpu_s", "CPU s"), (f"against_{k}_cpu_s", "CPU s"),
                              (f"{k}_vs_against", "x")):
                m, lo, hi = summary[key]
                text.append(f"| {key} | {m:,.3f} {unit} | {lo:,.3f}-{hi:,.3f} |")
    text.append("")
    text.append(f"Targets: explain / cold analyze --no-hta <= 1.5 (median {summary['ratio'][0]:.3f}, "
                f"worst {summary['ratio'][2]:.3f}); peak RSS <= 1.5 GB (explain "
                f"{summary['explain_rss_mb'][2]:,.0f} MB at most); warm <= 1 s (at most "
                f"{summary['warm_s'][2]:.2f} s).")
    if args.against:
        text.append("")
        text.append(f"Against {args.against} (CPU s of this tree / its, per round, median "
                    "[min-max]; the wall time moves with the machine's load, the CPU time much "
                    "less): "
                    + ", ".join(f"{LABEL[k]} {summary[f'{k}_vs_against'][0]:.3f} "
                                f"[{summary[f'{k}_vs_against'][1]:.3f}, "
                                f"{summary[f'{k}_vs_against'][2]:.3f}]"
                                for k in ("explain", "warm", "step")) + ".")
    out = "\n".join(text) + "\n"
    print(out)
    if args.out:
        stamp = datetime.now().strftime("%Y%m%d-%H%M")
        base = os.path.join(args.out, f"explain-speed-{stamp}")
        with open(base + ".md", "w") as f:
            f.write(out)
        with open(base + ".json", "w") as f:
            json.dump({"trace": args.trace, "bytes": size, "load": load, "rounds": rows,
                       "against": args.against,
                       "machine": platform.node(),
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}, f,
                      indent=1)
        print(f"wrote {base}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
