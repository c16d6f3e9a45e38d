"""The CUDA backend: builds ``tbe_kernels.cu`` (sort/scan steps, host API), the per weight
type kernels ``tbe_kernels_f32.cu`` / ``_f16.cu`` / ``_bf16.cu`` (compiled in parallel by ninja)
and ``tbe_binding.cpp`` on first use with torch's extension builder, caches the build, and wraps
the two ops with the layout of ``common.py``.

Build directory: ``$TBE_KERNELS_BUILD_DIR`` or ``~/.cache/tracekit/tbe_kernels/<hash>`` where
the hash covers the sources, flags and torch/CUDA versions, so an edit rebuilds and an
unchanged tree reuses the compiled module. Flags: ``-O3``, no fast math (the fp32 results
must match the reference), SASS + PTX for the GPU present (sm_90a on H100/H200), see
:func:`_gencode_flags`.

Kernel variants (``tbe_kernels.h`` describes them; all give bit-identical results): the forward
``v1`` / ``v2-12`` / ``v2-8`` / ``v2-4`` (``p``: with L2 prefetches) / ``v3-4`` / ``v3-2`` and
the backward ``v1`` / ``v2`` / ``v2-2rows`` / ``v2p`` (v2 with L2 prefetches) / ``v3`` / ``v3s`` (v3
with weight rows and Adagrad state streamed evict-first, ``ld/st.global.cs``, on a one-wave grid). Which
ones a call uses: ``$TBE_FWD_VARIANT`` / ``$TBE_BWD_VARIANT`` when set, else ``auto``: the
:data:`DISPATCH` table's choice for the call's shape class (weights type, largest table dim),
picked from measured times. :func:`use_variants` changes them for a block of code (benchmarks
and tests time and check every variant in one process). ``$TBE_SKIP_VARIANTS`` leaves variants
out of the lists that benchmarks and tests go through (:func:`forward_variants` /
:func:`backward_variants`) and out of the dispatch (:data:`FALLBACK` instead), so that one
variant's crash cannot poison the CUDA context for the others.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import torch

from runtime.kernels.common import POOL_NONE, KernelUnavailableError, RowUpdate, TBELayout

HERE = Path(__file__).resolve().parent
# sort/scan + host API, and the kernels of each weight type: four TUs that compile in parallel
SOURCES = [HERE / "tbe_kernels.cu", HERE / "tbe_kernels_f32.cu", HERE / "tbe_kernels_f16.cu", HERE / "tbe_kernels_bf16.cu",
           HERE / "tbe_binding.cpp"]
HEADERS = [HERE / "tbe_kernels.h", HERE / "tbe_impl.cuh"]
NO_ERROR = 2**63 - 1  # first_bad when every index was in range (kNoError)

# variant name -> the code the kernels take (ForwardArgs::variant / BackwardArgs::variant)
FORWARD_VARIANTS = {"v1": 0, "v2-12": 1, "v2-8": 2, "v2-4": 3, "v2-12p": 4, "v2-8p": 5, "v2-4p": 6, "v3-4": 7,
                    "v3-2": 8}
BACKWARD_VARIANTS = {"v1": 1, "v2": 2, "v2-2rows": 3, "v2p": 4, "v3": 5, "v3s": 6}
AUTO = "auto"  # the DISPATCH table's choice for the call's shape class

# The variants an "auto" call uses, per shape class: (weights, dim bucket) -> (forward, backward).
# weights: "fp32", or "16-bit" (fp16 and bf16 rows are read alike); dim bucket: the largest table
# dim rounded up to 32, 64, 128 or 256, else 1024 (the v2/v3 forward takes dims <= 256; other
# layouts run v1 whatever is asked). Chosen per class as the variant with the best worst-case
# ratio FBGEMM's time / ours over the class's cases of bench/tbe.py (uniform and Zipf ids,
# both batches, both optimizers; the bench itself prints a table by geometric mean, which agrees
# but for ties); buckets no run measured copy a neighbour. From the H200 run of 2026-11-23
# 22:43 UTC, every variant timed in one process (fbgemm_gpu 1.6.0; the worst ratios below:
# d124cf4:bench/results/tbe-h200-20261123-2243.md/.json (git show), d124cf4:bench/NOTES-tbe.md section 4; "bwd" ratios are
# steps with that run's v2-8 / v2-4p forward). Checked by the run of 23:02 UTC with this table:
# every case >= 1.03 forward, SGD and rowwise Adagrad (bench/results/tbe-h200-20261123-2302.md).
DISPATCH: dict[tuple[str, int], tuple[str, str]] = {
    ("fp32", 32): ("v3-2", "v3s"),  # not measured: as D=64
    # fp32 D=64, bwd: v3 0.99, v3s 0.97, v2 0.93 at 22:43; v3s as in the other classes (23:02: update
    # kernel v3 2149.6 us, v3s 2158.0; worst step v3s 1.03, v3 1.00)
    ("fp32", 64): ("v3-2", "v3s"),  # fwd v3-2 worst 1.14 (v3-4 1.08, v2-8 0.93)
    ("fp32", 128): ("v3-2", "v3s"),  # fwd v3-2 worst 1.12 (v3-4 1.04); bwd v3s worst 1.08 (v3 1.02, v2p 0.91)
    ("fp32", 256): ("v3-4", "v3s"),  # fwd v3-4 worst 1.07 (v3-2 1.03); bwd v3s worst 1.05 (v3 0.99)
    ("fp32", 1024): ("v1", "v2"),  # not measured (v3/v3s take rows of D <= 256; wider rows run v2)
    ("16-bit", 32): ("v3-2", "v3s"),  # not measured: as D=128
    ("16-bit", 64): ("v3-2", "v3s"),  # not measured: as D=128
    ("16-bit", 128): ("v3-2", "v3s"),  # fp16 fwd v3-2 worst 1.09 (v3-4 1.00, v2-4p 0.84); bwd v3s 1.22
    ("16-bit", 256): ("v3-2", "v3s"),  # not measured: rows of the bytes of fp32 D=128
    ("16-bit", 1024): ("v1", "v2"),  # not measured
}
# Used where $TBE_SKIP_VARIANTS leaves out the table's choice (these cannot be left out).
FALLBACK = ("v2-8", "v2")

# dim class policies of the backward (dim_class() in tbe_impl.cuh)
_CLASSES_WARP, _CLASSES_V2, _CLASSES_V2_TWO_ROWS = 0, 1, 2

_ext = None
_load_error: str | None = None


def _variant_from_env(var: str, table: dict[str, int]) -> str:
    name = os.environ.get(var, AUTO)
    if name != AUTO and name not in table:
        raise ValueError(f"${var}={name!r} is not one of {[AUTO, *table]}")
    return name


_variants = {
    "forward": _variant_from_env("TBE_FWD_VARIANT", FORWARD_VARIANTS),
    "backward": _variant_from_env("TBE_BWD_VARIANT", BACKWARD_VARIANTS),
}


def _skipped_variants() -> tuple[set[str], set[str]]:
    """(forward, backward) names that ``$TBE_SKIP_VARIANTS`` leaves out: comma-separated names,
    each ``fwd:NAME`` / ``bwd:NAME`` for one direction, or a bare NAME for whichever direction(s)
    have it (``TBE_SKIP_VARIANTS=v2p`` leaves out the backward v2p). :data:`FALLBACK` cannot be
    left out."""
    fwd, bwd = set(), set()
    for item in filter(None, (x.strip() for x in os.environ.get("TBE_SKIP_VARIANTS", "").split(","))):
        side, _, name = item.rpartition(":")
        if side not in ("", "fwd", "bwd"):
            raise ValueError(f"$TBE_SKIP_VARIANTS: {item!r}: the prefix must be fwd: or bwd:")
        hit = False
        if side in ("", "fwd") and name in FORWARD_VARIANTS:
            fwd.add(name)
            hit = True
        if side in ("", "bwd") and name in BACKWARD_VARIANTS:
            bwd.add(name)
            hit = True
        if not hit:
            raise ValueError(f"$TBE_SKIP_VARIANTS: {item!r} is not one of forward {sorted(FORWARD_VARIANTS)} "
                             f"or backward {sorted(BACKWARD_VARIANTS)}")
    if FALLBACK[0] in fwd or FALLBACK[1] in bwd:
        raise ValueError(f"$TBE_SKIP_VARIANTS cannot leave out the fallback variants "
                         f"(forward {FALLBACK[0]}, backward {FALLBACK[1]})")
    return fwd, bwd


def forward_variants() -> list[str]:
    """The forward variant names, less those ``$TBE_SKIP_VARIANTS`` leaves out."""
    return [v for v in FORWARD_VARIANTS if v not in _skipped_variants()[0]]


def backward_variants() -> list[str]:
    """The backward variant names, less those ``$TBE_SKIP_VARIANTS`` leaves out."""
    return [v for v in BACKWARD_VARIANTS if v not in _skipped_variants()[1]]


def variants() -> dict[str, str]:
    """The forward and backward kernel variants calls use now (``auto``: :func:`dispatch`)."""
    return dict(_variants)


def dim_bucket(max_dim: int) -> int:
    """The dim bucket of :data:`DISPATCH`: max_dim rounded up to 32, 64, 128 or 256, else 1024."""
    return next((b for b in (32, 64, 128, 256) if max_dim <= b), 1024)


def shape_class(weights_dtype: torch.dtype, max_dim: int) -> tuple[str, int]:
    """The :data:`DISPATCH` key of tables of this weights type and largest dim."""
    return ("fp32" if weights_dtype == torch.float32 else "16-bit", dim_bucket(max_dim))


def dispatch(weights_dtype: torch.dtype, max_dim: int) -> tuple[str, str]:
    """(forward, backward) variant names a call on tables of this weights type and largest dim
    uses now: the ones :func:`use_variants` / ``$TBE_FWD_VARIANT`` / ``$TBE_BWD_VARIANT`` set, or
    for ``auto`` the :data:`DISPATCH` table's (:data:`FALLBACK` for one $TBE_SKIP_VARIANTS leaves
    out)."""
    table_fwd, table_bwd = DISPATCH[shape_class(weights_dtype, max_dim)]
    skip_fwd, skip_bwd = _skipped_variants()
    fwd, bwd = _variants["forward"], _variants["backward"]
    if fwd == AUTO:
        fwd = FALLBACK[0] if table_fwd in skip_fwd else table_fwd
    if bwd == AUTO:
        bwd = FALLBACK[1] if table_bwd in skip_bwd else table_bwd
    return fwd, bwd


@contextlib.contextmanager
def use_variants(*, forward: str | None = None, backward: str | None = None):
    """Run the block with these kernel variants (None: keep the current one; ``auto``: the
    :data:`DISPATCH` table's)."""
    if forward is not None and forward != AUTO and forward not in FORWARD_VARIANTS:
        raise ValueError(f"forward variant {forward!r} is not one of {[AUTO, *FORWARD_VARIANTS]}")
    if backward is not None and backward != AUTO and backward not in BACKWARD_VARIANTS:
        raise ValueError(f"backward variant {backward!r} is not one of {[AUTO, *BACKWARD_VARIANTS]}")
    saved = dict(_variants)
    if forward is not None:
        _variants["forward"] = forward
    if backward is not None:
        _variants["backward"] = backward
    try:
        yield
    finally:
        _variants.update(saved)


def _gencode_flags() -> list[str]:
    """SASS + PTX for the GPU that is here, in ONE device compilation pass (the build time
    comes out of a tight GPU budget): sm_90a (+ its PTX) on an H100/H200, else sm_XY +
    compute_XY PTX. ``TBE_CUDA_ARCH="compute_90,sm_90;..."`` overrides."""
    spec = os.environ.get("TBE_CUDA_ARCH")
    if spec:
        flags = []
        for pair in spec.split(";"):
            virt, real = pair.split(",")
            flags.append(f"-gencode=arch={virt},code={real}")
        return flags
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")
    # two flags on one virtual arch: nvcc still runs its front end once (no shell-glob brackets)
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}", f"-gencode=arch=compute_{arch},code=compute_{arch}"]


