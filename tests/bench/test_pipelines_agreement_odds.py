"""bench/pipelines_agreement_odds.py: a figure's noise read from a results document, the simulated runs'
coverage and agreement, and the agreement the documents themselves show."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import pipelines_agreement_odds as ao


def _doc(ratios_by_pass: dict[int, list[float]], *, median: float, lo: float, hi: float) -> dict:
    """A results document of one preset: SparseDist at 10 ms in every round, FusedSparseDist at
    10 ms x the given ratio, the rounds in the given passes, a warm-up round first (left out)."""
    rounds = [{"warmup": True, "pass": 0, "runs": {"sparse": {"step_ms_median": 10.0}, "fused": {"step_ms_median": 99.0}}}]
    for p, ratios in ratios_by_pass.items():
        for x in ratios:
            rounds.append({"warmup": False, "pass": p,
                           "runs": {"sparse": {"step_ms_median": 10.0}, "fused": {"step_ms_median": 10.0 * x}}})
    summary = {"sparse": {"ratio": {"median": 1.0, "lo": 1.0, "hi": 1.0, "n": 1}},
               "fused": {"ratio": {"median": median, "lo": lo, "hi": hi, "n": len(rounds) - 1}}}
    return {"method": {"reference": "sparse"}, "presets": [{"preset": "tiny", "rounds": rounds, "summary": summary}]}


def test_the_noise_is_the_rounds_about_their_pass_median_and_the_pass_medians_spread():
    doc = _doc({0: [0.90, 0.92, 0.94], 1: [0.96, 0.98, 1.00]}, median=0.95, lo=0.9, hi=1.0)
    ratios, passes = ao.round_ratios(doc["presets"][0], "fused")
    assert passes == [0, 0, 0, 1, 1, 1]  # the warm-up round is not a figure
    nz = ao.noise(ratios, passes)
    # pass medians 0.92 and 0.98: residuals -0.02, 0, +0.02 in each; sd of (0.92, 0.98) = 0.06 / sqrt 2
    np.testing.assert_allclose(nz.residuals, [-0.02, 0, 0.02, -0.02, 0, 0.02], atol=1e-12)
    assert nz.pass_sd == pytest.approx(0.06 / np.sqrt(2))
    assert ao.noise([1.0, 1.1], [0, 0]).pass_sd == 0.0


def test_simulated_runs_of_pure_round_noise_are_covered_and_agree_as_the_theory_says():
    # no pass offset, rounds normal: the interval covers ~95 % and two runs agree ~83 % (P(|Z| <
    # 1.96 / sqrt 2)); the two-stage bootstrap counts the round noise twice, so a little more
    rng = np.random.default_rng(3)
    nz = ao.Noise(passes=[p for p in range(4) for _ in range(10)], residuals=rng.normal(0, 0.01, 400), pass_sd=0.0)
    cov, agree, hw = ao.simulate(nz, runs=200, seed=1, resamples=400)
    assert 0.9 <= cov <= 1.0
    assert 0.7 <= agree <= 0.97
    assert 0.002 < hw < 0.01  # ~1.96 x 1.25 x 0.01 / sqrt 40 = 0.0039


def test_a_pass_offset_the_design_cannot_sample_lowers_agreement():
    # a large offset per pass and only two passes: the interval is too narrow to hold the
    # other run's median most of the time
    rng = np.random.default_rng(4)
    res = rng.normal(0, 0.001, 400)
    few = ao.Noise(passes=[0] * 10 + [1] * 10, residuals=res, pass_sd=0.02)
    none = ao.Noise(passes=[0] * 10 + [1] * 10, residuals=res, pass_sd=0.0)
    _, agree_few, _ = ao.simulate(few, runs=200, seed=2, resamples=400)
    _, agree_none, _ = ao.simulate(none, runs=200, seed=2, resamples=400)
    assert agree_few < agree_none - 0.2


def test_the_command_reads_files_and_counts_the_pairs_that_agree(tmp_path, capsys):
    a = _doc({0: [0.95, 0.96, 0.97], 1: [0.94, 0.95, 0.96]}, median=0.95, lo=0.94, hi=0.96)
    b = _doc({0: [0.955] * 3, 1: [0.945] * 3}, median=0.955, lo=0.945, hi=0.965)
    c = _doc({0: [0.99] * 3, 1: [0.99] * 3}, median=0.99, lo=0.985, hi=0.995)
    paths = []
    for name, d in (("a", a), ("b", b), ("c", c)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(d))
    out = tmp_path / "odds.json"
    assert ao.main([*map(str, paths), "--runs", "20", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    # a and b: 0.95 in [0.945, 0.965] and 0.955 in [0.94, 0.96]; c agrees with neither
    assert [(o["a"], o["b"], o["agree"], o["figures"]) for o in got["observed"]] == [
        ("a", "b", 1, 1), ("a", "c", 0, 1), ("b", "c", 0, 1)]
    assert [f["variant"] for f in got["figures"]] == ["fused"] * 3
    assert "a vs b: 1 of 1 figures agree" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert ao.main([str(bad)]) == 2
    assert ao.main([str(bad), "--runs", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("pipelines_agreement_odds: error:") for e in err)
