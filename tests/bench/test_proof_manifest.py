"""bench/common/proof_manifest.py and the issue-5 benchmark's pairs: hand-made rounds, figures by hand."""

from __future__ import annotations

import math

import pytest

from bench.common import proof_manifest
from bench.fixes import proof_pairs


def _close(e: dict, median: float, lo: float, hi: float) -> bool:
    return all(math.isclose(e[k], v) for k, v in (("median", median), ("lo", lo), ("hi", hi)))


def test_pipeline_pair_is_paired_within_rounds():
    rounds = [
        {"warmup": True, "runs": {"sparse": {"step_ms_median": 99.0, "peak_reserved_bytes": 1}, "fused": {"step_ms_median": 1.0, "peak_reserved_bytes": 1}}},
        {"warmup": False, "runs": {"sparse": {"step_ms_median": 50.0, "peak_reserved_bytes": 20}, "fused": {"step_ms_median": 45.0, "peak_reserved_bytes": 22}}},
        {"warmup": False, "runs": {"sparse": {"step_ms_median": 60.0, "peak_reserved_bytes": 20}, "fused": {"step_ms_median": 54.0, "peak_reserved_bytes": 22}}},
    ]
    traces = {v: {"dir": f"sample_traces/pipelines_1gpu/{v}", "traced_step_ms": [70.0, 71.0]} for v in ("sparse", "fused")}
    pair = proof_manifest.pipeline_pair({"preset": "p", "rounds": rounds, "traces": traces}, "sparse", "fused",
                                        fix="fused_sparse_dist", trace_file="trace_rank0.json.gz")
    assert pair["name"] == "fused_sparse_dist/pipelines/p" and pair["expect"] == "time"
    assert pair["before"]["trace"] == "sample_traces/pipelines_1gpu/sparse/trace_rank0.json.gz"
    assert pair["before"]["traced_step_ms"] == [70.0, 71.0]
    m = pair["measured"]
    # the warm-up round is left out; ratios 0.9 and 0.9, savings 5 and 6 ms, memory 1.1 and 1.1
    assert _close(m["step_ratio"], 0.9, 0.9, 0.9) and m["step_ratio"]["n"] == 2
    assert _close(m["step_saving_ms"], 5.5, 5.0, 6.0)
    assert _close(m["peak_reserved_ratio"], 1.1, 1.1, 1.1) and _close(m["peak_reserved_saving_bytes"], -2, -2, -2)
    assert _close(pair["after"]["step_ms_estimate"], 49.5, 45.0, 54.0) and pair["after"]["step_ms"] == 49.5
    assert pair["before"]["peak_reserved_bytes"] == 20
    with pytest.raises(ValueError, match="fix must be"):
        proof_manifest.pair("faster", {}, expect="time", before={}, after={}, before_rounds={"step_ms": [], "reserved": []},
                            after_rounds={"step_ms": [], "reserved": []})


def test_issue5_pairs_from_the_parts_results():
    def rounds(before: str, after: str, b: float, a: float) -> list[dict]:
        return [{before: {"step_ms": b * k, "peak_reserved": 100}, after: {"step_ms": a * k, "peak_reserved": 80}} for k in (1, 2)]

    results = {
        "a": {"method": {"rounds": rounds("blocking", "async", 30.0, 21.0)},
              "traces": {"blocking": {"traced_step_ms": [31.0]}, "async": {"traced_step_ms": [22.0]}}},
        "b": {"method": {"rounds": rounds("legacy", "precomputed", 22.0, 20.0)}, "traces": {}},
        "c_method": {"rounds": rounds("standard", "inplace", 10.0, 10.0)},
        "c_standard": {"trace": {"traced_step_ms": [11.0]}, "snapshot": {"file": "x"}},
        "c_inplace": {"trace": {"traced_step_ms": [12.0]}},
    }
    pairs = {p["fix"]: p for p in proof_pairs(results)}
    assert set(pairs) == {"async_delta_copy", "precomputed_writeback", "inplace_batch_copy"}
    a = pairs["async_delta_copy"]
    assert a["before"]["trace"] == "sample_traces/issue5/issue5_delta_blocking.json.gz" and a["after"]["traced_step_ms"] == [22.0]
    assert _close(a["measured"]["step_ratio"], 0.7, 0.7, 0.7) and _close(a["measured"]["step_saving_ms"], 13.5, 9.0, 18.0)
    c = pairs["inplace_batch_copy"]
    assert c["expect"] == "memory" and c["before"]["snapshot"] == "sample_traces/issue5/issue5_inplace_standard.pickle"
    assert c["after"]["snapshot"] is None  # no snapshot was written for it
    assert _close(c["measured"]["peak_reserved_ratio"], 0.8, 0.8, 0.8)
    # a part that did not run gives no pair
    del results["b"]
    assert {p["fix"] for p in proof_pairs(results)} == {"async_delta_copy", "inplace_batch_copy"}


