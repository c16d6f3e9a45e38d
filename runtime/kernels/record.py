"""What a trace records of each TBE call, for ``tracekit.analyses.embedding_bw``.

Our kernels are called through a pybind extension, not through torch's dispatcher, so the
profiler sees no op around them and records no inputs. While a profiler runs, each call is
wrapped in a ``record_function`` range that carries the call's tensors and sizes as its inputs
(``torch.autograd._record_function_with_args_enter``): with ``record_shapes=True`` the trace
then holds, on a ``user_annotation`` around the kernels' launches, the same ``Input Dims``,
``Input type`` and ``Concrete Inputs`` it holds for FBGEMM's ops. The layouts (positions are
the contract with tracekit's model of them)::

    tracekit_tbe::forward(Tensor weights, Tensor indices, Tensor offsets,
                          Tensor? per_sample_weights, int num_features, int total_D,
                          int max_D, int pooling_mode)
    tracekit_tbe::backward_update(Tensor grad_output, Tensor weights, Tensor momentum,
                          Tensor indices, Tensor offsets, Tensor? per_sample_weights,
                          int num_features, int total_D, int max_D, int pooling_mode,
                          int optimizer)

Without a profiler the call costs one check (``torch.autograd._profiler_enabled``); the range
is never a phase annotation (no phase rule matches its name).
"""

from __future__ import annotations

import contextlib

import torch

FORWARD = "tracekit_tbe::forward"
BACKWARD = "tracekit_tbe::backward_update"


@contextlib.contextmanager
def recorded(name: str, *inputs):
    """A profiler range named ``name`` with ``inputs`` recorded as its inputs, while a
    profiler is on; nothing otherwise."""
    if not torch.autograd._profiler_enabled():
        yield
        return
    handle = torch.autograd._record_function_with_args_enter(name, *inputs)
    try:
        yield
    finally:
        torch.autograd._record_function_with_args_exit(handle)


__all__ = ["BACKWARD", "FORWARD", "recorded"]
