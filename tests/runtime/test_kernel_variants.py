"""The CUDA backend's kernel variants and dim classes, host side (runtime/kernels/cuda.py; no GPU
needed): the class of every dim under each policy, the v2 forward's layout rule, variant
selection."""

from __future__ import annotations

import pytest
import torch

from runtime.kernels import cuda as kc
from runtime.kernels.common import make_layout

# class id -> (lanes per row G, float4 (or 4 scalars) per lane kW, vector loads): dim_class() in
# tbe_impl.cuh
CLASSES = {0: (4, 1, True), 1: (8, 1, True), 2: (16, 1, True), 3: (32, 1, True), 4: (32, 2, True),
           5: (32, 4, True), 6: (32, 8, True), 7: (16, 2, True), 8: (16, 4, True),
           9: (32, 1, False), 10: (32, 2, False), 11: (32, 4, False), 12: (32, 8, False)}
POLICIES = {"v1": kc._CLASSES_WARP, "v2": kc._CLASSES_V2, "v2-2rows": kc._CLASSES_V2_TWO_ROWS}


def _expected(dim: int, aligned: bool, policy: str) -> tuple[int, int, bool]:
    """(G, kW, vector) written from the rules: the fewest lanes (v2: 4..32; v1: always 32;
    two rows: 16 lanes for 64 < dim <= 256), then the fewest float4 per lane that hold the row."""
    if dim % 4 or not aligned:
        return 32, next(w for w in (1, 2, 4, 8) if 128 * w >= dim), False
    if policy == "v2-2rows" and 64 < dim <= 256:
        return 16, 2 if dim <= 128 else 4, True
    if policy != "v1" and dim <= 64:
        return next(g for g in (4, 8, 16) if 4 * g >= dim), 1, True
    return 32, next(w for w in (1, 2, 4, 8) if 128 * w >= dim), True


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_dim_class_of_every_dim(policy):
    for dim in range(1, 1025):
        for aligned in (True, False):
            got = CLASSES[kc.dim_class(dim, aligned, POLICIES[policy])]
            assert got == _expected(dim, aligned, policy), (dim, aligned, policy)
            g, w, _ = got
            assert 4 * g * w >= dim  # the row fits the lanes


def test_v1_classes_are_the_first_versions():
    # the first version's numbering: (dim % 4 == 0 and aligned ? 0 : 4) + (<=128: 0, <=256: 1, <=512: 2, else 3)
    for dim in range(1, 1025):
        for aligned in (True, False):
            old = (0 if dim % 4 == 0 and aligned else 4) + (0 if dim <= 128 else 1 if dim <= 256 else 2 if dim <= 512 else 3)
            new = kc.dim_class(dim, aligned, kc._CLASSES_WARP)
            assert new == (3 + old if old < 4 else 9 + old - 4)


def test_dim_classes_mask():
    assert kc.dim_classes([64, 128, 5], True, kc._CLASSES_V2) == (1 << 2) | (1 << 3) | (1 << 9)
    assert kc.dim_classes([64, 128, 5], True) == (1 << 3) | (1 << 9)
    assert kc.dim_classes([200], False, kc._CLASSES_V2_TWO_ROWS) == 1 << 10


@pytest.mark.parametrize(
    "dims, rows, ok",
    [([128] * 3, [10] * 3, True), ([64, 64], [5, 7], True), ([20, 32], [3, 3], True), ([256, 132], [4, 4], True),
     ([64, 128], [5, 5], False),  # v1 splits them differently (16 and 32 lanes)
     ([16], [3], False), ([12, 8], [3, 3], False), ([130], [3], False), ([300], [3], False),
     ([64], [2**31], False)],
)
def test_v2_forward_layout(dims, rows, ok):
    layout = make_layout(rows, dims, list(range(len(dims))), torch.device("cpu"))
    assert kc._v2_forward_layout(layout) is ok


def test_use_variants_sets_and_restores():
    before = kc.variants()
    assert before == {"forward": kc.AUTO, "backward": kc.AUTO}
    with kc.use_variants(forward="v1"):
        assert kc.variants() == {"forward": "v1", "backward": kc.AUTO}
        with kc.use_variants(backward="v2-2rows"):
            assert kc.variants() == {"forward": "v1", "backward": "v2-2rows"}
        assert kc.variants()["backward"] == kc.AUTO
        with kc.use_variants(forward=kc.AUTO):
            assert kc.variants()["forward"] == kc.AUTO
    with pytest.raises(RuntimeError):
        with kc.use_variants(forward="v2-4", backward="v1"):
            raise RuntimeError("inside")
    assert kc.variants() == before
    with pytest.raises(ValueError, match="forward variant"):
        with kc.use_variants(forward="v3"):
            pass
    with pytest.raises(ValueError, match="backward variant"):
        with kc.use_variants(backward="v2-8"):
            pass


def test_variant_from_environment(monkeypatch):
    monkeypatch.setenv("TBE_FWD_VARIANT", "v2-4")
    assert kc._variant_from_env("TBE_FWD_VARIANT", kc.FORWARD_VARIANTS) == "v2-4"
    monkeypatch.setenv("TBE_FWD_VARIANT", "fast")
    with pytest.raises(ValueError, match="TBE_FWD_VARIANT"):
        kc._variant_from_env("TBE_FWD_VARIANT", kc.FORWARD_VARIANTS)
    monkeypatch.delenv("TBE_FWD_VARIANT")
    assert kc._variant_from_env("TBE_FWD_VARIANT", kc.FORWARD_VARIANTS) == kc.AUTO


