"""A job of many ranks: serial vs local processes vs a Dask cluster, and the per-rank cost.

    python -m bench.ranks [--ranks 64] [--repeat 2] [--big-copies 36] [--skip-dask]
                                [--skip-big] [--hta-ranks 8]

1. A job of ``--ranks`` rank traces (``tests/jobgen.py``: our runtime's 2-GPU traces, a planted
   straggler, all-to-all imbalance and clock offsets) in ``bench/data/job<N>/``.
2. ``tracekit analyze DIR`` (the text summary: the per-rank work keeps only what the job reads,
   no HTA section), cold (a fresh cache directory each time) and then warm, ``--repeat`` times:
   - ``serial``: ``--workers 1``, every rank in the one process;
   - ``local``: ``--workers 2``, two forked worker processes (the default on 2 CPUs);
   - ``dask``: ``--scheduler`` of a local cluster started here: ``dask scheduler`` and two
     ``dask worker --nthreads 1 --no-nanny`` processes, each with its own cache directory
     (restarted before each cold run, so their caches are empty; their start is not timed).
   Each run: wall time (the command, interpreter start included), peak RSS of the client
   process, of its largest worker process (local: ``RUSAGE_CHILDREN``; Dask: ``VmHWM`` of each
   worker and of the scheduler, reset before the run), and whether the summary names the
   planted straggler and heavy rank.
3. Per-rank cost at scale: one rank of ``--big-copies`` copies of a runtime trace (~14 MB of
   JSON each: 36 copies ~ 500 MB), ``tracekit analyze FILE --no-hta`` cold and warm: the per-rank
   work a worker does for a 500 MB rank (wall, peak RSS).
4. ``--client-ranks N``: the cross-rank part alone (the client's work) on N ranks whose
   summaries are the job's, each with ``--big-copies`` copies of its collectives (as a rank of
   that many copies has): time, peak RSS, the size of one rank's result.
5. ``--hta-ranks N``: HTA 0.5.0's ``get_potential_stragglers`` on the first N ranks of the job
   (the anchor: what HTA names without aligned clocks), as written and with the NCCL kernels
   renamed to the ``ncclKernel_`` prefix HTA looks for.

Writes ``bench/results/ranks-<UTC date>.json`` and prints a table. Results and the
extrapolation to 1,024 ranks: ``bench/NOTES-ranks.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from bench.common import REPO as ROOT
from tests.jobgen import make_job

HERE = ROOT / "bench"

DRIVER = """
import json, resource, sys
from tracekit.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("RESULT " + json.dumps({"rc": code, "self_mb": s.ru_maxrss / 1024, "child_mb": c.ru_maxrss / 1024,
                              "cpu_s": s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime}),
      file=sys.stderr)
"""

HTA_SNIPPET = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
load = time.perf_counter() - t
try:
    got = a.get_potential_stragglers(num_candidates=1)
    err = None
except Exception as e:
    got, err = None, f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps({"load_s": load, "stragglers": got, "error": err}))
"""


TASK_SNIPPET = """
import json, resource, sys, time
from tracekit.ranks.work import RankTask
task = RankTask(cache_dir=sys.argv[2], whole=False)
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
t, c = time.perf_counter(), cpu()
r = task(sys.argv[1])
took, cpu_s = time.perf_counter() - t, cpu() - c
import pickle
print("RESULT " + json.dumps({"task_s": took, "task_cpu_s": cpu_s,
                              "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                              "result_pickle_bytes": len(pickle.dumps(r)),
                              "kernels": len(r["collectives"]["kernels"])}))
"""

