"""Time the loader against HTA on one trace, in one run: the issue's speed and memory targets.

    python -m bench.load bench/data/large_rank0.json.gz [--skip-hta] [--repeat 3]
        [--baseline DIR]

Each measurement is a separate process (so imports count and peak RSS is the process's own,
read with ``os.wait4``):

1. ``hta``: HTA's ``TraceAnalysis(trace_dir=...)`` (the release installed beside this
   interpreter, named in the results' ``hta_version``: ``traceinsight==0.6.1``, or
   ``HolisticTraceAnalysis==0.5.0`` from another environment) on a directory holding only a
   symlink to the trace; the time is that call alone (imports excluded: generous to HTA).
2. ``cold``: ``tracekit analyze --format json`` with a fresh, empty cache dir (whole process).
3. ``warm``: the same command again (the caches are now filled).
   ``cold_no_hta``: cold again with ``--no-hta`` and another fresh cache dir (HTA's own figures
   left out: how much of the cold time they take).
4. ``load_cold`` / ``load_warm``: ``tracekit.trace.load`` alone, fresh cache dir then again
   (the loader's share, without the analyses and without the report cache).

``--bytecode``: byte-compile each tree's ``tracekit`` modules first (``compileall``, as ``pip
install`` does for an installed package) and remove them after. Without it, where
``PYTHONDONTWRITEBYTECODE`` is set (this machine's environment), every run compiles tracekit's
own modules from source (~0.07 s of a cold analyze of the ~50 MB trace, 2026-11-24).

``--repeat N``: the two cold analyze runs N times (each with a fresh cache dir), for a spread;
the ratio to HTA is given for the median and for each. ``--baseline DIR``: a checkout of
another commit (run with ``cwd`` and ``PYTHONPATH`` set to it, same interpreter): its cold runs
are interleaved with this tree's (the other tree first every second time), so the two compare
under the same load; ``cold_ratio_to_baseline`` and ``cold_no_hta_ratio_to_baseline`` are the
pairs' ratios (this tree's wall time over the baseline's): median and 95 % bootstrap interval
(``bench/common/method.py``). Against the commit an issue measured ("1.1 s today"), that ratio is
the figure that does not move with the machine's speed.

Prints a table and writes ``bench/results/load-<UTC date>.json``. Targets (the issues'): cold
analyze >= 30x faster than HTA's load, peak RSS <= 1.5 GB, warm <= 1 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from bench.common import REPO as ROOT, method

HERE = ROOT / "bench"

HTA_SNIPPET = """
import logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
took = time.perf_counter() - t
n = sum(len(df) for df in a.t.traces.values())
from importlib import metadata
from hta.version import __version_tuple__
dist = None
for d in ("traceinsight", "HolisticTraceAnalysis"):
    try:
        metadata.version(d)
        dist = d
        break
    except metadata.PackageNotFoundError:
        pass
