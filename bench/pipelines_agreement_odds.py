"""How often two runs of the pipeline benchmark *can* agree: the method's intervals simulated on
each figure's own measured noise.

    python -m bench.pipelines_agreement_odds A/results.json B/results.json ... [--runs 400] [--json OUT]

Issue 13 asks two runs in two calls to *agree*: every median ratio within the other run's 95 %
interval. This script says what that asks of the benchmark's own noise. For every figure (a
variant's step-time ratio to SparseDist on a preset) of every results file given:

1. **Its noise, measured**: the per-round ratios and the pass (process) each round ran in. The
   round noise is the residuals of the rounds about their own pass's median (resampled as they
   are: heavy tails kept); the pass offsets are normal with the standard deviation of the pass
   medians (an upper bound: it includes the round noise's share of a pass median).
2. **Simulated runs of the same design** (the file's passes and rounds per pass), ``--runs`` of
   them, each reduced by the benchmark's own estimator (``bench.method.estimate``: the median and
   the two-stage bootstrap interval over passes, then rounds). Reported: the **coverage** (share
   of the intervals that hold the true median: the method is calibrated when it is ~0.95) and
   **P(agree)** (share of pairs of simulated runs in which each median lies in the other's
   interval: the criterion, for one figure, when two calls differ only by this noise).
3. **P(all agree)**: the product over the figures of a file (the figures taken as independent),
   next to what the files themselves did: for every pair of the files given, how many figures
   agreed (``bench.method.agreement``, as ``bench/pipelines_compare.py`` counts them).

Two calls on different hosts also differ by the host's speed, which no run samples
(bench/NOTES-pipelines.md): the simulated P(agree) is what the criterion gives *without* that,
an upper bound.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


from bench.common import method

REFERENCE = "sparse"
"""The variant every ratio is taken to (SparseDist)."""


@dataclass(frozen=True)
class Noise:
    """One figure's measured noise: what a simulated run draws from."""

    passes: list
    """Pass label of each timed round, in order (the design a simulated run repeats)."""
    residuals: np.ndarray
    """[rounds] each round's ratio minus its own pass's median."""
    pass_sd: float
    """Standard deviation of the pass medians (0 with one pass)."""


@dataclass(frozen=True)
class Odds:
    """One figure of one results file, simulated."""

    file: str
    preset: str
    variant: str
    rounds: int
    passes: int
    pass_sd: float
    """Standard deviation of the pass medians (ratio units)."""
    round_mad: float
    """Median absolute deviation of the round residuals (ratio units)."""
    half_width: float
    """Median half-width of the simulated intervals (ratio units)."""
    coverage: float
    """Share of the simulated intervals holding the true median."""
    p_agree: float
    """Share of pairs of simulated runs that agree (each median in the other's interval)."""


def round_ratios(pdoc: dict, variant: str, reference: str = REFERENCE) -> tuple[list[float], list]:
    """``variant``'s step-time ratio to ``reference`` in each timed round of one preset of a
    results document, and the pass each ran in (``method.round_ratios``)."""
    got = method.round_ratios(pdoc, variant, reference)
    return [x for x, _ in got], [rd.get("pass", 0) for _, rd in got]


def noise(ratios: list[float], passes: list) -> Noise:
    """The round residuals about their pass's median and the pass medians' spread."""
    r = np.asarray(ratios, dtype=float)
    labels = np.asarray(passes)
    medians = {p: float(np.median(r[labels == p])) for p in dict.fromkeys(passes)}
    residuals = r - np.array([medians[p] for p in passes])
    sd = float(np.std(list(medians.values()), ddof=1)) if len(medians) > 1 else 0.0
    return Noise(list(passes), residuals, sd)


