"""The client's memory with the job's graph: how it grows with ranks and collectives per rank.

    python -m bench.job_client_memory [--base-ranks 16] [--repeats 1,4] [--ranks 64,128,256]

Question (issue 25): on 1,024 ranks the client's part of ``tracekit analyze DIR`` (everything
after the per-rank work: the ranks' summaries it receives, matching, clocks, the job object, the
job's graph joined at the collectives and its what-ifs) stays under 2 GB. Where does its memory
go, and what does 1,024 ranks of 500 MB extrapolate to?

Method:

1. For each ``--repeats`` R: a job of ``--base-ranks`` rank traces (``tests/jobgen.py``: our
   runtime's 2-GPU SparseDist traces, a planted straggler, all-to-all imbalance, clock offsets),
   each rank's events R times over (R x 24 collectives and R x 3 profiled steps a rank), in
   ``bench/data/client-r<R>/``; analysed once (``analyze_job``, 2 processes) so that every rank's
   report, skeleton included, is in the report cache.
2. For each ``--ranks`` N, with the job's graph and without it, in a fresh process: the B
   cached reports read back (``work.summary`` of each: what a worker sends), copied to N ranks
   through pickle (each its own objects, as the client unpickles each worker's result; rank r is
   the base job's rank r mod B, its process groups widened to N, then held as columns as
   ``work.summary`` sends it: ``tracekit.ranks.compact``), then the client's
   part (``tracekit.ranks.job.build_with_graph`` with ``JobConfig(job_graph=...)`` and, with
   the graph, the straggler at the median rank's speed, ``whatif.straggler_row``, as
   ``analyze_job`` runs it: in the client's process, the straggler's trace read again where
   there is host work to take out, ``straggler_trace_read``; without the
   graph the summaries carry no skeleton, as ``--no-job-graph`` sends none). Recorded: RSS
   (``VmRSS`` of ``/proc/self/status``) after the read and with the N summaries, the peak while
   copying them and the client's part's peak (``VmHWM``, reset through ``/proc/self/clear_refs``
   before each: the imports' transient peak, ~130 MB, is above the smaller figures and is what
   ``ru_maxrss`` would give); the part's wall and CPU time; one summary's pickled size and its skeleton's;
   the job graph's nodes and edges.

The client's memory is the part's peak; the difference with and without the graph is the
graph's. ``fit``: per case the least-squares fit of the peak, ``c + a N + b N K + d N^2``, and
its value at ``--target-ranks`` x ``--target-collectives`` (1,024 x 1,089: ranks of 500 MB).
``--arrivals-kept 0``: each instance's arrivals listed for the worst instances only, as a job of
more rank-instance pairs than ``JobConfig.arrivals_kept`` lists them (the target's 1.1 million;
every point measured here lists them all by default). Reading: ``bench/NOTES-ranks.md``. Writes ``bench/results/job-client-memory-<UTC
date>.json``; the machine is shared (its load average is recorded), memory is not its noise.
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
import time
from pathlib import Path

from bench.common import REPO

SNIPPET = """
import json, pickle, resource, sys, time
from pathlib import Path
from tracekit.ranks import inputs, job
from tracekit.ranks.config import JobConfig
from tracekit.ranks.work import summary
from tracekit.reportcache import cached_report
try:  # summaries held as columns (tracekit.ranks.compact); before that, as JSON values
    from tracekit.ranks.compact import compact, plain
except ImportError:
    compact = plain = lambda x: x
d, cache, n, graph = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
kept = None if sys.argv[5] == "default" else int(sys.argv[5])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
def reset_peak():  # the high-water mark back to the current RSS (Linux clear_refs)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
base, files = [], sorted(map(str, Path(d).glob("trace_rank*.json.gz")))
for f in files:  # as the workers send them
    x = plain(summary(cached_report(f, rules_path=None, cache_dir=cache, with_hta=False,
                                    with_skeleton=True)[0]))
    x["source"] = f
    base.append(x)
