"""Do the runs after a process's first trace run slower than the rounds? Question (issue 24's
2-GPU multitask FusedSparseDist misses): ``bench.pipelines`` traces each preset's variants in the
last pass's process, after that preset's rounds and before the next preset's, SparseDist first;
Kineto leaves CUPTI attached after a trace unless ``TEARDOWN_CUPTI=1``. If that costs the runs
after a trace, the later trace runs' untraced steps sit over their rounds and a later preset's
last-pass rounds over its first pass's, while the first trace run and the first preset do not.

Per results file (``bench.pipelines``' ``results.json`` or ``bench/results/pipelines-*.json``),
the multitask presets (host-bound or near it; the dense ones are GPU-bound), each ratio a median
untraced step over the median of the same variant's rounds:

- ``first``: the first trace run of the process (the first preset's first window) / its pass's rounds;
- ``later``: the first preset's other trace runs / the same rounds;
- ``first_preset_passes``: the first preset's last pass / its first pass (rounds only);
- ``later_preset_passes``: a later preset's last pass (after a trace) / its first pass.

    python -m bench.trace_order bench/results/pipelines-*gpu-h200-2026*.json [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

GROUPS = ("first", "later", "first_preset_passes", "later_preset_passes")


def ratios(doc: dict) -> dict[str, list[tuple[str, str, float]]]:
    """``{group: [(preset, what, ratio)]}`` of one results document (the groups above)."""
    out: dict[str, list] = {g: [] for g in GROUPS}
    for i, p in enumerate(doc.get("presets") or []):
        if not p["preset"].startswith("multitask"):
            continue
        timed = [rd for rd in p.get("rounds") or [] if not rd.get("warmup")]
        passes = sorted({rd.get("pass", 0) for rd in timed})
        if not passes:
            continue

        def rounds(v: str, q: int) -> float | None:
            xs = [rd["runs"][v]["step_ms_median"] for rd in timed if rd.get("pass", 0) == q and v in rd["runs"]]
            return statistics.median(xs) if xs else None

        for v in ("sparse", "fused"):
            a, b = rounds(v, passes[-1]), rounds(v, passes[0])
            if len(passes) > 1 and a and b:
                out["first_preset_passes" if i == 0 else "later_preset_passes"].append((p["preset"], v, a / b))
        if i != 0:
            continue
        for k, w in enumerate(x for x in p.get("windows") or [] if x.get("step_ms_median")):
            ref = rounds(w["variant"], passes[-1])
            if ref:
                out["first" if k == 0 else "later"].append((p["preset"], f"{w['variant']}/{w['option']}", w["step_ms_median"] / ref))
    return out


def summary(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": round(statistics.median(xs), 3), "lo": round(min(xs), 3), "hi": round(max(xs), 3),
            "over_1_05": sum(x > 1.05 for x in xs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.trace_order", description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="bench.pipelines results files")
    ap.add_argument("--out", help="a folder for trace-order.json")
    a = ap.parse_args(argv)
    groups: dict[str, list] = {g: [] for g in GROUPS}
    seen: set = set()
    for f in a.results:
        try:
            doc = json.loads(Path(f).read_text())
        except (OSError, ValueError) as e:
            print(f"trace_order: error: {f}: {e}", file=sys.stderr)
            return 2
        if doc.get("tag") in seen:  # the same run copied to two places
            continue
        seen.add(doc.get("tag"))
        for g, rows in ratios(doc).items():
            groups[g].extend((doc.get("tag"), *r) for r in rows)
    res = {g: {**summary([r[-1] for r in rows]), "rows": [[*r[:-1], round(r[-1], 3)] for r in rows]} for g, rows in groups.items()}
    print("| group | n | median | range | over 1.05 |\n|---|---|---|---|---|")
    for g in GROUPS:
        s = res[g]
        print(f"| {g} | {s['n']} | {s.get('median', '-')} | {s.get('lo', '-')}-{s.get('hi', '-')} | {s.get('over_1_05', '-')} |")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "trace-order.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