def simulate(nz: Noise, *, runs: int, seed: int, resamples: int = 2000) -> tuple[float, float, float]:
    """(coverage, P(agree), median half-width) of ``runs`` simulated runs of ``nz``'s design.
    Each run: one normal offset per pass (sd ``nz.pass_sd``) plus residuals drawn with
    replacement; the truth is the median of that mixture (computed on 200,000 draws)."""
    rng = np.random.default_rng(seed)
    keys = list(dict.fromkeys(nz.passes))
    idx = np.array([keys.index(p) for p in nz.passes])
    big = rng.normal(0.0, nz.pass_sd, 200_000) + rng.choice(nz.residuals, 200_000)
    truth = float(np.median(big))
    ests = []
    for i in range(runs):
        offsets = rng.normal(0.0, nz.pass_sd, len(keys))
        vals = offsets[idx] + rng.choice(nz.residuals, idx.size)
        lo, hi = method.bootstrap_ci(vals, clusters=nz.passes, resamples=resamples, seed=seed * 100_003 + i)
        ests.append((float(np.median(vals)), lo, hi))
    coverage = float(np.mean([lo <= truth <= hi for _, lo, hi in ests]))
    pairs = list(zip(ests[::2], ests[1::2]))
    agree = float(np.mean([(b[1] <= a[0] <= b[2]) and (a[1] <= b[0] <= a[2]) for a, b in pairs]))
    return coverage, agree, float(np.median([(hi - lo) / 2 for _, lo, hi in ests]))


def odds(doc: dict, name: str, *, runs: int, seed: int = 0, resamples: int = 2000) -> list[Odds]:
    """Every figure of one results document, simulated."""
    out = []
    ref = (doc.get("method") or {}).get("reference", REFERENCE)
    for p in doc.get("presets", []):
        for v in (p.get("summary") or {}):
            if v == ref:
                continue
            ratios, passes = round_ratios(p, v, ref)
            if len(ratios) < 2:
                continue
            nz = noise(ratios, passes)
            cov, agree, hw = simulate(nz, runs=runs, seed=seed + len(out), resamples=resamples)
            mad = float(np.median(np.abs(nz.residuals - np.median(nz.residuals))))
            out.append(Odds(name, p["preset"], v, len(ratios), len(set(passes)), nz.pass_sd, mad, hw, cov, agree))
    return out


def observed(docs: dict[str, dict]) -> list[tuple[str, str, int, int]]:
    """For every pair of the documents: (A, B, figures that agree, figures compared)."""
    out = []
    for (na, a), (nb, b) in itertools.combinations(docs.items(), 2):
        rows = method.agreement(a, b)
        out.append((na, nb, sum(r.ok for r in rows), len(rows)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="bench.pipelines results files")
    ap.add_argument("--runs", type=int, default=400, help="simulated runs per figure (even)")
    ap.add_argument("--json", help="also write the figures here")
    ns = ap.parse_args(argv)
    if ns.runs < 2 or ns.runs % 2:
        print("pipelines_agreement_odds: error: --runs must be an even number >= 2", file=sys.stderr)
        return 2
    docs = {}
    for path in ns.results:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            print(f"pipelines_agreement_odds: error: {path}: {e}", file=sys.stderr)
            return 2
        if not isinstance(doc, dict) or "presets" not in doc:
            print(f"pipelines_agreement_odds: error: {path}: not a bench.pipelines results.json", file=sys.stderr)
            return 2
        docs[Path(path).stem] = doc
    rows, products = [], {}
    print(f"{'file':38s} {'preset':16s} {'variant':10s} {'rounds':>6s} {'passes':>6s} {'pass sd':>8s} "
          f"{'round MAD':>9s} {'+-':>7s} {'coverage':>8s} {'P(agree)':>8s}")
    for name, doc in docs.items():
        got = odds(doc, name, runs=ns.runs)
        rows += got
        products[name] = math.prod(o.p_agree for o in got)
        for o in got:
            print(f"{o.file:38s} {o.preset:16s} {o.variant:10s} {o.rounds:6d} {o.passes:6d} {o.pass_sd:8.4f} "
                  f"{o.round_mad:9.4f} {o.half_width:7.4f} {o.coverage:8.3f} {o.p_agree:8.3f}")
        print(f"{name}: P(all {len(got)} agree) = {products[name]:.3f} (the figures taken as independent)")
    seen = observed(docs)
    for a, b, ok, n in seen:
        print(f"observed: {a} vs {b}: {ok} of {n} figures agree")
    if ns.json:
        Path(ns.json).write_text(json.dumps({
            "runs": ns.runs, "figures": [asdict(o) for o in rows], "p_all_agree": products,
            "observed": [dict(a=a, b=b, agree=ok, figures=n) for a, b, ok, n in seen]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
