"""runtime/kernels/record.py: a profiled TBE call carries the inputs tracekit's embedding model
reads (CPU, the reference backend; the CUDA backend is wrapped the same way)."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from runtime.embedding import OptimizerConfig, OptimType, Pooling, TableBatchedEmbedding, TableConfig
from runtime.kernels import record
from tracekit.analyses import embedding_bw
from tracekit.phases import default_rules
from tracekit.trace import load


def _module(opt: OptimType, dims=(16, 16, 16)) -> TableBatchedEmbedding:
    torch.manual_seed(0)
    return TableBatchedEmbedding([TableConfig(200, d) for d in dims], pooling=Pooling.SUM,
                                 optimizer=OptimizerConfig(opt, lr=0.1), backend="reference")


def _profiled(tmp_path, m: TableBatchedEmbedding, *, shapes: bool):
    b, f = 8, m.layout.num_features
    lengths = torch.randint(1, 6, (f * b,))
    offsets = torch.zeros(f * b + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    indices = torch.randint(0, 200, (int(offsets[-1]),))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
        m(indices, offsets).sum().backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return load(path, use_cache=False).traces[0], indices.numel(), b


@pytest.mark.parametrize("opt", [OptimType.EXACT_SGD, OptimType.EXACT_ROWWISE_ADAGRAD])
def test_profiled_calls_carry_their_inputs(tmp_path, opt):
    m = _module(opt)
    trace, n, b = _profiled(tmp_path, m, shapes=True)
    r = embedding_bw.compute(trace, default_rules())
    calls = r.calls
    assert list(calls["op"]) == [record.FORWARD, record.BACKWARD]
    # a CPU trace: the bytes are known, there is no GPU time to divide them by
    assert set(calls["status"]) == {embedding_bw.NO_KERNELS}
    f, d = 3, 16
    fwd, bwd = calls.iloc[0], calls.iloc[1]
    assert (fwd["lookups"], fwd["bags"], fwd["features"], fwd["dim"]) == (n, b, f, d)
    assert fwd["bytes"] == n * d * 4 + n * 8 + (f * b + 1) * 8 + b * f * d * 4
    assert bwd["fixed_bytes"] == b * f * d * 4 + n * 8 + (f * b + 1) * 8
    state = 2 * 4 if opt is OptimType.EXACT_ROWWISE_ADAGRAD else 0
    assert bwd["row_bytes"] == 2 * d * 4 + state


def test_without_record_shapes_the_calls_say_so(tmp_path):
    trace, _, _ = _profiled(tmp_path, _module(OptimType.EXACT_SGD), shapes=False)
    r = embedding_bw.compute(trace, default_rules())
    assert set(r.calls["status"]) == {embedding_bw.NO_SHAPES}
    assert r.calls["bytes"].isna().all()


def test_no_range_without_a_profiler():
    seen = []
    with record.recorded(record.FORWARD, torch.zeros(3), 1):
        seen.append(torch.autograd._profiler_enabled())
    assert seen == [False]
