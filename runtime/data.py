"""Synthetic recommendation data: pinned ``Batch``es built ahead of time.

One sparse feature per table. Bag lengths are uniform integers in ``[0, 2 * pooling_factor]``
(mean ``pooling_factor``); ids are uniform or Zipf-distributed over the table's rows, the hot
ranks scattered over the table by a fixed multiplicative hash so that hot rows are not
neighbours. Dense features are standard normal, labels Bernoulli(0.5). Every rank gets its own
stream of batches (seed and rank together pick it), as data-parallel training does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

import torch

from runtime.batch import Batch, KeyedJaggedTensor, feature_keys

_HASH_PRIME = 2_654_435_761  # Knuth's multiplicative hash constant, coprime to any table size < 2^31


@dataclass(frozen=True)
class DataConfig:
    """What the synthetic loader produces."""

    num_embeddings: tuple[int, ...]
    """Rows of each table; one sparse feature per table, ids drawn in ``[0, rows)``."""
    batch_size: int = 512
    """Samples per batch on each rank (B)."""
    num_batches: int = 16
    """Batches the loader yields before it stops."""
    pooling_factor: float = 8.0
    """Mean ids per (feature, sample); lengths are uniform in ``[0, 2 * pooling_factor]``."""
    pooling_factors: tuple[float, ...] = ()
    """Per table, in place of ``pooling_factor`` (hot tables: more ids per sample); empty: every
    table has ``pooling_factor``."""
    distribution: str = "zipf"
    """``"zipf"`` or ``"uniform"`` ids."""
    zipf_alpha: float = 1.05
    """Zipf exponent (> 0, != 1) when ``distribution == "zipf"``."""
    num_dense: int = 13
    """Dense features per sample."""
    weighted: bool = False
    """Give every id a per-sample weight (uniform in [0, 1))."""
    distinct_batches: int = 0
    """Build only this many distinct batches and cycle through them (0: all distinct). Keeps
    host memory small for long benchmark runs."""
    seed: int = 0
    """Base seed; rank r uses ``seed * 1_000_003 + r``."""
    pin_memory: bool = True
    """Pin the batches (only when CUDA is available: pinning needs a driver)."""

    def __post_init__(self) -> None:
        if not self.num_embeddings or any(n <= 0 for n in self.num_embeddings):
            raise ValueError("num_embeddings must be a non-empty tuple of positive row counts")
        object.__setattr__(self, "num_embeddings", tuple(int(n) for n in self.num_embeddings))
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {self.batch_size}")
        if self.num_batches < 0:
            raise ValueError(f"num_batches must be >= 0, got {self.num_batches}")
        if self.pooling_factor < 0:
            raise ValueError(f"pooling_factor must be >= 0, got {self.pooling_factor}")
        object.__setattr__(self, "pooling_factors", tuple(float(p) for p in self.pooling_factors))
        if self.pooling_factors and (len(self.pooling_factors) != len(self.num_embeddings) or min(self.pooling_factors) < 0):
            raise ValueError("pooling_factors must give one factor >= 0 per table")
        if self.distribution not in ("zipf", "uniform"):
            raise ValueError(f"distribution must be 'zipf' or 'uniform', got {self.distribution!r}")
        if self.zipf_alpha <= 0 or self.zipf_alpha == 1.0:
            raise ValueError(f"zipf_alpha must be > 0 and != 1, got {self.zipf_alpha}")
        if self.num_dense <= 0:
            raise ValueError(f"num_dense must be > 0, got {self.num_dense}")
        if self.distinct_batches < 0:
            raise ValueError(f"distinct_batches must be >= 0, got {self.distinct_batches}")

    @property
    def keys(self) -> tuple[str, ...]:
        return feature_keys(len(self.num_embeddings))


def _zipf_ids(n: int, rows: int, alpha: float, gen: torch.Generator) -> torch.Tensor:
    """``[n]`` int64 ids in [0, rows): bounded Zipf by inverse CDF of the continuous law, hashed."""
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    a = 1.0 - alpha
    # continuous density ~ x^-alpha on [1, rows + 1): x = ((N+1)^a - 1) u + 1)^(1/a)
    x = ((float(rows + 1) ** a - 1.0) * u + 1.0) ** (1.0 / a)
    rank = (x.floor().to(torch.int64) - 1).clamp_(0, rows - 1)
    return (rank * _HASH_PRIME) % rows


def make_batch(cfg: DataConfig, gen: torch.Generator) -> Batch:
    """One host batch drawn from ``gen``."""
    b, f = cfg.batch_size, len(cfg.num_embeddings)
    if cfg.pooling_factors:
        lengths = torch.cat([torch.randint(0, int(round(2 * p)) + 1, (b,), generator=gen, dtype=torch.int64)
                             for p in cfg.pooling_factors])  # [F*B], feature-major
    else:
        hi = int(round(2 * cfg.pooling_factor))
        lengths = torch.randint(0, hi + 1, (f * b,), generator=gen, dtype=torch.int64)  # [F*B]
    per_key = lengths.view(f, b).sum(dim=1).tolist()  # [F]
    chunks = []
    for rows, n in zip(cfg.num_embeddings, per_key):
        if cfg.distribution == "zipf":
            chunks.append(_zipf_ids(n, rows, cfg.zipf_alpha, gen))
        else:
            chunks.append(torch.randint(0, rows, (n,), generator=gen, dtype=torch.int64))
    values = torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.int64)  # [nnz]
    weights = torch.rand(values.numel(), generator=gen) if cfg.weighted else None  # [nnz]
    sparse = KeyedJaggedTensor(cfg.keys, values, lengths, b, tuple(per_key), weights)
    dense = torch.randn(b, cfg.num_dense, generator=gen)  # [B, num_dense]
    labels = torch.randint(0, 2, (b,), generator=gen).to(torch.float32)  # [B]
    return Batch(dense, sparse, labels)


class SyntheticLoader:
    """Iterable over ``cfg.num_batches`` host batches, all built (and pinned) in the constructor."""

    def __init__(self, cfg: DataConfig, *, rank: int = 0) -> None:
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + rank)
        n_build = cfg.num_batches if cfg.distinct_batches == 0 else min(cfg.distinct_batches, cfg.num_batches)
        pin = cfg.pin_memory and torch.cuda.is_available()
        self._batches = []
        for _ in range(n_build):
            batch = make_batch(cfg, gen)
            self._batches.append(batch.pin_memory() if pin else batch)

    def __len__(self) -> int:
        return self.cfg.num_batches

    def first(self, num_batches: int) -> "SyntheticLoader":
        """A loader over this one's first ``num_batches`` batches (any number with cycled
        ``distinct_batches``), sharing its built batches: nothing is generated or pinned again.
        Its ``cfg`` is this one's with ``num_batches`` replaced."""
        cfg = dataclasses.replace(self.cfg, num_batches=num_batches)
        n_build = cfg.num_batches if cfg.distinct_batches == 0 else min(cfg.distinct_batches, cfg.num_batches)
        if n_build > len(self._batches):
            raise ValueError(f"{num_batches} batches need {n_build} distinct ones, this loader built {len(self._batches)}")
        view = object.__new__(SyntheticLoader)
        view.cfg, view._batches = cfg, self._batches[:n_build]
        return view

    def __iter__(self) -> Iterator[Batch]:
        for i in range(self.cfg.num_batches):
            yield self._batches[i % len(self._batches)]