def _build_dir(flags: list[str]) -> Path:
    h = hashlib.sha256()
    for p in SOURCES + HEADERS:
        h.update(p.read_bytes())
    h.update(" ".join(flags).encode())
    h.update(f"{torch.__version__}|{torch.version.cuda}".encode())
    root = os.environ.get("TBE_KERNELS_BUILD_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tracekit", "tbe_kernels"
    )
    d = Path(root) / h.hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    return d


def load(verbose: bool = False):
    """The compiled extension (built once per source version). Raises KernelUnavailableError
    with the reason (no GPU, no nvcc, or the compiler's log) when it cannot be had."""
    global _ext, _load_error
    if _ext is not None:
        return _ext
    if _load_error is not None:
        raise KernelUnavailableError(_load_error)
    if not torch.cuda.is_available():
        _load_error = "no CUDA GPU is visible to torch"
        raise KernelUnavailableError(_load_error)
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None:
        _load_error = "no CUDA compiler found (CUDA_HOME/nvcc)"
        raise KernelUnavailableError(_load_error)
    flags = ["-O3", "-lineinfo", *_gencode_flags()]
    try:
        _ext = cpp_extension.load(
            name="tbe_kernels_ext",
            sources=[str(p) for p in SOURCES],
            extra_cflags=["-O3"],
            extra_cuda_cflags=flags,
            build_directory=str(_build_dir(flags)),
            verbose=verbose,
        )
    except Exception as e:  # the builder raises RuntimeError/OSError/subprocess errors with the log
        _load_error = f"building the TBE CUDA kernels failed: {e}"
        raise KernelUnavailableError(_load_error) from e
    return _ext


