"""A job of many small rank files: what each rank costs whatever its size, against another commit.

    python -m bench.small_ranks --baseline DIR [--ranks 1000] [--repeat 3] [--plain 500]
        [--job64 bench/data/job64] [--trace TRACE] [--skip-small] [--label TEXT]
        [--simultaneous] [--in-process N [--blocks B]]

1. ``--ranks`` rank files of 3 ProfilerSteps with one kernel each (``tests/tracegen.py``:
   ``TraceBuilder(rank=r, world_size=N)``; 9 events a rank, 9,000 for 1,000 ranks) in
   ``bench/data/small<N>/``: issue 29's job of tiny ranks, where the analyses' fixed cost per
   trace (frames and group-bys built whether or not the trace has anything for them) is all
   there is.
2. In each of ``--repeat`` rounds, every case once with this tree and once with ``--baseline``
   (a checkout of another commit, run with ``cwd`` and ``PYTHONPATH`` set to it, the same
   interpreter; which tree goes first alternates between rounds), each a fresh process:
   - ``small``: ``tracekit analyze DIR --no-hta --no-cache`` on the tiny ranks (the default
     local workers, one per CPU);
   - ``plain`` (``--plain N``): the same command on N rank files of one step and one kernel
     without ``distributedInfo`` (``bench/data/plain<N>/``; issue 29's 500: each loaded as
     rank 0, one warning line);
   - ``job64`` (``--job64 DIR``: ``python -m bench.ranks`` makes ``bench/data/job64``): the same
     command on the 64-rank job of real 2-GPU traces, which must not get slower;
   - ``trace`` (``--trace FILE``: the ~50 MB trace, ``python -m bench.common.synthetic_trace
     --copies 2``): ``tracekit analyze FILE --no-hta --no-cache --format json``, which must not
     get slower either.
   ``--simultaneous``: the two trees' runs of a case start together and run side by side
   (each pair under the same load: on a machine shared with other work, one after the other
   met loads 2x apart); else one after the other.
   Each run: CPU seconds of the process and its worker processes (user + system, ``os.wait4``:
   what ``/usr/bin/time`` reports), wall seconds, peak RSS, exit code, the load average before.
3. Per case: this tree's CPU seconds over the baseline's in each round (paired), the median
   and its 95 % bootstrap interval (``bench/common/method.py``), and the figures of each run.
4. ``--in-process N``: the CPU of one tiny rank in one process, what the lead can turn into a
   wall time on a quiet machine (the CLI's figures carry the machine's load): one process per
   tree runs a rank's work (``RankTask``, what a local worker runs: its collector frozen and
   its threshold as there, ``TRACEKIT_LOAD_PARALLEL=0``) on the tiny ranks, the two taking
   turns at ``--blocks`` blocks of N ranks (alternating which goes first), after 30 ranks of
   warm-up; CPU ms a rank per block, the paired ratios' median and interval.

Writes ``bench/results/small-ranks-<UTC date>.json`` and prints a table. Figures and method:
``bench/NOTES-ranks.md`` ("Many small ranks"); the limit it measures: ``docs/limits.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO as ROOT, method

HERE = ROOT / "bench"


def make_ranks(out: Path, n: int) -> Path:
    """``n`` rank files of 3 ProfilerSteps with one kernel each (kept when already there)."""
    from tests.tracegen import TraceBuilder

    if out.is_dir() and len(list(out.glob("rank*.json"))) == n:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        b = TraceBuilder(rank=r, world_size=n)
        for s in range(3):
            t = 1000.0 * s
            b.profiler_step(s + 1, t, 900)
            b.kernel("gemm_kernel", t + 10, 100, launch_at=t + 5)
        b.write(out / f"rank{r}.json")
    return out


def make_plain(out: Path, n: int) -> Path:
    """``n`` rank files of one ProfilerStep and one kernel each, without ``distributedInfo``
    (issue 29's reproduction: each loaded as rank 0, one warning line for them all; kept when
    already there)."""
    from tests.tracegen import TraceBuilder

    if out.is_dir() and len(list(out.glob("r*.json"))) == n:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        b = TraceBuilder()
        b.profiler_step(1, 0, 1000)
        b.kernel("gemm", 100, 50, launch_at=10)
        b.write(out / f"r{r:03d}.json")
    return out


def run(args: list[str], tree: Path, timeout: float) -> dict:
    """``tracekit ARGS`` with ``tree``'s tracekit in a fresh process: CPU (with its children),
    wall, peak RSS, exit code."""
    return run_all([(args, tree)], timeout)[0]


def run_all(jobs: list[tuple[list[str], Path]], timeout: float) -> list[dict]:
    """``run`` of every (ARGS, tree) at the same time."""
    load = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    procs = []
    for args, tree in jobs:
        env = dict(os.environ, PYTHONPATH=str(tree))
        env.pop("TRACEKIT_CACHE_DIR", None)
        # stderr to a file: a pipe nobody reads while the other run goes on could fill
        err = open(_err_file(len(procs)), "w+b")
        procs.append((subprocess.Popen([sys.executable, "-m", "tracekit.cli", *args], cwd=tree,
                                       env=env, stdout=subprocess.DEVNULL, stderr=err), err))
    ended: dict[int, tuple] = {}  # each reaped when it ends (its own wall time)
    deadline = t0 + timeout
    while len(ended) < len(procs):
        for i, (p, _) in enumerate(procs):
            if i not in ended:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    ended[i] = (status, ru, time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            for i, (p, _) in enumerate(procs):
                if i not in ended:
                    p.kill()
                    _, status, ru = os.wait4(p.pid, 0)
                    ended[i] = (status, ru, time.perf_counter() - t0)
        time.sleep(0.01)
    return [_result(err, *ended[i], load) for i, (_, err) in enumerate(procs)]


def _err_file(i: int) -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"small-ranks-stderr-{os.getpid()}-{i}")


def _result(err_file, status, ru, wall: float, load: list) -> dict:
    err_file.seek(0)
    err = err_file.read().decode(errors="replace")
    err_file.close()
    os.unlink(err_file.name)
    rc = os.waitstatus_to_exitcode(status)
    out = {"rc": rc, "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
           "user_s": round(ru.ru_utime, 3), "wall_s": round(wall, 3),
           "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "load_before": load}
    if rc != 0:
        out["stderr_tail"] = err[-1000:]
    return out


_RANK_WORKER = """
import gc, glob, os, sys, time
os.environ["TRACEKIT_LOAD_PARALLEL"] = "0"
tree, data, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import tracekit
from tracekit.ranks.work import RankTask
assert tracekit.__file__.startswith(tree), tracekit.__file__
files = sorted(glob.glob(os.path.join(data, "rank*.json")))
task = RankTask(use_cache=False, with_hta=False, whole=False)
for f in files[:30]:
    task(f)
