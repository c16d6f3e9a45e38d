"""Hand-built jobs of a few ranks: each rank a tiny real trace file (``tests.tracegen``) whose
collective kernels start and end where a test says, on a clock shifted by a planted offset."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.tracegen import TraceBuilder

A2A = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass
class Coll:
    """One collective instance: per rank its kernel's start (us, true clock) and the common end."""

    group: str
    collective: str
    step: int
    starts: dict[int, float]
    end: float
    out_nelems: dict[int, int] = field(default_factory=dict)
    in_nelems: dict[int, int] = field(default_factory=dict)
    dtype: str = "Long"


def comm_args(c: Coll, rank: int, world: int) -> dict:
    return {
        "Collective name": c.collective, "Process Group Name": c.group,
        "Process Group Description": "default_pg" if c.group == "0" else "undefined",
        "Process Group Ranks": str(list(range(world))), "Group size": world,
        "In msg nelems": c.in_nelems.get(rank, 64), "Out msg nelems": c.out_nelems.get(rank, 64),
        "dtype": c.dtype, "In split size": "[]", "Out split size": "[]",
    }


def rank_builder(r: int, world: int, *, base_time_ns: int = 1_790_000_000 * 10**9, **kw) -> TraceBuilder:
    """Rank ``r`` of a job of ``world`` ranks (``TraceBuilder`` keywords in ``kw``): its base time
    and its ``distributedInfo``, one default process group of every rank."""
    b = TraceBuilder(rank=r, world_size=world, **kw)
    b.extra_metadata["baseTimeNanoseconds"] = base_time_ns
    b.extra_metadata["distributedInfo"] = {
        "backend": "nccl", "rank": r, "world_size": world,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world,
                       "ranks": list(range(world))}]}
    return b


def write_job(directory: Path, colls: list[Coll], *, world: int, offsets_us: dict[int, float] | None = None,
              steps: int = 2, step_us: float = 1000.0, ranks: list[int] | None = None,
              base_time_ns: int = 1_790_000_000 * 10**9, name: str = "trace_rank{r}.json") -> list[Path]:
    """One trace per rank: ProfilerStep#1..steps of ``step_us`` each, a compute kernel per step,
    and every collective of ``colls`` (launched at the start of its step's window, on stream 17
    for group "0", 21 otherwise). Rank r's clock reads true time + ``offsets_us[r]``."""
    offsets_us = offsets_us or {}
    out = []
    for r in (range(world) if ranks is None else ranks):
        b = rank_builder(r, world, base_time_ns=base_time_ns, device=r % 8,
                         base_us=1_000_000.0 + offsets_us.get(r, 0.0))
        for s in range(1, steps + 1):
            t0 = (s - 1) * step_us
            b.profiler_step(s, t0, step_us)
            b.kernel("gemm_kernel", t0 + 5, 20, stream=7, launch_at=t0 + 1)
        for c in colls:
            t0 = (c.step - 1) * step_us
            args = comm_args(c, r, world)
            b.cpu_op("record_param_comms", t0 + 2, 1, args={**args, "Rank": r})
            b.kernel(A2A if "all_to_all" in c.collective else ALLREDUCE, c.starts[r],
                     c.end - c.starts[r], stream=17 if c.group == "0" else 21,
                     launch_at=t0 + 2.5, args=args)
        out.append(b.write(Path(directory) / name.format(r=r)))
    return out


STEPS = 4
PERIOD = 300.0
"""Rank 1's host launches its all-to-all once every 300 us (true clock)."""


def waiting_job(d: Path, period: float = PERIOD) -> list[Path]:
    """Two ranks meeting at an all-to-all (5 us of data) once a step. Rank 0 runs SparseDist on
    one stream, its kernels launched far ahead (``test_explain.fused_trace``): lookup 20 us, the
    all-to-all, dense forward 30, dense backward 40, embedding backward 30, optimizer 20, 1 us
    apart: 147 us of its own GPU work a step. Rank 1's host is slow: a 280-us op, then the
    all-to-all's launch; its kernel starts at 300 * step - 2 and the instance ends 5 us after the
    later arrival. Rank 0's all-to-all therefore waits about 150 us a step for rank 1: its trace
    is bound by that collective, rank 1's by its host (no embedding lookup there: the fix does
    not apply to it). ``period``: rank 1's step (its slow op 20 us shorter): 600 makes rank 0
    wait ~450 us a step, more than its own work."""
    coll = [Coll("0", "all_to_all", i, {}, 0.0) for i in range(1, STEPS + 1)]
    arrive1 = [period * i - 2 for i in range(1, STEPS + 1)]
    b0 = rank_builder(0, 2, device=0, base_us=1_000_000.0)
    gpu = 10.0
    for i in range(1, STEPS + 1):
        c, a = coll[i - 1], comm_args(coll[i - 1], 0, 2)
        h = (i - 1) * 10.0
        b0.profiler_step(i, h, 10)
        b0.annotation(f"## forward {i} ##", h + 0.5, 2.3)
        b0.kernel("tbe::detail::pooled_forward_kernel", gpu, 20,
                  launched_by=b0.runtime("cudaLaunchKernel", h + 1, 0.3))
        gpu += 21
        b0.cpu_op("record_param_comms", h + 1.4, 0.2, args={**a, "Rank": 0})
        end = max(gpu, arrive1[i - 1]) + 5
        c.starts[0], c.end = gpu, end
        b0.kernel(A2A, gpu, end - gpu, launched_by=b0.runtime("cudaLaunchKernel", h + 1.7, 0.2),
                  args=a)
        gpu = end + 1
        b0.kernel("dense_fwd", gpu, 30, launched_by=b0.runtime("cudaLaunchKernel", h + 2, 0.5))
        b0.annotation(f"## backward {i} ##", h + 2.9, 0.9)
        b0.kernel("dense_bwd", gpu + 31, 40, launched_by=b0.runtime("cudaLaunchKernel", h + 3, 0.5))
        b0.annotation(f"## emb_backward {i} ##", h + 3.9, 0.9)
        b0.kernel("emb_bwd", gpu + 72, 30, launched_by=b0.runtime("cudaLaunchKernel", h + 4, 0.5))
        b0.annotation(f"## optimizer {i} ##", h + 4.9, 0.9)
        b0.kernel("adam", gpu + 103, 20, launched_by=b0.runtime("cudaLaunchKernel", h + 5, 0.5))
        gpu += 124
    b1 = rank_builder(1, 2, device=1, base_us=1_000_000.0)
    for i in range(1, STEPS + 1):
        c, a = coll[i - 1], comm_args(coll[i - 1], 1, 2)
        h = period * (i - 1)
        b1.profiler_step(i, h, period)
        b1.cpu_op("aten::slow_host_work", h + 1, period - 20)
        b1.cpu_op("record_param_comms", h + period - 10, 1, args={**a, "Rank": 1})
        start = arrive1[i - 1]
        b1.kernel(A2A, start, c.end - start,
                  launched_by=b1.runtime("cudaLaunchKernel", h + period - 5, 1), args=a)
        b1.kernel("gemm_kernel", c.end + 1, 1,
                  launched_by=b1.runtime("cudaLaunchKernel", h + period - 3.5, 0.5))
    return [b0.write(d / "trace_rank0.json.gz"), b1.write(d / "trace_rank1.json.gz")]


