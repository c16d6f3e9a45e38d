"""SemiSync pipeline (TorchRec's TrainPipelineSemiSync): embeddings one step stale.

Batch i+1's lookup runs right after batch i's forward, before batch i's embedding backward, so
it reads tables that do not yet hold batch i's update; in exchange it (and its output
all-to-all) overlaps batch i's whole backward and optimizer. For batches before
``start_batch`` the lookup waits for the embedding backward instead: exact training.

Step i, by stream:

* memcpy stream:    copy of batch i+3
* data-dist stream: input dist of batch i+2 (splits all-to-all before batch i's forward, lengths
                    and values after its backward has been issued); lookup + output dist of
                    batch i+1 (semi-sync: after batch i's forward; exact: after its embedding
                    backward); batch i's embedding backward (output-dist backward + fused
                    table update)
* main stream:      dense forward of batch i on its (already looked-up) embeddings, dense
                    backward, dense optimizer

Where batch i+1's stale lookup runs (``lookup_placement``; both read the tables before batch i's
update, so the numerics are the same):

* ``after_backward`` (default): issued after batch i's backward and held on the data-dist stream
  until that backward is done on the GPU, then run ahead of batch i's embedding backward: beside
  the dense optimizer, whose ~1900 short kernels (the multitask presets) leave the GPU mostly
  idle, instead of taking SMs from the backward. Measured on one H200 (d124cf4:bench/NOTES-pipelines.md,
  four runs of 2026-11-23): 0.908-0.920x SparseDist's step on the headline preset, against
  0.919-0.946x for ``after_forward``.
* ``after_forward`` (TorchRec's): issued right after batch i's forward, it runs beside batch i's
  backward on the GPU.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

import torch
from torch.profiler import record_function

from runtime.batch import Batch
from runtime.pipelines.common import (
    SEMI_LOOKUP_PLACEMENTS,
    Feeder,
    InFlight,
    PipelineResult,
    StepCallback,
    current_stream,
    embedding_backward,
    embeddings_for_forward,
    new_stream,
    record_event,
    sparse_arch_of,
    start_embedding_lookup,
    start_sparse_data_dist,
    wait_for_batch,
    wait_sparse_data_dist,
    zero_grad,
)


def train_semi_sync(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[Batch],
    *,
    device: torch.device | str,
    start_batch: int = 0,
    lookup_placement: str = "after_backward",
    inplace_copy_batch_to_gpu: bool = False,
    on_step: StepCallback | None = None,
) -> PipelineResult:
    """Trains on every batch once; lookups one step stale from batch ``start_batch`` on."""
    if start_batch < 0:
        raise ValueError(f"start_batch must be >= 0, got {start_batch}")
    if lookup_placement not in SEMI_LOOKUP_PLACEMENTS:
        raise ValueError(f"lookup_placement must be one of {SEMI_LOOKUP_PLACEMENTS}, got {lookup_placement!r}")
    device = torch.device(device)
    arch = sparse_arch_of(model)
    main = current_stream(device)
    memcpy = new_stream(device, priority=-1)
    data_dist = new_stream(device, priority=-1)
    feeder = Feeder(batches, device=device, memcpy_stream=memcpy, inplace=inplace_copy_batch_to_gpu)

    # fill: batch 0 distributed and looked up, batch 1 distributed, batch 2 copied
    queue: deque[InFlight] = deque()
    feeder.copy_next_into(queue)
    if queue:
        start_sparse_data_dist(queue[0], arch=arch, stream=data_dist)
        wait_sparse_data_dist(queue[0], arch=arch, stream=data_dist)
        start_embedding_lookup(queue[0], arch=arch, stream=data_dist)
    feeder.copy_next_into(queue)
    if len(queue) > 1:
        start_sparse_data_dist(queue[1], arch=arch, stream=data_dist)
        wait_sparse_data_dist(queue[1], arch=arch, stream=data_dist)
    feeder.copy_next_into(queue)

    result = PipelineResult()
    while queue:
        cur = queue[0]
        i = cur.index
        stale = i >= start_batch
        # data-dist stream: splits all-to-all of batch i+2
        if len(queue) > 2:
            start_sparse_data_dist(queue[2], arch=arch, stream=data_dist)
        # main stream: dense forward of batch i on a leaf copy of its embeddings
        with record_function(f"## forward {i} ##"):
            wait_for_batch(cur, stream=main)
            emb = embeddings_for_forward(cur, arch=arch, stream=main)  # [B, F, D], autograd into the tables
            emb_leaf = emb.detach().requires_grad_()
            loss, _ = model.dense_forward(cur.batch, emb_leaf)
        queue.popleft()
        # memcpy stream: batch i+3
        feeder.copy_next_into(queue)
        # data-dist stream: batch i+1's lookup BEFORE batch i's embedding backward (stale)
        if stale and queue and lookup_placement == "after_forward":
            start_embedding_lookup(queue[0], arch=arch, stream=data_dist)
        # main stream: dense backward, stopping at the embeddings
        with record_function(f"## backward {i} ##"):
            loss.backward()
        # data-dist stream (after_backward): the same stale lookup, after batch i's backward on the GPU
        if stale and queue and lookup_placement == "after_backward":
            start_embedding_lookup(queue[0], arch=arch, stream=data_dist, after=record_event(main))
        # data-dist stream: lengths/values all-to-alls of batch i+2. Issued after the backward:
        # the host reads batch i+2's splits here (on several ranks), and the host should not
        # wait before the main stream has the backward queued (the read waits only for the
        # splits all-to-all, not for the lookup queued behind it on this stream)
        if len(queue) > 1:
            wait_sparse_data_dist(queue[1], arch=arch, stream=data_dist)
        # data-dist stream (where batch i's lookup ran): output-dist backward + fused table
        # update of batch i, alongside the optimizer on the main stream
        embedding_backward(i, emb, emb_leaf, stream=data_dist, main=main)
        with record_function(f"## optimizer {i} ##"):
            optimizer.step()
        zero_grad(optimizer)
        # exact steps: batch i+1's lookup after batch i's table update (the same stream: in order)
        if not stale and queue:
            start_embedding_lookup(queue[0], arch=arch, stream=data_dist)
        result.losses.append(loss.detach())
        if on_step is not None:
            on_step(i)
    return result
