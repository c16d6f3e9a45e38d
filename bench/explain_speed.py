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

    python -m bench.explain_speed TRACE [--repeat 3] [--step N] [--out bench/results]
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


def _run(args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, peak RSS MB) of ``python -m tracekit.cli ARGS`` in a process of its own."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "tracekit.cli", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"tracekit {' '.join(args)} failed ({p.returncode}): {err[-500:]}")
    return wall, usage.ru_maxrss / 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--step", type=int, default=None, help="the step --step asks for (default: "
                    "the last but one of the trace's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    work = tempfile.mkdtemp(prefix="explain-speed-")
    cache = os.path.join(work, "cache")
    env["TRACEKIT_CACHE_DIR"] = cache
    load = os.getloadavg()
    rows = []
    try:
        step = args.step
        for r in range(args.repeat):
            shutil.rmtree(cache, ignore_errors=True)
            a = _run(["analyze", args.trace, "--no-hta", "--format", "json", "--no-cache"], env)
            e = _run(["explain", args.trace, "--format", "json", "--no-cache"], env)
            _run(["explain", args.trace, "--format", "json"], env)  # fills the caches
            w = _run(["explain", args.trace, "--format", "json"], env)
            if step is None:
                out = subprocess.run([sys.executable, "-m", "tracekit.cli", "explain", args.trace,
                                      "--format", "json"], capture_output=True, text=True,
                                     env=env, check=True).stdout
                steps = [s["step"] for s in json.loads(out)["explain"][0]["steps"]]
                step = steps[-2] if len(steps) > 1 else steps[-1]
            s = _run(["explain", args.trace, "--format", "json", "--step", str(step)], env)
            rows.append({"round": r, "analyze_s": a[0], "analyze_rss_mb": a[1],
                         "explain_s": e[0], "explain_rss_mb": e[1], "warm_s": w[0],
                         "warm_rss_mb": w[1], "step_s": s[0], "step_rss_mb": s[1],
                         "ratio": e[0] / a[0]})
            print(f"round {r}: analyze --no-hta {a[0]:.2f} s ({a[1]:,.0f} MB), explain {e[0]:.2f} s "
                  f"({e[1]:,.0f} MB): {e[0] / a[0]:.3f}x; warm explain {w[0]:.2f} s; "
                  f"explain --step {step} {s[0]:.2f} s ({s[1]:,.0f} MB)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(k):
        v = [r[k] for r in rows]
        return statistics.median(v), min(v), max(v)

    summary = {k: med(k) for k in rows[0] if k != "round"}
    size = os.path.getsize(args.trace)
    text = [f"# explain's cost on {args.trace} ({size / 2**20:,.1f} MB gz) "
            f"({datetime.now(timezone.utc).isoformat(timespec='seconds')})", "",
            f"Command: `python -m bench.explain_speed {args.trace} --repeat {args.repeat}` on "
            f"{platform.node()} ({os.cpu_count()} cores), load average at the start "
            f"{load[0]:.2f}, {args.repeat} rounds, each command a fresh process.", "",
            "| figure | median | min-max |", "|---|---|---|"]
    for k, unit in (("analyze_s", "s"), ("explain_s", "s"), ("ratio", "x"), ("warm_s", "s"),
                    ("step_s", "s"), ("analyze_rss_mb", "MB"), ("explain_rss_mb", "MB"),
                    ("step_rss_mb", "MB")):
        m, lo, hi = summary[k]
        text.append(f"| {k} | {m:,.3f} {unit} | {lo:,.3f}-{hi:,.3f} |")
    text.append("")
    text.append(f"Targets: explain / cold analyze --no-hta <= 1.5 (median {summary['ratio'][0]:.3f}, "
                f"worst {summary['ratio'][2]:.3f}); peak RSS <= 1.5 GB (explain "
                f"{summary['explain_rss_mb'][2]:,.0f} MB at most); warm <= 1 s (at most "
                f"{summary['warm_s'][2]:.2f} s).")
    out = "\n".join(text) + "\n"
    print(out)
    if args.out:
        stamp = datetime.now().strftime("%Y%m%d-%H%M")
        base = os.path.join(args.out, f"explain-speed-{stamp}")
        with open(base + ".md", "w") as f:
            f.write(out)
        with open(base + ".json", "w") as f:
            json.dump({"trace": args.trace, "bytes": size, "load": load, "rounds": rows,
                       "machine": platform.node(),
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}, f,
                      indent=1)
        print(f"wrote {base}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
