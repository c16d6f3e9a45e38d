"""Table-batched embedding (TBE) with the optimizer fused into backward.

One module holds many embedding tables in ONE flat weights buffer (FBGEMM's ``weights_dev`` +
``weights_offsets``) and their optimizer state, looks all features up in one call, and in
backward updates the touched rows in place: no weight gradient is ever materialised and the
weights' ``.grad`` stays ``None`` (so a dense optimizer that also holds them skips them).

Input is FBGEMM's layout: ``indices`` (N,) over all features, ``offsets`` (F*B+1,), bag ``b``
of feature ``f`` = ``indices[offsets[f*B+b] : offsets[f*B+b+1]]``. The math of every pooling
and optimizer is written down in ``runtime/kernels/reference.py``.

Backends: ``"cuda"`` (our kernels in ``runtime/kernels/*.cu``), ``"reference"`` (pure torch,
any device), ``"auto"`` (cuda on a CUDA device when the kernels build, else the reference
with a warning). The module knows nothing of streams or all-to-all.

Out-of-range indices: never read. The reference raises :class:`EmbeddingIndexError` at once
(one ``.any()``: a host sync when it runs on a GPU). The CUDA forward checks every index on the
device; a bag holding a bad index is written as NaN, its bad indices get no update, and the
first bad position is recorded without a host sync; the error is raised at the next
``forward``/``backward`` of the module once the device has produced it, or at once by
:meth:`TableBatchedEmbedding.check_indices` (a sync). ``index_check="sync"`` raises in the
same forward at the cost of one host sync per call.
Cost of the default ("deferred") check per CUDA forward: a compare per index inside the
lookup kernel, an 8-byte fill, an 8-byte device-to-host copy into pinned memory and an event
record on the current stream, and an event query on the next call: no host sync, nothing
in a trace's sync-stall analysis. Offsets are checked by the reference only (a malformed
``offsets`` on the CUDA backend is clamped to ``[0, N]``, never read out of bounds).
"""

from __future__ import annotations

import math
from collections import OrderedDict
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import torch
from torch import Tensor, nn

from runtime.kernels import reference
from runtime.kernels.record import BACKWARD as _REC_BACKWARD
from runtime.kernels.record import FORWARD as _REC_FORWARD
from runtime.kernels.record import recorded
from runtime.kernels.common import (
    OPT_EXACT_ROWWISE_ADAGRAD,
    OPT_EXACT_SGD,
    POOL_MEAN,
    POOL_NONE,
    POOL_SUM,
    EmbeddingIndexError,
    KernelUnavailableError,
    RowUpdate,
    TBELayout,
    make_layout,
)

__all__ = [
    "TableConfig",
    "Pooling",
    "OptimType",
    "OptimizerConfig",
    "TableBatchedEmbedding",
    "RowUpdate",
    "EmbeddingIndexError",
    "KernelUnavailableError",
]


@dataclass(frozen=True)
class TableConfig:
    """One embedding table."""

    rows: int
    """number of rows (ids 0 .. rows-1); > 0"""
    dim: int
    """embedding dimension; > 0 (the CUDA backend takes up to 1024)"""
    name: str = ""
    """free-form label, used in messages only"""

    def __post_init__(self) -> None:
        for field in ("rows", "dim"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"TableConfig {self.name!r}: {field} must be a positive int, got {v!r}")


class Pooling(Enum):
    """How the rows of one bag are combined."""

    SUM = POOL_SUM
    MEAN = POOL_MEAN
    NONE = POOL_NONE


class OptimType(Enum):
    """The optimizer applied inside backward."""

    EXACT_SGD = OPT_EXACT_SGD
    EXACT_ROWWISE_ADAGRAD = OPT_EXACT_ROWWISE_ADAGRAD


