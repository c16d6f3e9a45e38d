"""The explain proof's manifest: for each fix the runtime can run on a GPU, the "before" trace
and what the same GPU run measured for the fix off and on (issue 9, section 4).

    python -m bench.common.proof_manifest merge OUT.json IN.json [IN.json ...]   # one manifest from several
    python -m bench.common.proof_manifest show MANIFEST.json                      # the pairs, one line each

Written by ``bench/pipelines.py`` (FusedSparseDist vs SparseDist, on the headline preset
and on a host-bound one where the fix cannot help) and ``bench/fixes.py`` (blocking ->
async delta copy, legacy -> precomputed writeback, standard -> in-place batch copy); read by
``bench/explain_proof.py``, which predicts each "after" from the "before" trace. The format (the
keys explain_proof.py reads, and beside them the method's intervals)::

    {"format": "tracekit-explain-proof/1", "device": "NVIDIA H200", "date": "YYYY-MM-DD", "note": str,
     "pairs": [{
        "name": "<fix>/<context>",          # unique in the manifest
        "fix": "fused_sparse_dist" | "async_delta_copy" | "precomputed_writeback" | "inplace_batch_copy",
        "expect": "time" | "memory",        # what the fix is about (in-place copy: memory)
        "context": {...},                   # benchmark, preset or part
        "device": str, "date_utc": str, "source": "<results file, relative to the manifest>",
        "before": {"label": "sparse", "trace": "<.json.gz>", "snapshot": "<.pickle>" | null,
                   "step_ms": number, "peak_reserved_bytes": number | null,
                   "step_ms_estimate": EST, "peak_reserved_estimate": EST | null,
                   "traced_step_ms": [ms, ...]},
        "after":  {... the same ...},
        "measured": {"step_ratio": EST, "step_saving_ms": EST,
                     "peak_reserved_ratio": EST, "peak_reserved_saving_bytes": EST}}]}

``step_ms`` / ``peak_reserved_bytes`` are the medians over the benchmark's timed rounds (or
windows); EST is ``{"median", "lo", "hi", "n"}``, that median with its 95 % bootstrap interval
(bench/common/method.py). ``step_ms`` is untraced (CUDA events, or the host clock around a drained
window); ``traced_step_ms`` are the traced steps' own times (profiler overhead included), to
judge how far the trace is from the untraced run. ``measured`` is paired within each round:
ratio after/before, saving before - after. Paths are relative to the manifest's folder (in the
repository once the run's ``commit/`` folder has been copied in).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Sequence


from bench.common import method

FORMAT = "tracekit-explain-proof/1"
FIXES = ("fused_sparse_dist", "async_delta_copy", "precomputed_writeback", "inplace_batch_copy")


def paired(before: Sequence[float | None], after: Sequence[float | None]) -> dict:
    """Paired figures of two series measured in the same rounds: ratio after/before and
    saving before - after (rounds missing either are skipped)."""
    pairs = [(b, a) for b, a in zip(before, after) if a is not None and b]
    return {
        "ratio": method.estimate([a / b for b, a in pairs]).to_dict() if pairs else None,
        "saving": method.estimate([b - a for b, a in pairs]).to_dict() if pairs else None,
    }


def side(label: str, *, trace: str | None, snapshot: str | None, step_ms: Sequence[float],
         reserved: Sequence[float | None], traced_step_ms: Sequence[float]) -> dict:
    """One side of a pair; ``trace``/``snapshot`` relative to the repository (``write`` makes
    them relative to the manifest)."""
    res = [r for r in reserved if r is not None]
    step = method.estimate(step_ms).to_dict() if step_ms else None
    mem = method.estimate(res).to_dict() if res else None
    return {
        "label": label,
        "trace": trace,
        "snapshot": snapshot,
        "step_ms": step["median"] if step else None,
        "peak_reserved_bytes": mem["median"] if mem else None,
        "step_ms_estimate": step,
        "peak_reserved_estimate": mem,
        "traced_step_ms": list(traced_step_ms),
    }


def pair(fix: str, context: dict, *, expect: str, before: dict, after: dict,
         before_rounds: dict, after_rounds: dict) -> dict:
    """One pair. ``*_rounds``: {"step_ms": [...], "reserved": [...]} per timed round, in the
    same round order for both sides (the pairing)."""
    if fix not in FIXES:
        raise ValueError(f"fix must be one of {FIXES}, got {fix!r}")
    step = paired(before_rounds["step_ms"], after_rounds["step_ms"])
    mem = paired(before_rounds["reserved"], after_rounds["reserved"])
    ctx = "/".join(str(v) for v in context.values())
    return {
        "name": f"{fix}/{ctx}",
        "fix": fix,
        "expect": expect,
        "context": context,
        "before": before,
        "after": after,
        "measured": {
            "step_ratio": step["ratio"], "step_saving_ms": step["saving"],
            "peak_reserved_ratio": mem["ratio"], "peak_reserved_saving_bytes": mem["saving"],
        },
    }


def pipeline_pair(pdoc: dict, before: str, after: str, *, fix: str, trace_file: str) -> dict:
    """A pair from one preset of bench.pipelines' results (its timed rounds and trace runs)."""
    rounds = [rd for rd in pdoc["rounds"] if not rd["warmup"] and before in rd["runs"] and after in rd["runs"]]

    def series(v: str) -> dict:
        return {"step_ms": [rd["runs"][v]["step_ms_median"] for rd in rounds],
                "reserved": [rd["runs"][v]["peak_reserved_bytes"] for rd in rounds]}

    def one(v: str) -> dict:
        t = pdoc["traces"][v]
        return side(v, trace=f"{t['dir']}/{trace_file}", snapshot=None, step_ms=series(v)["step_ms"],
                    reserved=series(v)["reserved"], traced_step_ms=t["traced_step_ms"])

    return pair(fix, {"bench": "pipelines", "preset": pdoc["preset"]}, expect="time",
                before=one(before), after=one(after), before_rounds=series(before), after_rounds=series(after))


