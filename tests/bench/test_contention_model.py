"""bench/contention_model.py: the three models on a real pair of the tree, its table and
counts, its bad input."""

from __future__ import annotations

import json
import os

from bench import contention_model as cm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_real_pair(tmp_path, capsys):
    """The runtime's ``multitask`` pair (1 H200, measured 1.156 ms [1.084, 1.208]): the overlap
    model predicts 1.673 ms, the block-level model 1.395 (both within 0.584 of it)."""
    src = os.path.join(ROOT, "bench/results/proof-h200-20261127.json")
    with open(src) as fh:
        doc = json.load(fh)
    pair = [p for p in doc["pairs"] if p["name"] == "1gpu/fused_sparse_dist/pipelines/multitask"][0]
    pair["before"]["trace"] = os.path.join(ROOT, "sample_traces/pipelines_1gpu/multitask/sparse/"
                                           "trace_rank0.json.gz")
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"pairs": [pair]}))
    assert cm.main([f"{m}:judged", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| m.json (judged) | 1gpu/fused_sparse_dist/pipelines/multitask | 1.156 [1.084, 1.208] " \
           "| 0.584 | 1.673, yes | 1.395, yes | 1.673, yes |" in out
    assert "- judged: overlap 1 of 1 within, mean |error| 0.517 ms over the 1 pairs the fix helped" in out
    got = json.loads(next(tmp_path.glob("contention-model-*.json")).read_text())
    assert got["summary"]["judged"]["blocks"]["within"] == 1


def test_bad_input_exits_2(tmp_path, capsys):
    assert cm.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read a manifest" in capsys.readouterr().err
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"pairs": [{"name": "x", "fix": "fused_sparse_dist",
                                        "before": {"trace": "nowhere.json.gz"}}]}))
    assert cm.main([str(m)]) == 2
    assert "no FusedSparseDist pair" in capsys.readouterr().err
    assert cm.main([f"{m}:fitted"]) == 2
    assert "expected PATH or PATH:judged" in capsys.readouterr().err


def test_cost(capsys):
    """``--cost``: explain on a real trace with each model, interleaved; bad input exits 2."""
    trace = os.path.join(ROOT, "sample_traces/pipelines_1gpu/multitask/sparse/trace_rank0.json.gz")
    got = cm.cost(trace, 1)
    assert len(got["cpu_s"]["overlap"]) == len(got["cpu_s"]["blocks"]) == 1
    assert got["ratio_median"] > 0 and got["events"] > 10_000
    assert cm.main(["--cost", "nowhere.json.gz"]) == 2
    assert "no such trace file" in capsys.readouterr().err
    assert cm.main([]) == 2
    assert "give proof manifests, or --cost TRACE" in capsys.readouterr().err