@dataclass(frozen=True)
class OptimizerConfig:
    """The fused optimizer and its hyper-parameters."""

    type: OptimType
    """EXACT_SGD (w -= lr*g) or EXACT_ROWWISE_ADAGRAD (FBGEMM: m += mean(g^2); w -= lr*g/(sqrt(m)+eps))"""
    lr: float
    """learning rate; finite and > 0"""
    eps: float = 1e-8
    """Adagrad's denominator term; finite and >= 0 (unused by SGD)"""

    def __post_init__(self) -> None:
        if not isinstance(self.type, OptimType):
            raise ValueError(f"OptimizerConfig.type must be an OptimType, got {self.type!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"OptimizerConfig.lr must be a finite number > 0, got {self.lr!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"OptimizerConfig.eps must be a finite number >= 0, got {self.eps!r}")


_CUDA_MAX_DIM = 1024


class _TBEFunction(torch.autograd.Function):
    """Forward = lookup; backward = optimizer update in place; returns no gradient at all.

    ``weights`` is an input only so that the output requires grad; it is not saved with
    ``save_for_backward`` (its version changes in every backward, and a pipeline may run the
    next forward before this backward).
    """

    @staticmethod
    def forward(ctx, weights, indices, offsets, per_sample_weights, module):  # noqa: ANN001
        ctx.module = module
        ctx.inputs = (indices, offsets, per_sample_weights)
        return module._lookup(indices, offsets, per_sample_weights)

    @staticmethod
    def backward(ctx, grad_output):  # noqa: ANN001
        indices, offsets, per_sample_weights = ctx.inputs
        ctx.module._update(indices, offsets, per_sample_weights, grad_output)
        return None, None, None, None, None


class TableBatchedEmbedding(nn.Module):
    """Many embedding tables looked up in one call; optimizer fused into backward.

    After each backward, :attr:`last_update` holds the rows it updated (:class:`RowUpdate`,
    device-resident, no host sync needed to produce it).
    """

    def __init__(
        self,
        tables: Sequence[TableConfig],
        *,
        feature_table_map: Sequence[int] | None = None,
        pooling: Pooling = Pooling.SUM,
        optimizer: OptimizerConfig,
        weights_dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        backend: str = "auto",
        index_check: str = "deferred",
    ) -> None:
        super().__init__()
        tables = list(tables)
        if not tables or not all(isinstance(t, TableConfig) for t in tables):
            raise ValueError("tables must be a non-empty sequence of TableConfig")
        if feature_table_map is None:
            feature_table_map = list(range(len(tables)))
        feature_table_map = [int(k) for k in feature_table_map]
        if not feature_table_map:
            raise ValueError("feature_table_map must name at least one feature")
        for f, k in enumerate(feature_table_map):
            if not 0 <= k < len(tables):
                raise ValueError(f"feature_table_map[{f}] = {k} is not a table index (0..{len(tables) - 1})")
        if not isinstance(pooling, Pooling):
            raise ValueError(f"pooling must be a Pooling, got {pooling!r}")
        if not isinstance(optimizer, OptimizerConfig):
            raise ValueError(f"optimizer must be an OptimizerConfig, got {optimizer!r}")
        dims = {tables[k].dim for k in feature_table_map}
        if pooling is Pooling.NONE and len(dims) != 1:
            raise ValueError(f"pooling NONE needs all features to share one dim, got dims {sorted(dims)}")
        if weights_dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            raise ValueError(
                f"weights_dtype must be torch.float32, float16 or bfloat16 (float64: reference only), got {weights_dtype}"
            )
        if backend not in ("auto", "cuda", "reference"):
            raise ValueError(f"backend must be 'auto', 'cuda' or 'reference', got {backend!r}")
        if index_check not in ("deferred", "sync"):
            raise ValueError(f"index_check must be 'deferred' or 'sync', got {index_check!r}")
        device = torch.device(device) if device is not None else torch.device("cpu")

        self.tables = tuple(tables)
        self.feature_table_map = tuple(feature_table_map)
        self.pooling = pooling
        self.optimizer = optimizer
        self.index_check = index_check
        self.layout: TBELayout = make_layout(
            [t.rows for t in tables], [t.dim for t in tables], feature_table_map, device
        )
        self.backend = self._pick_backend(backend, device, weights_dtype, self.layout.max_dim)

        # flat weights: table k at layout.weights_offsets_list[k]; .grad stays None
        self.weights = nn.Parameter(
            torch.zeros(self.layout.total_weights, dtype=weights_dtype, device=device)
        )
        # rowwise Adagrad state: one value per linear row id (empty for SGD)
        n_state = self.layout.total_rows if optimizer.type is OptimType.EXACT_ROWWISE_ADAGRAD else 0
        state_dtype = torch.float64 if weights_dtype == torch.float64 else torch.float32
        self.register_buffer("momentum", torch.zeros(n_state, dtype=state_dtype, device=device))
        self.last_update: RowUpdate | None = None
        self._update_hooks: OrderedDict[int, object] = OrderedDict()  # see register_update_hook
        self._cuda = None  # the loaded kernels (runtime.kernels.cuda), when backend == "cuda"
        self._pending_checks: list[tuple[Tensor, torch.cuda.Event]] = []  # (pinned flag, event) per CUDA forward
        if self.backend == "cuda":
            from runtime.kernels import cuda as cuda_backend

            self._cuda = cuda_backend
        self.reset_parameters()

    # ---------------------------------------------------------------- setup
    @staticmethod
    def _pick_backend(backend: str, device: torch.device, dtype: torch.dtype, max_dim: int) -> str:
        if backend == "reference":
            return "reference"
        problem = None
        if device.type != "cuda":
            problem = f"device is {device}, not a CUDA device"
        elif dtype not in (torch.float32, torch.float16, torch.bfloat16):
            problem = f"the CUDA kernels take float32/float16/bfloat16 weights, not {dtype}"
        elif max_dim > _CUDA_MAX_DIM:
            problem = f"the CUDA kernels take dims up to {_CUDA_MAX_DIM}, not {max_dim}"
        else:
            from runtime.kernels import cuda as cuda_backend

            try:
                cuda_backend.load()
            except KernelUnavailableError as e:
                problem = str(e)
        if problem is None:
            return "cuda"
        if backend == "cuda":
            raise KernelUnavailableError(f"backend 'cuda' cannot run: {problem}")
        if device.type == "cuda":
            warnings.warn(f"TableBatchedEmbedding: falling back to the torch reference ({problem})", stacklevel=3)
        return "reference"

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Each table uniform(-sqrt(1/rows), sqrt(1/rows)) from torch's default generator
        (TorchRec's default); optimizer state zero."""
        for k, t in enumerate(self.tables):
            bound = math.sqrt(1.0 / t.rows)
            self.layout.table_view(self.weights, k).uniform_(-bound, bound)
        self.momentum.zero_()

    def split_embedding_weights(self) -> list[Tensor]:
        """(rows, dim) views of each table inside the flat buffer (writes go to the module)."""
        return [self.layout.table_view(self.weights.detach(), k) for k in range(len(self.tables))]

    def split_optimizer_states(self) -> list[Tensor]:
        """(rows,) views of each table's rowwise-Adagrad momentum ([] for SGD)."""
        if self.momentum.numel() == 0:
            return []
        r = self.layout.row_offsets_list
        return [self.momentum[r[k] : r[k + 1]] for k in range(len(self.tables))]

    # ---------------------------------------------------------------- forward
    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Tensor | None = None) -> Tensor:
        """indices (N,) int64/int32; offsets (F*B+1,) same dtype; per_sample_weights (N,) float.

        Returns (B, sum of feature dims) for SUM/MEAN, (N, dim) for NONE; float32 (float64 for
        float64 weights) whatever the weights' dtype: 16-bit weights are accumulated in float32.
        """
        self._validate(indices, offsets, per_sample_weights)
        self._raise_pending_index_error(block=False)
        return _TBEFunction.apply(self.weights, indices, offsets, per_sample_weights, self)

    def _validate(self, indices: Tensor, offsets: Tensor, psw: Tensor | None) -> None:
        dev = self.weights.device
        if indices.dim() != 1 or offsets.dim() != 1:
            raise ValueError(f"indices and offsets must be 1-D, got shapes {tuple(indices.shape)} and {tuple(offsets.shape)}")
        if indices.dtype not in (torch.int32, torch.int64) or offsets.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"indices/offsets must be int32 or int64, got {indices.dtype}/{offsets.dtype}")
        if indices.device != dev or offsets.device != dev:
            raise ValueError(f"indices/offsets must be on {dev}, got {indices.device}/{offsets.device}")
        nf = self.layout.num_features
        if offsets.numel() < 1 or (offsets.numel() - 1) % nf != 0:
            raise ValueError(f"offsets must have F*B+1 entries with F={nf} features, got {offsets.numel()}")
        if psw is not None:
            if psw.dim() != 1 or psw.numel() != indices.numel() or psw.device != dev or not psw.is_floating_point():
                raise ValueError(f"per_sample_weights must be a floating (N,)={indices.numel()} tensor on {dev}")

    # ---------------------------------------------------------------- index errors
    def check_indices(self) -> None:
        """Raise EmbeddingIndexError now if any past CUDA forward saw a bad index (syncs)."""
        self._raise_pending_index_error(block=True)

    def _raise_pending_index_error(self, *, block: bool) -> None:
        # checks of earlier CUDA forwards, oldest first; a check whose copy has not landed yet
        # stays pending unless block=True
        while self._pending_checks:
            flag, event = self._pending_checks[0]
            if not block and not event.query():
                return
            if block:  # a completed event (query() True) needs no cudaEventSynchronize, which
                event.synchronize()  # a trace would show as a host sync in every step
            self._pending_checks.pop(0)
            first_bad = int(flag[0])
            if first_bad != self._cuda.NO_ERROR:
                self._pending_checks.clear()
                raise EmbeddingIndexError(
                    f"index at position {first_bad} of an earlier batch is outside its table "
                    "(the bags holding it were written as NaN and not trained)"
                )

    # ---------------------------------------------------------------- backend calls
    def _lookup(self, indices: Tensor, offsets: Tensor, psw: Tensor | None) -> Tensor:
        w = self.weights.detach()
        lay = self.layout
        # under a profiler: a range with the call's inputs (runtime.kernels.record)
        with recorded(_REC_FORWARD, w, indices, offsets, psw, lay.num_features, lay.total_dim,
                      lay.max_dim, self.pooling.value):
            if self.backend == "reference":
                return reference.forward(w, lay, indices, offsets, psw, self.pooling.value)
            out, flag = self._cuda.forward(w, lay, indices, offsets, psw, self.pooling.value)
        self._record_index_flag(flag)
        return out

    def _record_index_flag(self, flag: Tensor) -> None:
        host = torch.empty(1, dtype=flag.dtype, pin_memory=True)
        host.copy_(flag, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending_checks.append((host, event))
        if self.index_check == "sync":
            self._raise_pending_index_error(block=True)

    @torch.no_grad()
    def _update(self, indices: Tensor, offsets: Tensor, psw: Tensor | None, grad_output: Tensor) -> None:
        self._raise_pending_index_error(block=False)
        w = self.weights.detach()
        opt = self.optimizer
        args = (w, self.momentum, self.layout, indices, offsets, psw, self.pooling.value, grad_output.contiguous())
        kw = dict(optimizer=opt.type.value, lr=float(opt.lr), eps=float(opt.eps))
        lay = self.layout
        with recorded(_REC_BACKWARD, args[7], w, self.momentum, indices, offsets, psw,
                      lay.num_features, lay.total_dim, lay.max_dim, self.pooling.value,
                      opt.type.value):
            if self.backend == "reference":
                self.last_update = reference.backward_update(*args, **kw)
            else:
                self.last_update = self._cuda.backward_update(*args, **kw)
        for hook in tuple(self._update_hooks.values()):
            hook(self, self.last_update)

    def register_update_hook(self, hook) -> "torch.utils.hooks.RemovableHandle":
        """Call ``hook(module, update)`` after every fused update, right after it was launched
        (same thread and stream as the update; ``update`` is :attr:`last_update`). Used to
        wire delta tracking from outside (``runtime.delta.track_deltas``). Returns a handle
        whose ``remove()`` unregisters the hook."""
        handle = torch.utils.hooks.RemovableHandle(self._update_hooks)
        self._update_hooks[handle.id] = hook
        return handle

    def extra_repr(self) -> str:
        dims = [t.dim for t in self.tables]
        return (
            f"tables={len(self.tables)}, rows={sum(t.rows for t in self.tables)}, dims={dims}, "
            f"features={self.layout.num_features}, pooling={self.pooling.name}, "
            f"optimizer={self.optimizer.type.name}, backend={self.backend}"
        )