def sleeper_job(d: Path, *, host_us: dict[int, float], sleep_us: dict[int, float] | None = None,
                planted: tuple[int, ...] = (), extra_us: dict[int, float] | None = None,
                steps: int = 5, late_us: dict[int, float] | None = None,
                work_ops: tuple[str, ...] = ("aten::host_work",),
                out_nelems: dict[int, int] | None = None) -> list[Path]:
    """Ranks meeting at an all-to-all once a step, each host-bound: rank r's step is
    ``aten::host_work`` of ``host_us[r]`` (a launch call of 5 us every 50 us, each launching a
    3-us kernel the GPU runs at once), then ``aten::extra_host_work`` of ``extra_us[r]`` (the
    same make-up: work only that rank does), then a sleep of ``sleep_us[r]`` (nothing recorded:
    inside a ``## planted_host_delay ##`` annotation for the ranks in ``planted``), then the
    all-to-all's launch and a ``cudaStreamSynchronize`` that waits for it. The all-to-all
    moves its data in 10 us once the last rank has arrived: every rank's step lasts the slowest
    rank's, and the faster ranks wait in their synchronize. ``late_us[r]``: rank r ends its
    first step that much later (more host work after its synchronize, launch calls as above)
    and starts every later step as late. ``work_ops``: the host work as these ops one after the
    other, each an equal share of ``host_us[r]`` (the same ops on every rank). ``out_nelems``:
    the elements each rank receives in the all-to-all (an imbalanced one: hot tables)."""
    sleep_us, extra_us, late_us = sleep_us or {}, extra_us or {}, late_us or {}
    world = len(host_us)
    own = {r: host_us[r] + extra_us.get(r, 0.0) + sleep_us.get(r, 0.0) for r in host_us}
    period = max(own.values()) + 40.0
    builders = {r: rank_builder(r, world, device=r, base_us=1_000_000.0) for r in host_us}
    for i in range(1, steps + 1):
        c = Coll("0", "all_to_allv", i, {}, 0.0, out_nelems=dict(out_nelems or {}))
        begin = {r: (i - 1) * period + (late_us.get(r, 0.0) if i > 1 else 0.0) for r in host_us}
        launch = {r: begin[r] + 2 + own[r] for r in host_us}
        last = max(launch.values()) + 5
        c.end = last + 10
        for r, b in builders.items():
            h = begin[r]
            tail = late_us.get(r, 0.0) if i == 1 else 0.0
            b.profiler_step(i, h, period - 1 + tail)
            t = h + 1
            share = host_us[r] / len(work_ops)
            for name, span in (*((n, share) for n in work_ops),
                               ("aten::extra_host_work", extra_us.get(r, 0.0))):
                if span <= 0:
                    continue
                b.cpu_op(name, t, span)
                for k in range(int(span // 50)):
                    at = t + 1 + 50 * k
                    b.kernel("gemm_kernel", at + 7, 3, stream=7,
                             launched_by=b.runtime("cudaLaunchKernel", at, 5))
                t += span
            if sleep_us.get(r):
                if r in planted:
                    b.annotation("## planted_host_delay ##", t, sleep_us[r])
                t += sleep_us[r]
            args = comm_args(c, r, world)
            b.cpu_op("record_param_comms", launch[r] - 0.5, 0.3, args={**args, "Rank": r})
            start = launch[r] + 5
            c.starts[r] = start
            b.kernel(A2A, start, c.end - start, stream=17, args=args,
                     launched_by=b.runtime("cudaLaunchKernel", launch[r], 2))
            b.runtime("cudaStreamSynchronize", launch[r] + 3, c.end + 2 - (launch[r] + 3))
            if tail:
                t = c.end + 3
                b.cpu_op("aten::host_work", t, tail - 5)
                for k in range(int((tail - 5) // 50)):
                    b.kernel("gemm_kernel", t + 8 + 50 * k, 3, stream=7,
                             launched_by=b.runtime("cudaLaunchKernel", t + 1 + 50 * k, 5))
    return [b.write(Path(d) / f"trace_rank{r}.json.gz") for r, b in builders.items()]
