"""The workload that gpu/tbe_ncu.sh profiles with Nsight Compute: the two shapes issue 12 attacks
first, every contender once inside the NVTX range "prof" (after one warm-up call outside it), so
that ``ncu --nvtx --nvtx-include prof/`` profiles exactly those calls.

    python3 gpu/tbe_ncu.py --case zipf_fwd    # D=128, B=65536, Zipf ids: forward only
    python3 gpu/tbe_ncu.py --case d64_train   # D=64, B=16384, uniform ids: fwd+bwd+update (SGD)

Contenders: ours v1 (the first version), ours with every forward variant (zipf_fwd) or the v2
and v3 backward and the dispatch's choice ("auto": v3-2 + v3s, d64_train), FBGEMM when
fbgemm_gpu imports. The profiled calls run their backward on the calling thread, inside the range.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import tbe as bt  # noqa: E402
from runtime.embedding import OptimType  # noqa: E402
from runtime.kernels import cuda as kc  # noqa: E402
from runtime.kernels import fbgemm  # noqa: E402

CASES = {
    "zipf_fwd": dict(dim=128, batch=65536, dist="zipf", train=False,
                     ours=[(v, kc.AUTO) for v in kc.FORWARD_VARIANTS]),
    "d64_train": dict(dim=64, batch=16384, dist="uniform", train=True,
                      ours=[("v1", "v1"), ("v2-8", "v2"), ("v3-2", "v3"), (kc.AUTO, kc.AUTO)]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    args = ap.parse_args()
    c = CASES[args.case]
    torch.manual_seed(0)
    s = bt.make_set(c["batch"], c["dist"])
    grad = torch.randn(c["batch"], bt.T * c["dim"], device=bt.DEV)
    m = bt.ours(c["dim"], OptimType.EXACT_SGD, torch.float32)
    calls = []
    for fwd, bwd in c["ours"]:
        def call(fwd=fwd, bwd=bwd):
            with kc.use_variants(forward=fwd, backward=bwd):
                if c["train"]:
                    m(s[0], s[1]).backward(grad)
                else:
                    with torch.no_grad():
                        m(s[0], s[1])
        calls.append((f"ours {fwd}+{bwd}", call))
    ok, info = fbgemm.available()
    print(f"FBGEMM: {info}", flush=True)
    if ok:
        f = fbgemm.like(m)

        def call_fb():
            if c["train"]:
                f(s[0], s[1]).backward(grad)
            else:
                with torch.no_grad():
                    f(s[0], s[1])
        calls.append(("fbgemm", call_fb))
    for _, call in calls:  # warm-up (lazy initialisation, caches) outside the profiled range
        call()
    torch.cuda.synchronize()
    # the backward on this thread (autograd otherwise runs it on its device thread, outside this
    # thread's NVTX range: ncu then profiled no backward kernel)
    with torch.autograd.set_multithreading_enabled(False):
        torch.cuda.nvtx.range_push("prof")
        for name, call in calls:
            print(f"profiled: {name}", flush=True)
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