def test_skip_variants_from_environment(monkeypatch):
    monkeypatch.delenv("TBE_SKIP_VARIANTS", raising=False)
    assert kc.forward_variants() == list(kc.FORWARD_VARIANTS)
    assert kc.backward_variants() == list(kc.BACKWARD_VARIANTS)
    monkeypatch.setenv("TBE_SKIP_VARIANTS", "v2p")
    assert kc.backward_variants() == ["v1", "v2", "v2-2rows", "v3", "v3s"]
    assert kc.forward_variants() == list(kc.FORWARD_VARIANTS)
    monkeypatch.setenv("TBE_SKIP_VARIANTS", " bwd:v1, v2-4p ,v3-2")
    assert kc.backward_variants() == ["v2", "v2-2rows", "v2p", "v3", "v3s"]
    assert kc.forward_variants() == ["v1", "v2-12", "v2-8", "v2-4", "v2-12p", "v2-8p", "v3-4"]
    monkeypatch.setenv("TBE_SKIP_VARIANTS", "v1")  # both directions
    assert "v1" not in kc.forward_variants() and "v1" not in kc.backward_variants()
    monkeypatch.setenv("TBE_SKIP_VARIANTS", "v3")  # a backward name only
    assert "v3" not in kc.backward_variants() and kc.forward_variants() == list(kc.FORWARD_VARIANTS)
    for bad, match in (("v4", "not one of"), ("fwd:v2p", "not one of"), ("up:v1", "prefix"),
                       (kc.FALLBACK[1], "fallback"), ("fwd:" + kc.FALLBACK[0], "fallback")):
        monkeypatch.setenv("TBE_SKIP_VARIANTS", bad)
        with pytest.raises(ValueError, match=match):
            kc.backward_variants()


def test_dispatch_table_covers_every_class():
    for weights in ("fp32", "16-bit"):
        for bucket in (32, 64, 128, 256, 1024):
            fwd, bwd = kc.DISPATCH[(weights, bucket)]
            assert fwd in kc.FORWARD_VARIANTS and bwd in kc.BACKWARD_VARIANTS
    assert len(kc.DISPATCH) == 10
    assert kc.FALLBACK[0] in kc.FORWARD_VARIANTS and kc.FALLBACK[1] in kc.BACKWARD_VARIANTS


@pytest.mark.parametrize("dim, bucket", [(1, 32), (16, 32), (32, 32), (33, 64), (64, 64), (100, 128), (128, 128),
                                         (129, 256), (256, 256), (257, 1024), (1024, 1024)])
def test_dim_bucket(dim, bucket):
    assert kc.dim_bucket(dim) == bucket


def test_dispatch_follows_the_table_the_overrides_and_the_skips(monkeypatch):
    monkeypatch.delenv("TBE_SKIP_VARIANTS", raising=False)
    table = {("fp32", 128): ("v3-4", "v3"), ("16-bit", 64): ("v2-4p", "v2p"), ("fp32", 256): ("v2-12", "v1")}
    monkeypatch.setattr(kc, "DISPATCH", {**kc.DISPATCH, **table})
    assert kc.dispatch(torch.float32, 100) == ("v3-4", "v3")
    assert kc.dispatch(torch.float16, 64) == ("v2-4p", "v2p")
    assert kc.dispatch(torch.bfloat16, 40) == ("v2-4p", "v2p")
    assert kc.dispatch(torch.float32, 256) == ("v2-12", "v1")
    with kc.use_variants(forward="v2-4"):
        assert kc.dispatch(torch.float32, 100) == ("v2-4", "v3")
        with kc.use_variants(backward="v2-2rows"):
            assert kc.dispatch(torch.float16, 64) == ("v2-4", "v2-2rows")
    monkeypatch.setenv("TBE_SKIP_VARIANTS", "v3-4,v2p")  # the table's choice left out: the fallback
    assert kc.dispatch(torch.float32, 100) == (kc.FALLBACK[0], "v3")
    assert kc.dispatch(torch.float16, 64) == ("v2-4p", kc.FALLBACK[1])
    with kc.use_variants(forward="v3-4"):  # asked for by name: used (benchmarks time skipped ones never)
        assert kc.dispatch(torch.float32, 100)[0] == "v3-4"


def test_variant_codes_match_the_header():
    # ForwardArgs::variant 0..kFwdVariants-1, BackwardArgs::variant kBwdV1 .. kBwdV3Stream
    header = (kc.HERE / "tbe_kernels.h").read_text()
    assert "constexpr int kFwdVariants = 9;" in header and "constexpr int kFwdV2Configs = 6;" in header
    assert sorted(kc.FORWARD_VARIANTS.values()) == list(range(9))
    # 4..6: configs 1..3 (v2-12, v2-8, v2-4) with L2 prefetches; 7, 8: configs 4, 5 (v3-4, v3-2)
    for name in ("v2-12", "v2-8", "v2-4"):
        assert kc.FORWARD_VARIANTS[name + "p"] == kc.FORWARD_VARIANTS[name] + 3
    assert (kc.FORWARD_VARIANTS["v3-4"], kc.FORWARD_VARIANTS["v3-2"]) == (7, 8)
    assert "kFwdV2Loads[kFwdV2Configs] = {12, 12, 8, 4, 4, 2};" in header
    for name, code in (("kBwdV1", 1), ("kBwdV2", 2), ("kBwdV2TwoRows", 3), ("kBwdV2Prefetch", 4), ("kBwdV3", 5),
                       ("kBwdV3Stream", 6)):
        assert f"constexpr int {name} = {code};" in header
    assert kc.BACKWARD_VARIANTS == {"v1": 1, "v2": 2, "v2-2rows": 3, "v2p": 4, "v3": 5, "v3s": 6}
    assert set(kc._BACKWARD_POLICY) == set(kc.BACKWARD_VARIANTS)