rss0 = status("VmRSS")
reset_peak()
ranks = []
for r in range(n):  # each its own objects, as the client unpickles each worker's result
    x = pickle.loads(pickle.dumps(base[r % len(base)]))
    x["rank"] = r
    x["source"] = f"trace_rank{r}.json.gz"
    x["identity"]["distributed_info"].update(rank=r, world_size=n)
    for g in x["identity"]["distributed_info"].get("pg_config") or []:
        g.update(pg_size=n, ranks=list(range(n)))
    for g in x["collectives"]["groups"]:
        g["ranks"] = list(range(n))
    if not graph:
        x.pop("skeleton", None)
    ranks.append(compact(x))  # as work.summary sends it, its groups widened to N ranks
del base
summary_bytes = len(pickle.dumps(ranks[0]))
skeleton_bytes = len(pickle.dumps(ranks[0].get("skeleton"))) if graph else 0
rss1 = status("VmRSS")
peak1 = status("VmHWM")
reset_peak()
t, c = time.perf_counter(), time.process_time()
rs = inputs.assign("d", ranks, other_job_gap_ns=60 * 10**9)
cfg = JobConfig(job_graph=graph) if kept is None else JobConfig(job_graph=graph, arrivals_kept=kept)
built, ctx = job.build_with_graph(rs, cfg)
straggler_what_if = None
if ctx is not None:  # as analyze_job: the straggler's trace read again (rank r is file r mod B)
    from tracekit.ranks import whatif
    for x in rs.ranks:
        x["source"] = files[int(x["rank"]) % len(files)]
    got = whatif.straggler_row(rs.ranks, built, ctx, task=whatif.StragglerTask(cache_dir=cache),
                               workers=1)
    if got is not None:
        built["graph"]["what_ifs"].append(got)
        straggler_what_if = got.get("taken_out") is not None
took, took_cpu = time.perf_counter() - t, time.process_time() - c
print("RESULT " + json.dumps({
    "ranks": n, "graph": graph, "kernels_per_rank": len(ranks[0]["collectives"]["kernels"]),
    "steps_per_rank": len(ranks[0]["steps"]["steps"]), "instances": built["matching"]["instances"],
    "build_s": round(took, 3), "build_cpu_s": round(took_cpu, 3), "rss_after_read_mb": round(rss0, 1),
    "rss_with_summaries_mb": round(rss1, 1), "peak_copying_mb": round(peak1, 1),
    "rss_after_mb": round(status("VmRSS"), 1), "rss_peak_mb": round(status("VmHWM"), 1),
    "summary_pickle_bytes": summary_bytes, "skeleton_pickle_bytes": skeleton_bytes,
    "graph_nodes": int(ctx.graph.kind.size) if ctx is not None else 0,
    "graph_edges": int(ctx.graph.src.size) if ctx is not None else 0,
    "job_json_bytes": len(json.dumps(built)), "straggler": built["stragglers"]["rank"],
    "graph_straggler_what_if": [w["id"] for w in (built.get("graph") or {}).get("what_ifs") or []],
    "straggler_trace_read": straggler_what_if}))
