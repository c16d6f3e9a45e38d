"""bench.untraced_band: the estimate's error where the profiler's cost decides it, its band and
the band read on the other sets judged on each set left out (result files in, no traces)."""

from __future__ import annotations

import json

import pytest

from bench import untraced_band as ub


def loso_rows(errors_by_set: dict[str, list[float]], traced=100.0, measured=50.0) -> dict:
    rows = []
    for s, errs in errors_by_set.items():
        for i, e in enumerate(errs):
            rows.append({"left_out": s, "run": f"r{i}", "rank": 0, "traced_ms": traced,
                         "measured_untraced_ms": measured, "rule_only_ms": measured * (1 + e)})
    return {"rows": rows}


def test_band_and_leave_one_set_out(tmp_path):
    errs = {"a": [-0.2, -0.1, 0.0, 0.1, 0.3], "b": [-0.1, 0.0, 0.05, 0.2, 0.4]}
    doc = loso_rows(errs)
    # a GPU-bound run (estimate = traced): not counted in the band
    doc["rows"].append({"left_out": "a", "run": "gpu", "rank": 0, "traced_ms": 50.0,
                        "measured_untraced_ms": 50.0, "rule_only_ms": 50.0})
    fit = {"rows": [{"set": "judge", "run": "c0", "rank": 0, "traced_ms": 100.0,
                     "measured_untraced_ms": 50.0, "raw_estimated_untraced_ms": 80.0},
                    {"set": "fit", "run": "c1", "rank": 0, "traced_ms": 100.0,
                     "measured_untraced_ms": 50.0, "raw_estimated_untraced_ms": 50.0}]}
    rows = ub.rows_from(doc, {"c": fit}, "rule_only")
    assert len(rows) == 12  # the fitted row of the fit file left out
    out = ub.band(rows, 0.15)
    assert out["decided"] == 11 and out["within_10_rest"] == 1
    every = sorted(errs["a"] + errs["b"] + [0.6])
    assert out["band"] == pytest.approx([every[1], every[9]])
    # left out "a": the band of b's and c's errors
    other = sorted(errs["b"] + [0.6])
    lo, hi = other[0], other[5]
    assert out["left_out"]["a"]["band"] == pytest.approx([lo, hi])
    assert out["left_out"]["a"]["inside"] == sum(lo <= e <= hi for e in errs["a"])


