"""Real jobs of several ranks on NCCL, traced on every rank and timed untraced: the cross-rank
proof's data (issue 25, Wanted 5).

    torchrun --nproc-per-node 4 --master-port 29541 gpu/ranks_jobs.py --out DIR [--budget-s 180]
    torchrun --nproc-per-node 4 --master-port 29541 gpu/ranks_jobs.py --device cpu --preset tiny --out DIR  # gloo smoke

One job: the runtime's DLRM (runtime.session.Session), table-wise sharded (runtime.sharding), trained
by SparseDist (runtime/pipelines/sparse_dist.py) on synthetic data where ``hot`` of the tables have
a pooling factor ``hot_pooling`` and the others ``cold_pooling`` (runtime.data.DataConfig.
pooling_factors). Every rank owns the same number of tables (the same bytes). Three cases:

- ``balanced``: hot table i on rank i mod W (each rank as many hot tables as the others, to one);
- ``hot``: every hot table on rank 0 (the most lookups, and the most ids in the all-to-alls, on one
  rank: all-to-all imbalance; the other ranks wait for it);
- ``delay``: the balanced job, with rank ``--delay-rank`` sleeping ``--delay-ms`` on the host
  before each of its input dists (inside ``## start_sparse_data_dist i ##``, as a CPU op
  ``## planted_host_delay ##`` (a record_function around ``time.sleep``): a slow host op on one
  rank).

``balanced`` is the reference of both: the saving of balancing the hot job is hot - balanced, of
removing the delay, delay - balanced. The model is built twice (balanced plan, hot plan); the
delay case runs on the balanced model with the delay switched on.

Method (bench/method.py): a warm-up round (every case once, discarded), then timed rounds, every
case once per round in mirrored pairs of rotated orders, as many as ``--budget-s`` allows
(``--min-rounds`` at least). A run: ``--warmup`` steps, ``--timed`` steps (each rank's step times
from CUDA events on its main stream; on the CPU its host clock), 3 tail steps. A run's job step is
the slowest rank's median timed step; the case's figure is the median over rounds with a 95 %
bootstrap interval, and its ratio to ``balanced`` within each round likewise. Then one traced run
per case: the same steps, then one profiler warm-up step and ``--profile-steps`` steps traced
(Kineto with the runtime's default options: ``[memory]`` and ``cuda_sync`` events) on every rank.

Writes (rank 0) ``DIR/results.json`` and ``DIR/results.md`` (updated after every round), and
``DIR/commit/`` laid out as the repository:

- ``sample_traces/ranks_<W>gpu_<case>/trace_rank<r>.json.gz`` (every rank; preset ``jobs_hot``:
  ``ranks_<W>gpu_heavy_<case>``, ``jobs_mid``: ``ranks_<W>gpu_mid_<case>``, ``jobs_lite``: ``ranks_<W>gpu_lite_<case>``, ``jobs_wide``: ``ranks_<W>gpu_wide_<case>``, ``jobs_deep``: ``ranks_<W>gpu_deep_<case>``, ``jobs_tall``: ``ranks_<W>gpu_tall_<case>``, ``jobs_flat``: ``ranks_<W>gpu_flat_<case>``, ``jobs_slim``: ``ranks_<W>gpu_slim_<case>``, ``jobs_lean``: ``ranks_<W>gpu_lean_<case>``, ``jobs_trim``: ``ranks_<W>gpu_trim_<case>``, ``jobs_keen``: ``ranks_<W>gpu_keen_<case>``, ``jobs_bold``: ``ranks_<W>gpu_bold_<case>``, apart from preset ``jobs``' traces), ``metrics.json`` and
  ``README.md`` (the case, the plan, the measured untraced job step);
- ``bench/results/jobs-<W>gpu-<gpu>-<date>-<HHMM>.json`` / ``.md``.

**results.json** (the same document as ``bench/results/jobs-*.json``): ``device``, ``date_utc``,
``versions``, ``world_size``, ``command``, ``spec`` (the model and data), ``cases[case]``:
``{owners (the rank of each table), hot_tables, delay_rank, delay_ms}``; ``rounds[k]``:
``{round, warmup, order, t, runs[case]: {job_step_ms (max over ranks of the rank's median timed
step), job_step_ms_per_step (per timed step, max over ranks), ranks: [{step_ms, host_step_ms,
step_ms_median}], wall_s}}``; ``summary[case]``: ``{job_step: {median, lo, hi, n} ms, ratio (to
balanced, within rounds): {median, lo, hi, n}, saving_ms (what fixing the case saves per step: its
median minus balanced's; positive when the case is slower), saving_ms_interval (the same
difference of medians over the rounds resampled in pairs, 95 %: ``saving_interval``; results
written before 2026-11-28 21:00 UTC hold balanced's median times the ratio's interval minus 1, which
the point could fall outside), saving_share_of_step}``; ``traces[case]``: ``{dir, job_step_ms
(untraced steps of the trace run), traced_step_ms (per rank, the traced steps), ranks: [...],
trace_bytes (per rank)}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.profiler import record_function  # noqa: E402

from bench.common import method  # noqa: E402
from bench.common.host import quiet_gc  # noqa: E402
from runtime.data import DataConfig, SyntheticLoader  # noqa: E402
from runtime.dist import init_from_env  # noqa: E402
from runtime.model import DenseOptimizerConfig, ModelConfig  # noqa: E402
from runtime.session import Session  # noqa: E402
from runtime.sharding import ShardingPlan  # noqa: E402
from runtime.train import TrainConfig, versions  # noqa: E402

CASES = ("balanced", "hot", "delay")
REFERENCE = "balanced"
TAIL_STEPS = 3

PRESETS = {
    # 16 tables of 1M x 128 (8 GB over 4 ranks, twice: the balanced and the hot model), 4 hot
    # tables with 60 ids per sample, 12 with 4; 8192 samples per rank; a small dense part: the
    # lookups and the all-to-alls carry the imbalance
    "jobs": dict(tables=16, rows=1_000_000, dim=128, hot=4, hot_pooling=60.0, cold_pooling=4.0, batch=8192,
                 dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # a stronger imbalance: 4x the samples and 200 ids per sample in the hot tables (the lookups of the
    # rank that owns them dominate its step)
    "jobs_hot": dict(tables=16, rows=1_000_000, dim=128, hot=4, hot_pooling=200.0, cold_pooling=2.0, batch=32768,
                     dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-27, session 2): between the two above (16k samples, 40 ids per
    # sample in the hot tables, 3 in the cold), for 2-rank jobs with a delay of another size
    "jobs_mid": dict(tables=16, rows=1_000_000, dim=128, hot=4, hot_pooling=40.0, cold_pooling=3.0, batch=16384,
                     dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-27, session 3): 12k samples, 100 ids per sample in the hot
    # tables, 3 in the cold; 2- and 4-rank jobs with delays of other sizes on other ranks
    "jobs_lite": dict(tables=16, rows=1_000_000, dim=128, hot=4, hot_pooling=100.0, cold_pooling=3.0, batch=12288,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-27, session 4): 24 tables of which 6 hot (80 ids per sample, 2 in
    # the cold), 16k samples; 2- and 4-rank jobs with delays of other sizes on other ranks
    "jobs_wide": dict(tables=24, rows=1_000_000, dim=128, hot=6, hot_pooling=80.0, cold_pooling=2.0, batch=16384,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-27, session 5): 20 tables of which 5 hot (120 ids per sample, 4
    # in the cold), 8k samples; a 2-rank job with a delay of another size on rank 0
    "jobs_deep": dict(tables=20, rows=1_000_000, dim=128, hot=5, hot_pooling=120.0, cold_pooling=4.0, batch=8192,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 6): 12 tables of which 3 hot (150 ids per sample, 3
    # in the cold), 12k samples; a 2-rank job with a delay on rank 1, a 4-rank one with it on rank 0
    "jobs_tall": dict(tables=12, rows=1_000_000, dim=128, hot=3, hot_pooling=150.0, cold_pooling=3.0, batch=12288,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 7): 16 tables of which 2 hot (180 ids per sample, 4
    # in the cold), 10k samples; a 2-rank job with a delay on rank 0, a 4-rank one with it on rank 3
    "jobs_flat": dict(tables=16, rows=1_000_000, dim=128, hot=2, hot_pooling=180.0, cold_pooling=4.0, batch=10240,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 8): 20 tables of which 3 hot (110 ids per sample, 5
    # in the cold), 14k samples; a 2-rank job with a delay on rank 1, a 4-rank one with it on rank 2
    "jobs_slim": dict(tables=20, rows=1_000_000, dim=128, hot=3, hot_pooling=110.0, cold_pooling=5.0, batch=14336,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 9): 18 tables of which 4 hot (90 ids per sample, 3
    # in the cold), 12k samples; a 2-rank job with a delay on rank 0
    "jobs_lean": dict(tables=18, rows=1_000_000, dim=128, hot=4, hot_pooling=90.0, cold_pooling=3.0, batch=12288,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 10): 24 tables of which 2 hot (130 ids per sample, 4
    # in the cold), 10k samples; a 2-rank job with a delay on rank 1, a 4-rank one with it on rank 3
    "jobs_trim": dict(tables=24, rows=1_000_000, dim=128, hot=2, hot_pooling=130.0, cold_pooling=4.0, batch=10240,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 11): 20 tables of which 4 hot (140 ids per sample, 2
    # in the cold), 8k samples; a 2-rank job with a delay on rank 0, a 4-rank one with it on rank 1
    "jobs_keen": dict(tables=20, rows=1_000_000, dim=128, hot=4, hot_pooling=140.0, cold_pooling=2.0, batch=8192,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # held out from every fit (2026-11-28, session 12): 28 tables of which 3 hot (120 ids per sample, 3
    # in the cold), 12k samples; a 2-rank job with a delay on rank 1, a 4-rank one with it on rank 2
    "jobs_bold": dict(tables=28, rows=1_000_000, dim=128, hot=3, hot_pooling=120.0, cold_pooling=3.0, batch=12288,
                      dense_arch=(512, 256), over_arch=(1024, 1024, 512)),
    # the CPU smoke test (gloo, the reference TBE)
    "tiny": dict(tables=8, rows=2_000, dim=16, hot=2, hot_pooling=16.0, cold_pooling=2.0, batch=64,
                 dense_arch=(32,), over_arch=(64, 32)),
}


def table_plans(num_tables: int, hot: int, world: int) -> dict[str, tuple[int, ...]]:
    """Owners of each table (tables 0..hot-1 are the hot ones): ``balanced`` (hot table i on rank
    i mod W, the cold ones filling every rank to num_tables / W) and ``hot`` (every hot table on
    rank 0, the cold ones filling ranks 0..W-1 in turn to num_tables / W each)."""
    if num_tables % world or hot > num_tables // world or hot < 1:
        raise ValueError(f"need tables divisible by ranks and 1 <= hot <= tables / ranks: {num_tables}, {hot}, {world}")
    per = num_tables // world

    def fill(hot_owner) -> tuple[int, ...]:  # noqa: ANN001
        owners, load = [], [0] * world
        for t in range(hot):
            r = hot_owner(t)
            owners.append(r)
            load[r] += 1
        for _ in range(hot, num_tables):
            r = next(r for r in range(world) if load[r] < per)
            owners.append(r)
            load[r] += 1
        return tuple(owners)

    return {"balanced": fill(lambda t: t % world), "hot": fill(lambda t: 0)}


def plant_host_delay(model, *, ms: float) -> None:  # noqa: ANN001 - a DLRM sharded by runtime.sharding
    """Makes this rank sleep ``ms`` on the host before each of its input dists (a CPU op
    ``## planted_host_delay ##`` in the trace); ``ms = 0`` takes the delay away."""
    arch = model.sparse_arch
    arch.__dict__.pop("start_input_dist", None)  # the class's method again
    if ms <= 0:
        return
    start = arch.start_input_dist

    def delayed(kjt):  # noqa: ANN001, ANN202
        with record_function("## planted_host_delay ##"):
            time.sleep(ms / 1e3)
        return start(kjt)

    arch.start_input_dist = delayed


def _config(spec: dict, *, device: str, warmup: int, timed: int, profile: int, out: Path, seed: int) -> TrainConfig:
    rows = (spec["rows"],) * spec["tables"]
    pooling = (spec["hot_pooling"],) * spec["hot"] + (spec["cold_pooling"],) * (spec["tables"] - spec["hot"])
    model = ModelConfig(num_embeddings=rows, embedding_dim=spec["dim"], num_dense=13, dense_arch=spec["dense_arch"],
                        over_arch=spec["over_arch"], task_heads=1, embedding_optimizer="rowwise_adagrad", seed=seed)
    data = DataConfig(num_embeddings=rows, batch_size=spec["batch"], pooling_factors=pooling, distribution="zipf",
                      num_dense=13, distinct_batches=4, seed=seed)
    return TrainConfig(pipeline="sparse", device=device, warmup_steps=warmup, timed_steps=timed, profile_steps=profile,
                       tail_steps=TAIL_STEPS, out=str(out), model=model, data=data, allow_tf32=True, main_stream_priority=0,
                       dense_optimizer=DenseOptimizerConfig(kind="adam", lr=1e-3, foreach=True))


def saving_interval(per_round: list[dict], case: str) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of ``median(case) - median(balanced)`` over the
    rounds that ran both (``per_round``: case -> job step ms per round), the rounds resampled
    together (each keeps its pair: ``method.bootstrap_ci`` over the rounds' indices): the
    interval of the statistic ``saving_ms`` is, so that it holds its point."""
    import numpy as np

    both = [r for r in per_round if case in r and REFERENCE in r]
    a = np.array([r[case] for r in both], dtype=float)
    b = np.array([r[REFERENCE] for r in both], dtype=float)

    def diff(ix: np.ndarray, axis: int = 1) -> np.ndarray:
        ix = ix.astype(np.int64)
        return np.median(a[ix], axis=axis) - np.median(b[ix], axis=axis)

    return method.bootstrap_ci(range(len(both)), diff)


def summary_of(rounds: list[dict]) -> dict | None:
    """Per case: the median job step over ``rounds`` [95 % interval], its ratio to balanced's
    within rounds and the saving of fixing it (None without a round)."""
    if not rounds:
        return None
    per_round = [{c: run["job_step_ms"] for c, run in rd["runs"].items()} for rd in rounds]
    est = method.summarize(per_round, REFERENCE)
    ref = est[REFERENCE]["value"]
    out = {}
    for c, e in est.items():
        s = {"job_step": e["value"].to_dict()}
        if "ratio" in e:
            r = e["ratio"]
            s["ratio"] = r.to_dict()
            # saving of fixing the case (balancing / removing the delay): the case's median step
            # minus balanced's, its interval the same statistic's over the rounds resampled
            # (``saving_interval``: before, balanced's median times the within-round ratio's
            # interval, which the point could fall outside)
            s["saving_ms"] = round(e["value"].median - ref.median, 4)
            s["saving_ms_interval"] = [round(x, 4) for x in saving_interval(per_round, c)]
            s["saving_share_of_step"] = round(1 - 1 / r.median, 4) if r.median else None
        out[c] = s
    return out


class Jobs:
    def __init__(self, args) -> None:  # noqa: ANN001
        self.args = args
        self.info = init_from_env(args.device)
        self.rank0 = self.info.rank == 0
        self.world = self.info.world_size
        self.gpu = args.device == "cuda"
        self.t0 = time.perf_counter()
        self.out = Path(args.out)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.device_name = torch.cuda.get_device_name() if self.gpu else (platform.processor() or "cpu")
        slug = next((w for w in (''.join(c for c in x if c.isalnum()) for x in
                                 self.device_name.lower().replace("nvidia", " ").split()) if w), "cpu")
        self.tag = f"{self.world}gpu-{slug}-{args.date or now.strftime('%Y%m%d')}" + ("" if args.date else now.strftime("-%H%M"))
        self.spec = PRESETS[args.preset]
        plans = table_plans(self.spec["tables"], self.spec["hot"], self.world)
        self.cases = {
            "balanced": {"owners": plans["balanced"], "delay_rank": None, "delay_ms": 0.0},
            "hot": {"owners": plans["hot"], "delay_rank": None, "delay_ms": 0.0},
            "delay": {"owners": plans["balanced"], "delay_rank": args.delay_rank, "delay_ms": args.delay_ms},
        }
        self.doc = {
            "title": f"Jobs of {self.world} ranks on {self.device_name}: hot tables on one rank, a planted host delay",
            "device": self.device_name, "world_size": self.world, "backend": self.info.backend,
            "date_utc": now.isoformat(timespec="seconds"), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "versions": versions(), "preset": args.preset, "spec": self.spec, "pipeline": "sparse",
            "method": {"reference": REFERENCE, "warmup_steps": args.warmup, "timed_steps": args.timed, "tail_steps": TAIL_STEPS,
                       "profile_steps": args.profile_steps, "job_step": "per run: the slowest rank's median timed step "
                       "(CUDA events on each rank's main stream); per case: median over rounds [95 % bootstrap interval]",
                       "order": "a warm-up round, then timed rounds in mirrored pairs of rotated orders (bench/method.py)"},
            "cases": {c: {**v, "owners": list(v["owners"]), "hot_tables": list(range(self.spec["hot"]))} for c, v in self.cases.items()},
            "setup": {}, "rounds": [], "summary": {}, "traces": {}, "total_s": None, "tag": self.tag,
        }

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, msg: str) -> None:
        if self.rank0:
            print(f"[jobs {self.now():6.1f}s] {msg}", file=sys.stderr, flush=True)

    def decide(self, value):  # noqa: ANN001, ANN201
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def publish(self) -> None:
        if not self.rank0:
            return
        self.doc["total_s"] = round(self.now(), 1)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(self.doc, indent=1, default=str))
        (self.out / "results.md").write_text("\n".join(markdown(self.doc)) + "\n")

    # ---- the models --------------------------------------------------------------------------
    def build(self) -> None:
        a = self.args
        base = _config(self.spec, device=a.device, warmup=a.warmup, timed=a.timed, profile=0, out=self.out / "runs", seed=a.seed)
        self.cfg = base
        t = time.perf_counter()
        self.loader = SyntheticLoader(dataclasses.replace(base.data, num_batches=max(base.total_steps, 50)), rank=self.info.rank)
        self.doc["setup"]["loader_s"] = round(time.perf_counter() - t, 2)
        self.sessions = {}
        for plan in ("balanced", "hot"):
            self.sessions[plan] = Session(base, plan=ShardingPlan(self.world, self.cases[plan]["owners"]))
            self.doc["setup"][f"model_{plan}_s"] = round(self.sessions[plan].build_s, 2)
        self.say(f"models built: {self.doc['setup']}")

    def run(self, case: str, cfg: TrainConfig) -> dict:
        c = self.cases[case]
        session = self.sessions["hot" if case == "hot" else "balanced"]
        plant_host_delay(session.model, ms=c["delay_ms"] if self.info.rank == c["delay_rank"] else 0.0)
        try:
            with quiet_gc():
                run = session.run(cfg, self.loader.first(cfg.total_steps), progress=False)
        finally:
            plant_host_delay(session.model, ms=0.0)
        mine = {"step_ms": [round(x, 4) for x in run.step_ms], "host_step_ms": [round(x, 4) for x in run.host_step_ms],
                "step_ms_median": method.median(run.step_ms), "wall_s": round(run.wall_s, 3)}
        if run.profiled is not None:
            mine["traced_step_ms"] = [round(x, 4) for x in run.traced_step_ms]
            mine["traced_host_step_ms"] = [round(x, 4) for x in run.traced_host_step_ms]
            mine["trace_bytes"] = Path(run.trace).stat().st_size if run.trace and Path(run.trace).exists() else None
        ranks: list = [None] * self.world
        dist.all_gather_object(ranks, mine)
        per_step = [max(r["step_ms"][k] for r in ranks) for k in range(min(len(r["step_ms"]) for r in ranks))]
        return {"job_step_ms": max(r["step_ms_median"] for r in ranks), "job_step_ms_per_step": [round(x, 4) for x in per_step],
                "ranks": ranks, "wall_s": max(r["wall_s"] for r in ranks)}

    # ---- the method ----------------------------------------------------------------------------
    def rounds(self) -> None:
        a = self.args
        traces_s = len(CASES) * (4.0 if self.gpu else 2.0)
        t_rounds = None

        def one(r: int, order: list[str]) -> None:
            rd = {"round": r, "warmup": r == 0, "order": order, "t": [round(self.now(), 3)], "runs": {}}
            self.doc["rounds"].append(rd)
            for case in order:
                rd["runs"][case] = self.run(case, self.cfg)
            rd["t"].append(round(self.now(), 3))
            self.say(f"round {r}{' (warm-up)' if r == 0 else ''}: " + ", ".join(
                f"{c} {rd['runs'][c]['job_step_ms']:.3f}" for c in CASES) + f" ms ({rd['t'][1] - rd['t'][0]:.1f} s)")
            self.summarize()
            self.publish()

        one(0, list(CASES))
        t_rounds = self.now()
        left = a.budget_s - self.now() - traces_s
        for r, order in enumerate(method.round_orders(list(CASES), a.max_rounds), start=1):
            if not self.decide(method.next_round_runs(done=r - 1, elapsed_s=self.now() - t_rounds, left_s=left,
                                                      least=a.min_rounds, most=a.max_rounds)):
                break
            one(r, order)

    def summarize(self) -> None:
        got = summary_of([rd for rd in self.doc["rounds"] if not rd["warmup"]])
        if got is not None:
            self.doc["summary"] = got
        self.doc["timed_rounds"] = len([rd for rd in self.doc["rounds"] if not rd["warmup"]])
        after = summary_of(self.doc.get("rounds_after_traces") or [])
        if after is not None:
            self.doc["summary_after_traces"] = after

    def rounds_after_traces(self) -> None:
        """``--rounds-after-traces`` more timed rounds once every case is traced, in the process
        as the traced runs left it (each case's trace follows the traced runs of the cases before
        it: the untraced steps of a traced run were 1.0-1.5x the rounds' before any trace in
        session 4's jobs, more for each later case): the saving measured in the traces' regime."""
        n = self.args.rounds_after_traces
        if n <= 0:
            return
        self.doc["rounds_after_traces"] = []
        for r, order in enumerate(method.round_orders(list(CASES), n), start=1):
            if r > n:
                break
            rd = {"round": r, "warmup": False, "order": order, "t": [round(self.now(), 3)], "runs": {}}
            self.doc["rounds_after_traces"].append(rd)
            for case in order:
                rd["runs"][case] = self.run(case, self.cfg)
            rd["t"].append(round(self.now(), 3))
            self.say(f"round {r} after the traces: " + ", ".join(
                f"{c} {rd['runs'][c]['job_step_ms']:.3f}" for c in CASES) + " ms")
            self.summarize()
            self.publish()

    def write_cases(self) -> None:
        """metrics.json and README.md beside each case's traces (rank 0)."""
        if not self.rank0:
            return
        for case in CASES:
            if case in self.doc["traces"]:
                folder = self.out / "commit" / self.doc["traces"][case]["dir"]
                write_case(folder, case, self)


    # ---- traces ----------------------------------------------------------------------------------
    def traces(self) -> None:
        a = self.args
        for case in CASES:
            # the presets' traces apart: ranks_4gpu_<case> (jobs), ranks_4gpu_heavy_<case> (jobs_hot),
            # ranks_2gpu_mid_<case> (jobs_mid), ranks_<W>gpu_lite_<case> (jobs_lite)
            kind = {"jobs_hot": "heavy_", "jobs_mid": "mid_", "jobs_lite": "lite_", "jobs_wide": "wide_", "jobs_deep": "deep_", "jobs_tall": "tall_", "jobs_flat": "flat_", "jobs_slim": "slim_", "jobs_lean": "lean_", "jobs_trim": "trim_", "jobs_keen": "keen_", "jobs_bold": "bold_"}.get(a.preset, "")
            folder = self.out / "commit" / "sample_traces" / f"ranks_{self.world}gpu_{kind}{case}"
            cfg = dataclasses.replace(self.cfg, profile_steps=a.profile_steps, out=str(folder))
            seg = self.run(case, cfg)
            self.doc["traces"][case] = {"dir": str(folder.relative_to(self.out / "commit")), "job_step_ms": seg["job_step_ms"],
                                        "traced_step_ms": [r.get("traced_step_ms") for r in seg["ranks"]],
                                        "trace_bytes": [r.get("trace_bytes") for r in seg["ranks"]], "ranks": seg["ranks"]}
            self.say(f"trace {case}: untraced job step {seg['job_step_ms']:.3f} ms, traced per rank "
                     f"{[r.get('traced_step_ms') for r in seg['ranks']]}")
            self.publish()


def write_case(folder: Path, case: str, jobs: Jobs) -> None:
    """metrics.json and README.md beside a case's traces."""
    doc, c = jobs.doc, jobs.cases[case]
    s = doc["summary"].get(case, {})
    metrics = {
        "case": case, "pipeline": "sparse", "world_size": doc["world_size"], "device": doc["device"], "date_utc": doc["date_utc"],
        "versions": doc["versions"], "owners": list(c["owners"]), "hot_tables": list(range(jobs.spec["hot"])),
        "delay_rank": c["delay_rank"], "delay_ms": c["delay_ms"], "spec": jobs.spec,
        # the measured untraced job step (median over the interleaved rounds), as runtime.train's metrics.json names it
        "step_ms_p50": (s.get("job_step") or {}).get("median"),
        "measured_summary": s, "reference_summary": doc["summary"].get(REFERENCE),
        "trace_run": doc["traces"].get(case),
        # --rounds-after-traces: the same measure in the process as the traced runs left it
        "measured_after_traces": (doc.get("summary_after_traces") or {}).get(case),
        "measured": f"bench/results/jobs-{jobs.tag}.json (summary -> {case})",
    }
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
    what = {"balanced": "the hot tables spread one per rank (the reference)",
            "hot": "every hot table on rank 0: the most lookups and the most ids in the all-to-alls on one rank",
            "delay": f"the balanced job with rank {c['delay_rank']} sleeping {c['delay_ms']:g} ms on the host before each "
                     "input dist (CPU op `## planted_host_delay ##`)"}[case]
    js = s.get("job_step") or {}
    lines = [f"# {doc['world_size']} ranks, {case}: {what}", "",
             f"Written by `gpu/ranks_jobs.py` (`{doc['command']}`) on {doc['date_utc']}, {doc['world_size']} x {doc['device']}, "
             f"{doc.get('backend')}, torch {doc['versions'].get('torch')}. SparseDist, {jobs.spec['tables']} tables of {jobs.spec['rows']} x "
             f"{jobs.spec['dim']} (tables 0-{jobs.spec['hot'] - 1} hot: {jobs.spec['hot_pooling']:g} ids per sample, the others "
             f"{jobs.spec['cold_pooling']:g}), {jobs.spec['batch']} samples per rank; owners {list(c['owners'])}.", "",
             f"Measured untraced job step (slowest rank's median step, median over {doc.get('timed_rounds')} interleaved rounds "
             f"[95 % interval]): {js.get('median', float('nan')):.3f} ms [{js.get('lo', float('nan')):.3f}, "
             f"{js.get('hi', float('nan')):.3f}]" + ("" if case == REFERENCE else
             f"; against balanced: ratio {s['ratio']['median']:.3f} [{s['ratio']['lo']:.3f}, {s['ratio']['hi']:.3f}], "
             f"fixing it saves {s['saving_ms']:.3f} ms per step" if s.get("ratio") else "") + ".", "",
             "`trace_rank<r>.json.gz`: every rank's Kineto trace of the same run (the runtime's profiler options), "
             f"{jobs.args.profile_steps} profiled steps; `metrics.json`: the figures above and the trace run's step times."]
    (folder / "README.md").write_text("\n".join(lines) + "\n")


def write_commit(jobs: Jobs) -> None:
    res = jobs.out / "commit" / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    (res / f"jobs-{jobs.tag}.json").write_text(json.dumps(jobs.doc, separators=(",", ":"), default=str) + "\n")
    (res / f"jobs-{jobs.tag}.md").write_text("\n".join(markdown(jobs.doc)) + "\n")


def _est(e: dict | None) -> str:
    return "-" if not e else f"{e['median']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]"


def markdown(doc: dict) -> list[str]:
    lines = [f"# {doc['title']}", "", f"{doc['date_utc']}, `{doc['command']}`, torch {doc['versions'].get('torch')}, "
             f"{doc.get('backend')}; {doc.get('total_s')} s in all; {doc.get('timed_rounds', 0)} timed rounds.", "",
             "| case | owners | untraced job step ms [95 % CI] | / balanced | saving of the fix, ms [CI] | traced steps (rank 0) |",
             "|---|---|---|---|---|---|"]
    for c, cd in doc["cases"].items():
        s = doc["summary"].get(c, {})
        delay = "" if cd.get("delay_rank") is None else f", rank {cd['delay_rank']} +{cd['delay_ms']:g} ms"
        saving = "-" if "saving_ms" not in s else f"{s['saving_ms']:.3f} {s['saving_ms_interval']}"
        traced = ((doc["traces"].get(c) or {}).get("traced_step_ms") or [None])[0]
        lines.append(f"| {c} | {cd['owners']}{delay} | {_est(s.get('job_step'))} | {_est(s.get('ratio'))} | {saving} | {traced} |")
    after = doc.get("summary_after_traces") or {}
    if after:
        lines += ["", f"After the traces ({len(doc.get('rounds_after_traces') or [])} rounds, the process as the traced runs "
                  "left it):", "", "| case | untraced job step ms [95 % CI] | / balanced | saving of the fix, ms [CI] | "
                  "the traced run's untraced step ms |", "|---|---|---|---|---|"]
        for c in doc["cases"]:
            s = after.get(c, {})
            saving = "-" if "saving_ms" not in s else f"{s['saving_ms']:.3f} {s['saving_ms_interval']}"
            tr = (doc["traces"].get(c) or {}).get("job_step_ms")
            lines.append(f"| {c} | {_est(s.get('job_step'))} | {_est(s.get('ratio'))} | {saving} | "
                         + ("-" if tr is None else f"{tr:.3f}") + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test (gloo, the reference TBE)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="jobs")
    ap.add_argument("--budget-s", type=float, default=180.0, help="seconds for everything after the models' build")
    ap.add_argument("--min-rounds", type=int, default=6)
    ap.add_argument("--max-rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timed", type=int, default=6)
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--rounds-after-traces", type=int, default=0,
                    help="timed rounds again once every case is traced (the traces' regime: metrics.json's "
                         "measured_after_traces)")
    ap.add_argument("--delay-rank", type=int, default=2)
    ap.add_argument("--delay-ms", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--date", default=None, help="YYYYMMDD for the file names (default: today UTC and the start's HHMM)")
    a = ap.parse_args()
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        print("ranks_jobs: error: run under torchrun with 2 or more processes", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("ranks_jobs: error: needs CUDA GPUs (or --device cpu)", file=sys.stderr)
        return 2
    if not (1 <= a.min_rounds <= a.max_rounds and a.timed >= 1 and a.warmup >= 0 and a.profile_steps >= 1
            and 0 <= a.delay_rank < int(os.environ["WORLD_SIZE"]) and a.delay_ms > 0 and a.rounds_after_traces >= 0):
        print("ranks_jobs: error: need 1 <= --min-rounds <= --max-rounds, --timed >= 1, --profile-steps >= 1, "
              "0 <= --delay-rank < ranks, --delay-ms > 0, --rounds-after-traces >= 0", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below, then exit
    jobs = Jobs(a)
    try:
        jobs.build()
        jobs.rounds()
        jobs.traces()
        jobs.rounds_after_traces()
        jobs.write_cases()
    finally:
        jobs.summarize()
        jobs.publish()
        if jobs.rank0:
            write_commit(jobs)
            print((jobs.out / "results.md").read_text(), file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
