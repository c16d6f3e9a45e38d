"""A SparseNN / DLRM model on the table-batched embedding, and its dense optimizer.

``DLRM``: dense features -> dense arch (MLP) -> ``[B, D]``; sparse features -> sparse arch
(one table per feature, pooled) -> ``[B, F, D]``; interaction (pairwise dot products of the
F + 1 vectors, upper triangle, concatenated with the dense vector) -> over arch (MLP) -> one
logit per sample; loss = mean binary cross-entropy with logits.

The model knows nothing of streams, ranks or all-to-all: ``runtime.sharding.shard_model``
swaps its sparse arch from outside, and the pipelines call its two halves
(``sparse_arch(kjt)`` and ``dense_forward(batch, embeddings)``) on the streams they choose.
The embedding tables are updated inside their own backward (fused optimizer); the dense
optimizer built by ``make_dense_optimizer`` holds the dense parameters only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from runtime.batch import Batch, KeyedJaggedTensor, feature_keys
from runtime.embedding import OptimizerConfig, OptimType, TableBatchedEmbedding, TableConfig


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the DLRM."""

    num_embeddings: tuple[int, ...]
    """Rows of each table (one sparse feature per table)."""
    embedding_dim: int = 64
    """D: dimension of every table, and the dense arch's output width."""
    num_dense: int = 13
    """Dense input features."""
    dense_arch: tuple[int, ...] = (512, 256)
    """Hidden widths of the dense (bottom) MLP; a last layer of width D is appended."""
    over_arch: tuple[int, ...] = (1024, 1024, 512)
    """Hidden widths of the over (top) MLP; a last layer of width 1 is appended (with one task
    head), or the task heads follow its last hidden layer."""
    task_heads: int = 1
    """T: output heads. 1: the over arch ends in one logit (plain DLRM). T > 1: T separate
    ``Linear(width, 1)`` modules on the over arch's last hidden layer, one logit each (a
    multi-task model: many small dense parameters), all trained on the batch's label."""
    embedding_optimizer: str = "rowwise_adagrad"
    """Fused table optimizer: ``"sgd"`` (EXACT_SGD) or ``"rowwise_adagrad"``."""
    embedding_lr: float = 0.05
    """Learning rate of the fused table optimizer."""
    embedding_backend: str = "auto"
    """TBE backend: ``"auto"``, ``"cuda"`` or ``"reference"``."""
    seed: int = 0
    """Initialises every parameter; table t uses its own generator seeded from (seed, t)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_embeddings", tuple(int(n) for n in self.num_embeddings))
        object.__setattr__(self, "dense_arch", tuple(int(n) for n in self.dense_arch))
        object.__setattr__(self, "over_arch", tuple(int(n) for n in self.over_arch))
        if not self.num_embeddings or any(n <= 0 for n in self.num_embeddings):
            raise ValueError("num_embeddings must be a non-empty tuple of positive row counts")
        if self.embedding_dim <= 0 or self.num_dense <= 0:
            raise ValueError("embedding_dim and num_dense must be > 0")
        if any(n <= 0 for n in self.dense_arch + self.over_arch):
            raise ValueError("MLP widths must be > 0")
        if self.task_heads < 1:
            raise ValueError(f"task_heads must be >= 1, got {self.task_heads}")
        if self.embedding_optimizer not in ("sgd", "rowwise_adagrad"):
            raise ValueError(f"embedding_optimizer must be 'sgd' or 'rowwise_adagrad', got {self.embedding_optimizer!r}")
        if not self.embedding_lr > 0:
            raise ValueError(f"embedding_lr must be > 0, got {self.embedding_lr}")
        if self.embedding_backend not in ("auto", "cuda", "reference"):
            raise ValueError(f"embedding_backend must be auto|cuda|reference, got {self.embedding_backend!r}")

    @property
    def tables(self) -> tuple[TableConfig, ...]:
        return tuple(TableConfig(rows=n, dim=self.embedding_dim, name=f"t{i}") for i, n in enumerate(self.num_embeddings))

    @property
    def keys(self) -> tuple[str, ...]:
        return feature_keys(len(self.num_embeddings))

    def optimizer_config(self) -> OptimizerConfig:
        kind = OptimType.EXACT_SGD if self.embedding_optimizer == "sgd" else OptimType.EXACT_ROWWISE_ADAGRAD
        return OptimizerConfig(type=kind, lr=self.embedding_lr)


@dataclass(frozen=True)
class DenseOptimizerConfig:
    """The optimizer of the dense parameters (a torch.optim one, stepped by the pipeline)."""

    kind: str = "adam"
    """``"sgd"``, ``"adagrad"`` or ``"adam"``."""
    lr: float = 1e-3
    """Learning rate."""
    foreach: bool = True
    """Use the multi-tensor (foreach) implementation."""

    def __post_init__(self) -> None:
        if self.kind not in ("sgd", "adagrad", "adam"):
            raise ValueError(f"dense optimizer must be sgd|adagrad|adam, got {self.kind!r}")
        if not self.lr > 0:
            raise ValueError(f"dense optimizer lr must be > 0, got {self.lr}")


def mlp(widths: Sequence[int], *, last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TaskHeads(nn.Module):
    """T separate ``Linear(width, 1)`` heads: ``[B, width] -> [B, T]``. Each head keeps its own
    parameters (so a dense optimizer sees 2T small tensors, as in a multi-task model with many
    dense modules); the forward runs them as one matmul over their concatenated weights."""

    def __init__(self, width: int, count: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(width, 1) for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = torch.cat([h.weight for h in self.heads], dim=0)  # [T, width]
        bias = torch.cat([h.bias for h in self.heads], dim=0)  # [T]
        return torch.addmm(bias, x, weight.t())  # [B, T]


class SparseArch(nn.Module):
    """Pooled (sum) lookup of one table per feature: ``kjt -> [B, F, D]``."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        table_ids: Sequence[int] | None = None,
        device: torch.device | str = "cpu",
        materialize: bool = True,
    ) -> None:
        super().__init__()
        self.config = config
        self.table_ids = tuple(range(len(config.num_embeddings)) if table_ids is None else table_ids)
        self.keys = tuple(config.keys[t] for t in self.table_ids)
        self.embedding_dim = config.embedding_dim
        self.embedding: TableBatchedEmbedding | None = None
        if materialize and self.table_ids:
            all_tables = config.tables
            self.embedding = TableBatchedEmbedding(
                [all_tables[t] for t in self.table_ids],
                optimizer=config.optimizer_config(),
                device=device,
                backend=config.embedding_backend,
            )
            self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Table t: uniform(+-sqrt(1/rows)) from a generator seeded by (seed, t), so a table's
        initial values do not depend on which rank holds it or what else is there; the fused
        optimizer's state zero. Called again, it puts the tables back to their initial values
        in place (no new memory)."""
        if self.embedding is None:
            return
        for view, t in zip(self.embedding.split_embedding_weights(), self.table_ids):
            gen = torch.Generator(device=view.device).manual_seed(self.config.seed * 100_003 + 7919 * t + 1)
            bound = (1.0 / view.shape[0]) ** 0.5
            view.uniform_(-bound, bound, generator=gen)
        self.embedding.momentum.zero_()

    def table_bytes(self) -> list[int]:
        return [n * self.embedding_dim * 4 for n in (self.config.num_embeddings[t] for t in self.table_ids)]

    def subset(self, table_ids: Sequence[int], *, device: torch.device | str) -> "SparseArch":
        """A new sparse arch over some of this one's tables (positions in ``self.table_ids``),
        initialised exactly as they are here."""
        return SparseArch(self.config, table_ids=[self.table_ids[i] for i in table_ids], device=device)

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        b, f, d = kjt.stride, len(self.table_ids), self.embedding_dim
        if self.embedding is None:
            if f == 0:
                return torch.zeros(b, 0, d, device=kjt.device)
            raise RuntimeError("this sparse arch was built without tables (materialize=False)")
        pooled = self.embedding(kjt.values, kjt.offsets(), kjt.weights)  # [B, F*D]
        return pooled.view(b, f, d)


class DLRM(nn.Module):
    """Dense arch + sparse arch + dot interaction + over arch."""

    def __init__(
        self, config: ModelConfig, *, device: torch.device | str = "cpu", materialize_embeddings: bool = True
    ) -> None:
        super().__init__()
        self.config = config
        d, f = config.embedding_dim, len(config.num_embeddings)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.dense_arch = mlp((config.num_dense, *config.dense_arch, d), last_relu=True).to(device)
            n_inter = d + (f + 1) * f // 2
            if config.task_heads == 1:
                self.over_arch = mlp((n_inter, *config.over_arch, 1), last_relu=False).to(device)
                self.heads: TaskHeads | None = None
            else:
                self.over_arch = mlp((n_inter, *config.over_arch), last_relu=True).to(device)
                width = config.over_arch[-1] if config.over_arch else n_inter
                self.heads = TaskHeads(width, config.task_heads).to(device)
        self.sparse_arch: nn.Module = SparseArch(config, device=device, materialize=materialize_embeddings)
        rows, cols = torch.triu_indices(f + 1, f + 1, offset=1)
        self.register_buffer("_tri_rows", rows.to(device), persistent=False)
        self.register_buffer("_tri_cols", cols.to(device), persistent=False)

    def dense_modules(self) -> tuple[str, ...]:
        """Attribute names of the data-parallel (dense) submodules."""
        return ("dense_arch", "over_arch") if self.heads is None else ("dense_arch", "over_arch", "heads")

    def dense_parameters(self) -> list[nn.Parameter]:
        return [p for name in self.dense_modules() for p in getattr(self, name).parameters()]

    def dense_forward(self, batch: Batch, embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``embeddings`` ``[B, F, D]`` -> (loss scalar, logits ``[B]``, or ``[B, T]`` with T task
        heads: the loss is then the mean over heads of each head's loss on the batch's label)."""
        x = self.dense_arch(batch.dense)  # [B, D]
        z = torch.cat([x.unsqueeze(1), embeddings], dim=1)  # [B, F+1, D]
        dots = torch.bmm(z, z.transpose(1, 2))  # [B, F+1, F+1]
        inter = dots[:, self._tri_rows, self._tri_cols]  # [B, (F+1)F/2]
        top = self.over_arch(torch.cat([x, inter], dim=1))  # [B, 1], or [B, W] before T heads
        if self.heads is None:
            logits = top.squeeze(1)  # [B]
            loss = nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        else:
            logits = self.heads(top)  # [B, T]
            loss = nn.functional.binary_cross_entropy_with_logits(logits, batch.labels.unsqueeze(1).expand_as(logits))
        return loss, logits

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.dense_forward(batch, self.sparse_arch(batch.sparse))


def make_dense_optimizer(model: DLRM, config: DenseOptimizerConfig) -> torch.optim.Optimizer:
    """A torch optimizer over the dense parameters only (tables update themselves)."""
    params = model.dense_parameters()
    if config.kind == "sgd":
        return torch.optim.SGD(params, lr=config.lr, foreach=config.foreach)
    if config.kind == "adagrad":
        return torch.optim.Adagrad(params, lr=config.lr, foreach=config.foreach)
    return torch.optim.Adam(params, lr=config.lr, foreach=config.foreach)