def device_slug(name: str) -> str:
    """A GPU's name as it goes into result file names: its model, "NVIDIA H100 80GB HBM3" -> "h100"."""
    words = [re.sub(r"[^a-z0-9]+", "", w) for w in name.lower().replace("nvidia", " ").split()]
    return next((w for w in words if w), "cpu")


def _relative(doc_pairs: list[dict], frm: Path, to: Path) -> None:
    """Paths of the pairs' traces and snapshots, relative to ``frm``, made relative to ``to``."""
    for p in doc_pairs:
        for key in ("source",):
            if p.get(key):
                p[key] = os.path.relpath(frm / p[key], to)
        for sd in (p["before"], p["after"]):
            for key in ("trace", "snapshot"):
                if sd.get(key):
                    sd[key] = os.path.relpath(frm / sd[key], to)


def write(path: Path, pairs: list[dict], *, repo: Path, device: str, date_utc: str, source: str, versions: dict) -> None:
    """The manifest at ``path`` (inside ``repo``, the folder laid out as the repository), from
    pairs whose paths (and ``source``) are relative to ``repo``."""
    path = Path(path)
    for p in pairs:
        p.setdefault("device", device)
        p.setdefault("date_utc", date_utc)
        p.setdefault("source", source)
        p.setdefault("versions", versions)
    _relative(pairs, Path(repo).resolve(), path.parent.resolve())
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "device": device, "date": date_utc[:10], "note": f"measured by {source}", "pairs": pairs}
    path.write_text(json.dumps(doc, indent=1))


def load(path: Path) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} manifest")
    return doc


def merge(out: Path, inputs: Sequence[Path]) -> dict:
    """One manifest at ``out`` with every pair of ``inputs`` (paths rebased to ``out``'s folder)."""
    out = Path(out)
    pairs, seen, devices, dates = [], set(), set(), set()
    for p in inputs:
        doc = load(p)
        _relative(doc["pairs"], Path(p).resolve().parent, out.resolve().parent)
        devices.add(doc.get("device"))
        dates.add(doc.get("date"))
        for q in doc["pairs"]:
            if q["name"] in seen:
                raise ValueError(f"pair {q['name']} is in more than one input")
            seen.add(q["name"])
            pairs.append(q)
    one = lambda xs: next(iter(xs)) if len(xs) == 1 else "several (see each pair)"  # noqa: E731
    doc = {"format": FORMAT, "device": one(devices), "date": one(dates),
           "note": "merged from " + ", ".join(Path(p).name for p in inputs), "pairs": pairs}
    out.write_text(json.dumps(doc, indent=1))
    return doc


def show(doc: dict) -> list[str]:
    def est(e: dict | None, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
        return "-" if not e else f"{fmt.format(e['median'] * scale)} [{fmt.format(e['lo'] * scale)}, {fmt.format(e['hi'] * scale)}]"

    out = []
    for p in doc["pairs"]:
        m = p["measured"]
        out.append(f"{p['name']} ({p['expect']}; {p.get('device')} {p.get('date_utc')}): {p['before']['label']} -> "
                   f"{p['after']['label']}: step ratio {est(m['step_ratio'])}, saving {est(m['step_saving_ms'])} ms; "
                   f"reserved ratio {est(m['peak_reserved_ratio'])}; traces {p['before']['trace']} -> {p['after']['trace']}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "merge":
        doc = merge(Path(argv[1]), [Path(a) for a in argv[2:]])
        print(f"{argv[1]}: {len(doc['pairs'])} pairs")
        return 0
    if len(argv) == 2 and argv[0] == "show":
        print("\n".join(show(load(Path(argv[1])))))
        return 0
    if argv in (["-h"], ["--help"]):
        print(__doc__.split("\n\n")[1])
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
