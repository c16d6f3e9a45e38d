"""tracekit.analyses.embedding_bw: bytes from recorded shapes, bandwidth against the GPU's peak."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.tracegen import TraceBuilder, inputs, load_built
from tracekit.analyses import embedding_bw
from tracekit.hardware import GpuPeak, device_names, peak_hbm
from tracekit.phases import default_rules, rules_from_dict
from tracekit.errors import RulesError

# the TorchRec trace: indices 8,307,307, offsets 425,985 = B*T+1, total D 3328, max D 128
N, T, B, TOTAL_D, MAX_D = 8_307_307, 26, 16_384, 3328, 128
ROWS = 26 * 1_000_000


def fbgemm_forward_args(n=N, total_d=TOTAL_D, max_d=MAX_D, wtype="float", uvm=0, concrete=True):
    a = inputs(([ROWS * max_d], wtype), ([uvm], wtype), ([0, 0], wtype), ([T], "int"),
               ([T], "long int"), ([T + 1], "int"), (total_d,), (max_d,), ([n], "long int"),
               ([B * T + 1], "long int"), (0,), ([0], "int"), ([0], "int"), (0,), ("False",))
    if not concrete:
        del a["Concrete Inputs"]
    return a


def fbgemm_backward_args(n=N, opt_state=None):
    return inputs(([B, TOTAL_D], "float"), ([ROWS * MAX_D], "float"), ([0], "float"),
                  ([0, 0], "float"), ([T], "int"), ([T], "long int"), ([T + 1], "int"),
                  (MAX_D,), ("False",), ([T + 1], "long int"), (25,), ([n], "long int"),
                  ([B * T + 1], "long int"), (0,), ([0], "int"), (0,), (32,), ("False",),
                  (26,), (67108863,), ("False",), ("True",), ([ROWS], "float"), ([0], "float"),
                  ([T], "int"), ([T], "long int"))


FWD_BYTES = N * MAX_D * 4 + N * 8 + (B * T + 1) * 8 + B * TOTAL_D * 4
BWD_FIXED = B * TOTAL_D * 4 + N * 8 + (B * T + 1) * 8
ROW_ADAGRAD = 2 * MAX_D * 4 + 2 * 4


def tbe_trace(tmp_path, *, device="NVIDIA H200", fwd_us=1000.0, bwd_us=(500.0, 3000.0),
              fwd_args=None, bwd_args=None, fwd_name="fbgemm::split_embedding_codegen_forward_unweighted_cuda",
              bwd_name="fbgemm::split_embedding_backward_codegen_rowwise_adagrad_unweighted_exact_cuda",
              steps=2, annotation=False):
    """``steps`` ProfilerSteps, each: the forward op on the main thread (one kernel), the
    backward op on autograd's thread (a sort kernel, then the update kernel)."""
    b = TraceBuilder()
    b.extra_metadata["deviceProperties"] = [{"id": 0, "name": device}]
    add = b.annotation if annotation else b.cpu_op
    for k in range(steps):
        t0 = k * 20_000.0
        b.profiler_step(k + 1, t0, 19_000)
        add(fwd_name, t0 + 10, 50, args=fwd_args if fwd_args is not None else fbgemm_forward_args())
        b.kernel("split_embedding_codegen_forward_unweighted_kernel<float, float>", t0 + 100, fwd_us,
                 launch_at=t0 + 20)
        add(bwd_name, t0 + 2000, 80, tid=77,
            args=bwd_args if bwd_args is not None else fbgemm_backward_args())
        b.kernel("void cub::DeviceRadixSortOnesweepKernel<long>", t0 + 3000, bwd_us[0],
                 launch_at=t0 + 2010, tid=77)
        b.kernel("split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1",
                 t0 + 3000 + bwd_us[0], bwd_us[1], launch_at=t0 + 2030, tid=77)
    return load_built(b, tmp_path)


