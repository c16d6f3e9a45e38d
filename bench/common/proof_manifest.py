"""The explain proof's manifest: for each fix the runtime can run on a GPU, the "before" trace
and what the same GPU run measured for the fix off and on (issue 9, section 4).

    python -m bench.common.proof_manifest merge OUT.json IN.json[:PREFIX] [...]   # one manifest from several
    python -m bench.common.proof_manifest torchrec OUT.json FIX BEFORE_DIR AFTER_DIR [FIX BEFORE_DIR AFTER_DIR ...]
    python -m bench.common.proof_manifest show MANIFEST.json                      # the pairs, one line each

``merge``: ``:PREFIX`` puts ``PREFIX/`` before the names of that input's pairs (two runs of one
benchmark, on 1 and 2 GPUs, name their pairs alike). ``torchrec``: pairs from TorchRec's own
benchmark as ``gpu/torchrec_bench.py`` runs it, one folder per run (``timing-<name>-rank0.json``
and ``trace-<name>-rank0.json.gz``): each side's untraced passes (but the first, a warm-up, as
TorchRec leaves it out) divided by the pass's batches, the measured saving the difference of
the two medians with a 95 % bootstrap interval (the runs are not paired: each side resampled on
its own; ``unpaired``).

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


def unpaired(before: Sequence[float], after: Sequence[float], *, resamples: int = 10_000,
             seed: int = 0) -> dict:
    """Two series measured apart (not in the same rounds): ``saving`` before - after, the
    difference of their medians, and ``ratio`` after / before, each with a 95 % percentile
    bootstrap interval, each side resampled on its own."""
    import numpy as np

    b, a = np.asarray(before, float), np.asarray(after, float)
    rng = np.random.default_rng(seed)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    ma = np.median(a[rng.integers(0, a.size, (resamples, a.size))], axis=1)
    n = int(min(b.size, a.size))

    def est(point: float, boot: np.ndarray) -> dict:
        return {"median": float(point), "lo": float(np.percentile(boot, 2.5)),
                "hi": float(np.percentile(boot, 97.5)), "n": n}

    return {"saving": est(np.median(b) - np.median(a), mb - ma),
            "ratio": est(np.median(a) / np.median(b), ma / mb)}


def torchrec_side(folder: Path) -> tuple[dict, list[float], dict]:
    """(side, untraced ms per batch of each pass, the timing file) of one TorchRec run."""
    folder = Path(folder)
    timing = sorted(folder.glob("timing-*-rank0.json"))
    trace = sorted(folder.glob("trace-*-rank0.json.gz"))
    if not timing or not trace:
        raise ValueError(f"{folder}: no timing-*-rank0.json and trace-*-rank0.json.gz")
    doc = json.loads(timing[0].read_text())
    nb = int(doc.get("num_batches") or 1)
    un = [i["gpu_ms"] for i in doc["iterations"] if not i["traced"]]
    un = un[1:] if len(un) >= 5 else un
    per = [x / nb for x in un]
    traced = [i["gpu_ms"] / nb for i in doc["iterations"] if i["traced"]]
    sd = side(doc.get("name", folder.name), trace=str(trace[0]), snapshot=None, step_ms=per,
              reserved=[], traced_step_ms=traced)
    return sd, per, doc


def torchrec_pairs(out: Path, specs: Sequence[tuple[str, str, str]]) -> dict:
    """The manifest at ``out`` of TorchRec pairs ``(fix, before folder, after folder)``."""
    out = Path(out)
    pairs, devices, dates = [], set(), set()
    for fix, bdir, adir in specs:
        if fix not in FIXES:
            raise ValueError(f"fix must be one of {FIXES}, got {fix!r}")
        before, bper, bdoc = torchrec_side(Path(bdir))
        after, aper, _ = torchrec_side(Path(adir))
        readme = (Path(bdir) / "README.md").read_text() if (Path(bdir) / "README.md").exists() else ""
        m = re.search(r"on (\d{4}-\d\d-\d\dT[0-9:]+\+00:00), ([^,]+),", readme)
        date_utc, device = (m.group(1), m.group(2)) if m else ("", "")
        devices.add(device)
        dates.add(date_utc[:10])
        est = unpaired(bper, aper)
        pairs.append({
            "name": f"{fix}/torchrec/{Path(bdir).name}->{Path(adir).name}", "fix": fix,
            "expect": "time", "context": {"bench": "torchrec", "before": Path(bdir).name,
                                          "after": Path(adir).name},
            "device": device, "date_utc": date_utc,
            "source": ", ".join(os.path.relpath(timing_name(d).resolve(), out.resolve().parent)
                                for d in (bdir, adir)),
            "versions": {"torchrec": bdoc.get("torchrec_version"),
                         "fbgemm_gpu": bdoc.get("fbgemm_gpu_version")},
            "before": before, "after": after,
            "measured": {"step_ratio": est["ratio"], "step_saving_ms": est["saving"],
                         "peak_reserved_ratio": None, "peak_reserved_saving_bytes": None}})
    for p in pairs:
        for sd in (p["before"], p["after"]):
            sd["trace"] = os.path.relpath(Path(sd["trace"]).resolve(), out.resolve().parent)
    one = lambda xs: next(iter(xs)) if len(xs) == 1 else "several (see each pair)"  # noqa: E731
    doc = {"format": FORMAT, "device": one(devices), "date": one(dates),
           "note": "TorchRec's own benchmark (gpu/torchrec_bench.py): untraced passes per batch",
           "pairs": pairs}
    out.write_text(json.dumps(doc, indent=1))
    return doc


def timing_name(folder: str) -> Path:
    """The timing file of a TorchRec run's folder (the folder itself without one)."""
    t = sorted(Path(folder).glob("timing-*-rank0.json"))
    return t[0] if t else Path(folder)


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


def merge(out: Path, inputs: Sequence[Path | str]) -> dict:
    """One manifest at ``out`` with every pair of ``inputs`` (paths rebased to ``out``'s folder;
    an input ``PATH:PREFIX`` puts ``PREFIX/`` before its pairs' names)."""
    out = Path(out)
    pairs, seen, devices, dates = [], set(), set(), set()
    for p in inputs:
        p, _, prefix = str(p).partition(":")
        doc = load(Path(p))
        _relative(doc["pairs"], Path(p).resolve().parent, out.resolve().parent)
        devices.add(doc.get("device"))
        dates.add(doc.get("date"))
        for q in doc["pairs"]:
            if prefix:
                q["name"] = f"{prefix}/{q['name']}"
            if q["name"] in seen:
                raise ValueError(f"pair {q['name']} is in more than one input")
            seen.add(q["name"])
            pairs.append(q)
    one = lambda xs: next(iter(xs)) if len(xs) == 1 else "several (see each pair)"  # noqa: E731
    doc = {"format": FORMAT, "device": one(devices), "date": one(dates),
           "note": "merged from " + ", ".join(Path(str(p).partition(":")[0]).name for p in inputs),
           "pairs": pairs}
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
    if len(argv) >= 5 and argv[0] == "torchrec" and (len(argv) - 2) % 3 == 0:
        specs = [tuple(argv[i:i + 3]) for i in range(2, len(argv), 3)]
        doc = torchrec_pairs(Path(argv[1]), specs)
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
