"""Which stream waits for which in one autograd call that spans two streams (torch's engine).

    python3 gpu/autograd_streams.py

A node whose forward ran on a side stream (like FusedSparseDist's lookup), its backward sleeping
~0.1 s there and returning no gradient for its leaf input (like the TBE's fused update); the loss
made on the main stream. For each way of calling backward: does the main stream wait for (a)
work queued on the side stream before the call (the next batch's input dist, on the data-dist
stream that is also the lookup stream), (b) the side node's backward? Prints one line per case.
"""
from __future__ import annotations

import torch

SLEEP = 200_000_000  # GPU cycles, ~0.1 s


class Sleepy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, x):  # noqa: ANN001
        return x * 2.0

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001
        torch.cuda._sleep(SLEEP)
        return None, None


def case(current: str, accumulator_on_main: bool) -> tuple[bool, bool]:
    dev = torch.device("cuda")
    main, side = torch.cuda.current_stream(dev), torch.cuda.Stream(dev)
    w = torch.nn.Parameter(torch.zeros(1, device=dev))
    dense = torch.nn.Parameter(torch.ones(8, device=dev))
    keep = w.view_as(w).grad_fn.next_functions[0][0] if accumulator_on_main else None  # made with main current
    with torch.cuda.stream(side):
        emb = Sleepy.apply(w, torch.ones(8, device=dev))
    main.wait_stream(side)
    loss = (emb * dense).sum()
    torch.cuda.synchronize()
    results = []
    for prior in (True, False):
        if prior:  # work on the side stream queued before the call, that backward does not need
            with torch.cuda.stream(side):
                torch.cuda._sleep(SLEEP)
            ev_prior = torch.cuda.Event()
            ev_prior.record(side)
        with torch.cuda.stream(side if current == "side" else main):
            loss.backward(retain_graph=True)
        main_done = torch.cuda.Event()
        main_done.record(main)
        main_done.synchronize()
        side_done = torch.cuda.Event()
        side_done.record(side)
        # True: main finished while the side stream still worked (on the prior sleep, or on the node)
        results.append(not (ev_prior if prior else side_done).query())
        torch.cuda.synchronize()
    del keep
    return tuple(results)


def main() -> None:
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
    for current, acc in (("side", False), ("main", False), ("main", True)):
        free_of_prior, free_of_node = case(current, acc)
        print(f"backward with the {current} stream current{', the leaf accumulator made on main' if acc else ''}: "
              f"main waits for prior side work: {not free_of_prior}; main waits for the side node's backward: {not free_of_node}")


if __name__ == "__main__":
    main()
