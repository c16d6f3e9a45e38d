"""bench.overhead_job_pace: an earlier result's sets joined where their traces are gone, only
where the two runs agree on a set both hold; the other runs' summary per kind."""

from __future__ import annotations

import json

from bench import overhead_job_pace as jp


def row(run, rank, k, err):
    return {"run": run, "rank": rank, "gpus": 2, "k": k, "measured_ms": 10.0,
            "estimate_ms": 10.0 * (1 + err), "error": err}


def earlier(tmp_path, tree_err=0.05):
    doc = {"k": [1.0, 1.42, 1.7],
           "sets": {"h5": "/work/.heldout5/tree/sample_traces", "tree": "sample_traces"},
           "rows": [row(".heldout5/tree: sample_traces/torchrec_2gpu/a/r0.json.gz", 0, 1.0, -0.2),
                    row(".heldout5/tree: sample_traces/torchrec_2gpu/a/r0.json.gz", 0, 1.42, 0.01),
                    row(".heldout5/tree: sample_traces/torchrec_2gpu/a/r0.json.gz", 0, 1.7, 0.3),
                    row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.0, tree_err),
                    row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.42, 0.2),
                    row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.7, 0.4)]}
    p = tmp_path / "earlier.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_an_earlier_results_sets_join_where_the_runs_agree(tmp_path):
    now = {"tree": {1.0: [row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.0, 0.0505)],
                    1.18: [row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.18, 0.1)],
                    1.42: [row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.42, 0.2)]}}
    old, sets = jp.earlier_rows(earlier(tmp_path), [1.0, 1.18, 1.42], now)
    # the tree is this run's; set 5 comes from the file, at the K values both runs have
    assert list(old) == ["h5"] and sorted(old["h5"]) == [1.0, 1.42]
    assert [r["error"] for r in old["h5"][1.42]] == [0.01]
    assert sets == {"h5": "/work/.heldout5/tree/sample_traces"}


def test_an_earlier_result_that_disagrees_is_refused(tmp_path, capsys):
    now = {"tree": {1.0: [row("sample_traces/torchrec_2gpu/b/r0.json.gz", 0, 1.0, 0.0)]}}
    assert jp.earlier_rows(earlier(tmp_path, tree_err=0.05), [1.0], now) is None
    assert "differs from this run's" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert jp.earlier_rows(str(bad), [1.0], now) is None
    assert "not a result of bench.overhead_job_pace" in capsys.readouterr().err


def test_other_runs_per_kind():
    rows = [{"kind": "runtime, 1 GPU", "k1_error": 0.05, "now_error": 0.05, "k1_ms": 1.0,
             "now_ms": 1.0},
            {"kind": "runtime, 1 GPU", "k1_error": -0.2, "now_error": -0.2, "k1_ms": 2.0,
             "now_ms": 2.0},
            {"kind": "TorchRec, 2 GPUs", "k1_error": -0.15, "now_error": 0.02, "k1_ms": 3.0,
             "now_ms": 3.5}]
    k = jp.other_kinds(rows)
    assert k["runtime, 1 GPU"] == {"runs": 2, "k1_within": 1, "now_within": 1,
                                   "k1_median": 0.125, "now_median": 0.125, "moved": 0}
    assert k["TorchRec, 2 GPUs"]["k1_within"] == 0 and k["TorchRec, 2 GPUs"]["now_within"] == 1
    assert k["TorchRec, 2 GPUs"]["moved"] == 1


def test_a_sets_summary_says_which_way_it_misses():
    rows = [row("a", 0, 1.0, e) for e in (-0.3, -0.05, 0.02)]
    assert jp.summary(rows) == {"runs": 3, "within": 2, "median": 0.05, "signed": -0.05}
    assert jp.summary([]) == {"runs": 0, "within": 0, "median": None, "signed": None}