gc.freeze()  # as a local worker (tracekit.ranks.executors._init_worker)
gc.set_threshold(20_000, 10, 10)
i = 30
for _ in sys.stdin:  # one block a line
    t0 = time.process_time()
    for _ in range(n):
        task(files[i % len(files)])
        i += 1
    print((time.process_time() - t0) / n * 1000, flush=True)
"""


def in_process(trees: dict[str, Path], data: Path, n: int, blocks: int) -> dict:
    """CPU ms of a tiny rank's work in one process per tree, the trees taking turns at
    ``blocks`` blocks of ``n`` ranks (step 4 of the module docstring)."""
    procs = {}
    for who, tree in trees.items():
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env.pop("TRACEKIT_CACHE_DIR", None)
        procs[who] = subprocess.Popen([sys.executable, "-c", _RANK_WORKER, str(tree), str(data),
                                       str(n)], cwd=tree, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
    ms: dict[str, list[float]] = {who: [] for who in trees}
    loads = []
    try:
        for k in range(blocks):
            loads.append(round(os.getloadavg()[0], 2))
            for who in (list(trees) if k % 2 == 0 else list(trees)[::-1]):
                procs[who].stdin.write("go\n")
                procs[who].stdin.flush()
                ms[who].append(round(float(procs[who].stdout.readline()), 3))
            print(f"block {k}: " + "  ".join(f"{w} {ms[w][-1]:.2f} ms" for w in trees)
                  + f"  load {loads[-1]}", flush=True)
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    ratios = [t / b for t, b in zip(ms["this"], ms["baseline"])]
    lo, hi = method.bootstrap_ci(ratios)
    return {"ranks_per_block": n, "blocks": blocks, "load_before": loads,
            **{f"{w}_ms_per_rank": ms[w] for w in trees},
            **{f"{w}_ms_median": round(statistics.median(ms[w]), 3) for w in trees},
            "cpu_ratio_median": round(statistics.median(ratios), 4),
            "cpu_ratio_ci95": [round(lo, 4), round(hi, 4)],
            "cpu_ratios": [round(x, 4) for x in ratios]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="a checkout of the commit to compare with")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--job64", default=None, help="a directory of rank traces (bench.ranks')")
    ap.add_argument("--trace", default=None, help="one trace file (the ~50 MB trace)")
    ap.add_argument("--plain", type=int, default=0, metavar="N",
                    help="also N rank files without distributedInfo (bench/data/plain<N>/)")
    ap.add_argument("--skip-small", action="store_true", help="only --job64 and --trace")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--label", default="", help="what this tree is, where it is no git checkout")
    ap.add_argument("--simultaneous", action="store_true",
                    help="run the two trees' runs of a case side by side (the same load)")
    ap.add_argument("--in-process", type=int, default=0, metavar="N",
                    help="also: a tiny rank's CPU in one process per tree, blocks of N ranks")
    ap.add_argument("--blocks", type=int, default=10, help="blocks of --in-process (each tree)")
    a = ap.parse_args()
    base = Path(a.baseline).resolve()
    cases = {}
    if not a.skip_small:
        small = make_ranks(HERE / "data" / f"small{a.ranks}", a.ranks)
        cases["small"] = ["analyze", str(small), "--no-hta", "--no-cache"]
    if a.plain:
        plain = make_plain(HERE / "data" / f"plain{a.plain}", a.plain)
        cases["plain"] = ["analyze", str(plain), "--no-hta", "--no-cache"]
    if a.job64:
        cases["job64"] = ["analyze", str(Path(a.job64).resolve()), "--no-hta", "--no-cache"]
    if a.trace:
        cases["trace"] = ["analyze", str(Path(a.trace).resolve()), "--no-hta", "--no-cache",
                          "--format", "json"]
    trees = {"this": ROOT, "baseline": base}
    runs: dict[str, dict[str, list]] = {c: {"this": [], "baseline": []} for c in cases}
    for i in range(a.repeat):
        order = ["this", "baseline"] if i % 2 == 0 else ["baseline", "this"]
        for case, args in cases.items():
            got = run_all([(args, trees[who]) for who in order], a.timeout) if a.simultaneous \
                else [run(args, trees[who], a.timeout) for who in order]
            for who, r in zip(order, got):
                runs[case][who].append(r)
                print(f"round {i} {case:6s} {who:8s} cpu {r['cpu_s']:8.2f} s  wall "
                      f"{r['wall_s']:7.2f} s  rss {r['peak_rss_mb']:7.1f} MB  rc {r['rc']}  "
                      f"load {r['load_before']}", flush=True)
    per_rank = None
    if a.in_process:
        per_rank = in_process(trees, make_ranks(HERE / "data" / f"small{a.ranks}", a.ranks),
                              a.in_process, a.blocks)
    summary = {}
    for case, by in runs.items():
        ratios = [t["cpu_s"] / b["cpu_s"] for t, b in zip(by["this"], by["baseline"])
                  if b["cpu_s"] > 0]
        lo, hi = method.bootstrap_ci(ratios)
        summary[case] = {
            "cpu_ratio_median": round(statistics.median(ratios), 4) if ratios else None,
            "cpu_ratio_ci95": [round(lo, 4), round(hi, 4)], "cpu_ratios": [round(x, 4) for x in ratios],
            **{f"{w}_cpu_s": [r["cpu_s"] for r in by[w]] for w in trees},
            **{f"{w}_wall_s": [r["wall_s"] for r in by[w]] for w in trees},
            **{f"{w}_peak_rss_mb": [r["peak_rss_mb"] for r in by[w]] for w in trees},
            **{f"{w}_rc": [r["rc"] for r in by[w]] for w in trees},
        }
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or a.label

    doc = {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "cpus": os.cpu_count(), "this": head, "baseline": str(base),
           "ranks": a.ranks, "events_per_rank": 9, "simultaneous": a.simultaneous,
           "cases": cases, "summary": summary, "in_process": per_rank,
           "runs": runs}
    out = Path(a.out_dir) / f"small-ranks-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(f"{'case':6s} {'CPU ratio (this/baseline)':>28s}  this CPU s            baseline CPU s")
    for case, s in summary.items():
        print(f"{case:6s} {s['cpu_ratio_median']:>10} [{s['cpu_ratio_ci95'][0]}, "
              f"{s['cpu_ratio_ci95'][1]}]  {s['this_cpu_s']}  {s['baseline_cpu_s']}")
    if per_rank:
        print(f"in one process: {per_rank['this_ms_median']} ms of CPU a tiny rank against "
              f"{per_rank['baseline_ms_median']}, {per_rank['cpu_ratio_median']} "
              f"{per_rank['cpu_ratio_ci95']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
