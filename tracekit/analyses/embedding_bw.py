"""Embedding bandwidth: how close the embedding kernels run to the GPU's memory system.

An *embedding call* is one host op whose layout tracekit knows (the ``MODELS`` below: FBGEMM's
TBE forward and fused backward+optimizer ops, the runtime's ``tracekit_tbe::`` annotations,
torch's ``embedding_bag`` / ``embedding`` and their backward) with the GPU activities launched
inside it: each activity belongs to the innermost such op enclosing its launching runtime call
on the same thread. For each call:

- **bytes that must move**, from the op's recorded inputs (``record_shapes``: ``Input Dims``,
  ``Input type``, ``Concrete Inputs``), ``N`` lookups (indices), ``B`` bags per feature, ``T``
  features, ``D`` the dim (``total_D / T`` where the dims differ: then the rows are counted at the
  mean dim, which assumes as many lookups per feature), ``s`` bytes per weight:

  - forward (pooled): ``N*D*s`` rows read + ``B*total_D*o`` output written (``o``: the output's
    bytes per element) + indices + offsets read (+ per-sample weights, cache locations);
    without pooling the output is ``N*D*o``;
  - backward with the optimizer fused (FBGEMM's ``*_exact_cuda``, ours): ``B*total_D*g``
    gradient read + indices + offsets read, and for every distinct row the batch touches, the
    row read and written and its optimizer state read and written (``row_bytes`` per row). How
    many distinct rows there are is on the device only: the figure counts one per lookup
    (``U = N``), an **upper bound** on the bytes, so the bandwidth is *at most* the one shown;
  - FBGEMM's gradient of per-sample weights (``*_grad_indice_weights_cuda``): each lookup's row
    read, the gradient ``B*total_D*g`` read (once: a bag's lookups share its row), indices and
    offsets read, one weight gradient per lookup written;
  - torch's dense backward: the gradient table zeroed (``E*D*s``), the bag's gradient read
    once per lookup (``N*D*g``), one row written per lookup (``U = N``, an upper bound too).

  This is the model the TBE benchmark (``bench.tbe``) uses (a lower bound on DRAM traffic for the
  forward: repeated rows may be served from L2, which then shows as a share above peak);
- **GPU time**: the union of its activities' intervals (``gpu_ns``);
- **achieved GB/s** = bytes / gpu_ns, and its **share** of the device's peak memory bandwidth
  (``tracekit.hardware``, by ``deviceProperties``' name; a rules file's ``[[gpu]]`` first).

Where an op's inputs were not recorded (``record_shapes`` off), or do not have the layout
tracekit knows, or the tables are not in device memory (FBGEMM's UVM, SSD), the call is
listed with its reason and no estimate. Embedding kernels (the phase rules' lookup and
embedding-backward kernel names) that no modelled op launched are counted by the op that did
launch them, or ``no launching op``.

Totals per kernel (op and its longest kernel), per phase (the phase of the call's longest
activity), per step (``ProfilerStep``, or the inferred steps) and per direction; a *finding*
for each direction (lookup forward / backward) whose share of peak is below
``EmbeddingBwConfig.far_below``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import intervals, phases
from tracekit import steps as steps_mod
from tracekit.emptyresult import kept
from tracekit.hardware import GpuPeak, device_names, peak_hbm
from tracekit.phases import Rules
from tracekit.trace.model import SHAPE_NAME, Kind, Trace
from tracekit.frames import BuiltWhenRead, column


@dataclass(frozen=True)
class EmbeddingBwConfig:
    """What counts as far below the memory system."""

    far_below: float = 0.5
    """A direction (forward, backward) whose bandwidth is below this share of the device's peak
    gets a finding."""
    target: float = 0.8
    """The share of peak a finding states the kernels' time at (a TBE forward reaches ~0.9:
    98 % of a device-to-device copy on an H200, ``bench/results/tbe-h200-*.md``)."""
    min_gpu_share: float = 0.01
    """No finding for a direction whose kernels take less than this share of the GPU's busy time
    (nor less than 0.1 ms in all)."""


FORWARD = "forward"
BACKWARD = "backward"

CALL_COLUMNS = [
    "op", "family", "direction", "tid", "ts", "end", "step", "phase", "kernel", "activities",
    "gpu_start", "gpu_end", "gpu_ns", "lookups", "bags", "features", "dim", "total_dim",
    "weights_type", "bytes", "fixed_bytes", "row_bytes", "upper_bound", "gbps", "share", "status",
]
"""``op`` (its name), ``family`` (``fbgemm``/``tracekit``/``torch``), ``direction``
(``forward``/``backward``), ``tid, ts, end`` (the host op), ``step`` (-1 outside any),
``phase`` (of its longest activity), ``kernel`` (the longest activity's name), ``activities``,
``gpu_start, gpu_end, gpu_ns`` (union of its activities; -1/0 without any), ``lookups`` (N),
``bags`` (B, per feature), ``features`` (T), ``dim`` (D: max D, or total_D/T where dims differ),
``total_dim``, ``weights_type``, ``bytes`` (the model, with U = N in a backward), ``fixed_bytes``
and ``row_bytes`` (``bytes = fixed_bytes + row_bytes * U``; ``row_bytes`` 0 in a forward),
``upper_bound`` (bytes counted with U = N), ``gbps``, ``share`` (of peak; NaN unknown),
``status`` (``ok``, or why there is no estimate; numbers are -1/NaN then)."""

STATUS_OK = "ok"
NO_SHAPES = "inputs not recorded (profile with record_shapes=True)"
NO_KERNELS = "no GPU activity"


# ---- the recorded inputs -------------------------------------------------------------------------

_TYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2, "bfloat16": 2,
    "long int": 8, "long": 8, "int": 4, "short int": 2, "short": 2, "signed char": 1,
    "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
}
_FLOATS = {"float", "double", "c10::Half", "c10::BFloat16", "half", "bfloat16", "unsigned char",
           "c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz"}
_INTS = {"long int", "long", "int"}
_SPARSE_TYPE_BYTES = {0: 4, 1: 2, 2: 1, 5: 2, 6: 1}
"""FBGEMM's SparseType (output_dtype): FP32, FP16, INT8, BF16, FP8."""


class _Bad(Exception):
    """The inputs do not have the layout the model expects (the message says how)."""


@dataclass(frozen=True)
class _Inputs:
    dims: list
    types: list
    concrete: list

    def tensor(self, i: int, what: str, kinds: set[str], ndim: int | None = None) -> tuple[list[int], str]:
        if i >= len(self.dims) or i >= len(self.types):
            raise _Bad(f"input {i} ({what}) missing")
        d, t = self.dims[i], self.types[i]
        if t not in kinds or not isinstance(d, list) or (ndim is not None and len(d) != ndim):
            raise _Bad(f"input {i} ({what}) is {t or 'none'} {d}, not a {ndim or ''}-D "
                       f"{'/'.join(sorted(kinds))} tensor")
        return d, t

    def numel(self, i: int, what: str, kinds: set[str], ndim: int | None = None) -> tuple[int, int]:
        """(elements, bytes per element) of tensor input ``i``."""
        d, t = self.tensor(i, what, kinds, ndim)
        n = 1
        for x in d:
            n *= int(x)
        return n, _TYPE_BYTES[t]

    def optional(self, i: int) -> tuple[int, int]:
        """(elements, bytes each) of an optional tensor input, (0, 0) when absent."""
        if i >= len(self.dims) or not self.types[i] or self.types[i] not in _TYPE_BYTES:
            return 0, 0
        n = 1
        for x in self.dims[i]:
            n *= int(x)
        return n, _TYPE_BYTES[self.types[i]]

    def scalar(self, i: int, what: str) -> int:
        v = self.concrete[i] if i < len(self.concrete) else ""
        try:
            return int(v)
        except (TypeError, ValueError):
            if not self.concrete:
                raise _Bad(f"{what} not recorded (no Concrete Inputs: torch < 2.1)") from None
            raise _Bad(f"input {i} ({what}) is {v!r}, not an integer") from None


def _inputs(dims: str, types: str, concrete: str) -> _Inputs | None:
    if not dims or not types:
        return None
    try:
        d, t = json.loads(dims), json.loads(types)
        c = json.loads(concrete) if concrete else []
    except ValueError:
        return None
    if not isinstance(d, list) or not isinstance(t, list) or not isinstance(c, list):
        return None
    return _Inputs(d, t, c)


@dataclass(frozen=True)
class OpBytes:
    """What one op's kernels must move: ``fixed + per_row * U`` bytes, U the distinct rows a
    backward touches (``lookups`` in the figure: an upper bound); 0 ``per_row`` in a forward."""

    lookups: int
    bags: int
    features: int
    dim: float
    total_dim: int
    weights_type: str
    fixed: float
    per_row: float = 0.0
    note: str = ""


# ---- the models -------------------------------------------------------------------------------------

_STATE_FLOATS = {  # FBGEMM optimizer -> (floats per row, floats per element) of state, fp32
    "sgd": (0, 0), "exact_sgd": (0, 0), "rowwise_adagrad": (1, 0), "exact_rowwise_adagrad": (1, 0),
    "approx_rowwise_adagrad": (1, 0), "rowwise_weighted_adagrad": (1, 0),
    "rowwise_adagrad_with_weight_decay": (1, 0), "adagrad": (0, 1), "exact_adagrad": (0, 1),
    "approx_sgd": (0, 0), "adam": (0, 2), "lamb": (0, 2), "partial_rowwise_adam": (1, 1),
    "partial_rowwise_lamb": (1, 1), "lars_sgd": (0, 1), "none": (0, 0),
}


def _dims(total_d: int, max_d: int, t: int) -> tuple[float, str]:
    """D to count rows at, and a note when the features' dims differ."""
    if t <= 0:
        raise _Bad("no features")
    if total_d == t * max_d:
        return float(max_d), ""
    return total_d / t, (f"dims differ (total {total_d} over {t} features, max {max_d}): rows "
                         "counted at the mean dim")


def _weights_in_hbm(x: _Inputs, at: int, dense: bool) -> tuple[int, int]:
    """The element size of the device weights (input ``at``) and the position of the last
    weights input (``weights_offsets`` comes next): a split op's UVM, cache and placement inputs
    follow its device weights. ``_Bad`` when the tables are in UVM (host memory) or there are no
    device weights."""
    dev, s = x.numel(at, "dev_weights", _FLOATS, 1)
    if not dense:
        uvm, _ = x.numel(at + 1, "uvm_weights", _FLOATS, 1)
        if uvm:
            raise _Bad("tables in UVM (host memory), not read from HBM: not modelled")
    if not dev:
        raise _Bad("no device weights")
    return s, at + (0 if dense else 3)


def _fbgemm_forward(m: re.Match, x: _Inputs) -> OpBytes:
    dense, nobag, weighted = m["dense"] == "dense", bool(m["nobag"]), m["w"] == "weighted"
    if m["vbe"]:
        raise _Bad("variable batch sizes (VBE): not modelled")
    s, base = _weights_in_hbm(x, 0, dense)
    wt = x.types[0]
    t, _ = x.numel(base + 1, "weights_offsets", _INTS, 1)
    if nobag:
        d = x.scalar(base + 2, "D")
        total_d, dim, note, pos = d, float(d), "", base + 3
    else:
        t1, _ = x.numel(base + 2, "D_offsets", _INTS, 1)
        total_d, max_d = x.scalar(base + 3, "total_D"), x.scalar(base + 4, "max_D")
        dim, note = _dims(total_d, max_d, t1 - 1)
        t, pos = t1 - 1, base + 5
    n, si = x.numel(pos, "indices", _INTS, 1)
    bt1, so = x.numel(pos + 1, "offsets", _INTS, 1)
    pos += 2 if nobag else 3  # pooling_mode
    fixed = n * dim * s + n * si + bt1 * so
    if weighted:
        nw, sw = x.optional(pos)
        fixed += nw * sw
        pos += 1
    if not dense:
        nl, sl = x.optional(pos)  # lxu_cache_locations (empty without a cache)
        fixed += nl * sl
        pos += 2  # uvm_cache_stats
    out_s = _SPARSE_TYPE_BYTES.get(x.scalar(pos, "output_dtype")) if pos < len(x.concrete) else 4
    if out_s is None:
        raise _Bad("output type not one tracekit knows")
    b = (bt1 - 1) // max(t, 1)
    fixed += (n * dim if nobag else b * total_d) * out_s
    return OpBytes(n, b, t, dim, total_d, wt, fixed, 0.0, note)


def _fbgemm_backward(m: re.Match, x: _Inputs) -> OpBytes:
    dense, nobag, weighted = m["dense"] == "dense", bool(m["nobag"]), m["w"] == "weighted"
    if m["vbe"]:
        raise _Bad("variable batch sizes (VBE): not modelled")
    opt = m["opt"]
    if opt not in _STATE_FLOATS:
        raise _Bad(f"optimizer {opt!r}: its state is not modelled")
    g_n, g_s = x.numel(0, "grad_output", {"float", "c10::Half", "c10::BFloat16"})
    s, base = _weights_in_hbm(x, 1, dense)
    if nobag:
        d = x.scalar(base + 2, "D")
        dim, t, pos = float(d), x.numel(base + 1, "weights_offsets", _INTS, 1)[0], base + 3
        total_d, note = d, ""
        pos += 2  # hash_size_cumsum, total_hash_size_bits
    else:
        t1, _ = x.numel(base + 2, "D_offsets", _INTS, 1)
        t = t1 - 1
        max_d = x.scalar(base + 3, "max_D")
        gd = x.tensor(0, "grad_output", {"float", "c10::Half", "c10::BFloat16"}, 2)[0]
        total_d = int(gd[1])
        dim, note = _dims(total_d, max_d, t)
        pos = base + 7  # mixed_D, hash_size_cumsum, total_hash_size_bits
    n, si = x.numel(pos, "indices", _INTS, 1)
    bt1, so = x.numel(pos + 1, "offsets", _INTS, 1)
    fixed = g_n * g_s + n * si + bt1 * so
    if weighted:
        nw, sw = x.optional(pos + 3)
        fixed += nw * sw
    per_row, per_elem = _STATE_FLOATS[opt]
    row = 2 * dim * s + 2 * 4 * (per_row + per_elem * dim)
    return OpBytes(n, (bt1 - 1) // max(t, 1), t, dim, total_d, x.types[1], fixed, row, note)


def _fbgemm_grad_indice_weights(m: re.Match, x: _Inputs) -> OpBytes:
    # {split,dense}_embedding_codegen_grad_indice_weights_cuda(grad_output, dev_weights,
    #     [uvm_weights, lxu_cache_weights, weights_placements,] weights_offsets, D_offsets, max_D,
    #     indices, offsets, ...): the gradient of each lookup's per-sample weight, a dot product of
    #     its row and its bag's gradient row
    dense = m["dense"] == "dense"
    if m["vbe"]:
        raise _Bad("variable batch sizes (VBE): not modelled")
    gd, gt = x.tensor(0, "grad_output", {"float", "c10::Half", "c10::BFloat16"}, 2)
    s, base = _weights_in_hbm(x, 1, dense)
    t1, _ = x.numel(base + 2, "D_offsets", _INTS, 1)
    max_d = x.scalar(base + 3, "max_D")
    total_d = int(gd[1])
    dim, note = _dims(total_d, max_d, t1 - 1)
    n, si = x.numel(base + 4, "indices", _INTS, 1)
    bt1, so = x.numel(base + 5, "offsets", _INTS, 1)
    b = (bt1 - 1) // max(t1 - 1, 1)
    # rows once per lookup (as the forward), the gradient once per bag (its lookups share it)
    fixed = n * dim * s + b * total_d * _TYPE_BYTES[gt] + n * si + bt1 * so + n * 4
    return OpBytes(n, b, t1 - 1, dim, total_d, x.types[1], fixed, 0.0, note)


def _ours_forward(_m: re.Match, x: _Inputs) -> OpBytes:
    # tracekit_tbe::forward(weights, indices, offsets, per_sample_weights, num_features,
    #                       total_D, max_D, pooling_mode): runtime/kernels/record.py
    _, s = x.numel(0, "weights", _FLOATS, 1)
    n, si = x.numel(1, "indices", _INTS, 1)
    bt1, so = x.numel(2, "offsets", _INTS, 1)
    nw, sw = x.optional(3)
    t, total_d, max_d = x.scalar(4, "num_features"), x.scalar(5, "total_D"), x.scalar(6, "max_D")
    pooling = x.scalar(7, "pooling_mode")
    out_s = 8 if x.types[0] == "double" else 4
    b = (bt1 - 1) // max(t, 1)
    if pooling == 2:  # no pooling: one row out per lookup
        dim, note, out = float(max_d), "", n * max_d * out_s
    else:
        dim, note = _dims(total_d, max_d, t)
        out = b * total_d * out_s
    return OpBytes(n, b, t, dim, total_d, x.types[0], n * dim * s + n * si + bt1 * so + nw * sw + out,
                  0.0, note)


def _ours_backward(_m: re.Match, x: _Inputs) -> OpBytes:
    # tracekit_tbe::backward_update(grad_output, weights, momentum, indices, offsets,
    #     per_sample_weights, num_features, total_D, max_D, pooling_mode, optimizer)
    g_n, g_s = x.numel(0, "grad_output", _FLOATS)
    _, s = x.numel(1, "weights", _FLOATS, 1)
    m_n, m_s = x.optional(2)
    n, si = x.numel(3, "indices", _INTS, 1)
    bt1, so = x.numel(4, "offsets", _INTS, 1)
    nw, sw = x.optional(5)
    t, total_d, max_d = x.scalar(6, "num_features"), x.scalar(7, "total_D"), x.scalar(8, "max_D")
    pooling = x.scalar(9, "pooling_mode")
    dim, note = (float(max_d), "") if pooling == 2 else _dims(total_d, max_d, t)
    row = 2 * dim * s + (2 * m_s if m_n else 0)  # rowwise state: one value per row
    return OpBytes(n, (bt1 - 1) // max(t, 1), t, dim, total_d, x.types[1],
                  g_n * g_s + n * si + bt1 * so + nw * sw, row, note)


def _torch_bag(_m: re.Match, x: _Inputs) -> OpBytes:
    # aten::_embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
    #                      per_sample_weights, include_last_offset, padding_idx)
    (e, d), wt = x.tensor(0, "weight", _FLOATS, 2)
    s = _TYPE_BYTES[wt]
    n, si = x.numel(1, "indices", _INTS)
    nb, so = x.numel(2, "offsets", _INTS, 1)
    nw, sw = x.optional(6)
    last = len(x.concrete) > 7 and x.concrete[7] in ("True", "1", "true")
    b = nb - 1 if last else nb
    return OpBytes(n, b, 1, float(d), int(d), wt, n * d * s + n * si + nb * so + nw * sw + b * d * s)


def _torch_embedding(_m: re.Match, x: _Inputs) -> OpBytes:
    # aten::embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
    (e, d), wt = x.tensor(0, "weight", _FLOATS, 2)
    s = _TYPE_BYTES[wt]
    n, si = x.numel(1, "indices", _INTS)
    return OpBytes(n, n, 1, float(d), int(d), wt, 2 * n * d * s + n * si)


def _torch_dense_backward(m: re.Match, x: _Inputs) -> OpBytes:
    # aten::_embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
    #     num_weights, ...); aten::embedding_dense_backward(grad_output, indices, num_weights,
    #     padding_idx, scale_grad_by_freq)
    gd, gt = x.tensor(0, "grad", {"float", "double", "c10::Half", "c10::BFloat16"})
    if not gd:
        raise _Bad("grad is a scalar")
    d, g_s = int(gd[-1]), _TYPE_BYTES[gt]
    n, si = x.numel(1, "indices", _INTS)
    bag = m["bag"] is not None
    e = x.scalar(5 if bag else 2, "num_weights")
    fixed = e * d * g_s + n * si  # the gradient table zeroed, the indices read
    if bag:
        fixed += x.numel(2, "offset2bag", _INTS)[0] * si
    rows = 1
    for v in gd[:-1]:
        rows *= int(v)
    per_row = 2 * d * g_s  # the lookup's gradient row read, its table row written
    return OpBytes(n, rows, 1, float(d), d, gt, fixed, per_row)


@dataclass(frozen=True)
class Model:
    """How one op's recorded inputs give the bytes its kernels move."""

    family: str
    direction: str
    pattern: re.Pattern
    bytes: object
    """``(match, _Inputs) -> OpBytes``; raises ``_Bad`` when the inputs do not fit."""


_FBGEMM = r"^fbgemm::(?P<dense>split|dense|ssd)_embedding(?P<nobag>_nobag)?_"
MODELS: tuple[Model, ...] = (
    Model("fbgemm", FORWARD, re.compile(
        _FBGEMM + r"codegen_forward_(?P<w>weighted|unweighted)(?P<vbe>_vbe)?(_gwd)?_cuda$"),
        _fbgemm_forward),
    Model("fbgemm", BACKWARD, re.compile(
        _FBGEMM + r"backward_codegen_(?P<opt>\w+?)_(?P<w>weighted|unweighted)(?P<vbe>_vbe)?(_gwd)?"
        r"_exact_cuda$"), _fbgemm_backward),
    Model("fbgemm", BACKWARD, re.compile(
        r"^fbgemm::(?P<dense>split|dense|ssd)_embedding_codegen_grad_indice_weights(?P<vbe>_vbe)?"
        r"_cuda$"), _fbgemm_grad_indice_weights),
    Model("tracekit", FORWARD, re.compile(r"^tracekit_tbe::forward$"), _ours_forward),
    Model("tracekit", BACKWARD, re.compile(r"^tracekit_tbe::backward_update$"), _ours_backward),
    Model("torch", FORWARD, re.compile(r"^aten::_embedding_bag(_forward_only)?$"), _torch_bag),
    Model("torch", FORWARD, re.compile(r"^aten::embedding$"), _torch_embedding),
    Model("torch", BACKWARD, re.compile(
        r"^aten::(?P<bag>_embedding_bag_)?(?(bag)dense_backward|embedding_dense_backward)$"),
        _torch_dense_backward),
)
"""The ops tracekit knows the layout of: first match wins."""
_SSD = "tables on SSD: their rows do not come from HBM (not modelled)"


def model_of(name: str) -> tuple[Model, re.Match] | None:
    for m in MODELS:
        hit = m.pattern.search(name)
        if hit:
            return m, hit
    return None


def op_bytes(name: str, dims: str, types: str, concrete: str) -> OpBytes | str:
    """The bytes model of one op from its recorded inputs (the JSON texts of ``Trace.args``),
    or why there is none."""
    found = model_of(name)
    if found is None:
        return "not an op tracekit knows the layout of"
    model, hit = found
    if "dense" in hit.groupdict() and hit["dense"] == "ssd":
        return _SSD
    x = _inputs(dims, types, concrete)
    if x is None:
        return NO_SHAPES
    try:
        return model.bytes(hit, x)
    except _Bad as e:
        return f"inputs not understood: {e}"
    except (TypeError, ValueError, KeyError, IndexError) as e:
        return f"inputs not understood: {type(e).__name__}"


# ---- the result -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """A direction whose embedding kernels run far below the memory system."""

    id: str
    title: str
    evidence: str
    direction: str
    gbps: float
    share: float
    peak_gbps: float
    upper_bound: bool
    gpu_ns: int
    """The direction's kernels' GPU time (all calls)."""
    gpu_ns_at_target: int
    """The same bytes at ``EmbeddingBwConfig.target`` of peak."""
    per_step_ns: float | None
    """``gpu_ns - gpu_ns_at_target`` per step (None without steps)."""


@dataclass(frozen=True)
class EmbeddingBwResult(BuiltWhenRead):
    """Every embedding call with its bandwidth, and totals."""

    calls: pd.DataFrame
    """One row per embedding call, by time (``CALL_COLUMNS``)."""
    by_kernel: pd.DataFrame
    """``family, direction, op, kernel, calls, gpu_ns, bytes, gbps, share, upper_bound``, by GPU
    time (the calls with an estimate)."""
    by_phase: pd.DataFrame
    """``phase, direction, calls, gpu_ns, bytes, gbps, share, upper_bound``."""
    by_step: pd.DataFrame
    """``step, direction, calls, gpu_ns, bytes, gbps, share, upper_bound``."""
    by_direction: pd.DataFrame
    """``direction, calls, gpu_ns, bytes, gbps, share, upper_bound``."""
    missing: pd.DataFrame
    """Calls and embedding kernels without an estimate: ``op, reason, calls, activities,
    gpu_ns``, by GPU time."""
    device: str | None
    """The GPU's name (``deviceProperties``), None when the trace does not say."""
    peak_gbps: float | None
    """Its peak memory bandwidth, None for an unknown GPU (shares are then NaN)."""
    peak_source: str
    """``built-in table: H200``, ``<rules file>: ...``, or why there is none."""
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def _empty_calls() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in CALL_COLUMNS})


