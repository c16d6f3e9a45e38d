"""The benchmark method: interleaved rounds, medians with bootstrap intervals, and whether two
runs of a benchmark agree. Python and numpy (no torch): the pipeline benchmark, the issue-5
benchmark and ``bench/pipelines_compare.py`` share it, and the CPU tests check it on tiny data.

The method, for variants compared with a reference variant (SparseDist):

* **Rounds.** First a warm-up round: every variant runs once and nothing of it enters the
  figures (first use of kernels and libraries, allocator growth, the GPU reaching its steady
  clocks and temperature all land there; it is kept in the results so they can be seen). Then
  R timed rounds (R even, >= 6): every variant once per round, in mirrored pairs of rotated
  orders (:func:`round_orders`), so no variant always runs first, right after a pause, or right
  after the same other variant, and a drift of the machine (clocks, temperature) reaches every
  variant alike instead of whichever runs last.
* **Per round**, each variant gives one figure: the median of its timed steps in that round
  (and its peak memory). Its ratio to the reference is taken *within the round* (paired).
* **Estimate**: the median over rounds of those ratios, with a 95 % percentile-bootstrap
  interval over rounds (:func:`bootstrap_ci`: rounds resampled with replacement, seeded, so the
  same figures give the same interval). The same for peak memory.
* **Agreement** of two runs (two separate GPU calls): every median ratio lies within the other
  run's interval (:func:`agreement`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

LEVEL = 0.95
"""Confidence level of the intervals."""
RESAMPLES = 10_000
"""Bootstrap resamples (the interval's ends move by well under 1 % of its width between seeds)."""


def median(xs: Iterable[float | None]) -> float | None:
    """The median; None when there is no value (Nones are left out)."""
    s = sorted(x for x in xs if x is not None)
    if not s:
        return None
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def percentile(xs: Iterable[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def round_orders(variants: Sequence[str], rounds: int) -> list[list[str]]:
    """The order of the variants in each of ``rounds`` timed rounds, in mirrored pairs: round
    2k is ``variants`` rotated left by k places, round 2k+1 the same order reversed. In each pair
    of rounds every variant's two positions add up to n-1 and every two variants swap order, so a
    drift of the machine that is linear over the pair moves every variant's mean by the same
    amount and the paired ratios by symmetric amounts (their median stays put); and the rotation
    changes which variant runs first."""
    n = len(variants)
    out = []
    for r in range(rounds):
        k = r // 2
        order = [variants[(k + j) % n] for j in range(n)]
        out.append(order[::-1] if r % 2 else order)
    return out


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[..., Any] = np.median,
    *,
    clusters: Sequence[Any] | None = None,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``stat(values)``: the values (one per round) resampled
    with replacement ``resamples`` times (numpy's PCG64 seeded with ``seed``: the same values
    give the same interval); the interval holds the middle ``level`` of the statistic's
    resampled values (``stat(samples, axis=1)``). One value: a zero-width interval at it; none:
    NaNs.

    ``clusters`` (one label per value, e.g. the pass a round ran in; the median only): a
    two-stage bootstrap, the clusters resampled with replacement, then the values within each
    drawn cluster: an offset shared by a cluster's rounds (a pass's CPU, say) then widens the
    interval as it should, instead of counting as many independent rounds. One cluster: the
    plain bootstrap."""
    vals = np.asarray([float(v) for v in values])
    if vals.size == 0:
        return math.nan, math.nan
    if vals.size == 1:
        return float(vals[0]), float(vals[0])
    rng = np.random.Generator(np.random.PCG64(seed))
    if clusters is not None and len(set(clusters)) > 1:
        if len(clusters) != vals.size:
            raise ValueError("one cluster label per value")
        boot = _two_stage_medians(vals, list(clusters), rng, resamples)
    else:
        boot = stat(vals[rng.integers(0, vals.size, size=(resamples, vals.size))], axis=1)
    tail = (1.0 - level) / 2
    lo, hi = np.percentile(boot, [100 * tail, 100 * (1 - tail)])
    return float(lo), float(hi)


def _two_stage_medians(vals: np.ndarray, clusters: list, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of ``resamples`` two-stage resamples: K clusters drawn with replacement from the K,
    then within each drawn cluster as many values as it has, with replacement."""
    keys = list(dict.fromkeys(clusters))
    groups = [vals[[c == k for c in clusters]] for k in keys]
    sizes = np.array([g.size for g in groups])
    k, m = len(groups), int(sizes.max())
    table = np.full((k, m), np.nan)
    for i, g in enumerate(groups):
        table[i, : g.size] = g
    pick = rng.integers(0, k, size=(resamples, k))  # [R, K] the clusters drawn
    n = sizes[pick][:, :, None]  # [R, K, 1] their sizes
    idx = np.floor(rng.random((resamples, k, m)) * n).astype(np.int64)  # [R, K, m] draws within
    draws = np.where(np.arange(m)[None, None, :] < n, table[pick[:, :, None], idx], np.nan)
    return np.nanmedian(draws.reshape(resamples, k * m), axis=1)


@dataclass(frozen=True)
class Estimate:
    """A median over rounds with its bootstrap interval."""

    median: float
    """Median of the per-round values."""
    lo: float
    """Lower end of the 95 % interval."""
    hi: float
    """Upper end of the 95 % interval."""
    n: int
    """Rounds the estimate is made of."""

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Estimate":
        return cls(float(d["median"]), float(d["lo"]), float(d["hi"]), int(d["n"]))


def estimate(values: Sequence[float], *, clusters: Sequence[Any] | None = None, seed: int = 0) -> Estimate:
    """Median of ``values`` (one per round) and its bootstrap interval (two-stage over
    ``clusters`` when given: :func:`bootstrap_ci`)."""
    values = [float(v) for v in values]
    lo, hi = bootstrap_ci(values, clusters=clusters, seed=seed)
    return Estimate(median(values), lo, hi, len(values))


def paired_ratios(per_round: Sequence[dict[str, float]], variant: str, reference: str) -> list[float]:
    """``variant``'s figure over ``reference``'s, round by round (rounds missing either skipped)."""
    out = []
    for r in per_round:
        a, b = r.get(variant), r.get(reference)
        if a is not None and b:
            out.append(a / b)
    return out


def round_ratios(pdoc: dict, variant: str, reference: str) -> list[tuple[float, dict]]:
    """``variant``'s step-time ratio to ``reference`` in each timed round of one preset of a
    results document (as bench.pipelines writes it), with the round itself; rounds without
    both runs left out."""
    out = []
    for rd in pdoc.get("rounds", []):
        a, b = rd["runs"].get(variant), rd["runs"].get(reference)
        if rd.get("warmup") or not a or not b or not b.get("step_ms_median"):
            continue
        out.append((a["step_ms_median"] / b["step_ms_median"], rd))
    return out


def summarize(per_round: Sequence[dict[str, float]], reference: str,
              clusters: Sequence[Any] | None = None) -> dict[str, dict[str, Estimate]]:
    """For each variant of the timed rounds ``per_round`` (one dict variant -> figure per round):
    ``value`` (the figure) and ``ratio`` (to ``reference`` within each round), as Estimates;
    ``clusters``: one label per round (the pass it ran in), for two-stage intervals."""
    variants = list(dict.fromkeys(v for r in per_round for v in r))
    labels = list(clusters) if clusters is not None else [0] * len(per_round)
    out: dict[str, dict[str, Estimate]] = {}
    for v in variants:
        kept = [(r[v], c) for r, c in zip(per_round, labels) if r.get(v) is not None]
        out[v] = {"value": estimate([x for x, _ in kept], clusters=[c for _, c in kept])}
        both = [(r, c) for r, c in zip(per_round, labels) if r.get(v) is not None and r.get(reference)]
        if both:
            out[v]["ratio"] = estimate(paired_ratios([r for r, _ in both], v, reference), clusters=[c for _, c in both])
    return out


def next_round_runs(*, done: int, elapsed_s: float, left_s: float, least: int, most: int) -> bool:
    """Whether timed round ``done + 1`` runs, ``done`` rounds having taken ``elapsed_s`` seconds of
    the ``left_s`` the timed rounds may take: always up to ``least`` (the method's minimum), never
    past ``most``; in between, a mirrored pair (:func:`round_orders`) starts only when both its
    rounds fit at the timed rounds' mean so far, and its second round always runs. The timed
    rounds' own mean, not the warm-up round's time: that one carries every first use (it took 9x
    a timed round on 2026-11-24) and planned a third of the rounds that fitted."""
    if done >= most:
        return False
    if done < least or done % 2 == 1:
        return True
    return elapsed_s + 2 * elapsed_s / max(done, 1) <= left_s


@dataclass(frozen=True)
class Agreement:
    """One figure of two runs, and whether each run's median lies in the other's interval."""

    preset: str
    variant: str
    figure: str
    a: Estimate
    b: Estimate

    @property
    def ok(self) -> bool:
        return self.ok_within(0.0, 0.0)

    def ok_within(self, tol_a: float, tol_b: float) -> bool:
        """Each median in the other's interval widened by that run's resolution of the figure
        (``tol_a`` for run A's interval, ``tol_b`` for B's): below it two values are not told
        apart by the measurement (:func:`ratio_resolution`)."""
        return (self.a.lo - tol_a <= self.b.median <= self.a.hi + tol_a
                and self.b.lo - tol_b <= self.a.median <= self.b.hi + tol_b)


EVENT_RESOLUTION_MS = 0.5e-3
"""The step timer's resolution: CUDA events time an interval to about 0.5 us
(``cudaEventElapsedTime``'s documentation); bench.pipelines' step times are event intervals."""


def ratio_resolution(variant_ms: float, reference_ms: float, *, resolution_ms: float = EVENT_RESOLUTION_MS) -> float:
    """How finely a step-time ratio ``variant_ms / reference_ms`` is known when each time is
    known to ``resolution_ms``: the ratio times both relative resolutions in quadrature (6.5 ms
    steps: ~1e-4 on a ratio near 1; 50 ms steps: ~1.4e-5)."""
    return (variant_ms / reference_ms) * math.hypot(resolution_ms / variant_ms, resolution_ms / reference_ms)


def agreement(a: dict, b: dict, *, figures: Sequence[str] = ("ratio",)) -> list[Agreement]:
    """Every (preset, variant, figure) estimate present in both results documents (``presets``
    -> ``summary`` -> variant -> figure -> Estimate dict, as bench.pipelines writes them), but
    the reference variant's (its ratio to itself is 1 in every round)."""
    def index(doc: dict) -> dict:
        out = {}
        for p in doc.get("presets", []):
            for v, figs in (p.get("summary") or {}).items():
                for f in figures:
                    if isinstance(figs.get(f), dict):
                        out[(p["preset"], v, f)] = Estimate.from_dict(figs[f])
        return out

    ia, ib = index(a), index(b)
    ref = {a.get("method", {}).get("reference"), b.get("method", {}).get("reference")}
    return [Agreement(k[0], k[1], k[2], ia[k], ib[k]) for k in ia if k in ib and k[1] not in ref]
