"""Write a large, real Kineto trace of a DLRM-style training loop (for the loader benchmark).

Runs on a GPU (or, slowly, on the CPU). The issue's recipe: 26 EmbeddingBag tables updated by
Adagrad, MLPs updated by Adam, the batch copied to the GPU on a side stream, profiled for 160
steps with record_shapes, profile_memory and with_stack. With the defaults this writes ~500 MB
of JSON (~1.6 M events). It uses plain torch (no tracekit, no runtime) so it is what any user's
trace looks like, labelled with TorchRec's stage names.

    python -m bench.common.large_trace --out DIR [--steps 160] [--tables 26] [--batch 2048]

Writes DIR/<name>.json.gz (and prints its size and event count).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from bench.common.synthetic_trace import Written


class DLRM(nn.Module):
    """Dense MLP + one EmbeddingBag per table + dot interaction + over-arch MLP."""

    def __init__(self, num_tables: int, rows: int, dim: int, dense_in: int) -> None:
        super().__init__()
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(rows, dim, mode="sum", sparse=True) for _ in range(num_tables)
        )
        self.bottom = nn.Sequential(
            nn.Linear(dense_in, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, dim), nn.ReLU()
        )
        n = num_tables + 1
        self.top = nn.Sequential(
            nn.Linear(n * (n - 1) // 2 + dim, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1)
        )

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor], offs: list[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)  # (B, D)
        embs = [t(i, o) for t, i, o in zip(self.tables, ids, offs)]  # T x (B, D)
        z = torch.stack([x] + embs, dim=1)  # (B, T+1, D)
        inter = torch.bmm(z, z.transpose(1, 2))  # (B, T+1, T+1)
        iu = torch.triu_indices(z.shape[1], z.shape[1], offset=1, device=z.device)
        flat = inter[:, iu[0], iu[1]]  # (B, (T+1)T/2)
        return self.top(torch.cat([x, flat], dim=1)).squeeze(1)  # (B,)


def make_batches(n: int, *, tables: int, rows: int, batch: int, pooling: int, dense_in: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        dense = torch.randn(batch, dense_in, generator=g)
        ids, offs = [], []
        for _t in range(tables):
            lengths = torch.randint(1, 2 * pooling, (batch,), generator=g)
            offs.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
            ids.append(torch.randint(0, rows, (int(lengths.sum()),), generator=g))
        labels = torch.randint(0, 2, (batch,), generator=g).float()
        out.append((dense.pin_memory(), [i.pin_memory() for i in ids], [o.pin_memory() for o in offs], labels.pin_memory()) if torch.cuda.is_available() else (dense, ids, offs, labels))
    return out


@dataclass(frozen=True)
class LargeTraceConfig:
    """The training loop :func:`write_large_trace` profiles (the defaults: ~500 MB of JSON)."""

    name: str = "large_rank0"
    """File name, without ``.json.gz``."""
    steps: int = 160
    """Profiled steps (after 1 wait and 2 warm-up steps)."""
    tables: int = 26
    """EmbeddingBag tables (Adagrad)."""
    rows: int = 200_000
    """Rows per table."""
    dim: int = 64
    """Embedding dim."""
    batch: int = 2048
    """Samples per batch."""
    pooling: int = 20
    """Mean ids per bag (lengths uniform in [1, 2 * pooling))."""
    stack: bool = True
    """Profile with ``with_stack`` (a larger trace)."""


def write_large_trace(out_dir: str | Path, cfg: LargeTraceConfig = LargeTraceConfig()) -> Written:
    """Run and profile the loop of ``cfg`` on the GPU (else the CPU) and write
    ``out_dir/<name>.json.gz``."""
    args = cfg
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = DLRM(args.tables, args.rows, args.dim, 13).to(dev)
    sparse_params = [p for t in model.tables for p in t.parameters()]
    dense_params = list(model.bottom.parameters()) + list(model.top.parameters())
    emb_opt = torch.optim.Adagrad(sparse_params, lr=0.01)
    dense_opt = torch.optim.Adam(dense_params, lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    host_batches = make_batches(
        4, tables=args.tables, rows=args.rows, batch=args.batch, pooling=args.pooling, dense_in=13, seed=1
    )
    copy_stream = torch.cuda.Stream() if dev.type == "cuda" else None

    def to_device(i: int, b):
        # The batch copy runs on the side stream (copy_stream); the main stream waits for it.
        with record_function(f"## copy_batch_to_gpu {i} ##"):
            if copy_stream is None:
                return b
            with torch.cuda.stream(copy_stream):
                dense, ids, offs, labels = b
                moved = (
                    dense.to(dev, non_blocking=True),
                    [x.to(dev, non_blocking=True) for x in ids],
                    [x.to(dev, non_blocking=True) for x in offs],
                    labels.to(dev, non_blocking=True),
                )
            torch.cuda.current_stream().wait_stream(copy_stream)
            return moved

    wait, warmup = 1, 2
    total = wait + warmup + args.steps
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, f"{args.name}.json")
    t0 = time.time()
    with profile(
        activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else []),
        schedule=schedule(wait=wait, warmup=warmup, active=args.steps, repeat=1),
        record_shapes=True,
        profile_memory=True,
        with_stack=args.stack,
        on_trace_ready=lambda prof: prof.export_chrome_trace(json_path),
    ) as prof:
        for i in range(total):
            dense, ids, offs, labels = to_device(i, host_batches[i % len(host_batches)])
            with record_function("## zero_grad ##"):
                emb_opt.zero_grad(set_to_none=True)
                dense_opt.zero_grad(set_to_none=True)
            with record_function(f"## forward {i} ##"):
                loss = loss_fn(model(dense, ids, offs), labels)
            with record_function(f"## backward {i} ##"):
                loss.backward()
            with record_function(f"## optimizer {i} ##"):
                emb_opt.step()
                dense_opt.step()
            prof.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t1 = time.time()
    gz_path = json_path + ".gz"
    with open(json_path, "rb") as src, gzip.open(gz_path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    raw = os.path.getsize(json_path)
    with open(json_path, "rb") as f:
        n_events = len(json.load(f)["traceEvents"])
    os.remove(json_path)
    print(f"{args.steps} profiled steps in {t1 - t0:.1f} s on {dev}")
    return Written(Path(gz_path), raw, n_events)


def main(argv: list[str] | None = None) -> None:
    d = LargeTraceConfig()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--name", default=d.name)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--tables", type=int, default=d.tables)
    p.add_argument("--rows", type=int, default=d.rows)
    p.add_argument("--dim", type=int, default=d.dim)
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--pooling", type=int, default=d.pooling)
    p.add_argument("--no-stack", action="store_true", help="leave out with_stack (smaller trace)")
    a = p.parse_args(argv)
    w = write_large_trace(a.out, LargeTraceConfig(name=a.name, steps=a.steps, tables=a.tables, rows=a.rows, dim=a.dim,
                                                  batch=a.batch, pooling=a.pooling, stack=not a.no_stack))
    print(f"wrote {w.path}: {w.json_bytes / 1e6:.1f} MB JSON, {w.path.stat().st_size / 1e6:.1f} MB gzipped, {w.events} events")


if __name__ == "__main__":
    main()