def _embedding_kernels(names: np.ndarray, rules: Rules) -> np.ndarray:
    """Activities whose names the lookup / embedding-backward kernel rules match."""
    rx = [r.regex for r in rules.kernels if r.phase in (rules.lookup_phase, "emb_backward")]
    if not rx:
        return np.zeros(len(names), bool)
    codes, uniq = fnp.factorize(names)  # hashing, not sorting: a million names in ~0.1 s
    hit = np.array([any(r.search(str(u)) for r in rx) for u in uniq], bool)
    return hit[codes] if len(uniq) else np.zeros(len(names), bool)


def _enclosing(ops: pd.DataFrame, tid: np.ndarray, qs: np.ndarray, qe: np.ndarray,
               exclude_self: bool = False) -> np.ndarray:
    """Row of ``ops`` (``tid, ts, end``) that innermost encloses each query on its thread, -1.
    ``exclude_self``: the queries are ``ops`` themselves, in order; each gets its container."""
    out = np.full(qs.size, -1, np.int64)
    if ops.empty or not qs.size:
        return out
    for t, g in ops.groupby("tid", sort=False):
        g = g.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        s, e = column(g, "ts", np.int64), column(g, "end", np.int64)
        par = intervals.innermost_containers(s, e)
        ids = g.index.to_numpy(np.int64)
        if exclude_self:
            out[ids] = np.where(par >= 0, ids[np.maximum(par, 0)], -1)
            continue
        sel = np.flatnonzero(tid == t)
        if not sel.size:
            continue
        k = intervals.innermost_enclosing(s, e, par, qs[sel], qe[sel])
        out[sel] = np.where(k >= 0, ids[np.maximum(k, 0)], -1)
    return out


