"""bench/gpu_under_collectives.py: compute kernels under a communication kernel against the same
kernels of a one-GPU reference, on hand-built traces."""

from __future__ import annotations

import pytest

from bench import gpu_under_collectives as guc
from tests.tracegen import TraceBuilder

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def steps(path, *, slow_under: float, comm: bool) -> str:
    """Three steps of 100 us: kernels gemm_a (10 us) and gemm_b (10 us) on stream 7; with
    ``comm`` an NCCL kernel on stream 17 runs beside gemm_a, which then takes ``slow_under``
    times as long."""
    b = TraceBuilder()
    for i in range(3):
        t0 = 100.0 * i
        b.profiler_step(i + 1, t0, 100)
        a = 10 * (slow_under if comm else 1.0)
        b.kernel("gemm_a", t0 + 10, a, launch_at=t0 + 1)
        if comm:
            b.kernel(NCCL, t0 + 8, a + 4, stream=17, launch_at=t0 + 2)
        b.kernel("gemm_b", t0 + 40, 10, launch_at=t0 + 3)
    return str(b.write(path))


def test_only_the_kernels_under_a_collective_pay(tmp_path):
    ref = steps(tmp_path / "ref.json.gz", slow_under=1.0, comm=False)
    rank = steps(tmp_path / "trace_rank0.json.gz", slow_under=1.3, comm=True)
    r = guc.measure(ref, rank)
    # gemm_a ran wholly under the NCCL kernel and took 13 us against 10: 3 us, +30 %; gemm_b
    # ran alone as long as in the reference
    assert r["under"]["kernels_per_step"] == 1 and r["alone"]["kernels_per_step"] == 1
    assert r["under"]["extra_ns_per_step"] == pytest.approx(3_000)
    assert r["under"]["extra_fraction"] == pytest.approx(0.3)
    assert r["alone"]["extra_ns_per_step"] == pytest.approx(0)
    assert r["communication_ns_per_step"] == pytest.approx(17_000)


def test_the_runner_writes_its_table(tmp_path):
    ref = steps(tmp_path / "ref.json.gz", slow_under=1.0, comm=False)
    job = tmp_path / "job"
    job.mkdir()
    steps(job / "trace_rank0.json.gz", slow_under=1.5, comm=True)
    assert guc.main([f"{ref}:{job}", "--out", str(tmp_path / "out")]) == 0
    (md,) = (tmp_path / "out").glob("gpu-under-collectives-*.md")
    assert "| 1, 0.005, +50.0 % | 1, 0.000, +0.0 % |" in md.read_text()


def test_bad_input_exits_2(tmp_path, capsys):
    assert guc.main([f"{tmp_path / 'missing.json.gz'}:{tmp_path}"]) == 2
    assert "no reference trace" in capsys.readouterr().err


def test_fix_moves_reads_the_slowdown_in_the_trace_itself(tmp_path):
    # gemm_a runs under the NCCL kernel in the first step only (13 us there, 10 us in the
    # others): the in-trace measure reads +30 %; no fix applies to these kernels
    b = TraceBuilder()
    for i in range(3):
        t0 = 100.0 * i
        b.profiler_step(i + 1, t0, 100)
        a = 13.0 if i == 0 else 10.0
        b.kernel("gemm_a", t0 + 10, a, launch_at=t0 + 1)
        if i == 0:
            b.kernel(NCCL, t0 + 8, a + 4, stream=17, launch_at=t0 + 2)
        b.kernel("gemm_b", t0 + 40, 10, launch_at=t0 + 3)
    r = guc.fix_moves(str(b.write(tmp_path / "trace_rank0.json.gz")))
    assert r["in_trace_matched"] == 1
    assert r["in_trace_slowdown"] == pytest.approx(0.3)
    assert r["under_fix_ns_per_step"] is None and r["saving_ns"] is None
    # the counted steps (2 and 3) hold no collective
    assert r["communication_ns_per_step"] == 0 and r["under_base_ns_per_step"] == 0


def test_fix_moves_runner_and_its_bad_input(tmp_path, capsys):
    job = tmp_path / "job"
    job.mkdir()
    steps(job / "trace_rank0.json.gz", slow_under=1.3, comm=True)
    (job / "metrics_rank0.json").write_text("{}")  # not a trace: left out
    assert guc.main(["--fix-moves", str(job), "--out", str(tmp_path / "out")]) == 0
    (md,) = (tmp_path / "out").glob("gpu-under-collectives-*.md")
    assert "What `fused_sparse_dist` moves under collectives" in md.read_text()
    assert guc.main(["--fix-moves", str(tmp_path / "nothing")]) == 2
    assert "no rank trace" in capsys.readouterr().err
    assert guc.main([]) == 2