print("RESULT", took, n, f"{dist or 'hta'}==" + ".".join(map(str, __version_tuple__)))
"""

LOAD_SNIPPET = """
import sys, time
t = time.perf_counter()
from tracekit.trace import load
ts = load(sys.argv[1], cache_dir=sys.argv[2])
took = time.perf_counter() - t
tr = ts.traces[0]
print("RESULT", took, len(tr.events), len(tr.memory))
"""


def run(cmd: list[str], *, stdout=subprocess.DEVNULL, timeout: float | None = None,
        tree: Path = ROOT) -> dict:
    """Runs ``cmd`` in ``tree``; wall time, CPU time and peak RSS (MB) of it and its children."""
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(tree)) if tree != ROOT else None
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=tree, env=env)
    deadline = None if timeout is None else t0 + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if deadline is not None and time.perf_counter() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.005)
    wall = time.perf_counter() - t0
    out = p.stdout.read().decode() if p.stdout else ""
    err = p.stderr.read().decode()
    p.returncode = os.waitstatus_to_exitcode(status)
    res = {
        "cmd": " ".join(cmd),
        "rc": p.returncode,
        "wall_s": round(wall, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
        "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
    }
    for line in out.splitlines():
        if line.startswith("RESULT"):
            res["result"] = line.split()[1:]
    if p.returncode != 0:
        res["stderr_tail"] = err[-2000:]
    return res


def _compile(packages: list[Path]) -> list[Path]:
    """Byte-compile ``packages``; the ``__pycache__`` directories this made (to remove after)."""
    before = {d for p in packages for d in p.rglob("__pycache__")}
    for p in packages:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(p)], check=True,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    return [d for p in packages for d in p.rglob("__pycache__") if d not in before]


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--skip-hta", action="store_true", help="leave HTA out (no ratio)")
    ap.add_argument("--hta-timeout", type=float, default=900)
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--repeat", type=int, default=3, help="cold analyze runs of each kind")
    ap.add_argument("--baseline", help="a checkout of another commit, measured alongside")
    ap.add_argument("--bytecode", action="store_true",
                    help="byte-compile the trees' tracekit modules first (removed after)")
    a = ap.parse_args()
    trace = os.path.abspath(a.trace)
    if not os.path.isfile(trace):
        sys.exit(f"bench.load: no such file: {trace}")
    py = sys.executable
    results: dict = {
        "trace": os.path.relpath(trace, ROOT) if trace.startswith(str(ROOT)) else trace,
        "trace_bytes": os.path.getsize(trace),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "loadavg_before": loadavg(),
        "bytecode": "compiled first" if a.bytecode else (
            "compiled by every run" if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else "as Python caches it"),
        "runs": {},
    }
    work = tempfile.mkdtemp(prefix="bench-load-")
    try:
        # page the file in once so that no measurement pays for the first disk read
        with open(trace, "rb") as f:
            while f.read(16 << 20):
                pass
        if not a.skip_hta:
            hta_dir = os.path.join(work, "hta")
            os.makedirs(hta_dir)
            os.symlink(trace, os.path.join(hta_dir, os.path.basename(trace)))
            print("hta: TraceAnalysis(trace_dir=...) ...", flush=True)
            r = run([py, "-c", HTA_SNIPPET, hta_dir], stdout=subprocess.PIPE, timeout=a.hta_timeout)
            if "result" in r:
                r["load_s"] = round(float(r["result"][0]), 3)
                r["rows"] = int(r["result"][1])
                if len(r["result"]) > 2:  # the release measured: traceinsight==0.6.1, ...
                    results["hta_version"] = r["result"][2]
            results["runs"]["hta"] = r
        trees = {"": ROOT}
        if a.baseline:
            trees["baseline_"] = Path(a.baseline).resolve()
            results["baseline"] = str(trees["baseline_"])
        if a.bytecode:
            compiled = _compile([t / "tracekit" for t in trees.values()])
        for i in range(a.repeat):
            # the trees in turn, the other one first every second time (a machine that speeds up
            # or slows down over a pair then favours neither)
            for prefix, tree in (list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]):
                cache = os.path.join(work, f"cache-{prefix}{i}")
                analyze = [py, "-m", "tracekit.cli", "analyze", "--format", "json", "--cache-dir", cache, trace]
                print(f"{prefix}cold: tracekit analyze ({i + 1}/{a.repeat}) ...", flush=True)
                results["runs"].setdefault(f"{prefix}cold_all", []).append(run(analyze, tree=tree))
                if i == 0:
                    print(f"{prefix}warm: tracekit analyze ...", flush=True)
                    results["runs"][f"{prefix}warm"] = run(analyze, tree=tree)
                print(f"{prefix}cold_no_hta: tracekit analyze --no-hta ({i + 1}/{a.repeat}) ...", flush=True)
                results["runs"].setdefault(f"{prefix}cold_no_hta_all", []).append(run(
                    [py, "-m", "tracekit.cli", "analyze", "--format", "json", "--no-hta",
                     "--cache-dir", os.path.join(work, f"cache-no-hta-{prefix}{i}"), trace], tree=tree))
        for k in [k for k in results["runs"] if k.endswith("_all")]:  # the median run of each
            rs = results["runs"][k]
            results["runs"][k[:-4]] = sorted(rs, key=lambda r: r["wall_s"])[len(rs) // 2]
        load_cache = os.path.join(work, "load-cache")
        for label in ("load_cold", "load_warm"):
            print(f"{label}: tracekit.trace.load ...", flush=True)
            r = run([py, "-c", LOAD_SNIPPET, trace, load_cache], stdout=subprocess.PIPE)
            if "result" in r:
                r["load_s"] = round(float(r["result"][0]), 3)
                r["events"], r["memory_events"] = int(r["result"][1]), int(r["result"][2])
            results["runs"][label] = r
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if a.bytecode:
            for d in compiled:
                shutil.rmtree(d, ignore_errors=True)
    results["loadavg_after"] = loadavg()
    runs = results["runs"]
    cold, warm = runs["cold"], runs["warm"]
    summary = {
        "cold_wall_s": cold["wall_s"],
        "cold_walls_s": [r["wall_s"] for r in runs["cold_all"]],
        "cold_peak_rss_mb": cold["peak_rss_mb"],
        "warm_wall_s": warm["wall_s"],
        "cold_no_hta_wall_s": runs["cold_no_hta"]["wall_s"],
        "cold_no_hta_walls_s": [r["wall_s"] for r in runs["cold_no_hta_all"]],
        "load_cold_wall_s": runs["load_cold"]["wall_s"],
        "load_cold_peak_rss_mb": runs["load_cold"]["peak_rss_mb"],
        "load_warm_wall_s": runs["load_warm"]["wall_s"],
    }
    if "baseline_cold" in runs:
        summary["baseline_cold_walls_s"] = [r["wall_s"] for r in runs["baseline_cold_all"]]
        summary["baseline_cold_no_hta_walls_s"] = [r["wall_s"] for r in runs["baseline_cold_no_hta_all"]]
        for kind in ("cold", "cold_no_hta"):  # this tree's run over the baseline's, pair by pair
            ratios = [x / y for x, y in zip(summary[f"{kind}_walls_s"],
                                            summary[f"baseline_{kind}_walls_s"])]
            summary[f"{kind}_ratio_to_baseline"] = method.estimate(ratios).to_dict()
    if "hta" in runs and "load_s" in runs["hta"]:
        h = runs["hta"]["load_s"]
        summary["hta_load_s"] = h
        summary["hta_peak_rss_mb"] = runs["hta"]["peak_rss_mb"]
        summary["speedup_cold_analyze_vs_hta"] = round(h / cold["wall_s"], 1)
        summary["speedups_cold_analyze_vs_hta"] = [round(h / w, 1) for w in summary["cold_walls_s"]]
        if "baseline_cold" in runs:
            summary["baseline_speedups_cold_analyze_vs_hta"] = [
                round(h / w, 1) for w in summary["baseline_cold_walls_s"]]
        summary["speedup_load_vs_hta"] = round(h / runs["load_cold"]["wall_s"], 1)
    summary["targets"] = {
        # None: not measured (--skip-hta, or HTA's load failed)
        "speedup>=30": (summary["speedup_cold_analyze_vs_hta"] >= 30
                        if "speedup_cold_analyze_vs_hta" in summary else None),
        "cold_rss<=1.5GB": cold["peak_rss_mb"] <= 1536,
        "warm<=1s": warm["wall_s"] <= 1.0,
    }
    results["summary"] = summary
    failed = [k for k, r in runs.items() if not isinstance(r, list) and r["rc"] != 0]
    if failed:
        results["failed"] = failed

    print()
    print(f"{'run':<10} {'wall s':>8} {'cpu s':>8} {'peak RSS MB':>12}  note")
    for k, r in runs.items():
        if isinstance(r, list):
            continue
        note = f"load {r['load_s']} s" if "load_s" in r else ""
        if k + "_all" in runs:
            note += f"median of {len(runs[k + '_all'])}"
        if r["rc"] != 0:
            note += f" FAILED rc={r['rc']}"
        print(f"{k:<10} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {r['peak_rss_mb']:>12.0f}  {note}")
    print()
    for k, v in summary.items():
        if k.endswith("_ratio_to_baseline"):
            print(f"{k:<32} median {v['median']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}] over {v['n']} pairs "
                  "(95 % bootstrap interval)")
        elif k != "targets":
            print(f"{k:<32} {v}")
    print("targets:", ", ".join(f"{k} {'not measured' if ok is None else 'PASS' if ok else 'FAIL'}"
                                for k, ok in summary["targets"].items()))
    print(f"tracekit's bytecode: {results['bytecode']}")
    print(f"load average before {results['loadavg_before']} after {results['loadavg_after']} "
          f"({os.cpu_count()} CPUs)")
    os.makedirs(a.out_dir, exist_ok=True)
    out = Path(a.out_dir) / f"load-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