CLIENT_SNIPPET = """
import copy, json, pickle, resource, sys, time
from tracekit.ranks import analyze_job, inputs, job
n, copies = int(sys.argv[3]), int(sys.argv[4])
base = analyze_job(sys.argv[1], cache_dir=sys.argv[2], whole=False, workers=1).ranks  # warm
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
span = max(k["end"] for r in base for k in r["collectives"]["kernels"]) - min(
    k["ts"] for r in base for k in r["collectives"]["kernels"]) + 10**6
ranks = []
for r in range(n):
    b = base[r % len(base)]
    x = copy.deepcopy(b)
    x["rank"] = r
    x["source"] = f"trace_rank{r}.json.gz"
    x["identity"]["distributed_info"].update(rank=r, world_size=n)
    for g in x["identity"]["distributed_info"].get("pg_config") or []:
        g.update(pg_size=n, ranks=list(range(n)))
    for g in x["collectives"]["groups"]:
        g["ranks"] = list(range(n))
    ks = x["collectives"]["kernels"]
    x["collectives"]["kernels"] = [{**k, "step": k["step"] + 2 * c, "ts": k["ts"] + c * span,
                                    "end": k["end"] + c * span} for c in range(copies) for k in ks]
    x["steps"]["steps"] = [{**s, "step": s["step"] + 2 * c} for c in range(copies)
                           for s in b["steps"]["steps"]]
    ranks.append(x)
per_rank_pickle = len(pickle.dumps(ranks[0]))
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
rs = inputs.assign("d", ranks, other_job_gap_ns=60 * 10**9)
j = job.build(rs)
took = time.perf_counter() - t
rss2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps({"ranks": n, "kernels_per_rank": len(ranks[0]["collectives"]["kernels"]),
    "instances": j["matching"]["instances"], "build_s": took, "rss_before_mb": rss0,
    "rss_with_summaries_mb": rss1, "rss_peak_mb": rss2, "summary_pickle_bytes": per_rank_pickle,
    "job_json_bytes": len(json.dumps(j)), "straggler": j["stragglers"]["rank"]}))
"""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def reset_hwm(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def analyze(args: list[str], env=None, tree: Path | None = None) -> dict:
    """``tracekit`` with ``args`` in a fresh process: wall time, peak RSS, its output;
    ``tree``: another checkout's tracekit (a baseline's) instead of this one."""
    t0 = time.perf_counter()
    env = {**os.environ, **(env or {})}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    p = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True,
                       cwd=tree or ROOT, env=env)
    wall = time.perf_counter() - t0
    res = {"wall_s": round(wall, 3)}
    for line in p.stderr.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            res.update(rc=r["rc"], client_rss_mb=round(r["self_mb"], 1),
                       worker_rss_mb=round(r["child_mb"], 1) if r["child_mb"] else None,
                       cpu_s=round(r["cpu_s"], 2))
    res["stdout"] = p.stdout
    if "rc" not in res:
        res["rc"] = p.returncode
        res["stderr_tail"] = p.stderr[-2000:]
    return res


