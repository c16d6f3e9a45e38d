"""FBGEMM's table-batched embedding built like one of ours, for comparisons (the benchmark and
the GPU agreement test). ``fbgemm_gpu`` is optional: nothing here imports it until asked, and
:func:`available` says whether it can be had (it cannot on CI's machine).

FBGEMM 1.6.0's ``SplitTableBatchedEmbeddingBagsCodegen`` takes the same inputs as our module:
``indices`` (N,) and ``offsets`` (F*B+1,) over the bags in feature-major order, same dtype; its
output is (B, sum of dims). Its rowwise Adagrad is ours (m += mean(g^2); w -= lr/(sqrt(m)+eps) g).
Settings: FBGEMM's defaults (bounds check WARNING, its v1 forward, non-deterministic backward of
very long segments) except stochastic rounding, which is off so that 16-bit tables round to
nearest like ours and can be compared.
"""

from __future__ import annotations

import torch

from runtime.embedding import OptimType, Pooling, TableBatchedEmbedding


def available() -> tuple[bool, str]:
    """(True, fbgemm_gpu's version) when fbgemm_gpu imports and its operator library loaded
    (``torch.ops.fbgemm``), else (False, why)."""
    try:
        import fbgemm_gpu
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: F401
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        torch.ops.fbgemm.asynchronous_complete_cumsum  # raises when the op library is missing
        return True, str(getattr(fbgemm_gpu, "__version__", "unknown"))
    except Exception as e:  # ImportError, or a library that fails to load: no FBGEMM
        return False, f"{type(e).__name__}: {e}"


def like(m: TableBatchedEmbedding):
    """FBGEMM's TBE on m's device with m's tables (rows, dims, feature map, pooling), optimizer
    (type, lr, eps) and weights (fp32 or fp16, copied); its optimizer state zero."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice, EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen

    precision = {torch.float32: SparseType.FP32, torch.float16: SparseType.FP16}.get(m.weights.dtype)
    if precision is None:
        raise ValueError(f"FBGEMM's TBE is compared on fp32 or fp16 weights, not {m.weights.dtype}")
    optimizer = {OptimType.EXACT_SGD: EmbOptimType.EXACT_SGD,
                 OptimType.EXACT_ROWWISE_ADAGRAD: EmbOptimType.EXACT_ROWWISE_ADAGRAD}[m.optimizer.type]
    pooling = {Pooling.SUM: PoolingMode.SUM, Pooling.MEAN: PoolingMode.MEAN, Pooling.NONE: PoolingMode.NONE}[m.pooling]
    device = m.weights.device
    f = SplitTableBatchedEmbeddingBagsCodegen(
        [(t.rows, t.dim, EmbeddingLocation.DEVICE, ComputeDevice.CUDA) for t in m.tables],
        feature_table_map=list(m.feature_table_map),
        optimizer=optimizer,
        learning_rate=float(m.optimizer.lr),
        eps=float(m.optimizer.eps),
        pooling_mode=pooling,
        weights_precision=precision,
        output_dtype=SparseType.FP32,
        stochastic_rounding=False,
        device=torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device()),
    )
    with torch.no_grad():
        for dst, src in zip(f.split_embedding_weights(), m.split_embedding_weights()):
            dst.copy_(src)
        for states in f.split_optimizer_states():
            for st in states:
                st.zero_()
    return f


def momentum(f) -> list[torch.Tensor]:
    """FBGEMM's rowwise-Adagrad state, one (rows,) tensor per table ([] for SGD)."""
    return [states[0] for states in f.split_optimizer_states() if states]
