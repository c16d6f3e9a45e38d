"""bench/load_pool.py: several bench.load runs' paired cold walls pooled into one ratio."""

from __future__ import annotations

import json

import pytest

from bench import load_pool


def _doc(ours: list[float], base: list[float]) -> dict:
    return {"summary": {"cold_no_hta_walls_s": ours, "baseline_cold_no_hta_walls_s": base}}


def _write(tmp_path, name: str, doc: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_pooled_ratio_is_the_median_of_every_pair():
    a = _doc([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])  # ratios 0.5
    b = _doc([0.6, 0.6], [1.0, 1.0])  # ratios 0.6
    flat, two_stage, walls = load_pool.pool({"a": a, "b": b})
    assert flat.n == 5 and flat.median == pytest.approx(0.5)
    assert walls == [0.5, 0.5, 0.5, 0.6, 0.6]
    # two runs that disagree: the two-stage interval reaches both, the flat one need not
    assert two_stage.lo == pytest.approx(0.5) and two_stage.hi == pytest.approx(0.6)


def test_exit_code_follows_the_two_stage_upper_end(tmp_path, capsys):
    fast = _write(tmp_path, "fast.json", _doc([0.40, 0.42, 0.41, 0.43], [0.80, 0.80, 0.82, 0.81]))
    slow = _write(tmp_path, "slow.json", _doc([0.50, 0.52, 0.51, 0.53], [0.80, 0.80, 0.82, 0.81]))
    assert load_pool.main([fast]) == 0
    out = capsys.readouterr().out
    assert "<= 0.6 s in 4 of 4 runs" in out and "target ratio 0.545: met" in out
    assert load_pool.main([fast, slow]) == 1  # the slow run's 0.63 pulls the upper end over
    assert "NOT met" in capsys.readouterr().out


def test_a_file_without_pairs_is_one_line_and_exit_2(tmp_path, capsys):
    bad = _write(tmp_path, "nobase.json", {"summary": {"cold_no_hta_walls_s": [0.4]}})
    assert load_pool.main([bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was it run with --baseline" in err[0]
    assert load_pool.main([str(tmp_path / "missing.json")]) == 2
