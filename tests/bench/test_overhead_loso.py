"""bench/overhead_loso.py on hand-made sets of runs whose untraced step a known model gives:
each set left out in turn, the model fitted on the others finds that step again where the model
before does not; the fits judged again from their file; a trace held by two sets is the first
set's; a bad --set or --fits is refused."""

from __future__ import annotations

import json

from bench import overhead_fit, overhead_loso
from tests.bench.test_overhead_fit import host_bound_run

TRUE = {"cpu_op": 3000.0, "runtime": 1000.0, "memory": 2500.0, "sync_call": 0.0, "python": 0.0,
        "shapes": 0.0, "modules": 0.0}


def _run(folder, *, ops: int, memory: bool, preset: str) -> None:
    """Three host-bound steps of ``ops`` CPU ops around launches (and a [memory] event each),
    with the untraced step ``TRUE`` gives written beside the trace."""
    doc = host_bound_run(folder, ops=ops, memory=memory, preset=preset, step_us=2000)
    run = overhead_fit.find_runs([str(folder)])[0]
    overhead_fit.prepare(run)
    doc["trace_run"]["step_ms"] = [overhead_fit.estimate_ms(run, TRUE, "")]
    (folder / "metrics.json").write_text(json.dumps(doc))


def test_each_set_left_out_is_found_again(tmp_path, capsys):
    sets = {}
    for k, (name, shape) in enumerate({"a": (20, 40), "b": (30, 50), "c": (25, 60)}.items()):
        root = tmp_path / name / "sample_traces" / "pipelines_1gpu"
        for ops, mem in ((shape[0], True), (shape[1], False), (shape[0] + 5, False)):
            _run(root / f"p{ops}{'m' if mem else ''}" / "sparse", ops=ops, memory=mem,
                 preset=f"p{ops}")
        sets[name] = tmp_path / name / "sample_traces"
    # the tree holds a copy of one of set a's traces: it stays set a's
    tree = tmp_path / "tree" / "sample_traces" / "pipelines_1gpu" / "copy" / "sparse"
    tree.mkdir(parents=True)
    src = sets["a"] / "pipelines_1gpu" / "p20m" / "sparse"
    for f in ("trace_rank0.json.gz", "metrics.json"):
        (tree / f).write_bytes((src / f).read_bytes())
    out = tmp_path / "out"
    argv = [x for n in ("a", "b", "c") for x in ("--set", f"{n}={sets[n]}")] + \
        ["--set", f"tree={tmp_path / 'tree' / 'sample_traces'}", "--no-join", "--out", str(out)]
    assert overhead_loso.main(argv) == 0
    doc = json.loads(next(out.glob("overhead-loso-*.json")).read_text())
    assert doc["runs_per_set"] == {"a": 3, "b": 3, "c": 3, "tree": 0}
    assert sorted(doc["left_out"]) == ["a", "b", "c"]
    for left, d in doc["left_out"].items():
        assert d["fitted_on"] == sorted({"a", "b", "c"} - {left})
        before, after = d["before"]["all"], d["after"]["all"]
        assert after["worst"] < 0.02 < before["worst"], (left, before, after)
        assert after["within"] == 3
    rows = doc["rows"]
    assert len(rows) == 9 and all(abs(r["after_error"]) < 0.02 for r in rows)
    assert "| a | b, c (6) | runtime, 1 GPU |" in capsys.readouterr().out
    # judged again from those fits, not refitted: the same estimates
    first = next(out.glob("overhead-loso-*.json"))
    again = tmp_path / "again"
    assert overhead_loso.main(argv[:-1] + [str(again), "--fits", str(first)]) == 0
    redo = json.loads(next(again.glob("overhead-loso-*.json")).read_text())
    assert [r["after_ms"] for r in redo["rows"]] == [r["after_ms"] for r in rows]
    assert redo["fits_from"] == str(first)
    assert overhead_loso.main(argv[:-1] + [str(again), "--fits", str(tmp_path / "none.json")]) == 2
    assert "not an overhead_loso result" in capsys.readouterr().err
    # no refit: the model's own costs in the refit column, the same estimates as "rule only"
    plain = tmp_path / "plain"
    assert overhead_loso.main(argv[:-1] + [str(plain), "--no-refit"]) == 0
    nofit = json.loads(next(plain.glob("overhead-loso-*.json")).read_text())
    assert nofit["refit"] is False
    assert [r["after_ms"] for r in nofit["rows"]] == [r["rule_only_ms"] for r in nofit["rows"]]
    assert all(d["costs_ns"] == overhead_loso.BEFORE for d in nofit["left_out"].values())


def test_a_bad_set_is_refused(tmp_path, capsys):
    assert overhead_loso.main(["--set", f"x={tmp_path / 'none'}"]) == 2
    assert capsys.readouterr().err.strip().startswith("--set x=")
