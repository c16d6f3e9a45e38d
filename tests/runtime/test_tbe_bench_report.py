"""The TBE benchmark's report and the Nsight Compute summary, on hand-built inputs (no GPU):
the ratio table (FBGEMM's time / ours), the agreement verdicts, the per-kernel summary."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(rel: str):
    spec = importlib.util.spec_from_file_location(Path(rel).stem, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    from bench import tbe
    return tbe


def _report(bench):
    case = {
        "dim": 128, "batch": 65536, "dist": "zipf", "precision": "fp32", "optimizers": ["EXACT_SGD", "EXACT_ROWWISE_ADAGRAD"],
        "forward": {"ours": 4.0, "ours v1": 5.0, "ours v2-8": 4.0, "fbgemm": 3.2, "torch": 13.0},
        "forward_GBps": 5000.0, "forward_frac_of_copy": 1.17,
        "results": {
            "EXACT_SGD": {"ms": {"ours": 12.0, "ours v1": 16.0, "fbgemm": 15.0, "torch": 90.0}, "GBps": 2000.0,
                          "frac_of_copy": 0.47, "fbgemm kernels": [{"kernel": "k", "us": 10.0, "calls": 1}]},
            "EXACT_ROWWISE_ADAGRAD": {"ms": {"ours": 20.0, "ours v1": 17.0, "fbgemm": 15.0}, "GBps": 1900.0,
                                      "frac_of_copy": 0.45},
        },
        "agreement": {"forward": 3e-8, "EXACT_SGD": {"tables": 2e-7, "tables_ok": True, "tolerance": 1e-5},
                      "EXACT_ROWWISE_ADAGRAD": {"tables": 4e-5, "tables_ok": False, "tolerance": 1e-5,
                                                "momentum": 1e-7, "momentum_ok": True}},
        "variants_identical": {"forward v1": True, "EXACT_SGD backward v1": False},
    }
    return {"device": "H", "date": "d", "torch": "t", "cuda": "c", "fbgemm": "1.6.0", "fbgemm_why": None,
            "default_variants": ["v2-8", "v2"], "columns": ["ours", "fbgemm", "torch", "ours v1"], "copy_GBps": 4276.0,
            "cases": [case, {"dim": 64, "batch": 16384, "dist": "uniform", "precision": "fp32", "error": "OOM"}]}


def test_ratio_table(bench):
    md = bench.markdown(_report(bench))
    # forward 3.2/4.0, SGD 15/12, Adagrad 15/20; v1: 3.2/5.0, 15/16, 15/17
    assert "| 128 | 65536 | zipf | fp32 | 0.80 | 1.25 | 0.75 | 0.64 | 0.94 | 0.88 |" in md
    assert "| 64 | 16384 | uniform | fp32 | error: OOM |" in md


def test_best_variant_ratio(bench):
    md = bench.markdown(_report(bench))
    # forward: fastest of ours is v2-8 (4.0; 'ours' itself is not a variant): 3.2/4.0; SGD: 15/12 (ours v1 16)
    assert "| 128 | 65536 | zipf | fp32 | 0.80 (v2-8) | 0.94 (v1) | 0.88 (v1) |" in md


def test_agreement_and_variant_verdicts(bench):
    md = bench.markdown(_report(bench))
    row = next(line for line in md.splitlines() if line.startswith("| 128 | 65536 | zipf | fp32 | 3.0e-08"))
    assert "EXACT_SGD: 2.0e-07 ok" in row and "EXACT_ROWWISE_ADAGRAD: 4.0e-05 FAIL, state 1.0e-07 ok" in row
    assert "NO: EXACT_SGD backward v1" in row
    assert "Kernels of one fwd+bwd+update step, fbgemm, D=128 B=65536 zipf fp32 EXACT_SGD" in md


def test_cases_order(bench):
    full = bench.cases(False)
    assert [(c["dim"], c["batch"], c["dist"], c["precision"]) for c in full[:7]] == [
        (128, 65536, "uniform", "fp32"), (128, 65536, "zipf", "fp32"), (64, 16384, "uniform", "fp32"),
        (128, 16384, "uniform", "fp32"), (256, 65536, "uniform", "fp32"), (128, 65536, "uniform", "fp16"),
        (128, 65536, "zipf", "fp16")]
    assert len(full) == 14 and len({(c["dim"], c["batch"], c["dist"], c["precision"]) for c in full}) == 14
    assert len(bench.cases(True)) == 2


def test_ncu_summary(tmp_path):
    summary = _load("gpu/ncu_summary.py")
    raw = tmp_path / "zipf_fwd.raw.csv"
    raw.write_text(
        '"ID","Kernel Name","gpu__time_duration.sum","gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",'
        '"dram__bytes_read.sum","dram__bytes_write.sum","lts__t_sector_hit_rate.pct",'
        '"sm__warps_active.avg.pct_of_peak_sustained_active","launch__registers_per_thread",'
        '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"\n'
        '"","","ms","%","Gbyte","Mbyte","%","%","register/thread","ratio","ratio","ratio"\n'
        '"0","void tbe::detail::pooled_forward_kernel<long, float>(tbe::ForwardArgs)","5.1","55.3","9.5","870",'
        '"71.2","24.9","127","40.2","1.5","3,000.5"\n')
    lines = summary.summarize(raw)
    row = next(line for line in lines if line.startswith("| pooled_forward_kernel<long, float>"))
    assert row == ("| pooled_forward_kernel<long, float> | 5100.0 | 55.3 | 10.37 | 71.2 | – | 24.9 | 127 | "
                   "lg_throttle 3000.5, long_scoreboard 40.2, wait 1.5 |")
    assert summary.summarize(tmp_path / "d64_train.raw.csv")[2] == "missing (the profile did not finish)"
