"""What the page calls things and the small tables it draws, on inputs whose answer is known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dashboards import names, reports, results


def test_variant_from_metrics_json(tmp_path):
    run = tmp_path / "pipelines_2gpu"
    for pipe in ("fused", "sparse"):
        (run / pipe).mkdir(parents=True)
        (run / pipe / "metrics.json").write_text(json.dumps({"pipeline": pipe, "world_size": 2, "config": {"lookup_stream": "new", "emb_backward": "with_dense"}}))
        (run / pipe / "trace_rank0.json.gz").write_bytes(b"")
    f = names.variant(str(run / "fused" / "trace_rank0.json.gz"), "fused/trace_rank0")
    s = names.variant(str(run / "sparse"), "sparse")  # a per-rank directory
    assert f.name == "FusedSparseDist (new lookup stream) · 2 GPUs" and f.pipeline == "fused"
    assert s.name == "SparseDist · 2 GPUs"
    assert f.group == s.group == str(run)  # one run: compared together by default
    # every non-default option of a variant in its name (bench_pipelines' fused_step_start beside fused)
    for folder, pipe, cfg, want in (
        ("fused_step_start", "fused", {"lookup_stream": "data_dist", "lookup_placement": "step_start", "emb_backward": "with_dense"},
         "FusedSparseDist (lookup at step start) · 2 GPUs"),
        ("fused_default", "fused", {"lookup_stream": "data_dist", "lookup_placement": "before_optimizer",
                                    "emb_backward": "with_dense"}, "FusedSparseDist · 2 GPUs"),
        ("fused_both", "fused", {"lookup_stream": "new", "lookup_placement": "after_data_dist", "emb_backward": "with_dense"},
         "FusedSparseDist (new lookup stream, lookup after data dist) · 2 GPUs"),
        ("fused_current", "fused", {"lookup_stream": "current", "emb_backward": "with_dense"},
         "FusedSparseDist (lookup on the main stream) · 2 GPUs"),
        ("fused_separate", "fused", {"emb_backward": "separate"}, "FusedSparseDist (separate embedding backward) · 2 GPUs"),
        # a run from before the option: its embedding backward was a separate autograd call
        ("fused_legacy", "fused", {"lookup_stream": "data_dist"}, "FusedSparseDist (separate embedding backward) · 2 GPUs"),
        ("semi_exact", "semi", {"start_batch": 5, "lookup_placement": "step_start", "semi_lookup_placement": "after_backward"},
         "SemiSync (exact until batch 5) · 2 GPUs"),
        ("semi_default", "semi", {"start_batch": 0, "semi_lookup_placement": "after_backward"}, "SemiSync · 2 GPUs"),
        ("semi_after_forward", "semi", {"start_batch": 0, "semi_lookup_placement": "after_forward"},
         "SemiSync (lookup after forward) · 2 GPUs"),
        # a run from before the option: TorchRec's placement, which it had
        ("semi_legacy", "semi", {"start_batch": 0}, "SemiSync (lookup after forward) · 2 GPUs"),
        ("sparse_inplace", "sparse", {"inplace_copy_batch_to_gpu": True, "lookup_placement": "step_start"},
         "SparseDist (in-place copy) · 2 GPUs"),
    ):
        (run / folder).mkdir()
        (run / folder / "metrics.json").write_text(json.dumps({"pipeline": pipe, "world_size": 2, "config": cfg}))
        assert names.variant(str(run / folder), folder).name == want
    # no metrics.json: the label, grouped by folder and the name's first two words
    a = names.variant(str(tmp_path / "issue5_delta_async.json.gz"), "issue5_delta_async")
    b = names.variant(str(tmp_path / "issue5_delta_none.json.gz"), "issue5_delta_none")
    c = names.variant(str(tmp_path / "issue5_inplace_standard.json.gz"), "issue5_inplace_standard")
    assert (a.name, a.pipeline) == ("issue5_delta_async", None)
    assert a.group == b.group != c.group
    (tmp_path / "metrics.json").write_text("not json")  # an unreadable metrics.json is no name
    assert names.variant(str(tmp_path / "x.json"), "x").name == "x"


def test_stream_roles():
    busy = {
        (0, 7): {"forward": 20.0, "backward": 50.0, "optimizer": 5.0},
        (0, 20): {"batch_copy": 5.0},
        (0, 30): {"lookup": 4.0, "emb_backward": 10.0},
        (0, 40): {"communication": 9.0, "other": 1.0},
        (0, 50): {"input_dist": 3.0},
        (0, 60): {"forward": 1.0},
        (0, 70): {"other": 2.0},
        (1, 7): {"forward": 1.0},  # each device has its main stream
    }
    roles = names.stream_roles(busy, {(0, 70): 2.0})
    assert roles == {(0, 7): "main", (0, 20): "memcpy", (0, 30): "lookup", (0, 40): "NCCL", (0, 50): "data-dist",
                     (0, 60): "compute", (0, 70): "memcpy", (1, 7): "main"}
    assert names.stream_label(0, 7, "main", 1) == "main · stream 7"
    assert names.stream_label(1, 7, "main", 2) == "GPU 1 · main · stream 7"


def test_thread_label():
    assert names.thread_label(745, "thread 745 (pt_autograd_0)", False) == "pt_autograd_0 745"
    assert names.thread_label(629, "thread 629 (python3)", True) == "main python3 629"
    assert names.thread_label(5, None, False) == "thread 5"


def _report(gaps: list[dict]) -> dict:
    return {"gaps": {"gaps": gaps}}


def _pair(step, opt, lookup, idle=0, overlap=0):
    """An optimizer -> lookup pair as tracekit reports it: opt and lookup are (start, end) ns."""
    return {"device": 0, "step": step, "optimizer_batch": step, "lookup_batch": step + 1, "optimizer_start": opt[0],
            "optimizer_end": opt[1], "lookup_start": lookup[0], "lookup_end": lookup[1], "gap_ns": lookup[0] - opt[1],
            "overlap_ns": overlap, "idle_ns": idle, "matched_by": "batch index"}


def test_gaps_say_what_a_signed_gap_means():
    g = results.gaps(_report([
        _pair(1, (100, 200), (500, 600), idle=100),  # waited 0.3 us after the optimizer, GPU idle 0.1 of it
        _pair(2, (1000, 2000), (1500, 2500), overlap=500),  # started while the optimizer ran
        _pair(3, (10_000, 11_000), (2_000, 3_000)),  # ran 8 us before the optimizer started (SemiSync)
    ]))
    assert g["kind"].tolist() == ["gap", "overlap", "ahead"]
    assert np.allclose(g["gap_ms"], [300e-6, -500e-6, -9000e-6])
    assert np.allclose(g["idle_ms"], [100e-6, 0, 0]) and np.allclose(g["busy_ms"], [200e-6, 0, 0])
    assert np.allclose(g["overlap_ms"], [0, 500e-6, 0]) and np.allclose(g["ahead_ms"], [0, 0, 8000e-6])
    text = results.gap_summary(g)
    assert "1 step(s) where the next lookup waited" in text and "ran 0.008 ms before the optimizer" in text
    assert results.gaps(_report([])) is None


def _rep(**headline) -> dict:
    return {"headline": headline, "warnings": []}


def test_compare_verdicts_against_the_baseline():
    picked = [("A", _rep(step_gpu_p90_ns=100e6, stall_total_ns=20_000, comm_overlap_ratio=0.5, exposed_comm_ns=0)),
              ("B", _rep(step_gpu_p90_ns=90e6, stall_total_ns=23_000, comm_overlap_ratio=0.6, exposed_comm_ns=0)),
              ("C", _rep(step_gpu_p90_ns=100.5e6, stall_total_ns=None, comm_overlap_ratio=0.4, exposed_comm_ns=0))]
    t = results.compare(picked, 0)
    p90 = t[t["figure"] == "GPU span P90"].set_index("trace")
    assert p90.loc["A", "verdict"] == "baseline" and np.isnan(p90.loc["A", "diff_pct"])
    assert p90.loc["B", "verdict"] == "better" and p90.loc["B", "diff_pct"] == pytest.approx(-10.0)
    assert p90.loc["C", "verdict"] == "same"  # +0.5%: within the noise
    stalls = t[t["figure"] == "sync stalls, CPU"].set_index("trace")
    assert stalls.loc["B", "verdict"] == "same"  # +15% but 0.003 ms: not "worse"
    assert stalls.loc["C", "verdict"] == "–"
    ratio = t[t["figure"] == "comm overlapped by compute"].set_index("trace")
    assert ratio.loc["B", "verdict"] == "better" and ratio.loc["C", "verdict"] == "worse"  # higher is better
    assert "exposed communication" not in set(t["figure"])  # 0 everywhere: no chart
    t1 = results.compare(picked, 1)  # another baseline
    assert t1[(t1["figure"] == "GPU span P90") & (t1["trace"] == "A")]["verdict"].item() == "worse"



def test_compare_bars_name_the_traces_under_each_columns_lowest_chart_only():
    """Every chart has the traces in one order: their names under the lowest chart of each of the
    three columns (under every row they ran into the next row's titles), the margins fixed for
    them (no axis leaves them to plotly.js's automargin: an extra layout pass on every draw)."""
    from dashboards import figures

    long = "SparseDist · 1 GPU · a_rather_long_name"
    picked = [(n, _rep(step_gpu_p90_ns=v * 1e6, step_cpu_p90_ns=v * 1e6, step_p90_ns=v * 1e6, stall_total_ns=v * 1e6,
                       exposed_memcpy_ns=v * 1e6))
              for n, v in (("A", 10), ("B", 12), (long, 9))]
    t = results.compare(picked, 0)
    fig = figures.compare_bars(t)
    n = len(fig["data"])
    assert n >= 4  # two rows at least: some charts have one below them
    axes = {k: v for k, v in fig["layout"].items() if k.startswith(("xaxis", "yaxis"))}
    assert all(a["automargin"] is False for a in axes.values())
    shown = [fig["layout"]["xaxis" + ("" if k == 0 else str(k + 1))]["showticklabels"] for k in range(n)]
    assert shown == [k + 3 >= n for k in range(n)]
    assert [d["x"] for d in fig["data"]] == [["A", "B", long]] * n
    m = fig["layout"]["margin"]
    assert m["b"] >= 3 * len(long) and m["r"] >= 4 * len(long)

def test_warnings_gather_the_loaders_and_the_sections():
    rep = {"warnings": ["cut"], "steps": {"warnings": ["odd step"]}, "explain": {"warnings": ["no flows"]}, "gaps": {}}
    assert sorted(reports.warnings(rep)) == ["cut", "no flows", "odd step"] and reports.warnings(rep)[0] == "cut"


def test_bytes_unit():
    assert results.bytes_unit(2**30) == ("GiB", 2**30)
    assert results.bytes_unit(2**30 - 1) == ("MiB", 2**20)


EXPLAIN = {  # a rank's "explain" section as `tracekit explain` writes it (hand-made: two steps)
    "bound": "host", "bound_share": 0.72,
    "steps": [
        {"step": 51, "bound": "host", "bound_share": 0.7,
         "breakdown": {"host": 7e6, "compute:forward": 2e6, "compute:backward": 1e6}},
        {"step": 52, "bound": "compute:backward", "bound_share": 0.5,
         "breakdown": {"host": 3e6, "compute:backward": 5e6, "compute:custom": 1e6, "idle": 1e6}},
    ],
    "breakdown": [],
    "findings": [  # in tracekit's order (tracekit.analyses.explain.finding_order)
        {"id": "lookup", "title": "the lookup waits for the optimizer", "fix": "FusedSparseDist", "evidence": "gap 0.6 ms",
         "saving_ns": 5_000_000, "saving_fraction": 0.5, "helps": True},
        {"id": "sync", "title": "a sync in backward", "fix": "precomputed writeback", "evidence": "3 syncs, 55 ms",
         "saving_ns": 2_000_000, "saving_fraction": 0.2, "helps": True},
        {"id": "memory", "title": "batch copy memory on a side stream", "fix": "in-place batch copy", "evidence": "5 GiB",
         "saving_ns": None, "saving_fraction": None, "helps": True},
    ],
}


def test_explain_section_ready_to_draw():
    ex = reports.explain({"explain": EXPLAIN})
    assert ex["bound"] == "host-bound (72.0% of the critical path)"
    f = ex["findings"]
    assert [x["title"] for x in f] == [x["title"] for x in EXPLAIN["findings"]]  # tracekit's order, never re-sorted
    assert [x["saving"] for x in f] == ["saves 5.000 ms (50.0% of the step)", "saves 2.000 ms (20.0% of the step)",
                                        "no time saving predicted"]
    # categories bottom-up: host, the compute phases (unknown ones after the known), then the rest
    assert ex["categories"] == ["host", "compute:forward", "compute:backward", "compute:custom", "idle"]
    assert [s["step"] for s in ex["steps"]] == ["51", "52"]
    assert ex["steps"][1]["compute:backward"] == 5.0 and ex["steps"][0]["idle"] == 0.0
    assert ex["steps"][1]["bound"] == "backward-bound (50.0% of the critical path)"
    assert reports.explain({"headline": {}}) is None
    # a memory finding says what it saves in bytes, a contention-aware saving is given beside
    mem = reports.explain({"explain": {"findings": [
        {"kind": "memory", "title": "m", "saving_bytes": 3 * 2**30},
        {"kind": "time", "title": "t", "saving_ns": 2e6, "saving_fraction": 0.1, "saving_contention_ns": 1.5e6}]}})
    assert [x["saving"] for x in mem["findings"]] == ["3.00 GiB less peak reserved",
                                                      "saves 2.000 ms (10.0% of the step) · 1.500 ms with contention"]
    assert all(x["predicted"] for x in mem["findings"]) and not ex["findings"][2]["predicted"]
    # under 1% of the step (tracekit says it does not help): the CLI's "would not help here", drawn as no saving
    none = reports.explain({"explain": {"findings": [
        {"kind": "time", "title": "u", "saving_ns": 1e6, "saving_fraction": 0.0101, "helps": True},
        {"kind": "time", "title": "t", "saving_ns": 0.0, "saving_fraction": 0.0, "helps": False}]}})
    assert [x["saving"] for x in none["findings"]] == ["saves 1.000 ms (1.0% of the step)",
                                                       "saves 0.000 ms (0.0% of the step): would not help here"]
    assert [x["predicted"] for x in none["findings"]] == [True, False]


def test_compare_a_lookup_that_runs_ahead_does_not_wait():
    """SemiSync's signed gap (-45 ms) is not 'better' than SparseDist's +0.6 ms: neither waits long."""
    sparse = {"headline": {"mean_gap_ns": 600_000}, "gaps": {"gaps": [{"gap_ns": 600_000}, {"gap_ns": 700_000}]}}
    semi = {"headline": {"mean_gap_ns": -45e6}, "gaps": {"gaps": [{"gap_ns": -45e6}, {"gap_ns": 100_000}]}}
    t = results.compare([("sparse", sparse), ("semi", semi)], 0)
    wait = t[t["figure"] == "lookup's wait for the optimizer, mean"].set_index("trace")
    assert wait.loc["sparse", "value"] == pytest.approx(0.65)
    assert wait.loc["semi", "value"] == pytest.approx(0.05)  # (0 + 0.1) / 2
    assert wait.loc["semi", "verdict"] == "better" and wait.loc["semi", "diff_pct"] == pytest.approx(-92.3, abs=0.1)


def test_snapshot_streams_named_as_on_the_timeline():
    """The issue-5 run with a snapshot beside it: the side stream's handle gets the timeline's
    name of CUPTI stream 14 and its votes; the note says how streams are matched."""
    from pathlib import Path

    from tracekit import api

    path = Path(__file__).resolve().parents[2] / "sample_traces" / "issue5" / "issue5_inplace_standard.json.gz"
    if not path.exists() or not path.with_suffix("").with_suffix(".pickle").exists():
        pytest.skip("sample_traces/issue5 not present")
    trace = api.open(path, use_cache=False)
    a = trace.analysis(with_hta=False)
    lanes = results.stream_names(trace)
    unit, table = results.snapshot(trace, a, lanes)
    rows = dict(zip(table["stream"], zip(table["on the timeline"], table["votes"])))
    assert rows["default stream (handle 0) · main"] == (lanes[(0, 7)], "365 of 365 (100.0%)")
    assert rows["side stream (handle 591794080)"] == (lanes[(0, 14)], "12 of 12 (100.0%)")
    assert lanes[(0, 14)].startswith("memcpy")
    text = results.snapshot_note(a)
    assert "at least 3 votes and 80.0%" in text and "377 of the trace's 377 allocations" in text
