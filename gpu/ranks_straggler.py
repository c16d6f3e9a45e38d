"""Two ranks with a planted straggler and an imbalanced all-to-all, on real NCCL: traces for
``tracekit analyze DIR`` to find both (issue 11's check on hardware).

    torchrun --nproc_per_node 2 gpu/ranks_straggler.py --out DIR [--steps 8] [--delay-ms 2]

Each step on each rank: a few matmuls (the dense part), ``torch.cuda.synchronize()`` (both
ranks' GPUs idle: what follows starts when its host launches it), then rank ``--straggler``
sleeps ``--delay-ms`` on the host, then an ``all_to_all_single`` on the default group in which
every rank sends ``--elems`` float32 to each rank and ``--factor`` times as many to rank
``--heavy``, and an ``all_reduce`` on a second group. torch.profiler records 4 active steps
after 1 wait and 2 warmup steps, and each rank writes ``DIR/trace_rank<r>.json.gz``. Expected:
rank ``--straggler`` arrives last at every collective, by about ``--delay-ms`` at the all-to-all
(at the all-reduce, which starts on each GPU when its all-to-all ends, by ~0.1 ms: measured on 2
H200s, 2026-11-24), and rank ``--heavy`` receives ``factor * world / (world - 1 + factor)`` times
the mean.

``--cpu``: gloo on the CPU (a smoke test of the script; its traces have no GPU kernels).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--delay-ms", type=float, default=2.0)
    ap.add_argument("--straggler", type=int, default=1)
    ap.add_argument("--heavy", type=int, default=0)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--elems", type=int, default=1 << 20)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    cpu = a.cpu or not torch.cuda.is_available()
    dist.init_process_group("gloo" if cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cpu") if cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    if not cpu:
        torch.cuda.set_device(dev)
    dense_group = dist.new_group(list(range(world)))
    n = a.elems
    send = [n * (a.factor if j == a.heavy else 1) for j in range(world)]
    recv = [n * (a.factor if rank == a.heavy else 1)] * world
    x = torch.randn(sum(send), device=dev)
    y = torch.empty(sum(recv), device=dev)
    w = torch.randn(2048, 2048, device=dev)
    grad = torch.randn(1 << 22, device=dev)

    def sync() -> None:
        if not cpu:
            torch.cuda.synchronize()

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"trace_rank{rank}.json.gz")
    acts = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
    with profile(activities=acts, schedule=schedule(wait=1, warmup=2, active=4, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for step in range(a.steps):
            with record_function(f"## forward {step} ##"):
                h = w
                for _ in range(4):
                    h = torch.tanh(h @ w)
            sync()
            if rank == a.straggler:
                time.sleep(a.delay_ms / 1000)
            with record_function(f"## start_sparse_data_dist {step} ##"):
                dist.all_to_all_single(y, x, output_split_sizes=recv, input_split_sizes=send)
            with record_function(f"## backward {step} ##"):
                dist.all_reduce(grad, group=dense_group)
            sync()
            prof.step()
    dist.barrier()
    if rank == 0:
        print(f"wrote {world} traces in {a.out}: straggler {a.straggler} (+{a.delay_ms} ms), "
              f"heavy {a.heavy} (x{a.factor})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
