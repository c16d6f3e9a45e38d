"""bench.contention: what kernels of two streams cost each other where they overlap."""

from __future__ import annotations

import json

import pytest

from bench import contention
from tests.tracegen import US, TraceBuilder


def pair_trace(path, *, fused: bool):
    """Three 1-ms steps of kernels a (300 us) and b (200 us): one after the other on stream 7
    (before), or b on stream 9 from 100 us into a, each 50 us longer (after); launched 8.5 us
    before they start where their stream is idle."""
    b = TraceBuilder()
    for i in (1, 2, 3):
        s = (i - 1) * 1000.0
        b.profiler_step(i, s, 1000)
        b.annotation(f"## forward {i} ##", s + 0.5, 3)
        b.kernel("a", s + 10, 350 if fused else 300,
                 launched_by=b.runtime("cudaLaunchKernel", s + 1, 0.5))
        b.kernel("b", s + 110 if fused else s + 311, 250 if fused else 200,
                 stream=9 if fused else 7,
                 launched_by=b.runtime("cudaLaunchKernel", s + 101 if fused else s + 2, 0.5))
    return str(b.write(path))


def test_overlap_and_what_each_stream_paid(tmp_path):
    before = pair_trace(tmp_path / "before.json", fused=False)
    after = pair_trace(tmp_path / "after.json", fused=True)
    m = contention.measure(before, after)
    # after: a 10..360 on stream 7 (the main one: more kernel time), b 110..360 on stream 9:
    # each under the other 250 us, one overlap of 250 us a step; each 50 us longer than before
    assert m["steps_after"] == 2 and m["overlap_ns"] == 250 * US
    assert m["main_stretch_ns"] == 50 * US and m["side_stretch_ns"] == 50 * US
    assert m["main_late_ns"] == 0
    assert m["main_share"] == pytest.approx(0.2) and m["side_share"] == pytest.approx(0.2)
    assert "| p | 0.250 | 0.050 + 0.000 = 0.050 | 0.20 | 0.050 | 0.20 |" in \
        contention.render([{"name": "p", **m}], "cmd", 1.0)


def test_manifest_pairs_and_bad_input(tmp_path, capsys):
    pair_trace(tmp_path / "before.json", fused=False)
    pair_trace(tmp_path / "after.json", fused=True)
    man = tmp_path / "m.json"
    man.write_text(json.dumps({"pairs": [
        {"name": "p", "fix": "fused_sparse_dist", "before": {"trace": "before.json"},
         "after": {"trace": "after.json"}},
        {"name": "q", "fix": "fused_sparse_dist", "before": {"trace": "before.json"},
         "after": {"trace": "missing.json"}},
        {"name": "r", "fix": "async_delta_copy", "before": {"trace": "before.json"},
         "after": {"trace": "after.json"}}]}))
    assert [n for n, _, _ in contention.pairs_of(str(man))] == ["p"]
    assert contention.main([str(man), "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("contention-*.json"))
    assert contention.main([str(tmp_path / "none.json")]) == 2
    assert "cannot read the manifest" in capsys.readouterr().err
    (tmp_path / "e.json").write_text(json.dumps({"pairs": []}))
    assert contention.main([str(tmp_path / "e.json")]) == 2
    assert "no FusedSparseDist pair" in capsys.readouterr().err
