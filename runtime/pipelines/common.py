"""The stages every pipeline schedules, each under its TorchRec label (see DESIGN.md).

A pipeline file is one loop that calls these stages in its own order on its own streams. A
stage runs its GPU work on the stream it is given (``None``: the current stream) and records
an event where a later stage on another stream must wait. On the CPU there are no streams or
events: every ``stream``/``event`` is ``None`` and each stage runs the same code in place.

Allocator rule (what the in-place batch copy is about): memory allocated while a side stream is
current belongs to that stream's pool; tensors used on another stream get ``record_stream``.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.profiler import record_function

from runtime.batch import Batch
from runtime.sharding import ShardedSparseArch, SplitsInFlight, TensorsInFlight

LOOKUP_STREAMS = ("data_dist", "new", "current")
LOOKUP_PLACEMENTS = ("before_optimizer", "step_start", "after_data_dist")
"""FusedSparseDist: where the host issues the lookup (runtime.pipelines.fused_sparse_dist)."""
FUSED_EMB_BACKWARDS = ("with_dense", "separate")
"""FusedSparseDist: the embedding backward inside the dense backward's autograd call, or in a
call of its own (runtime.pipelines.fused_sparse_dist)."""
SEMI_LOOKUP_PLACEMENTS = ("after_forward", "after_backward")
"""SemiSync: where the stale lookup of batch i+1 runs (runtime.pipelines.semi_sync)."""


@dataclass
class InFlight:
    """One batch moving through the pipeline, with what its stages produced so far."""

    index: int
    """Batch index i (the ``{i}`` of the labels)."""
    batch: Batch
    """The batch on the training device."""
    copied: Any = None
    """Event recorded on the memcpy stream after the copy (None on CPU / same stream)."""
    splits: SplitsInFlight | None = None
    """After ``start_sparse_data_dist``."""
    tensors: TensorsInFlight | None = None
    """After ``wait_sparse_data_dist``."""
    dist_done: Any = None
    """Event on the data-dist stream after ``wait_sparse_data_dist``."""
    dist_stream: torch.cuda.Stream | None = None
    """The stream ``wait_sparse_data_dist`` ran on (the features' all-to-alls were made there)."""
    embeddings: torch.Tensor | None = None
    """``[B, F, D]`` pooled embeddings after ``start_embedding_lookup`` (Fused, SemiSync)."""
    lookup_done: Any = None
    """Event on the lookup stream after ``start_embedding_lookup``."""
    lookup_stream: torch.cuda.Stream | None = None
    """The stream ``start_embedding_lookup`` ran on (the embeddings were made there)."""


@dataclass
class PipelineResult:
    """What a pipeline returns when its data is exhausted."""

    losses: list[torch.Tensor] = field(default_factory=list)
    """Loss of each step, detached, on the training device (no host sync was needed)."""

    @property
    def steps(self) -> int:
        """Batches trained (each exactly once)."""
        return len(self.losses)


StepCallback = Callable[[int], None]
"""Called after step i's optimizer has been issued (``prof.step()``, timing, progress)."""


# ------------------------------------------------------------------------------------------
# streams
# ------------------------------------------------------------------------------------------
def new_stream(device: torch.device, *, priority: int = 0) -> torch.cuda.Stream | None:
    return torch.cuda.Stream(device=device, priority=priority) if device.type == "cuda" else None


def current_stream(device: torch.device) -> torch.cuda.Stream | None:
    return torch.cuda.current_stream(device) if device.type == "cuda" else None


def on_stream(stream: torch.cuda.Stream | None):
    """``with on_stream(s):`` makes ``s`` current (no-op for None)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def record_event(stream: torch.cuda.Stream | None) -> torch.cuda.Event | None:
    if stream is None:
        return None
    ev = torch.cuda.Event()
    ev.record(stream)
    return ev


def wait_event(stream: torch.cuda.Stream | None, event: torch.cuda.Event | None) -> None:
    if stream is not None and event is not None:
        stream.wait_event(event)


def use_on(stream: torch.cuda.Stream | None, tensors: Any, event: Any, *,
           made_on: torch.cuda.Stream | None = None) -> None:
    """Makes ``stream`` wait for ``event`` (recorded once ``tensors`` were made, on ``made_on``)
    and keeps their memory alive there (``record_stream``); nothing to do on the CPU (None) or on
    the stream that made them (stream order already holds). Compared by identity: the loops pass
    the stream objects they made, and another object for the same stream only costs a wait."""
    if stream is not None and stream is not made_on:
        wait_event(stream, event)
        tensors.record_stream(stream)


def sparse_arch_of(model: torch.nn.Module) -> ShardedSparseArch:
    arch = getattr(model, "sparse_arch", None)
    if not isinstance(arch, ShardedSparseArch):
        raise TypeError("pipelines need a model whose sparse arch was sharded (runtime.sharding.shard_model)")
    return arch


# ------------------------------------------------------------------------------------------
# stages
# ------------------------------------------------------------------------------------------
def copy_batch_to_gpu(
    host: Batch,
    index: int,
    *,
    device: torch.device,
    memcpy_stream: torch.cuda.Stream | None,
    inplace: bool,
) -> InFlight:
    """Host batch -> device batch.

    Standard: under the memcpy stream, ``host.to(device)`` allocates AND copies there, so the
    allocator files the batch under the memcpy stream (the main stream cannot reuse it later).
    In place: the destination is allocated on the current (main) stream, the memcpy stream
    first waits for the main stream (the memory may have just been freed there) and fills it
    with ``copy_``.
    """
    if not inplace:
        with record_function(f"## copy_batch_to_gpu {index} ##"), on_stream(memcpy_stream):
            batch = host.to(device, non_blocking=True)
            return InFlight(index, batch, copied=record_event(memcpy_stream))
    with record_function(f"## inplace_copy_batch_to_gpu {index} ##"):
        batch = host.empty_like(device=device)  # allocated on the main stream
        if memcpy_stream is not None:
            memcpy_stream.wait_stream(current_stream(device))
        with on_stream(memcpy_stream):
            batch.copy_(host, non_blocking=True)
            return InFlight(index, batch, copied=record_event(memcpy_stream))


def wait_for_batch(f: InFlight, *, stream: torch.cuda.Stream | None) -> None:
    """Makes ``stream`` (None: nothing to do) wait for f's copy and keeps its memory alive there."""
    use_on(stream, f.batch, f.copied)


def start_sparse_data_dist(f: InFlight, *, arch: ShardedSparseArch, stream: torch.cuda.Stream | None) -> None:
    """On ``stream``: permute f's features by owner, start the splits all-to-all."""
    with record_function(f"## start_sparse_data_dist {f.index} ##"), on_stream(stream):
        use_on(stream, f.batch.sparse, f.copied)
        f.splits = arch.start_input_dist(f.batch.sparse)


def wait_sparse_data_dist(f: InFlight, *, arch: ShardedSparseArch, stream: torch.cuda.Stream | None) -> None:
    """On ``stream``: wait for the splits, start the lengths and values all-to-alls."""
    with record_function(f"## wait_sparse_data_dist {f.index} ##"), on_stream(stream):
        f.tensors = arch.wait_input_dist_splits(f.splits)
        f.splits = None
        f.dist_done = record_event(stream)
        f.dist_stream = stream


def start_embedding_lookup(
    f: InFlight, *, arch: ShardedSparseArch, stream: torch.cuda.Stream | None, after: Any = None
) -> None:
    """On ``stream``: wait for f's features (and for the event ``after``, recorded on another
    stream: work the lookup must come after), look up the local tables and start the all-to-all
    of the pooled embeddings. The last embedding backward needs no event where it ran on
    ``stream`` too: stream order puts the lookup behind it."""
    with record_function(f"## start_embedding_lookup {f.index} ##"), on_stream(stream):
        wait_event(stream, after)
        # FusedSparseDist and SemiSync look up on the data-dist stream: nothing to wait for
        use_on(stream, f.tensors, f.dist_done, made_on=f.dist_stream)
        f.embeddings = arch.compute_and_output_dist(f.tensors)  # [B, F, D]
        f.tensors = None
        f.lookup_done = record_event(stream)
        f.lookup_stream = stream


def embeddings_for_forward(f: InFlight, *, arch: ShardedSparseArch, stream: torch.cuda.Stream | None) -> torch.Tensor:
    """Inside ``## forward i ##``: the pooled embeddings of f on ``stream`` (the main one),
    looked up here unless a lookup stage already did it."""
    if f.embeddings is None:
        use_on(stream, f.tensors, f.dist_done, made_on=f.dist_stream)
        emb = arch.compute_and_output_dist(f.tensors)
        f.tensors = None
        return emb
    use_on(stream, f.embeddings, f.lookup_done, made_on=f.lookup_stream)
    return f.embeddings


def embedding_backward(
    index: int,
    embeddings: torch.Tensor,
    leaf: torch.Tensor,
    *,
    stream: torch.cuda.Stream | None,
    main: torch.cuda.Stream | None,
) -> Any:
    """``## emb_backward i ##``: backward from the dense part's gradient of the embeddings
    (``leaf.grad``, made on the main stream) through the output dist into the fused table
    update, with ``stream`` current. Autograd runs each node on the stream its forward ran on
    (the lookup's), and at the end makes only the *current* stream wait: so the main stream is
    free for the optimizer while the tables are updated. A lookup on ``stream`` after it needs
    no event: stream order puts it behind the update."""
    with record_function(f"## emb_backward {index} ##"), on_stream(stream):
        if stream is not None and stream != main:
            stream.wait_stream(main)  # the gradient is made by the main stream's backward
            leaf.grad.record_stream(stream)
        torch.autograd.backward([embeddings], [leaf.grad])


def grad_accumulators(module: torch.nn.Module) -> list[Any]:
    """The gradient accumulator (autograd's leaf node) of each parameter of ``module`` that
    requires grad, made now if there is none, with the current stream: autograd runs an
    accumulator on the stream that was current when it was made, and at the end of a
    ``backward()`` makes the calling stream wait for every accumulator's stream. The caller holds
    the list (a parameter keeps its accumulator only while something refers to it)."""
    with torch.enable_grad():
        return [p.view_as(p).grad_fn.next_functions[0][0] for p in module.parameters() if p.requires_grad]


def zero_grad(optimizer: torch.optim.Optimizer) -> None:
    with record_function("## zero_grad ##"):
        optimizer.zero_grad()


class Feeder:
    """Numbers the host batches and copies each to the device as it is pulled (the
    ``copy_batch_to_gpu`` stage, on ``memcpy_stream``); nothing is left once the data is
    exhausted."""

    def __init__(
        self,
        batches: Iterable[Batch],
        *,
        device: torch.device,
        memcpy_stream: torch.cuda.Stream | None,
        inplace: bool,
    ) -> None:
        self._it: Iterator[tuple[int, Batch]] | None = enumerate(batches)
        self._device = device
        self._memcpy_stream = memcpy_stream
        self._inplace = inplace

    def copy_next(self) -> InFlight | None:
        """The next batch, its copy issued; None once the data is exhausted."""
        if self._it is None:
            return None
        item = next(self._it, None)
        if item is None:
            self._it = None
            return None
        index, host = item
        return copy_batch_to_gpu(
            host, index, device=self._device, memcpy_stream=self._memcpy_stream, inplace=self._inplace
        )

    def copy_next_into(self, queue: deque[InFlight]) -> None:
        """Appends the next batch (its copy issued) to ``queue``, if there is one."""
        f = self.copy_next()
        if f is not None:
            queue.append(f)
