"""Kineto traces of CUDA graph replays, for tracekit explain's check of what it cannot read
(issue 24 item 5): a small MLP's forward and backward captured in a ``torch.cuda.CUDAGraph`` and
replayed every step (``graph.replay()``: one ``cudaGraphLaunch`` whose kernels share its
correlation id), then the same steps eagerly, each under torch.profiler with ProfilerStep and a
``loss.item()`` a step. Two traces, and the untraced step time of each (CUDA events, the same
process):

    $OUT/graph/trace.json.gz   graph replays (the kernels in the trace when the profiler records
                               them: torch 2.11 with CUDA 13 does)
    $OUT/eager/trace.json.gz   the same work launched kernel by kernel
    $OUT/metrics.json          {"graph": {"step_ms": ...}, "eager": {...}, torch, cuda, device}

    python3 gpu/cuda_graph_trace.py --out DIR [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 0
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(8) for m in
                                  (torch.nn.Linear(2048, 2048), torch.nn.ReLU())]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 2048, device=dev)
    y = torch.randn(4096, 2048, device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # warm up on a side stream, then capture (torch's recipe)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step()

    def run_graph():
        graph.replay()
        return static_loss

    metrics = {"torch": torch.__version__, "cuda": torch.version.cuda,
               "device": torch.cuda.get_device_name(0)}
    for name, fn in (("graph", run_graph), ("eager", step)):
        for _ in range(3):
            fn().item()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.steps):
            fn().item()
        end.record()
        end.synchronize()
        step_ms = start.elapsed_time(end) / args.steps
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=args.steps),
                on_trace_ready=lambda p, d=d: p.export_chrome_trace(os.path.join(d, "trace.json.gz"))
        ) as prof:
            for _ in range(args.steps + 2):
                fn().item()
                prof.step()
        metrics[name] = {"step_ms": step_ms}
        print(f"{name}: untraced step {step_ms:.3f} ms; trace {d}/trace.json.gz")
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