def test_write_and_merge_keep_paths_relative_to_the_manifest(tmp_path):
    def one_pair(name: str) -> dict:
        return {"name": name, "fix": "fused_sparse_dist", "expect": "time",
                "before": {"label": "a", "trace": "sample_traces/x/a.json.gz", "snapshot": None},
                "after": {"label": "b", "trace": "sample_traces/x/b.json.gz"}, "measured": {}}

    repo = tmp_path / "commit"
    first = repo / "bench" / "results" / "one.json"
    proof_manifest.write(first, [one_pair("x/1")], repo=repo, device="GPU", date_utc="2026-11-24T10:00:00+00:00",
                         source="bench/results/r.json", versions={})
    doc = proof_manifest.load(first)
    assert (doc["device"], doc["date"]) == ("GPU", "2026-11-24")
    (p,) = doc["pairs"]
    assert p["before"]["trace"] == "../../sample_traces/x/a.json.gz" and p["source"] == "r.json" and p["device"] == "GPU"
    second = tmp_path / "elsewhere" / "two.json"
    proof_manifest.write(second, [one_pair("x/2")], repo=repo, device="GPU", date_utc="2026-11-25T11:00:00+00:00",
                         source="bench/results/s.json", versions={})
    merged = proof_manifest.merge(repo / "m.json", [first, second])
    assert [q["name"] for q in merged["pairs"]] == ["x/1", "x/2"] and merged["device"] == "GPU"
    assert merged["date"] == "several (see each pair)"
    assert [q["before"]["trace"] for q in merged["pairs"]] == ["sample_traces/x/a.json.gz"] * 2
    with pytest.raises(ValueError, match="more than one input"):
        proof_manifest.merge(tmp_path / "m.json", [first, first])
    # a prefix tells two runs' pairs of the same name apart (1 and 2 GPUs)
    both = proof_manifest.merge(repo / "m2.json", [f"{first}:1gpu", f"{first}:2gpu"])
    assert [q["name"] for q in both["pairs"]] == ["1gpu/x/1", "2gpu/x/1"]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a"):
        proof_manifest.load(tmp_path / "bad.json")
    assert proof_manifest.device_slug("NVIDIA H200") == "h200" and proof_manifest.device_slug("NVIDIA H100 80GB HBM3") == "h100"


def test_torchrec_pairs_per_batch_and_unpaired(tmp_path):
    """TorchRec's runs: each side's untraced passes (but the warm-up) per batch; the saving is
    the difference of the medians, its interval from each side resampled on its own."""
    import json

    def run(name: str, passes: list[float]) -> None:
        d = tmp_path / "sample_traces" / name
        d.mkdir(parents=True)
        its = [{"traced": False, "gpu_ms": 500.0}] + [{"traced": False, "gpu_ms": x} for x in passes] \
            + [{"traced": True, "gpu_ms": 900.0}]
        (d / f"timing-{name}-rank0.json").write_text(json.dumps(
            {"name": name, "num_batches": 8, "iterations": its, "torchrec_version": "1.6.1"}))
        (d / f"trace-{name}-rank0.json.gz").write_bytes(b"")
        (d / "README.md").write_text("Run by `gpu/torchrec_bench.py` on 2026-11-27T09:14:57+00:00, "
                                     "NVIDIA H200, torch 2.11")

    run("sparse", [160.0, 156.0, 152.0, 158.0, 154.0])
    run("fused", [176.0, 184.0, 180.0, 178.0, 182.0])
    out = tmp_path / "bench" / "results" / "t.json"
    out.parent.mkdir(parents=True)
    doc = proof_manifest.torchrec_pairs(out, [("fused_sparse_dist", tmp_path / "sample_traces/sparse",
                                                tmp_path / "sample_traces/fused")])
    (p,) = doc["pairs"]
    assert (doc["device"], doc["date"]) == ("NVIDIA H200", "2026-11-27")
    assert p["before"]["step_ms"] == 156.0 / 8 and p["after"]["step_ms"] == 180.0 / 8
    assert p["before"]["traced_step_ms"] == [900.0 / 8]
    s = p["measured"]["step_saving_ms"]
    assert s["median"] == pytest.approx(-24.0 / 8) and s["lo"] <= s["median"] <= s["hi"] < 0
    assert p["measured"]["step_ratio"]["median"] == pytest.approx(180.0 / 156.0)
    assert p["before"]["trace"] == "../../sample_traces/sparse/trace-sparse-rank0.json.gz"
    assert proof_manifest.load(out)["pairs"][0]["name"] == "fused_sparse_dist/torchrec/sparse->fused"
    with pytest.raises(ValueError, match="fix must be"):
        proof_manifest.torchrec_pairs(out, [("faster", tmp_path / "sample_traces/sparse",
                                             tmp_path / "sample_traces/fused")])