def test_cli_writes_and_refuses_bad_input(tmp_path, capsys):
    f = tmp_path / "loso.json"
    f.write_text(json.dumps(loso_rows({"a": [0.0, 0.1], "b": [-0.1, 0.2]})))
    assert ub.main(["--loso", str(f), "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("untraced-band-*.md")) and list(tmp_path.glob("untraced-band-*.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    capsys.readouterr()
    assert ub.main(["--loso", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"rows": []}))
    assert ub.main(["--loso", str(empty)]) == 2


def test_by_options_reads_each_kind_apart(tmp_path):
    """--by-options: TorchRec's runs (the slow-host rule's options) and the others apart, each
    kind's band and, leaving one set out, its runs inside its own band and the pooled one."""
    rows = []
    for s, tr, other in (("a", [-0.3, -0.2, -0.1], [0.0, 0.1, 0.3]),
                         ("b", [-0.25, -0.15, -0.05], [-0.05, 0.05, 0.2])):
        for i, e in enumerate(tr):
            rows.append({"set": s, "run": f"sample_traces/torchrec_1gpu/x{i}/t.json.gz rank 0",
                         "traced_ms": 100.0, "measured_ms": 50.0, "estimate_ms": 50 * (1 + e)})
        for i, e in enumerate(other):
            rows.append({"set": s, "run": f"sample_traces/pipelines_1gpu/p{i} rank 0",
                         "traced_ms": 100.0, "measured_ms": 50.0, "estimate_ms": 50 * (1 + e)})
    out = ub.by_options(rows, 0.15)
    assert out["slow_host"]["runs"] == 6 and out["other"]["runs"] == 6
    assert out["slow_host"]["median"] < 0 < out["other"]["median"]
    b = sorted([-0.25, -0.15, -0.05])  # left out a: b's TorchRec runs make the band
    assert out["slow_host"]["left_out"]["a"]["band"] == pytest.approx([b[0], b[2]])
    assert out["slow_host"]["left_out"]["a"]["inside"] == 2  # -0.2 and -0.1, not -0.3
    pooled = sorted([-0.25, -0.15, -0.05, -0.05, 0.05, 0.2])
    assert out["slow_host"]["left_out"]["a"]["inside_pooled"] == sum(
        pooled[0] <= e <= pooled[5] for e in (-0.3, -0.2, -0.1))
    text = ub.render({"date_utc": "d", "command": "c", "seconds": 0, "machine": "m", "runs": 12,
                      "decided": 12, "decides": 0.15, "within_10_decided": 0, "within_10_rest": 0,
                      "band": None, "left_out": {}, "by_options": out})
    assert "slow-host rule's options" in text and "inside the pooled one" in text


def test_the_job_pace_results_estimates_replace_the_files(tmp_path):
    """``--pace``: the jobs' ranks a job-pace result judged take its estimate at the K the model
    holds (matched by set, path from sample_traces/ and rank), TorchRec's ranks of incomplete
    jobs its own-trace model-now estimate; a TorchRec job rank it does not hold is left out;
    the rest keep their files' estimates."""
    rows = [{"set": "h9", "run": "sample_traces/torchrec_2gpu/a/t-rank1.json.gz rank 1",
             "traced_ms": 30.0, "measured_ms": 20.0, "estimate_ms": 15.0},
            {"set": "h8", "run": "sample_traces/torchrec_2gpu/b/t-rank0.json.gz rank 0",
             "traced_ms": 30.0, "measured_ms": 20.0, "estimate_ms": 15.0},
            {"set": "tree", "run": "sample_traces/torchrec_2gpu/c/t-rank0.json.gz rank 0",
             "traced_ms": 30.0, "measured_ms": 20.0, "estimate_ms": 16.0},
            {"set": "tree", "run": "sample_traces/torchrec_1gpu/d/t-rank0.json.gz rank 0",
             "traced_ms": 30.0, "measured_ms": 20.0, "estimate_ms": 17.0},
            {"set": "tree", "run": "sample_traces/pipelines_2gpu/e/trace_rank0.json.gz rank 0",
             "traced_ms": 30.0, "measured_ms": 20.0, "estimate_ms": 18.0}]
    pace = {"sets": {"h9": "/work/.heldout9/tree/sample_traces", "tree": "sample_traces"},
            "rows": [{"run": ".heldout9/tree: sample_traces/torchrec_2gpu/a/t-rank1.json.gz",
                      "rank": 1, "k": 1.0, "estimate_ms": 15.0},
                     {"run": ".heldout9/tree: sample_traces/torchrec_2gpu/a/t-rank1.json.gz",
                      "rank": 1, "k": 1.42, "estimate_ms": 19.5}],
            "others": {"tree": {"rows": [
                {"run": "sample_traces/torchrec_2gpu/c/t-rank0.json.gz", "rank": 0,
                 "kind": "TorchRec, 2 GPUs", "now_ms": 18.5},
                {"run": "sample_traces/pipelines_2gpu/e/trace_rank0.json.gz", "rank": 0,
                 "kind": "runtime, 2 GPUs", "now_ms": 99.0}]}}}
    out, info = ub.with_pace(rows, pace, 1.42)
    got = {(r["set"], r["run"].split("/")[2]): r["estimate_ms"] for r in out}
    assert got == {("h9", "a"): 19.5, ("tree", "c"): 18.5, ("tree", "d"): 17.0,
                   ("tree", "e"): 18.0}
    assert info["replaced"] == 2 and len(info["left_out"]) == 1 and "h8" in info["left_out"][0]
