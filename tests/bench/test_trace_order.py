"""bench.trace_order: the runs after a process's first trace against the rounds."""

from __future__ import annotations

import json

from bench import trace_order


def _run(ms: float) -> dict:
    return {"step_ms_median": ms}


def _doc() -> dict:
    def rounds(p: int, sparse: float, fused: float) -> list[dict]:
        return [{"round": k, "warmup": k == 0, "pass": p, "runs": {"sparse": _run(sparse), "fused": _run(fused)}} for k in range(3)]
    first = {"preset": "multitask_a", "rounds": rounds(0, 40.0, 36.0) + rounds(1, 40.0, 36.0),
             "windows": [{"variant": "sparse", "option": "default", "step_ms_median": 40.0},
                         {"variant": "fused", "option": "default", "step_ms_median": 45.0}]}
    later = {"preset": "multitask_b", "rounds": rounds(0, 30.0, 28.0) + rounds(1, 33.0, 28.0),
             "windows": [{"variant": "sparse", "option": "default", "step_ms_median": 33.0}]}
    dense = {"preset": "dense_c", "rounds": rounds(0, 10.0, 9.0) + rounds(1, 20.0, 9.0), "windows": []}
    return {"tag": "t", "presets": [first, later, dense]}


def test_ratios_split_the_first_trace_run_from_the_later_ones():
    r = trace_order.ratios(_doc())
    assert r["first"] == [("multitask_a", "sparse/default", 1.0)]
    assert r["later"] == [("multitask_a", "fused/default", 45.0 / 36.0)]
    assert r["first_preset_passes"] == [("multitask_a", "sparse", 1.0), ("multitask_a", "fused", 1.0)]
    # a later preset's windows are not "first" (its process traced before); dense presets left out
    assert r["later_preset_passes"] == [("multitask_b", "sparse", 1.1), ("multitask_b", "fused", 1.0)]


def test_main_counts_a_copied_run_once_and_refuses_a_bad_file(tmp_path, capsys):
    f = tmp_path / "a.json"
    f.write_text(json.dumps(_doc()))
    (tmp_path / "b.json").write_text(json.dumps(_doc()))
    assert trace_order.main([str(f), str(tmp_path / "b.json"), "--out", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "trace-order.json").read_text())
    assert res["later"]["n"] == 1 and res["later"]["over_1_05"] == 1 and res["first"]["median"] == 1.0
    (tmp_path / "bad.json").write_text("{")
    assert trace_order.main([str(tmp_path / "bad.json")]) == 2
    assert "trace_order: error" in capsys.readouterr().err