def test_fbgemm_forward_and_backward_bytes_and_bandwidth(tmp_path):
    r = embedding_bw.compute(tbe_trace(tmp_path), default_rules())
    assert r.device == "NVIDIA H200" and r.peak_gbps == 4800
    calls = r.calls
    assert list(calls["direction"]) == ["forward", "backward"] * 2
    assert list(calls["step"]) == [1, 1, 2, 2]
    fwd, bwd = calls.iloc[0], calls.iloc[1]
    assert fwd["status"] == "ok" and fwd["lookups"] == N and fwd["bags"] == B and fwd["features"] == T
    assert fwd["bytes"] == FWD_BYTES and not fwd["upper_bound"]
    assert fwd["gpu_ns"] == 1_000_000 and fwd["activities"] == 1
    assert fwd["gbps"] == pytest.approx(FWD_BYTES / 1e6)
    assert fwd["share"] == pytest.approx(FWD_BYTES / 1e6 / 4800)
    assert fwd["phase"] == "lookup"
    # backward: both kernels, rows counted once per lookup (an upper bound)
    assert bwd["activities"] == 2 and bwd["gpu_ns"] == 3_500_000
    assert bwd["fixed_bytes"] == BWD_FIXED and bwd["row_bytes"] == ROW_ADAGRAD
    assert bwd["bytes"] == BWD_FIXED + N * ROW_ADAGRAD and bwd["upper_bound"]
    assert "cta_per_row" in bwd["kernel"]
    # totals
    d = r.by_direction.set_index("direction")
    assert d.loc["forward", "calls"] == 2 and d.loc["forward", "bytes"] == 2 * FWD_BYTES
    assert d.loc["backward", "gpu_ns"] == 7_000_000
    s = r.by_step.set_index(["step", "direction"])
    assert s.loc[(2, "forward"), "bytes"] == FWD_BYTES
    assert set(r.by_phase["phase"]) == {"lookup", "emb_backward"}
    assert r.missing.empty


def test_finding_when_far_below_peak(tmp_path):
    # forward: 4.43 GB in 1 ms = 4.4 TB/s (92 % of 4.8): no finding; backward (upper bound):
    # ~8.96 GB in 3.5 ms = 2.56 TB/s, 53 %: none at 0.5, one at 0.6
    r = embedding_bw.compute(tbe_trace(tmp_path), default_rules())
    assert r.findings == ()
    r = embedding_bw.compute(tbe_trace(tmp_path), default_rules(),
                             embedding_bw.EmbeddingBwConfig(far_below=0.6))
    (f,) = r.findings
    assert f.direction == "backward" and f.upper_bound
    assert f.title.startswith("the embedding backward (with the update) moves at most 2.")
    assert "of the H200's 4.80 TB/s" in f.title
    total = 2 * (BWD_FIXED + N * ROW_ADAGRAD)
    assert f.gpu_ns_at_target == round(total / (0.8 * 4800))
    assert f.per_step_ns == pytest.approx((7_000_000 - f.gpu_ns_at_target) / 2)


def test_slow_lookup_is_a_finding(tmp_path):
    r = embedding_bw.compute(tbe_trace(tmp_path, fwd_us=4000.0), default_rules())
    (f,) = [f for f in r.findings if f.direction == "forward"]
    assert not f.upper_bound and f.share == pytest.approx(FWD_BYTES / 4e6 / 4800)
    assert "moves 1.14 TB/s, 24 % of" in f.title


def test_no_shapes_no_estimate(tmp_path):
    tr = tbe_trace(tmp_path, fwd_args={}, bwd_args={})
    r = embedding_bw.compute(tr, default_rules())
    assert set(r.calls["status"]) == {embedding_bw.NO_SHAPES}
    assert r.calls["bytes"].isna().all() and r.calls["gbps"].isna().all()
    assert r.by_direction.empty and r.findings == ()
    m = r.missing.set_index("op")
    assert m.loc["fbgemm::split_embedding_codegen_forward_unweighted_cuda", "calls"] == 2
    assert m.loc["fbgemm::split_embedding_codegen_forward_unweighted_cuda", "reason"] == embedding_bw.NO_SHAPES


