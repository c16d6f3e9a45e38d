"""FusedSparseDist pipeline (TorchRec's TrainPipelineFusedSparseDist).

The tables are updated inside the fused embedding backward, so batch i+1's lookup does not have
to wait for step i's dense optimizer: it runs on the lookup stream right behind the embedding
backward of batch i, while the main stream does the optimizer. The backward is cut at the
embeddings (as SemiSync does): the dense backward runs on the main stream, the embedding
backward (output-dist backward + fused table update) on the lookup stream, so the main stream
goes on to the optimizer at once.

Step i, by stream:

* lookup stream:    batch i's embedding backward, then batch i+1's lookup + output dist
* memcpy stream:    copy of batch i+2
* data-dist stream: input dist of batch i+1
* main stream:      dense forward of batch i (waits for its lookup), dense backward, optimizer

Options: the lookup stream is the data-dist stream (less memory: one fewer pool in the caching
allocator), a new stream (more overlap) or the current stream (no overlap). Where the host
issues the lookup (``lookup_placement``; the GPU order on the lookup stream is the same in all
three, the numerics too):

* ``before_optimizer`` (default; TorchRec's ``embedding_lookup_before_optimizer``): batch i+1's
  lookup is issued right after batch i's embedding backward, before the optimizer. The
  optimizer of a model with many small dense tensors is thousands of launches (the multitask
  presets' per-parameter Adam: ~1900 per step): issued after them, the lookup reaches the GPU
  only once the host has issued them all, too late to overlap the optimizer unless the host
  runs a whole step ahead of the GPU.
* ``step_start`` (TorchRec's default): at the start of step i+1, before the data dist of
  batch i+2, i.e. after the host has issued step i's optimizer.
* ``after_data_dist``: in step i+1, after the data dist of batch i+2 and the copy of i+3.

How the backward is cut (``emb_backward``; the GPU work, its streams and the numerics are the same):

* ``with_dense`` (default): one autograd call, ``loss.backward()``. Autograd runs each node on
  the stream its forward ran on: the dense nodes on the main stream, the output-dist backward
  and the fused table update on the lookup stream, which waits (by event) for the embeddings'
  gradient only. At its end a call makes the calling (main) stream wait for the streams of the
  leaves' gradient accumulators; the tables' accumulators are made on the main stream before
  the first lookup and held (``grad_accumulators``; the tables get no gradient: their update is
  fused into the backward), so the main stream waits for nothing and goes on to the optimizer.
  (Made by the first lookup, on the lookup stream, they would make the main stream wait for the
  embedding backward; calling backward with the lookup stream current instead would make the
  main stream's backward wait for all work queued on it before, the next batch's input dist
  included: gpu/autograd_streams.py measured all three on an H200.)
* ``separate``: the dense backward stops at a detached leaf copy of the embeddings, then a second
  autograd call (``## emb_backward i ##``) runs the embedding part from the leaf's gradient. The
  same streams, but a second hand-off to autograd's device thread and its set-up every step:
  ~0.3 ms of host time, which shows in full on a step bound by the host (bench/NOTES-pipelines.md).
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

import torch
from torch.profiler import record_function

from runtime.batch import Batch
from runtime.pipelines.common import (
    FUSED_EMB_BACKWARDS,
    LOOKUP_PLACEMENTS,
    LOOKUP_STREAMS,
    Feeder,
    InFlight,
    PipelineResult,
    StepCallback,
    current_stream,
    embedding_backward,
    embeddings_for_forward,
    grad_accumulators,
    new_stream,
    sparse_arch_of,
    start_embedding_lookup,
    start_sparse_data_dist,
    wait_for_batch,
    wait_sparse_data_dist,
    zero_grad,
)


def train_fused_sparse_dist(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[Batch],
    *,
    device: torch.device | str,
    lookup_stream: str = "data_dist",
    lookup_placement: str = "before_optimizer",
    emb_backward: str = "with_dense",
    inplace_copy_batch_to_gpu: bool = False,
    on_step: StepCallback | None = None,
) -> PipelineResult:
    """Trains on every batch once with the lookup moved up behind the embedding backward."""
    if lookup_stream not in LOOKUP_STREAMS:
        raise ValueError(f"lookup_stream must be one of {LOOKUP_STREAMS}, got {lookup_stream!r}")
    if lookup_placement not in LOOKUP_PLACEMENTS:
        raise ValueError(f"lookup_placement must be one of {LOOKUP_PLACEMENTS}, got {lookup_placement!r}")
    if emb_backward not in FUSED_EMB_BACKWARDS:
        raise ValueError(f"emb_backward must be one of {FUSED_EMB_BACKWARDS}, got {emb_backward!r}")
    device = torch.device(device)
    arch = sparse_arch_of(model)
    main = current_stream(device)
    memcpy = new_stream(device, priority=-1)
    data_dist = new_stream(device, priority=-1)
    if lookup_stream == "new":
        lookup = new_stream(device)
    else:
        lookup = data_dist if lookup_stream == "data_dist" else main
    feeder = Feeder(batches, device=device, memcpy_stream=memcpy, inplace=inplace_copy_batch_to_gpu)
    # with_dense: the tables' gradient accumulators on the main stream, for the whole loop (see above)
    accumulators = grad_accumulators(arch) if emb_backward == "with_dense" else []  # noqa: F841 - held

    # fill: batch 0 copied and distributed, batch 1 copied
    queue: deque[InFlight] = deque()
    feeder.copy_next_into(queue)
    if queue:
        start_sparse_data_dist(queue[0], arch=arch, stream=data_dist)
        wait_sparse_data_dist(queue[0], arch=arch, stream=data_dist)
    feeder.copy_next_into(queue)

    # every lookup and every embedding backward runs on the lookup stream: stream order puts batch
    # i+1's lookup behind batch i's table update, with no event (autograd runs the embedding
    # backward on the stream its forward ran on)
    result = PipelineResult()
    while queue:
        cur = queue[0]
        nxt = queue[1] if len(queue) > 1 else None
        i = cur.index
        # lookup stream: batch i's lookup behind batch i-1's embedding backward (step_start; with
        # before_optimizer only batch 0, the others were issued in the step before)
        if lookup_placement == "step_start" or (lookup_placement == "before_optimizer" and cur.embeddings is None):
            start_embedding_lookup(cur, arch=arch, stream=lookup)
        zero_grad(optimizer)
        wait_for_batch(cur, stream=main)
        # data-dist stream: splits all-to-all of batch i+1
        if nxt is not None:
            start_sparse_data_dist(nxt, arch=arch, stream=data_dist)
        # memcpy stream: batch i+2
        feeder.copy_next_into(queue)
        if lookup_placement == "after_data_dist":
            start_embedding_lookup(cur, arch=arch, stream=lookup)
        # main stream: dense forward of batch i (separate: on a leaf copy of its embeddings)
        with record_function(f"## forward {i} ##"):
            emb = embeddings_for_forward(cur, arch=arch, stream=main)  # [B, F, D], made on the lookup stream
            emb_leaf = emb.detach().requires_grad_() if emb_backward == "separate" else emb
            loss, _ = model.dense_forward(cur.batch, emb_leaf)
        # data-dist stream: lengths/values all-to-alls of batch i+1
        if nxt is not None:
            wait_sparse_data_dist(nxt, arch=arch, stream=data_dist)
        # main stream: dense backward (separate: stopping at the embeddings); with_dense: in the
        # same autograd call, the lookup stream's output-dist backward + fused table update of batch i
        with record_function(f"## backward {i} ##"):
            loss.backward()
        if emb_backward == "separate":
            # lookup stream: output-dist backward + fused table update of batch i, a call of its own
            embedding_backward(i, emb, emb_leaf, stream=lookup, main=main)
        # lookup stream: batch i+1's lookup right behind it, issued before the optimizer's launches
        if lookup_placement == "before_optimizer" and nxt is not None:
            start_embedding_lookup(nxt, arch=arch, stream=lookup)
        # main stream: dense optimizer, alongside the embedding backward and the next lookup
        with record_function(f"## optimizer {i} ##"):
            optimizer.step()
        queue.popleft()
        result.losses.append(loss.detach())
        if on_step is not None:
            on_step(i)
    return result