"""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def one(job: Path, cache: Path, n: int, graph: bool, arrivals_kept: int | None = None) -> dict:
    p = subprocess.run([sys.executable, "-c", SNIPPET, str(job), str(cache), str(n),
                        "1" if graph else "0",
                        "default" if arrivals_kept is None else str(arrivals_kept)],
                       capture_output=True, text=True, cwd=REPO)
    r = {"rc": p.returncode, "loadavg": loadavg()}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r.update(json.loads(line[7:]))
    if p.returncode:
        r["stderr_tail"] = p.stderr[-1500:]
    return r


def fit(rows: list[dict], target_ranks: int, target_collectives: int) -> dict:
    """Per case (with the graph, without): the least-squares fit of the part's peak over the
    rows, ``c + a N + b N K + d N^2`` (N ranks, K collectives a rank; the N^2 term: the process
    groups' rank lists every summary carries), its largest residual, and its value at
    ``target_ranks`` x ``target_collectives``."""
    import numpy as np

    out = {}
    for graph in (False, True):
        rs = [r for r in rows if r.get("graph") == graph and r.get("rc") == 0
              and r.get("rss_peak_mb") is not None]
        if len(rs) < 4:
            continue
        n = np.array([r["ranks"] for r in rs], float)
        k = np.array([r["kernels_per_rank"] for r in rs], float)
        y = np.array([r["rss_peak_mb"] for r in rs], float)
        x = np.c_[np.ones_like(n), n, n * k, n * n]
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        c, a, b, d = coef.tolist()
        at = c + a * target_ranks + b * target_ranks * target_collectives + d * target_ranks ** 2
        out["with_graph" if graph else "without_graph"] = {
            "c_mb": round(c, 1), "a_mb_per_rank": round(a, 4),
            "b_kb_per_rank_and_collective": round(b * 1000, 3),
            "d_mb_per_rank_squared": float(f"{d:.3g}"),
            "max_residual_mb": round(float(np.abs(x @ coef - y).max()), 2),
            "target_ranks": target_ranks, "target_collectives": target_collectives,
            "extrapolated_gb": round(at / 1000, 2)}
    return out


def main() -> None:
    from tests.jobgen import make_job
    from tracekit.ranks import analyze_job

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-ranks", type=int, default=16)
    ap.add_argument("--repeats", default="1,4", help="each rank's events this many times over")
    ap.add_argument("--ranks", default="64,128,256", help="the client's part on this many ranks")
    ap.add_argument("--reuse", action="store_true",
                    help="keep bench/data/client-r<R> and its cache when they are there (same --base-ranks)")
    ap.add_argument("--arrivals-kept", type=int, default=None,
                    help="JobConfig.arrivals_kept (default: its default, 100,000): 0 lists no "
                         "instance's arrivals but the worst ones', as a job of more (rank, "
                         "instance) pairs than the default does (1,024 ranks of ~1,000 "
                         "collectives: ~10**6)")
    ap.add_argument("--target-ranks", type=int, default=1024, help="the fit extrapolated to ...")
    ap.add_argument("--target-collectives", type=int, default=1089,
                    help="... ranks of this many collectives each (1,089: a 500 MB rank, the "
                         "397 MB rank's 864 x 1.26)")
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    a = ap.parse_args()
    repeats = [int(x) for x in a.repeats.split(",")]
    sizes = [int(x) for x in a.ranks.split(",")]
    results: dict = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                 "python": platform.python_version()},
                     "command": "python -m bench.job_client_memory " + " ".join(sys.argv[1:]),
                     "base_ranks": a.base_ranks, "arrivals_kept": a.arrivals_kept,
                     "loadavg_before": loadavg(), "rows": []}
    for rep in repeats:
        job = REPO / "bench" / "data" / f"client-r{rep}"
        cache = REPO / "bench" / "data" / f"client-r{rep}-cache"
        if not (a.reuse and job.exists() and cache.exists()):
            for x in (job, cache):
                if x.exists():
                    shutil.rmtree(x)
            print(f"generating {job} ({a.base_ranks} ranks, {rep} x the events) ...", flush=True)
            make_job(job, a.base_ranks, repeat=rep)
            t0 = time.perf_counter()
            analyze_job(job, cache_dir=cache, whole=False, workers=2)
            print(f"  analysed in {time.perf_counter() - t0:.0f} s", flush=True)
        print(f"{job}: the client's part", flush=True)
        for n in sizes:
            for graph in (False, True):
                r = one(job, cache, n, graph, a.arrivals_kept)
                r["repeat"] = rep
                results["rows"].append(r)
                print(f"  {n:5d} ranks  graph {'on ' if graph else 'off'}  "
                      f"{r.get('kernels_per_rank')} kernels/rank  peak {r.get('rss_peak_mb')} MB  "
                      f"(summaries {r.get('rss_with_summaries_mb')} MB, read {r.get('rss_after_read_mb')})"
                      f"  {r.get('build_s')} s  rc {r['rc']}", flush=True)
    results["fit"] = fit(results["rows"], a.target_ranks, a.target_collectives)
    for case, f in results["fit"].items():
        print(f"{case}: {f['b_kb_per_rank_and_collective']} kB a rank and collective; "
              f"{f['target_ranks']} ranks x {f['target_collectives']} collectives: "
              f"~{f['extrapolated_gb']} GB (fit residual <= {f['max_residual_mb']} MB)", flush=True)
    results["loadavg_after"] = loadavg()
    os.makedirs(a.out_dir, exist_ok=True)
    dest = Path(a.out_dir) / f"job-client-memory-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M}.json"
    dest.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
