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