def test_no_concrete_inputs_says_so(tmp_path):
    tr = tbe_trace(tmp_path, fwd_args=fbgemm_forward_args(concrete=False))
    r = embedding_bw.compute(tr, default_rules())
    fwd = r.calls[r.calls["direction"] == "forward"]
    assert fwd["status"].str.contains("total_D not recorded").all()
    assert fwd["bytes"].isna().all()


def test_uvm_tables_are_not_estimated(tmp_path):
    r = embedding_bw.compute(tbe_trace(tmp_path, fwd_args=fbgemm_forward_args(uvm=5)), default_rules())
    assert r.calls.loc[r.calls["direction"] == "forward", "status"].str.contains("UVM").all()


def test_mixed_dims_use_the_mean_dim_and_say_so(tmp_path):
    r = embedding_bw.compute(tbe_trace(tmp_path, fwd_args=fbgemm_forward_args(total_d=2600)),
                             default_rules())
    fwd = r.calls.iloc[0]
    assert fwd["dim"] == 100.0
    assert fwd["bytes"] == N * 100 * 4 + N * 8 + (B * T + 1) * 8 + B * 2600 * 4
    assert any("mean dim" in n for n in r.notes)


def test_fp16_weights_and_unknown_gpu(tmp_path):
    r = embedding_bw.compute(tbe_trace(tmp_path, device="Some Future GPU",
                                       fwd_args=fbgemm_forward_args(wtype="c10::Half")),
                             default_rules())
    fwd = r.calls.iloc[0]
    assert fwd["bytes"] == N * MAX_D * 2 + N * 8 + (B * T + 1) * 8 + B * TOTAL_D * 4
    assert r.peak_gbps is None and math.isnan(fwd["share"]) and "not in tracekit's table" in r.peak_source
    assert r.findings == ()


def test_rules_file_gives_a_gpu_its_peak(tmp_path):
    rules = rules_from_dict({"gpu": [{"pattern": "Future GPU", "hbm_gbps": 2000, "label": "FG"}]},
                            "mine.toml", base=default_rules())
    r = embedding_bw.compute(tbe_trace(tmp_path, device="Some Future GPU"), rules)
    assert r.peak_gbps == 2000 and r.peak_source.startswith("mine.toml: FG")
    with pytest.raises(RulesError):
        rules_from_dict({"gpu": [{"pattern": "x", "hbm_gbps": -1}]}, "bad.toml")


def test_ours_recorded_annotation(tmp_path):
    # runtime/kernels/record.py's layout, 4 features of dim 64, rowwise Adagrad state
    n, b, f, d = 100_000, 4096, 4, 64
    fwd = inputs(([f * 1000 * d], "float"), ([n], "long int"), ([f * b + 1], "long int"), (),
                 (f,), (f * d,), (d,), (0,))
    bwd = inputs(([b, f * d], "float"), ([f * 1000 * d], "float"), ([f * 1000], "float"),
                 ([n], "long int"), ([f * b + 1], "long int"), (), (f,), (f * d,), (d,), (0,), (1,))
    tr = tbe_trace(tmp_path, fwd_args=fwd, bwd_args=bwd, fwd_name="tracekit_tbe::forward",
                   bwd_name="tracekit_tbe::backward_update", annotation=True)
    r = embedding_bw.compute(tr, default_rules())
    c = r.calls
    assert set(c["family"]) == {"tracekit"} and set(c["status"]) == {"ok"}
    assert c.iloc[0]["bytes"] == n * d * 4 + n * 8 + (f * b + 1) * 8 + b * f * d * 4
    assert c.iloc[1]["fixed_bytes"] == b * f * d * 4 + n * 8 + (f * b + 1) * 8
    assert c.iloc[1]["row_bytes"] == 2 * d * 4 + 2 * 4


