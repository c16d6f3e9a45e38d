"""Which TBE kernel variants crash (GPU only): a crash (an illegal address) poisons the CUDA
context for the rest of the process, so one crashing variant would fail every later test and
benchmark case of a run. This runs every variant's forward and backward on small mixed inputs
in a child process; when that child fails, each variant alone in a child of its own. It prints
the variants that failed and writes them, as a ``$TBE_SKIP_VARIANTS`` value (``fwd:NAME`` /
``bwd:NAME``, comma-separated; empty when none failed), to --out, for gpu/run_all.sh to pass to
the tests and the benchmark. The fallback variants (runtime.kernels.cuda.FALLBACK) cannot be
left out: when one of them fails, it is printed and the exit status is 1.

    python3 gpu/tbe_smoke.py --out /tmp/tbe_skip_variants.txt      # ~10 s when none fails
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def exercise(forward: list[str], backward: list[str]) -> None:
    """Forward and two training steps per variant: pooled (every dim class, weighted, fp32 and
    fp16, Zipf ids with rows past the chunk length) and NONE pooling (dims 12 and 64)."""
    import torch

    from runtime.embedding import OptimizerConfig, OptimType, Pooling, TableBatchedEmbedding, TableConfig
    from runtime.kernels import cuda as kc

    dev = torch.device("cuda")
    torch.manual_seed(0)
    layouts = [([4, 20, 64, 100, 128, 200, 256, 384, 5, 130], Pooling.SUM), ([128] * 3, Pooling.SUM),
               ([64] * 3, Pooling.MEAN), ([256] * 2, Pooling.SUM), ([12] * 2, Pooling.NONE), ([64] * 2, Pooling.NONE)]
    for dims, pooling in layouts:
        for dtype in (torch.float32, torch.float16):
            for opt in (OptimType.EXACT_SGD, OptimType.EXACT_ROWWISE_ADAGRAD):
                m = TableBatchedEmbedding([TableConfig(rows=500, dim=d) for d in dims], pooling=pooling,
                                          optimizer=OptimizerConfig(opt, lr=0.05), weights_dtype=dtype, device=dev,
                                          backend="cuda")
                batch, nf = 64, len(dims)
                lengths = torch.randint(0, 40, (nf * batch,), device=dev)
                offsets = torch.zeros(nf * batch + 1, dtype=torch.int64, device=dev)
                offsets[1:] = torch.cumsum(lengths, 0)
                n = int(offsets[-1])
                ranks = torch.multinomial(torch.arange(1, 501, device=dev, dtype=torch.float).pow(-1.1), n,
                                          replacement=True)
                psw = torch.rand(n, device=dev) + 0.5 if pooling is not Pooling.NONE else None
                for fv in forward:
                    with kc.use_variants(forward=fv):
                        with torch.no_grad():
                            m(ranks, offsets, psw)
                for bv in backward:
                    with kc.use_variants(backward=bv):
                        for _ in range(2):
                            out = m(ranks, offsets, psw)
                            out.backward(torch.randn_like(out))
                torch.cuda.synchronize()


def child(forward: list[str], backward: list[str]) -> bool:
    cmd = [sys.executable, __file__, "--child", "--fwd", ",".join(forward), "--bwd", ",".join(backward)]
    env = dict(os.environ, TBE_SKIP_VARIANTS="")
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"FAILED (rc {r.returncode}): forward {forward} backward {backward}\n{r.stderr[-1500:]}", flush=True)
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the $TBE_SKIP_VARIANTS value here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fwd", default="", help=argparse.SUPPRESS)
    ap.add_argument("--bwd", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        exercise([v for v in args.fwd.split(",") if v], [v for v in args.bwd.split(",") if v])
        return 0
    from runtime.kernels import cuda as kc

    kc.load()  # build (or reuse) the extension once, outside the children's time limits
    fwd, bwd = list(kc.FORWARD_VARIANTS), list(kc.BACKWARD_VARIANTS)
    bad: list[str] = []
    if child(fwd, bwd):
        print(f"every variant ran: forward {fwd}, backward {bwd}", flush=True)
    else:
        bad = [f"fwd:{v}" for v in fwd if not child([v], [])] + [f"bwd:{v}" for v in bwd if not child([], [v])]
        print(f"variants that failed: {bad or 'none alone (only together)'}", flush=True)
    fallback = {f"fwd:{kc.FALLBACK[0]}", f"bwd:{kc.FALLBACK[1]}"}
    skip = [v for v in bad if v not in fallback]
    if args.out:
        Path(args.out).write_text(",".join(skip))
    print(f"TBE_SKIP_VARIANTS={','.join(skip)}", flush=True)
    if fallback & set(bad):
        print(f"a fallback variant failed ({sorted(fallback & set(bad))}): it cannot be left out", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