def found(text: str, plan) -> dict:
    """Whether the summary names the planted straggler and heavy all-to-all receiver."""
    s = re.search(r"rank (\d+) arrived last at", text)
    h = re.search(r"imbalance: rank (\d+) received", text)
    return {"straggler": bool(s) and int(s.group(1)) == plan.straggler,
            "heavy": bool(h) and int(h.group(1)) == plan.heavy_rank}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, root: Path, n_workers: int = 2) -> None:
        self.root = root
        self.dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or "dask"
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.scheduler = subprocess.Popen(
            [self.dask, "scheduler", "--host", "127.0.0.1", "--port",
             self.address.rsplit(":", 1)[1], "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.n = n_workers
        self.workers: list[subprocess.Popen] = []
        self.round = 0

    def start_workers(self) -> None:
        """Fresh workers with empty caches (the previous ones stopped)."""
        self.stop_workers()
        self.round += 1
        for i in range(self.n):
            cache = self.root / f"r{self.round}-w{i}-cache"
            self.workers.append(subprocess.Popen(
                [self.dask, "worker", self.address, "--nthreads", "1", "--no-nanny",
                 "--no-dashboard", "--memory-limit", "0", "--local-directory",
                 str(self.root / f"r{self.round}-w{i}")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "TRACEKIT_CACHE_DIR": str(cache)}))
        from distributed import Client

        with Client(self.address, timeout=60) as c:
            c.wait_for_workers(self.n, timeout=120)

    def stop_workers(self) -> None:
        for w in self.workers:
            w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
        self.workers = []

    def close(self) -> None:
        self.stop_workers()
        self.scheduler.terminate()
        self.scheduler.wait(timeout=30)


def run_mode(mode: str, job: Path, plan, work: Path, repeat: int, cluster: Cluster | None) -> dict:
    out: dict = {"cold": [], "warm": []}
    for i in range(repeat):
        cache = work / f"{mode}-cache-{i}"
        args = ["analyze", str(job), "--cache-dir", str(cache)]
        if mode == "serial":
            args += ["--workers", "1"]
        elif mode == "local":
            args += ["--workers", "2"]
        else:
            cluster.start_workers()
            args += ["--scheduler", cluster.address]
            for w in cluster.workers:
                reset_hwm(w.pid)
            reset_hwm(cluster.scheduler.pid)
        for phase in ("cold", "warm"):
            print(f"{mode} {phase} #{i + 1} ...", flush=True)
            r = analyze(args)
            r["found"] = found(r.pop("stdout"), plan)
            r["loadavg"] = loadavg()
            if mode == "dask":
                r["worker_rss_mb"] = [round(vm_hwm_mb(w.pid) or 0, 1) for w in cluster.workers]
                r["scheduler_rss_mb"] = round(vm_hwm_mb(cluster.scheduler.pid) or 0, 1)
            out[phase].append(r)
    for phase in ("cold", "warm"):
        walls = [r["wall_s"] for r in out[phase]]
        out[f"{phase}_wall_s_min"] = min(walls)
        out[f"{phase}_wall_s_median"] = round(statistics.median(walls), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--big-copies", type=int, default=36)
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--skip-modes", action="store_true")
    ap.add_argument("--hta-ranks", type=int, default=0)
    ap.add_argument("--client-ranks", type=int, default=0,
                    help="time the cross-rank part alone on this many ranks (summaries of the job's "
                         "ranks, each with --big-copies copies of its collectives)")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    a = ap.parse_args()
    data = HERE / "data"
    job = data / f"job{a.ranks}"
    results: dict = {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "loadavg_before": loadavg(), "ranks": a.ranks,
    }
    print(f"generating {job} ...", flush=True)
    t0 = time.perf_counter()
    if job.exists():
        shutil.rmtree(job)
    plan = make_job(job, a.ranks)
    results["generate_s"] = round(time.perf_counter() - t0, 1)
    results["job_bytes"] = sum(f.stat().st_size for f in job.iterdir())
    results["plan"] = {"straggler": plan.straggler, "heavy_rank": plan.heavy_rank,
                       "delay_us": plan.delay_us, "heavy_factor": plan.heavy_factor,
                       "per_host": plan.per_host}
    work = Path(tempfile.mkdtemp(prefix="bench-ranks-"))
    try:
        for f in job.iterdir():  # page the files in: no run pays for the first disk read
            f.read_bytes()
        if not a.skip_modes:
            modes = ["serial", "local"] + ([] if a.skip_dask else ["dask"])
            cluster = Cluster(work) if "dask" in modes else None
            try:
                results["modes"] = {m: run_mode(m, job, plan, work, a.repeat, cluster)
                                    for m in modes}
            finally:
                if cluster is not None:
                    cluster.close()
        if not a.skip_big:
            big = data / f"big{a.big_copies}"
            if big.exists():
                shutil.rmtree(big)
            print(f"generating one rank of {a.big_copies} copies ...", flush=True)
            make_job(big, 2, repeat=a.big_copies, ranks=[0])
            f = big / "trace_rank0.json.gz"
            import gzip

            with gzip.open(f, "rb") as g:
                json_bytes = sum(len(b) for b in iter(lambda: g.read(1 << 24), b""))
            cache = work / "big-cache"
            args = ["analyze", str(f), "--no-hta", "--cache-dir", str(cache), "--out", os.devnull]
            print("big rank cold ...", flush=True)
            cold = analyze(args)
            print("big rank warm ...", flush=True)
            warm = analyze(args)
            for r in (cold, warm):
                r.pop("stdout", None)
            print("big rank: the per-rank work alone ...", flush=True)
            p = subprocess.run([sys.executable, "-c", TASK_SNIPPET, str(f), str(work / "task-cache")],
                               capture_output=True, text=True, cwd=ROOT)
            task = {"rc": p.returncode}
            for line in p.stdout.splitlines():
                if line.startswith("RESULT "):
                    task.update(json.loads(line[7:]))
            if p.returncode:
                task["stderr_tail"] = p.stderr[-1500:]
            results["big_rank"] = {"file": str(f.relative_to(ROOT)), "gz_bytes": f.stat().st_size,
                                   "json_bytes": json_bytes, "cold": cold, "warm": warm,
                                   "task": task,
                                   "loadavg": loadavg()}
        if a.client_ranks:
            cache = work / "client-cache"
            print("client part: a warm job first ...", flush=True)
            analyze(["analyze", str(job), "--cache-dir", str(cache), "--out", os.devnull])
            print(f"client part: {a.client_ranks} ranks x {a.big_copies} copies of the collectives ...",
                  flush=True)
            p = subprocess.run([sys.executable, "-c", CLIENT_SNIPPET, str(job), str(cache),
                                str(a.client_ranks), str(a.big_copies)],
                               capture_output=True, text=True, cwd=ROOT)
            r = {"rc": p.returncode, "loadavg": loadavg()}
            for line in p.stdout.splitlines():
                if line.startswith("RESULT "):
                    r.update(json.loads(line[7:]))
            if p.returncode:
                r["stderr_tail"] = p.stderr[-1500:]
            results["client"] = r
        if a.hta_ranks:
            results["hta"] = {}
            for variant in ("as written", "kernels renamed ncclKernel_"):
                hdir = work / f"hta-{len(results['hta'])}"
                hdir.mkdir()
                for r in range(a.hta_ranks):
                    src = job / f"trace_rank{r}.json.gz"
                    if variant == "as written":
                        os.symlink(src, hdir / src.name)
                    else:  # HTA looks for kernels named ncclKernel*; NCCL >= 2.19 writes ncclDevKernel*
                        import gzip

                        with gzip.open(src, "rb") as f_in, gzip.open(hdir / src.name, "wb", 1) as f_out:
                            f_out.write(f_in.read().replace(b"ncclDevKernel_", b"ncclKernel_"))
                print(f"HTA get_potential_stragglers on {a.hta_ranks} ranks ({variant}) ...",
                      flush=True)
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-c", HTA_SNIPPET, str(hdir)],
                                   capture_output=True, text=True, cwd=ROOT)
                r = {"wall_s": round(time.perf_counter() - t0, 1), "rc": p.returncode}
                for line in p.stdout.splitlines():
                    if line.startswith("RESULT "):
                        r.update(json.loads(line[7:]))
                if p.returncode:
                    r["stderr_tail"] = p.stderr[-1500:]
                results["hta"][variant] = r
            results["hta"]["planted_straggler"] = plan.straggler
            results["hta"]["clock_offsets_us"] = [plan.offset_us(r) for r in range(a.hta_ranks)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["loadavg_after"] = loadavg()
    os.makedirs(a.out_dir, exist_ok=True)
    dest = Path(a.out_dir) / f"ranks-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M}.json"
    dest.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "modes"}, indent=1))
    for m, r in (results.get("modes") or {}).items():
        c = r["cold"]
        print(f"{m:7s} cold {r['cold_wall_s_min']:7.1f} s (median {r['cold_wall_s_median']:.1f})"
              f"  warm {r['warm_wall_s_min']:5.1f} s  client {max(x['client_rss_mb'] for x in c):6.0f} MB"
              f"  worker {c[0].get('worker_rss_mb')} MB  found {c[0]['found']}")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
