"""Training pipelines: one loop per file, each scheduling the same stages on its own streams.

=============  ============================================================================
``base``       no overlap: every stage in order on the main stream
``sparse``     SparseDist: batch copy on a memcpy stream, input dist on a data-dist stream,
               three batches in flight
``fused``      FusedSparseDist: SparseDist + the next batch's lookup right behind the fused
               embedding backward, overlapping the dense optimizer (issued before the optimizer
               by default: ``lookup_placement``); the embedding backward in the dense
               backward's autograd call or a call of its own (``emb_backward``)
``semi``       SemiSync: the lookup of batch i+1 runs before batch i's embedding backward
               (embeddings one step stale), exact for the first ``start_batch`` steps; beside
               batch i's backward or its optimizer (``lookup_placement``)
=============  ============================================================================
"""

from __future__ import annotations

from runtime.pipelines.base import train_base
from runtime.pipelines.common import (
    FUSED_EMB_BACKWARDS,
    LOOKUP_PLACEMENTS,
    LOOKUP_STREAMS,
    SEMI_LOOKUP_PLACEMENTS,
    PipelineResult,
)
from runtime.pipelines.fused_sparse_dist import train_fused_sparse_dist
from runtime.pipelines.semi_sync import train_semi_sync
from runtime.pipelines.sparse_dist import train_sparse_dist

PIPELINES = {
    "base": train_base,
    "sparse": train_sparse_dist,
    "fused": train_fused_sparse_dist,
    "semi": train_semi_sync,
}

__all__ = [
    "PIPELINES",
    "LOOKUP_STREAMS",
    "LOOKUP_PLACEMENTS",
    "FUSED_EMB_BACKWARDS",
    "SEMI_LOOKUP_PLACEMENTS",
    "PipelineResult",
    "train_base",
    "train_sparse_dist",
    "train_fused_sparse_dist",
    "train_semi_sync",
]
