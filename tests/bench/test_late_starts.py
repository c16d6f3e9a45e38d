"""bench/late_starts.py: GPU work that started later than the model allows, by what other
streams ran meanwhile, on hand-built traces."""

from __future__ import annotations

import pytest

from bench import late_starts as ls
from tests.tracegen import TraceBuilder

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def held(path, other: str) -> str:
    """Three steps of 100 us: kernel ``main_k`` on stream 7, launched at 5 us, starts at 30 us
    (ready some 20 us earlier): held back while ``other`` runs on stream 20 from 2 to 40 us."""
    b = TraceBuilder()
    for i in range(3):
        t0 = 100.0 * i
        b.profiler_step(i + 1, t0, 100)
        b.kernel(other, t0 + 2, 38, stream=20, launch_at=t0 + 0.5)
        b.kernel("main_k", t0 + 30, 10, launch_at=t0 + 5)
    return str(b.write(path))


@pytest.mark.parametrize("other,key", [("gemm_side", "compute"), (NCCL, "communication")])
def test_a_late_start_is_told_by_what_ran_beside_it(tmp_path, other, key):
    (r,) = ls.measure(held(tmp_path / "t.json.gz", other))
    late = r["late_ms"]
    total = sum(late.values())
    # late by what the trace's launch latency leaves of the 25 us (some 12 us), all of it
    # under the other stream's kernel
    assert 0.005 < total < 0.025
    assert late[key] == pytest.approx(total, rel=0.01)
    assert late["nothing"] == pytest.approx(0, abs=1e-6)
    assert r["steps"] == 2 and r["traced_ms"] == pytest.approx(0.1)


def test_the_runner_writes_its_table_and_refuses_bad_input(tmp_path, capsys):
    path = held(tmp_path / "t.json.gz", "gemm_side")
    assert ls.main([path, "--out", str(tmp_path / "out")]) == 0
    (md,) = (tmp_path / "out").glob("late-starts-*.md")
    assert "| 0 | 2 |" in md.read_text()
    assert ls.main([str(tmp_path / "missing.json.gz")]) == 2
    assert "no such trace file or folder" in capsys.readouterr().err
