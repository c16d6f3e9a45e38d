"""Do two runs of the pipeline benchmark agree? Every median ratio within the other run's interval.

    python -m bench.pipelines_compare A/results.json B/results.json [--memory]

For every (preset, variant) of both files: the step-time ratio to SparseDist of each run
(median [95 % interval over rounds]) and whether each median lies inside the other run's
interval; ``--memory`` adds the peak-reserved ratios. Prints one line per figure and a verdict;
exit 0 when all agree, 1 when one does not, 2 on bad input. Under a disagreement, a line more:
how many step-time ratios agree once each interval is widened by its run's timer resolution
(CUDA events, ~0.5 us per step time: ~1e-4 on the 6.5 ms dense_heavy steps' ratios), i.e. which
misses are smaller than the measurement can tell; the verdict and exit code stay the strict ones.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


from bench.common.method import agreement, median, ratio_resolution, round_ratios


def _load(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"pipelines_compare: error: {path}: {e}") from None
    if not isinstance(doc, dict) or "presets" not in doc:
        raise SystemExit(f"pipelines_compare: error: {path}: not a bench.pipelines results.json")
    return doc


def _preset(doc: dict, name: str) -> dict | None:
    """The results document's preset ``name`` (None when it has none)."""
    return next((p for p in doc.get("presets", []) if p.get("preset") == name), None)


def _host(doc: dict, preset: str | None = None) -> float | None:
    """The host probe (us per tiny CPU op) of a run: a preset's median over its runs, or the
    process's at its start."""
    if preset is None:
        return (doc.get("process") or {}).get("host_probe_us")
    p = _preset(doc, preset)
    return (((p or {}).get("host") or {}).get("probe_us") or {}).get("median")


STEADY = 1.2
"""A round counts as on a steady host when both its runs' host probes are within this factor of
the median probe over both calls' runs of the preset (the diagnostic under a disagreement)."""


def _probes(doc: dict, preset: str) -> list[float]:
    p = _preset(doc, preset)
    return [run["host_probe_us"] for rd in (p or {}).get("rounds", []) if not rd.get("warmup")
            for run in rd["runs"].values() if run.get("host_probe_us")]


def steady_host_ratio(doc: dict, preset: str, variant: str, reference: str, *, limit_us: float) -> tuple[float | None, int]:
    """(median, rounds) of ``variant``'s ratio to ``reference`` over the timed rounds of ``preset``
    whose two runs both had a host probe <= ``limit_us``: the figure on a host of one speed, to
    tell a disagreement the host's speed explains from one it does not. A diagnostic: the
    figures of record use every round."""
    ratios = [x for x, rd in round_ratios(_preset(doc, preset) or {}, variant, reference)
              if max(rd["runs"][v].get("host_probe_us") or math.inf for v in (variant, reference)) <= limit_us]
    return median(ratios), len(ratios)


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def compare(a: dict, b: dict, *, memory: bool = False) -> tuple[list[str], bool]:
    figures = ("ratio", "reserved_ratio") if memory else ("ratio",)
    rows = agreement(a, b, figures=figures)
    lines = []
    for name, d in (("A", a), ("B", b)):
        proc = d.get("process") or {}
        lines.append(f"{name}: {d.get('device')} {d.get('date_utc')}, CPU {proc.get('cpu_model', '-')}, pinning "
                     f"{str(proc.get('pin', '-')).split(':')[0]}, host probe {_fmt(_host(d))} us/op")
    lines.append("")
    for r in rows:
        lines.append(f"{'ok ' if r.ok else 'NO '} {r.preset:16s} {r.variant:24s} {r.figure:14s} "
                     f"A {r.a.median:.4f} [{r.a.lo:.4f}, {r.a.hi:.4f}]  B {r.b.median:.4f} [{r.b.lo:.4f}, {r.b.hi:.4f}]")
    bad = [r for r in rows if not r.ok]
    if not rows:
        lines.append("no figure in common")
    verdict = bool(rows) and not bad
    lines += ["", "Targets (each run):"]
    for name, d in (("A", a), ("B", b)):
        for p in d.get("presets", []):
            for t, ok in (p.get("targets") or {}).items():
                lines.append(f"  {name} {p['preset']:16s} {t}: {'met' if ok else 'NOT met'}")
    ref = a.get("method", {}).get("reference", "sparse")
    steady = []
    for r in bad:
        if r.figure != "ratio":
            continue
        limit = STEADY * (median(_probes(a, r.preset) + _probes(b, r.preset)) or math.nan)
        (ma, na), (mb, nb) = (steady_host_ratio(d, r.preset, r.variant, ref, limit_us=limit) for d in (a, b))
        steady.append(f"  {r.preset:16s} {r.variant:24s} A {_fmt(ma, '.4f')} ({na} rounds)  B {_fmt(mb, '.4f')} ({nb} rounds)")
    if steady:
        lines += ["", f"Where they disagree, the rounds with both runs on a steady host (probe <= {STEADY:g} x the preset's "
                  "median over both calls; a diagnostic, not the figure):"] + steady
    presets = sorted({r.preset for r in bad})
    if presets:
        lines += ["", "Host probe (median us/op over the preset's runs) where they disagree: " + "; ".join(
            f"{p} A {_fmt(_host(a, p))} / B {_fmt(_host(b, p))}" for p in presets)
            + " (a host slower in one call moves a host-bound preset's ratios: bench/NOTES-pipelines.md)"]
    lines += ["", f"{'AGREE' if verdict else 'DISAGREE'}: {len(rows) - len(bad)} of {len(rows)} figures within the other run's interval"]
    if bad:
        lines.append(_at_timer_resolution(a, b, rows, ref))
    return lines, verdict


def _step_ms(doc: dict, preset: str, variant: str) -> float | None:
    step = (((_preset(doc, preset) or {}).get("summary") or {}).get(variant) or {}).get("step")
    return step.get("median") if isinstance(step, dict) else None


def _at_timer_resolution(a: dict, b: dict, rows: list, ref: str) -> str:
    """The step-time ratios' agreement once each interval is widened by its run's timer
    resolution (``bench.method.ratio_resolution``): a line under the verdict, which it does not
    change."""
    ok, n, widest = 0, 0, 0.0
    for r in rows:
        if r.figure != "ratio":
            continue
        tol = []
        for d in (a, b):
            v, s = _step_ms(d, r.preset, r.variant), _step_ms(d, r.preset, ref)
            tol.append(ratio_resolution(v, s) if v and s else 0.0)
        n += 1
        ok += r.ok_within(*tol)
        widest = max(widest, *tol)
    return (f"At the step timer's resolution (CUDA events, ~0.5 us: at most +/-{widest:.5f} on a ratio here): "
            f"{ok} of {n} step-time ratios agree")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--memory", action="store_true", help="also the peak-reserved ratios")
    ns = ap.parse_args(argv)
    try:
        lines, ok = compare(_load(ns.a), _load(ns.b), memory=ns.memory)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