def _same_index_dtype(indices: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if indices.dtype == offsets.dtype:
        return indices.contiguous(), offsets.contiguous()
    return indices.long().contiguous(), offsets.long().contiguous()


def _psw(psw: torch.Tensor | None) -> torch.Tensor | None:
    return None if psw is None else psw.float().contiguous()


def forward(
    weights: torch.Tensor,
    layout: TBELayout,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: torch.Tensor | None,
    pooling: int,
    *,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, first_bad): first_bad is a (1,) int64 device tensor, NO_ERROR when all
    indices were in range, else the smallest bad position (its bag's output is NaN).
    ``out``: write into this (rows, width) float32 buffer instead of a new one (tests poison it)."""
    ext = load()
    indices, offsets = _same_index_dtype(indices, offsets)
    first_bad = torch.full((1,), NO_ERROR, dtype=torch.int64, device=weights.device)
    return ext.forward(
        weights,
        layout.feature_weights_offsets,
        layout.feature_dims,
        layout.feature_rows,
        layout.output_offsets,
        indices,
        offsets,
        _psw(per_sample_weights),
        pooling,
        layout.output_width(pooling),
        layout.batch_size(offsets),
        first_bad,
        out,
        layout.max_dim,
        _v2_forward_layout(layout),
        FORWARD_VARIANTS[dispatch(weights.dtype, layout.max_dim)[0]],
    ), first_bad


def _v2_forward_layout(layout: TBELayout) -> bool:
    """Whether the v2 forward can take this layout (with aligned output columns, which the
    kernels check): every table < 2^31 rows, every dim a multiple of 4 and in the same one of
    (16, 32], (32, 64], (64, 128], (128, 256] -- the v1 forward's lane split (8, 16, 32 lanes
    with one float4, 32 lanes with two) for every bag, so that both sum in the same order."""
    buckets = {next((i for i, top in enumerate((32, 64, 128, 256)) if d <= top), None) for d in layout.table_dims}
    return (
        all(d % 4 == 0 and d > 16 for d in layout.table_dims)
        and len(buckets) == 1
        and None not in buckets
        and max(layout.table_rows) < 2**31
    )


def dim_class(dim: int, grad_aligned: bool, policy: int) -> int:
    """The kernels' dim class of a table (dim_class() in tbe_impl.cuh): 0-2: 4/8/16 lanes per row
    (dim <= 16/32/64); 3-6: 32 lanes, 1/2/4/8 float4 per lane; 7, 8: 16 lanes, 2/4 float4 (two
    rows per warp); 9-12: scalar loads (dim % 4 != 0 or unaligned gradient rows). ``policy``:
    one row per warp (v1, and the chunk sums), v2, or v2 with two rows per warp up to dim 256."""
    if dim % 4 != 0 or not grad_aligned:
        return 9 + (0 if dim <= 128 else 1 if dim <= 256 else 2 if dim <= 512 else 3)
    units = dim // 4
    if policy != _CLASSES_WARP:
        for c, top in enumerate((4, 8, 16)):
            if units <= top:
                return c
    if units <= 32:
        return 7 if policy == _CLASSES_V2_TWO_ROWS else 3
    if units <= 64:
        return 8 if policy == _CLASSES_V2_TWO_ROWS else 4
    return 5 if units <= 128 else 6


def dim_classes(dims, grad_aligned: bool, policy: int = _CLASSES_WARP) -> int:
    """Bit mask of the dim classes (:func:`dim_class`) of these dims."""
    mask = 0
    for d in dims:
        mask |= 1 << dim_class(d, grad_aligned, policy)
    return mask


_BACKWARD_POLICY = {"v1": _CLASSES_WARP, "v2": _CLASSES_V2, "v2-2rows": _CLASSES_V2_TWO_ROWS, "v2p": _CLASSES_V2,
                    "v3": _CLASSES_V2, "v3s": _CLASSES_V2}


def backward_update(
    weights: torch.Tensor,
    momentum: torch.Tensor,
    layout: TBELayout,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    per_sample_weights: torch.Tensor | None,
    pooling: int,
    grad_output: torch.Tensor,
    *,
    optimizer: int,
    lr: float,
    eps: float,
) -> RowUpdate:
    """In-place optimizer update of ``weights``/``momentum``; no host sync."""
    ext = load()
    variant = dispatch(weights.dtype, layout.max_dim)[1]
    indices, offsets = _same_index_dtype(indices, offsets)
    if pooling == POOL_NONE:
        grad_aligned = layout.max_dim % 4 == 0
    else:
        grad_aligned = all(o % 4 == 0 for o in layout.output_offsets_list)
    unique_ids, num_unique = ext.backward(
        weights,
        momentum,
        layout.feature_rows,
        layout.feature_row_offsets,
        layout.output_offsets,
        layout.row_offsets,
        layout.table_weights_offsets,
        layout.table_dims_t,
        indices,
        offsets,
        _psw(per_sample_weights),
        grad_output.float().contiguous(),
        pooling,
        layout.output_width(pooling),
        layout.batch_size(offsets),
        layout.max_dim,
        layout.total_rows,
        grad_aligned,
        dim_classes(layout.table_dims, grad_aligned),
        dim_classes(layout.table_dims, grad_aligned, _BACKWARD_POLICY[variant]),
        optimizer,
        lr,
        eps,
        BACKWARD_VARIANTS[variant],
    )
    return RowUpdate(linear_ids=unique_ids, count=num_unique[0], row_offsets=layout.row_offsets_list)