class _Names:
    """Row -> the host op's name, looked up for the few rows asked (not a string per op)."""

    def __init__(self, codes: np.ndarray, cats: pd.Index) -> None:
        self.codes, self.cats = codes, cats

    def __getitem__(self, row: int) -> str:
        return str(self.cats[self.codes[row]])


def _outermost(host: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The ``rows`` of ``host`` that no other of them encloses (the runtime's reference backend
    calls torch's embedding_bag inside its own call: the outer call is the one measured)."""
    if rows.size < 2:
        return rows
    sub = host.iloc[rows]
    inner = _enclosing(sub.reset_index(drop=True), column(sub, "tid", np.int64),
                       column(sub, "ts", np.int64), column(sub, "end", np.int64),
                       exclude_self=True)
    return rows[inner < 0]


def _busy(starts: np.ndarray, ends: np.ndarray) -> int:
    return intervals.length(intervals.union(starts, ends)) if starts.size else 0


def _peak(trace: Trace, rules: Rules, device: int) -> tuple[str | None, GpuPeak | None, str]:
    names = device_names(trace.metadata)
    name = names.get(device) or (next(iter(names.values())) if names else None)
    if name is None:
        return None, None, "the trace names no GPU (no deviceProperties)"
    g = peak_hbm(name, rules.gpus)
    if g is None:
        return name, None, (f"{name!r} is not in tracekit's table of GPUs: give its peak in a "
                            "rules file ([[gpu]] pattern, hbm_gbps)")
    where = "built-in table" if g.source == "built-in table" else g.source
    return name, g, f"{where}: {g.name} {g.hbm_gbps:,.0f} GB/s"


def _totals(calls: pd.DataFrame, keys: list[str], peak: float | None) -> pd.DataFrame:
    """Calls, GPU time, bytes, GB/s, share and upper bound per value of ``keys``, by GPU time
    (the calls with an estimate; a few hundred rows: plain Python, not a pandas groupby)."""
    cols = keys + ["calls", "gpu_ns", "bytes", "gbps", "share", "upper_bound"]
    ok = calls[calls["status"] == STATUS_OK]
    groups: dict[tuple, list] = {}
    for rec in zip(*(ok[k].tolist() for k in keys), ok["gpu_ns"].tolist(), ok["bytes"].tolist(),
                   ok["upper_bound"].tolist()):
        g = groups.setdefault(tuple(rec[: len(keys)]), [0, 0, 0.0, False])
        g[0] += 1
        g[1] += int(rec[len(keys)])
        g[2] += float(rec[len(keys) + 1])
        g[3] = g[3] or bool(rec[len(keys) + 2])
    rows = []
    for key, (n, ns, b, upper) in groups.items():
        gbps = b / max(ns, 1)
        rows.append([*key, n, ns, b, gbps, gbps / peak if peak else np.nan, upper])
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("gpu_ns", ascending=False, kind="stable").reset_index(drop=True)


def _is_model(codes: np.ndarray, cats: pd.Index) -> np.ndarray:
    """bool per host op (``phases.host_ops``' codes): an op whose bytes a model estimates."""
    return phases.per_used_name(
        codes, cats, lambda n: np.array([model_of(str(x)) is not None for x in n.tolist()], bool),
        False)


def _main_device(devices: np.ndarray) -> int:
    """The device most of ``devices`` are on (0 when none is known)."""
    return int(np.bincount(devices[devices >= 0]).argmax()) if (devices >= 0).any() else 0


def compute(trace: Trace, rules: Rules, config: EmbeddingBwConfig | None = None) -> EmbeddingBwResult:
    """The embedding calls of ``trace`` and their bandwidth (see the module docstring)."""
    config = config or EmbeddingBwConfig()
    _, codes, cats = phases.host_ops(trace)
    acts, _ = phases.activities(trace, rules)
    if not _is_model(codes, cats).any() and \
            not _embedding_kernels(column(acts, "name", object), rules).any():
        # no modelled op and no embedding kernel: empty tables, the same for every such trace
        # but for the GPU (tracekit.emptyresult)
        name, gpu, source = _peak(trace, rules, _main_device(column(acts, "device", np.int64)))
        return kept(("embedding_bw", config), lambda: _compute(trace, rules, config),
                    device=name, peak_gbps=gpu.hbm_gbps if gpu else None, peak_source=source)
    return _compute(trace, rules, config)


def _compute(trace: Trace, rules: Rules, config: EmbeddingBwConfig) -> EmbeddingBwResult:
    ops, codes, cats = phases.host_ops(trace)
    is_model = _is_model(codes, cats)
    is_emb = phases.name_matches(codes, cats, SHAPE_NAME)
    ts = column(ops, "ts", np.int64)
    host = pd.DataFrame({"tid": column(ops, "tid", np.int64), "ts": ts,
                         "end": ts + column(ops, "dur", np.int64)})
    acts, _ = phases.activities(trace, rules)
    a_names = column(acts, "name", object)
    a_emb = _embedding_kernels(a_names, rules)
    linked = column(acts, "launch_ts", np.int64) >= 0
    a_tid = column(acts, "launch_tid", np.int64)
    a_ls = column(acts, "launch_ts", np.int64)
    # the launch's end is not kept by activities(): a launch inside an op starts inside it, and
    # a host op on one thread encloses all of a call that starts in it
    owner = np.full(len(acts), -1, np.int64)
    model_rows = _outermost(host, np.flatnonzero(is_model))
    if model_rows.size and linked.any():
        sel = np.flatnonzero(linked)
        k = _enclosing(host.iloc[model_rows].reset_index(drop=True), a_tid[sel], a_ls[sel], a_ls[sel])
        owner[sel] = np.where(k >= 0, model_rows[np.maximum(k, 0)], -1)

    # the inputs recorded on each modelled op (Trace.args rows)
    args = trace.args
    inputs: dict[int, tuple[str, str, str]] = {}
    if len(args) and model_rows.size:
        ev_rows = np.flatnonzero(phases.of_kinds(column(trace.events, "kind"),
                                                 (Kind.ANNOTATION, Kind.CPU_OP)))
        # host_ops' row i is the i-th host op of the events table
        pos = np.searchsorted(ev_rows, column(args, "event", np.int64))
        pos = np.minimum(pos, max(ev_rows.size - 1, 0))
        is_host = ev_rows.size > 0
        dims = args["input_dims"].astype(str).to_numpy(object)
        types = args["input_types"].astype(str).to_numpy(object)
        conc = args["concrete_inputs"].astype(str).to_numpy(object)
        for j in np.flatnonzero(dims != "").tolist():
            if is_host and ev_rows[pos[j]] == args["event"].iat[j]:
                inputs[int(pos[j])] = (dims[j], types[j], conc[j])

    steps = steps_mod.compute(trace, rules).steps
    spans = pd.DataFrame({"step": steps["step"], "ts": steps["cpu_start"], "end": steps["cpu_end"]})
    a_ts, a_end = column(acts, "ts", np.int64), column(acts, "end", np.int64)
    a_phase = column(acts, "phase", object)
    a_dev = column(acts, "device", np.int64)
    names = _Names(codes, cats)

    by_owner: dict[int, np.ndarray] = {}
    if (owner >= 0).any():
        order = np.argsort(owner, kind="stable")
        o = owner[order]
        cut = np.flatnonzero(fnp.r_(True, o[1:] != o[:-1]))
        for c0, c1 in zip(cut, fnp.r_(cut[1:], o.size)):
            if o[c0] >= 0:
                by_owner[int(o[c0])] = order[c0:c1]

    device = _main_device(a_dev[np.flatnonzero(owner >= 0)] if (owner >= 0).any() else a_dev)
    dev_name, gpu, peak_source = _peak(trace, rules, device)
    peak = gpu.hbm_gbps if gpu else None

    rows = []
    notes: list[str] = []
    for r in model_rows.tolist():
        mine = by_owner.get(r)
        model, _ = model_of(names[r])
        got = op_bytes(names[r], *inputs[r]) if r in inputs else NO_SHAPES
        row = {"op": names[r], "family": model.family, "direction": model.direction,
               "tid": int(host["tid"].iat[r]), "ts": int(host["ts"].iat[r]),
               "end": int(host["end"].iat[r]), "phase": "", "kernel": "", "activities": 0,
               "gpu_start": -1, "gpu_end": -1, "gpu_ns": 0, "lookups": -1, "bags": -1,
               "features": -1, "dim": np.nan, "total_dim": -1, "weights_type": "",
               "bytes": np.nan, "fixed_bytes": np.nan, "row_bytes": np.nan,
               "upper_bound": False, "gbps": np.nan, "share": np.nan}
        if mine is not None:
            longest = mine[np.argmax(a_end[mine] - a_ts[mine])]
            row.update(kernel=str(a_names[longest]), phase=str(a_phase[longest]),
                       activities=int(mine.size), gpu_start=int(a_ts[mine].min()),
                       gpu_end=int(a_end[mine].max()), gpu_ns=_busy(a_ts[mine], a_end[mine]))
        if isinstance(got, str):
            row["status"] = got
        else:
            total = got.fixed + got.per_row * got.lookups
            row.update(lookups=got.lookups, bags=got.bags, features=got.features, dim=got.dim,
                       total_dim=got.total_dim, weights_type=got.weights_type, bytes=total,
                       fixed_bytes=got.fixed, row_bytes=got.per_row,
                       upper_bound=got.per_row > 0, status=STATUS_OK)
            if row["gpu_ns"] > 0:
                row["gbps"] = total / row["gpu_ns"]
                row["share"] = row["gbps"] / peak if peak else np.nan
            else:
                row["status"] = NO_KERNELS
            if got.note and f"{names[r]}: {got.note}" not in notes:
                notes.append(f"{names[r]}: {got.note}")
        rows.append(row)
    calls = pd.DataFrame(rows) if rows else _empty_calls()
    if rows:
        calls["step"] = (phases.step_of(spans, column(calls, "ts", np.int64)) if len(spans)
                         else np.full(len(calls), -1, np.int64))
        calls = calls[CALL_COLUMNS].sort_values("ts", kind="stable").reset_index(drop=True)

    missing = _missing(calls, owner, a_emb, is_emb, host, names, a_tid, a_ls, linked, a_ts, a_end)
    by_dir = _totals(calls, ["direction"], peak)
    result = EmbeddingBwResult(
        calls=calls,
        by_kernel=_totals(calls, ["family", "direction", "op", "kernel"], peak),
        by_phase=_totals(calls, ["phase", "direction"], peak),
        by_step=_totals(calls, ["step", "direction"], peak).sort_values(
            ["step", "direction"], kind="stable").reset_index(drop=True),
        by_direction=by_dir,
        missing=missing,
        device=dev_name,
        peak_gbps=peak,
        peak_source=peak_source,
        notes=tuple(notes),
    )
    busy_all = _busy(a_ts, a_end)
    n_steps = int(calls.loc[calls["step"] >= 0, "step"].nunique()) if len(calls) else 0
    found = _findings(by_dir, gpu, config, busy_all, n_steps)
    return EmbeddingBwResult(**{**result.__dict__, "findings": tuple(found)})


def _missing(calls, owner, a_emb, is_emb, host, names, a_tid, a_ls, linked, a_ts, a_end) -> pd.DataFrame:
    cols = ["op", "reason", "calls", "activities", "gpu_ns"]
    parts = []
    if len(calls):
        bad = calls[calls["status"] != STATUS_OK]
        if len(bad):
            parts.append(bad.groupby(["op", "status"], sort=False).agg(
                calls=("op", "size"), activities=("activities", "sum"),
                gpu_ns=("gpu_ns", "sum")).reset_index().rename(columns={"status": "reason"}))
    # embedding kernels no modelled op launched: by the embedding-named op that did, if any
    orphan = np.flatnonzero(a_emb & (owner < 0))
    if orphan.size:
        emb_rows = np.flatnonzero(is_emb)
        by = np.full(orphan.size, -1, np.int64)
        ok = linked[orphan]
        if emb_rows.size and ok.any():
            q = orphan[ok]
            k = _enclosing(host.iloc[emb_rows].reset_index(drop=True), a_tid[q], a_ls[q], a_ls[q])
            by[ok] = np.where(k >= 0, emb_rows[np.maximum(k, 0)], -1)
        op = np.array([names[b] if b >= 0 else "" for b in by.tolist()], dtype=object)
        reason = np.where(by >= 0, "not an op tracekit knows the layout of",
                          np.where(linked[orphan], "no embedding op around the launch",
                                   "no launching call in the trace"))
        df = pd.DataFrame({"op": np.where(by >= 0, op, "(none)"), "reason": reason,
                           "start": a_ts[orphan], "end": a_end[orphan], "owner": by})
        for (o, why), g in df.groupby(["op", "reason"], sort=False):
            parts.append(pd.DataFrame({
                "op": [o], "reason": [why],
                "calls": [int(g["owner"].nunique()) if o != "(none)" else 0],
                "activities": [len(g)],
                "gpu_ns": [_busy(column(g, "start", np.int64), column(g, "end", np.int64))]}))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    out = pd.concat(parts, ignore_index=True)[cols]
    return out.sort_values("gpu_ns", ascending=False, kind="stable").reset_index(drop=True)


_WHAT = {FORWARD: "embedding lookup (forward)", BACKWARD: "embedding backward (with the update)"}


def _findings(by_dir: pd.DataFrame, gpu: GpuPeak | None, config: EmbeddingBwConfig,
              busy_all: int, n_steps: int) -> list[Finding]:
    if gpu is None or by_dir.empty:
        return []
    out = []
    for r in by_dir.itertuples(index=False):
        if r.share >= config.far_below or r.gpu_ns < max(1e5, config.min_gpu_share * busy_all):
            continue
        at_target = int(round(r.bytes / (config.target * gpu.hbm_gbps)))
        tb = r.gbps / 1000
        bound = "at most " if r.upper_bound else ""
        title = (f"the {_WHAT[r.direction]} moves {bound}{tb:.2f} TB/s, {100 * r.share:.0f} % of "
                 f"the {gpu.name}'s {gpu.hbm_gbps / 1000:.2f} TB/s")
        per_step = (r.gpu_ns - at_target) / n_steps if n_steps else None
        evidence = (f"{r.calls} calls, {r.bytes / 1e9:.3f} GB in {r.gpu_ns / 1e6:.3f} ms of GPU "
                    f"time; at {100 * config.target:.0f} % of peak they would take "
                    f"{at_target / 1e6:.3f} ms")
        if per_step is not None:
            evidence += f" ({per_step / 1e6:.3f} ms less kernel time per step)"
        if r.upper_bound:
            evidence += ("; bytes counted as if every lookup touched a distinct row (repeated "
                         "rows move less), so the real bandwidth is lower still")
        out.append(Finding(
            id=f"embedding_bw_{r.direction}", title=title, evidence=evidence,
            direction=r.direction, gbps=float(r.gbps), share=float(r.share),
            peak_gbps=gpu.hbm_gbps, upper_bound=bool(r.upper_bound), gpu_ns=int(r.gpu_ns),
            gpu_ns_at_target=at_target, per_step_ns=per_step))
    return out


__all__ = ["CALL_COLUMNS", "EmbeddingBwConfig", "EmbeddingBwResult", "Finding", "MODELS",
           "OpBytes", "compute", "op_bytes"]
