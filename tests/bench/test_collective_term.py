"""bench/collective_term.py: its table and counts from given rows, its bad input."""

from __future__ import annotations

import json

from bench import collective_term as ct


def row(name, measured, tol, model, term):
    return {"manifest": "m.json", "name": name, "folder": "f", "step_ms": 20.0,
            "measured_ms": measured, "lo": measured - 0.1, "hi": measured + 0.1, "tolerance_ms": tol,
            "predicted_ms": {"model": model, "0.25": term},
            "within": {"model": abs(model - measured) <= tol, "0.25": abs(term - measured) <= tol}}


def test_render_counts_each_variant():
    text = ct.render([row("a", 0.6, 0.4, 1.1, 1.2), row("b", 1.5, 0.8, 2.2, 2.4)], (0.25,), "cmd", 1.0)
    assert "| m.json | a | 0.600 [0.500, 0.700] | 0.400 | 1.100, no | 1.200, no |" in text
    assert "- m.json: within, model 1 of 2, term 0.25 0 of 2" in text


def test_bad_input_exits_2(tmp_path, capsys):
    assert ct.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read a manifest" in capsys.readouterr().err
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"pairs": [{"name": "x", "fix": "fused_sparse_dist",
                                        "before": {"trace": "nowhere.json.gz"}}]}))
    assert ct.main([str(m)]) == 2
    assert "no FusedSparseDist pair with every rank" in capsys.readouterr().err
    assert ct.main([str(m), "--share", "1.5"]) == 2