def test_torch_embedding_bag_and_dense_backward(tmp_path):
    e, d, n, nb = 100_000, 32, 50_000, 1024
    b = TraceBuilder()
    b.extra_metadata["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    b.cpu_op("aten::embedding_bag", 10, 100)
    b.cpu_op("aten::_embedding_bag", 12, 90,
             args=inputs(([e, d], "float"), ([n], "long int"), ([nb], "long int"), ("False",),
                         (0,), ("False",), (), ("False",), (-1,)))
    b.kernel("void at::native::(anonymous namespace)::embedding_bag_kernel_sum_mean<float>", 200,
             100, launch_at=20)
    b.cpu_op("aten::_embedding_bag_backward", 1000, 100, tid=9)
    b.cpu_op("aten::_embedding_bag_dense_backward", 1002, 90, tid=9,
             args=inputs(([nb, d], "float"), ([n], "long int"), ([n], "long int"),
                         ([nb], "long int"), ([nb], "long int"), (e,), ("False",), (0,), (), (-1,)))
    b.memset(1200, 20, launch_at=1010, tid=9)
    b.kernel("void at::native::compute_grad_weight_bags<float>", 1230, 80, launch_at=1020, tid=9)
    r = embedding_bw.compute(load_built(b, tmp_path), default_rules())
    assert r.peak_gbps == 2039
    fwd, bwd = r.calls.iloc[0], r.calls.iloc[1]
    assert fwd["op"] == "aten::_embedding_bag" and fwd["family"] == "torch"
    assert fwd["bytes"] == n * d * 4 + n * 8 + nb * 8 + nb * d * 4
    assert bwd["op"] == "aten::_embedding_bag_dense_backward" and bwd["activities"] == 2
    assert bwd["gpu_ns"] == 100_000  # the memset and the kernel, back to back
    assert bwd["fixed_bytes"] == e * d * 4 + n * 8 + n * 8
    assert bwd["row_bytes"] == 2 * d * 4 and bwd["upper_bound"]


def test_kernels_without_a_modelled_op_are_counted(tmp_path):
    b = TraceBuilder()
    b.cpu_op("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function", 10, 100,
             args=inputs(([0], "float")))
    b.kernel("split_embedding_codegen_forward_unweighted_kernel<half>", 200, 50, launch_at=20)
    b.kernel("split_embedding_codegen_forward_unweighted_kernel<half>", 300, 50)  # no launch
    r = embedding_bw.compute(load_built(b, tmp_path), default_rules())
    assert r.calls.empty
    m = r.missing.set_index("reason")
    assert m.loc["not an op tracekit knows the layout of", "op"].startswith("fbgemm::split_embedding_codegen_lookup")
    assert m.loc["not an op tracekit knows the layout of", "gpu_ns"] == 50_000
    assert m.loc["no launching call in the trace", "activities"] == 1


def test_gpu_table():
    assert peak_hbm("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert peak_hbm("NVIDIA H100 PCIe").hbm_gbps == 2000
    assert peak_hbm("NVIDIA H200").hbm_gbps == 4800
    assert peak_hbm("NVIDIA A100-SXM4-40GB").hbm_gbps == 1555
    assert peak_hbm("NVIDIA A100 80GB PCIe").hbm_gbps == 1935
    assert peak_hbm("NVIDIA B200").hbm_gbps == 8000
    assert peak_hbm("AMD Instinct MI300X").hbm_gbps == 5300
    assert peak_hbm("Test GPU") is None and peak_hbm(None) is None
    mine = (GpuPeak("H200", 4000, "mine", "x.toml"),)
    assert peak_hbm("NVIDIA H200", mine).hbm_gbps == 4000
    assert device_names({"deviceProperties": [{"id": 1, "name": "A"}, "junk", {"id": True}]}) == {1: "A"}


def test_loader_keeps_inputs_only_for_embedding_ops(tmp_path):
    b = TraceBuilder()
    b.cpu_op("aten::mm", 10, 10, args=inputs(([4, 4], "float"), ([4, 4], "float")))
    b.cpu_op("aten::_embedding_bag", 30, 10, args=inputs(([10, 4], "float"), ([3], "long int"), (7,)))
    tr = load_built(b, tmp_path)
    a = tr.args
    assert len(a) == 1
    assert tr.events["name"].iloc[a["event"].iat[0]] == "aten::_embedding_bag"
    assert a["input_dims"].iat[0] == "[[10,4],[3],[]]"
    assert a["input_types"].iat[0] == '["float","long int","Scalar"]'
    assert a["concrete_inputs"].iat[0] == '["","","7"]'


def test_a_real_gpu_trace_gets_its_finding():
    """tests/data/dlrm_2stream_small.json.gz (torch 2.11, H200, record_shapes): 32 lookups of
    torch's embedding_bag over 10,000-row tables, 12 us kernels: far below the memory system."""
    from tests.conftest import TEST_DATA
    from tracekit.trace import load

    r = embedding_bw.compute(load(TEST_DATA / "dlrm_2stream_small.json.gz", use_cache=False).traces[0],
                             default_rules())
    assert r.device == "NVIDIA H200" and r.peak_gbps == 4800
    ok = r.calls[r.calls["status"] == "ok"]
    assert len(ok) == 32 and set(ok["op"]) == {"aten::_embedding_bag"}
    assert (ok["dim"] == 64).all() and (ok["bags"] == 512).all()
    # every call's bytes from its own shapes: rows + indices + offsets + output (fp32, int64)
    assert (ok["bytes"] == ok["lookups"] * 64 * 4 + ok["lookups"] * 8 + 512 * 8 + 512 * 64 * 4).all()
    (f,) = r.findings
    assert f.title == "the embedding lookup (forward) moves 0.26 TB/s, 5 % of the H200's 4.80 TB/s"


def test_fbgemm_grad_indice_weights(tmp_path):
    """The weighted features' backward: the gradient of each per-sample weight."""
    args = inputs(([B, TOTAL_D], "float"), ([ROWS * MAX_D], "float"), ([0], "float"),
                  ([0, 0], "float"), ([T], "int"), ([T], "long int"), ([T + 1], "int"), (MAX_D,),
                  ([N], "long int"), ([B * T + 1], "long int"), ([0], "int"), ([T], "int"))
    tr = tbe_trace(tmp_path, bwd_args=args, steps=1,
                   bwd_name="fbgemm::split_embedding_codegen_grad_indice_weights_cuda")
    bwd = embedding_bw.compute(tr, default_rules()).calls.iloc[1]
    assert bwd["status"] == "ok" and not bwd["upper_bound"]
    assert bwd["bytes"] == N * MAX_D * 4 + B * TOTAL_D * 4 + N * 8 + (B * T + 1) * 8 + N * 4


TORCHREC = Path(__file__).resolve().parents[2] / "sample_traces" / "torchrec_1gpu" / "sparse_b8192" \
    / "trace-1gpu_sparse_b8192-rank0.json.gz"


@pytest.mark.skipif(not TORCHREC.is_file(), reason="TorchRec's benchmark trace (gpu/torchrec_bench.py) not committed")
def test_torchrec_benchmark_trace():
    """TorchRec 1.6.1's own pipeline benchmark (1 x H200, 2026-11-27, record_shapes): every
    FBGEMM TBE call is modelled (forward, fused SGD backward, the weighted features' weight
    gradient) and the backward, even counted at one row per lookup, is under half the peak."""
    from tracekit.trace import load

    r = embedding_bw.compute(load(TORCHREC, use_cache=False).traces[0], default_rules())
    assert set(r.calls["status"]) == {"ok"} and len(r.calls) == 80
    assert {op.split("::")[1] for op in r.calls["op"]} == {
        "split_embedding_codegen_forward_unweighted_cuda", "split_embedding_codegen_forward_weighted_cuda",
        "split_embedding_backward_codegen_sgd_unweighted_exact_cuda",
        "split_embedding_backward_codegen_sgd_weighted_exact_cuda",
        "split_embedding_codegen_grad_indice_weights_cuda"}
    (f,) = r.findings
    assert f.title == "the embedding backward (with the update) moves at most 2.20 TB/s, 46 % of the H200's 4.80 TB/s"
