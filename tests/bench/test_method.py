"""bench/common/method.py: the orders of the rounds, the bootstrap interval and the agreement of two
runs, on tiny data whose answers are worked out by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bench.common import method


def test_round_orders_come_in_mirrored_rotated_pairs():
    v = ["sparse", "fused", "semi"]
    assert method.round_orders(v, 4) == [
        ["sparse", "fused", "semi"], ["semi", "fused", "sparse"],
        ["fused", "semi", "sparse"], ["sparse", "semi", "fused"],
    ]
    for n in (2, 3, 4, 9):
        names = [f"v{i}" for i in range(n)]
        orders = method.round_orders(names, 2 * n)
        assert all(sorted(o) == names for o in orders)
        # every two rounds: each variant's positions add up to n - 1, every pair swaps order
        for a, b in zip(orders[::2], orders[1::2]):
            assert all(a.index(x) + b.index(x) == n - 1 for x in names)
        # over 2n rounds every variant runs first twice
        assert all(sum(o[0] == x for o in orders) == 2 for x in names)


def _drifting_machine(order_of_rounds, true, drift_per_run):
    """Each run's figure: the variant's true time x (1 + drift x runs so far)."""
    k, rounds = 0, []
    for order in order_of_rounds:
        r = {}
        for v in order:
            r[v] = true[v] * (1 + drift_per_run * k)
            k += 1
        rounds.append(r)
    return rounds


@pytest.mark.parametrize("n", [3, 4, 9])
def test_interleaving_cancels_a_drift_that_a_fixed_order_turns_into_a_ratio(n):
    """A machine that gets 1 % slower with every run (a GPU heating up): run in the old order
    (SparseDist always first) the others' ratios come out several % too high; in mirrored pairs
    of rounds the median ratio is the true one."""
    names = ["sparse"] + [f"v{i}" for i in range(1, n)]
    true = {v: 1.0 if v == "sparse" else 0.9 for v in names}
    fixed = method.summarize(_drifting_machine([names] * 6, true, 0.01), "sparse")
    mirrored = method.summarize(_drifting_machine(method.round_orders(names, 6), true, 0.01), "sparse")
    for v in names[1:]:
        assert fixed[v]["ratio"].median / 0.9 - 1 > 0.009 * names.index(v) * 0.9  # later in the round: worse
        assert abs(mirrored[v]["ratio"].median / 0.9 - 1) < 0.0025


def test_bootstrap_interval_of_the_median_by_hand():
    # two rounds: resampled medians are a (1/4), (a+b)/2 (1/2), b (1/4): the 95 % interval is [a, b]
    assert method.bootstrap_ci([1.0, 3.0]) == (1.0, 3.0)
    # three rounds 1, 2, 10: P(median = 1) = P(median = 10) = 7/27 > 2.5 %: the interval is [1, 10]
    assert method.bootstrap_ci([2.0, 10.0, 1.0]) == (1.0, 10.0)
    # equal values, one value, none
    assert method.bootstrap_ci([0.93] * 6) == (0.93, 0.93)
    assert method.bootstrap_ci([0.5]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in method.bootstrap_ci([]))


def test_bootstrap_interval_is_seeded_and_narrows_with_more_rounds():
    few = [0.92, 0.95, 0.93, 0.97, 0.94, 0.91]
    assert method.bootstrap_ci(few, seed=3) == method.bootstrap_ci(few, seed=3)
    lo, hi = method.bootstrap_ci(few)
    assert min(few) <= lo <= method.median(few) <= hi <= max(few)
    many = few * 8
    lo8, hi8 = method.bootstrap_ci(many)
    assert hi8 - lo8 < hi - lo


def test_summarize_pairs_ratios_within_rounds():
    # the machine is 20 % slower in round 2: the ratios, taken within each round, do not move
    rounds = [{"sparse": 10.0, "fused": 9.0}, {"sparse": 12.0, "fused": 10.8}, {"sparse": 10.0, "fused": 9.0}]
    s = method.summarize(rounds, "sparse")
    assert s["fused"]["value"].median == 9.0 and s["sparse"]["value"].hi == 12.0
    r = s["fused"]["ratio"]
    assert r.n == 3 and all(math.isclose(x, 0.9) for x in (r.median, r.lo, r.hi))
    # a round without the reference gives no ratio for that round
    assert method.paired_ratios([{"fused": 9.0}, {"sparse": 10.0, "fused": 9.5}], "fused", "sparse") == [0.95]


def _rounds_run(round_s: float, left_s: float, least: int, most: int) -> int:
    done = 0
    while method.next_round_runs(done=done, elapsed_s=done * round_s, left_s=left_s, least=least, most=most):
        done += 1
    return done


def test_rounds_run_are_whole_pairs_and_bounded():
    assert _rounds_run(10, 75, 6, 10) == 6
    assert _rounds_run(10, 80, 6, 10) == 8  # a pair fits exactly
    assert _rounds_run(10, 95, 6, 10) == 8
    assert _rounds_run(10, 1000, 6, 10) == 10
    assert _rounds_run(10, 5, 6, 10) == 6  # the minimum always runs
    assert _rounds_run(0, 5, 2, 4) == 4
    # a pair's second round runs even when the time is up (never half a pair)
    assert method.next_round_runs(done=7, elapsed_s=1e9, left_s=1, least=6, most=10)


def _doc(ratios: dict[str, tuple[float, float, float]]) -> dict:
    return {"method": {"reference": "sparse"}, "presets": [{"preset": "p", "summary": {
        v: {"ratio": {"median": m, "lo": lo, "hi": hi, "n": 6}} for v, (m, lo, hi) in ratios.items()}}]}


def test_agreement_needs_each_median_inside_the_other_interval():
    a = _doc({"sparse": (1, 1, 1), "fused": (0.93, 0.92, 0.95), "semi": (0.90, 0.88, 0.91)})
    b = _doc({"sparse": (1, 1, 1), "fused": (0.94, 0.93, 0.96), "semi": (0.92, 0.915, 0.93)})
    rows = {r.variant: r.ok for r in method.agreement(a, b)}
    # the reference is left out; fused: 0.93 in [0.93, 0.96] and 0.94 in [0.92, 0.95];
    # semi: 0.90 is not in [0.915, 0.93]
    assert rows == {"fused": True, "semi": False}
    assert all(r.ok for r in method.agreement(a, a))


def test_ratio_resolution_by_hand_and_agreement_within_it():
    # 6.5 ms over 6.75 ms, each known to 0.5 us: 0.96296 x hypot(0.5e-3/6.5, 0.5e-3/6.75)
    tol = method.ratio_resolution(6.5, 6.75)
    assert tol == pytest.approx((6.5 / 6.75) * math.sqrt((0.5e-3 / 6.5) ** 2 + (0.5e-3 / 6.75) ** 2))
    assert 1.0e-4 < tol < 1.1e-4 and method.ratio_resolution(50.0, 50.0) == pytest.approx(1.414e-5, rel=1e-3)
    # B's median 0.96186 below A's interval [0.96190, 0.9771] by 4e-5: a miss, but not beyond A's resolution
    r = method.Agreement("p", "fused", "ratio", method.Estimate(0.96237, 0.96190, 0.97714, 32),
                         method.Estimate(0.96186, 0.96127, 0.96404, 32))
    assert not r.ok and r.ok_within(tol, tol) and not r.ok_within(1e-5, 1e-5)


@pytest.mark.parametrize("values", list(itertools.permutations([1.0, 2.0, 4.0, 8.0])))
def test_median_and_percentile(values):
    assert method.median(values) == 3.0
    assert method.percentile(values, 0.0) == 1.0 and method.percentile(values, 1.0) == 8.0
    assert method.median([]) is None and method.median([None, 2.0]) == 2.0


def test_two_stage_interval_widens_with_a_cluster_offset():
    rng = np.random.default_rng(0)
    noise = list(rng.normal(0, 0.002, 60))
    offsets = [0.0] * 20 + [0.01] * 20 + [-0.01] * 20  # three passes, each with its own offset
    vals = [1.0 + n + o for n, o in zip(noise, offsets)]
    labels = [0] * 20 + [1] * 20 + [2] * 20
    lo1, hi1 = method.bootstrap_ci(vals)
    lo2, hi2 = method.bootstrap_ci(vals, clusters=labels)
    assert hi2 - lo2 > 2 * (hi1 - lo1)  # the offsets count: the interval spans the passes
    assert lo2 <= 0.995 and hi2 >= 1.005
    # without an offset the two intervals are alike
    flat = [1.0 + n for n in noise]
    lo3, hi3 = method.bootstrap_ci(flat, clusters=labels)
    lo4, hi4 = method.bootstrap_ci(flat)
    assert abs((hi3 - lo3) - (hi4 - lo4)) < 0.5 * (hi4 - lo4)
    # one cluster: the plain bootstrap; a label per value is required
    assert method.bootstrap_ci(flat, clusters=[0] * 60) == (lo4, hi4)
    with pytest.raises(ValueError):
        method.bootstrap_ci(flat, clusters=[0, 1])
