"""bench/overhead_fit.py on hand-made runs whose untraced step a known model gives: the fit
finds its costs again and judges the run it was not fitted on."""

from __future__ import annotations

import json

import pytest

from bench import overhead_fit
from tests.tracegen import TraceBuilder

TRUE = {"cpu_op": 3000.0, "runtime": 1000.0, "memory": 2000.0, "sync_call": 0.0, "python": 0.0,
        "shapes": 0.0, "modules": 0.0}


def host_bound_run(folder, *, ops: int, memory: bool, preset: str, step_us: int = 1000) -> dict:
    """Three host-bound steps of ``step_us`` each: ``ops`` CPU ops around launches (and a
    [memory] event each), written as ``folder``'s trace with a ``metrics.json`` (an untraced
    step of 1 ms, for the caller to replace); returns that metrics document."""
    b = TraceBuilder()
    for i in range(3):
        t0 = step_us * i
        b.profiler_step(i + 1, t0, step_us)
        for j in range(ops):
            t = t0 + 10 + j * 30
            b.cpu_op("aten::add", t, 20)
            b.kernel("k", t + 12, 2, launched_by=b.runtime("cudaLaunchKernel", t + 5, 5))
            if memory:
                b.memory(t + 15, 1024, total_allocated=1024, total_reserved=2048)
    folder.mkdir(parents=True)
    b.write(folder / "trace_rank0.json.gz")
    doc = {"preset": preset, "variant": "sparse", "world_size": 1,
           "trace_run": {"step_ms": [1.0]}}
    (folder / "metrics.json").write_text(json.dumps(doc))
    return doc


def test_fit_finds_the_costs_and_judges_the_others(tmp_path, monkeypatch):
    root = tmp_path / "sample_traces"
    host_bound_run(root / "pipelines_1gpu" / "a", ops=20, memory=True, preset="fitme")
    host_bound_run(root / "profiler_1gpu" / "fitme" / "sparse" / "no_memory", ops=20, memory=False,
         preset="fitme")
    host_bound_run(root / "pipelines_1gpu" / "b", ops=30, memory=True, preset="other")
    runs = overhead_fit.find_runs([str(root)])
    assert sorted((r.preset, r.option) for r in runs) == [
        ("fitme", "default"), ("fitme", "no_memory"), ("other", "default")]
    for r in runs:
        overhead_fit.prepare(r)
        r.untraced_ms = overhead_fit.estimate_ms(r, TRUE)  # what the known model gives
        r.fit = r.preset == "fitme"
    fitted = [r for r in runs if r.fit]
    prior = {t: 1000.0 for t in TRUE}
    costs, told, alone = overhead_fit.fit(fitted, "terms", prior)
    assert "memory" in alone and "cpu_op" not in alone  # the option sets vary memory only
    judged = [r for r in runs if not r.fit][0]
    assert overhead_fit.estimate_ms(judged, prior) / judged.untraced_ms - 1 > 0.05
    assert abs(overhead_fit.estimate_ms(judged, costs) / judged.untraced_ms - 1) < 0.01
    assert costs["memory"] == pytest.approx(TRUE["memory"], rel=0.1)
    c = overhead_fit.contrasts(runs)
    assert [(x["option"], x["term"], round(x["events_per_step"])) for x in c] == [
        ("no_memory", "memory", -20)]


def test_anchor_wakes_for_one_run_only(tmp_path, monkeypatch):
    """``--anchor-wakes on|off`` sets the untraced replay's anchored wakes for that run (the
    result says which) and leaves the model's setting as it was."""
    from tracekit.graph import overhead as oh

    root = tmp_path / "sample_traces"
    host_bound_run(root / "pipelines_1gpu" / "a", ops=5, memory=False, preset="fitme")
    seen = []
    real = overhead_fit.estimate_ms
    monkeypatch.setattr(overhead_fit, "estimate_ms",
                        lambda *a, **k: seen.append(oh.ANCHOR_WAKES) or real(*a, **k))
    before = oh.ANCHOR_WAKES
    for flag, want in (("on", True), ("off", False)):
        seen.clear()
        out = tmp_path / flag
        assert overhead_fit.main(["--runs", str(root), "--mode", "scale", "--anchor-wakes", flag,
                                  "--out", str(out)]) == 0
        assert seen and set(seen) == {want}
        doc = json.loads(next(out.glob("*.json")).read_text())
        assert doc["anchor_wakes"] is want
        assert oh.ANCHOR_WAKES is before
