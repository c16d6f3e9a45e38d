"""What a run wrote beside its trace that tells the untraced step time.

``untraced_step(trace_path, rank)`` reads, from the trace's folder:

- the runtime's ``metrics.json``: ``trace_run.step_ms`` (the untraced steps of the process that
  wrote the trace, CUDA events; their median), else for a job of several ranks
  ``ranks[rank].step_ms_p50`` (the timed steps before the profiled ones), else ``step_ms_p50``;
- TorchRec's benchmark as ``gpu/torchrec_bench.py`` runs it: ``timing-<name>-rank<r>.json``
  beside ``trace-<name>-rank<r>.json.gz``: the median ``gpu_ms`` of its untraced iterations (but
  the first, a warm-up, when there are 5 or more, as TorchRec reports them; a
  pass of the pipeline over ``num_batches`` batches: what a trace's ``ProfilerStep`` spans when
  the benchmark records one per pass; ``meta["batches_per_pass"]`` says how many).

It returns ``(ms, source, meta)`` (``source`` names the file and key; ``meta``: ``world_size``,
``preset``, ``variant``, ``option``: the profiler option set where the run says it,
``batches_per_pass``: 1 except for TorchRec's passes), or None. ``per_step(found, steps_source)``
turns it into the untraced time of one of the trace's steps: a pass divided by its batches where
the trace's steps are batches (no ``ProfilerStep``: steps from optimizer boundaries).
Nothing the user gave is written; a file that cannot be read is ignored (None).
"""

from __future__ import annotations

import json
import os
import re
import statistics


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _median(xs) -> float | None:
    try:
        vals = [float(x) for x in xs if x is not None and float(x) > 0]
    except (TypeError, ValueError):
        return None
    return statistics.median(vals) if vals else None


def untraced_step(trace_path: str, rank: int = 0) -> tuple[float, str, dict] | None:
    """The untraced step (ms) the run that wrote ``trace_path`` measured (module docstring)."""
    folder = os.path.dirname(os.path.abspath(trace_path))
    base = os.path.basename(trace_path)
    m = re.match(r"^trace-(?P<name>.+)-rank(?P<r>\d+)\.json(\.gz)?$", base)
    if m:
        doc = _read(os.path.join(folder, f"timing-{m.group('name')}-rank{m.group('r')}.json"))
        if doc is not None:
            its = [i.get("gpu_ms") for i in doc.get("iterations") or []
                   if isinstance(i, dict) and not i.get("traced")]
            # the first pass warms up (TorchRec drops it too when it ran 5 or more)
            ms = _median(its[1:] if len(its) >= 5 else its)
            if ms is None:
                ms = _median(doc.get("torchrec_gpu_elapsed_ms") or [])
            if ms is not None:
                nb = doc.get("num_batches")
                nb = int(nb) if isinstance(nb, (int, float)) and nb >= 1 else 1
                return ms, f"timing-{m.group('name')}-rank{m.group('r')}.json (untraced passes)", {
                    "world_size": doc.get("world_size") or 1, "preset": "torchrec",
                    "variant": m.group("name"), "option": "torchrec", "batches_per_pass": nb}
    doc = _read(os.path.join(folder, "metrics.json"))
    if doc is None:
        return None
    cfg = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    meta = {"world_size": doc.get("world_size") or 1, "preset": doc.get("preset"),
            "variant": doc.get("variant") or doc.get("pipeline"),
            "option": doc.get("option") or _option(cfg.get("profiler"), folder),
            "batches_per_pass": 1}
    run = doc.get("trace_run") if isinstance(doc.get("trace_run"), dict) else None
    if run:
        per_rank = run.get("ranks")
        if isinstance(per_rank, list) and rank < len(per_rank) and isinstance(per_rank[rank], dict):
            ms = _median(per_rank[rank].get("step_ms") or [])
            if ms is not None:
                return ms, f"metrics.json (trace_run.ranks[{rank}].step_ms)", meta
        ms = _median(run.get("step_ms") or [])
        if ms is not None:
            return ms, "metrics.json (trace_run.step_ms: the same process, untraced)", meta
    ranks = doc.get("ranks")
    if isinstance(ranks, list):
        for r in ranks:
            if isinstance(r, dict) and r.get("rank") == rank:
                ms = r.get("step_ms_p50") or _median(r.get("step_ms") or [])
                if ms:
                    return float(ms), f"metrics.json (ranks[{rank}].step_ms_p50)", meta
    ms = doc.get("step_ms_p50")
    if isinstance(ms, (int, float)) and ms > 0:
        return float(ms), "metrics.json (step_ms_p50)", meta
    return None


def per_step(found: tuple[float, str, dict], steps_source: str) -> tuple[float, str]:
    """``(ms, source)`` of one of the trace's steps from ``untraced_step``'s answer: a pass of
    several batches divided by them when the trace's steps are not ``ProfilerStep`` spans
    (``tracekit.steps``: then each step is one batch, from the optimizer's boundaries)."""
    ms, source, meta = found
    nb = int(meta.get("batches_per_pass") or 1)
    if nb > 1 and steps_source != "ProfilerStep":
        return ms / nb, f"{source}: a pass of {nb} batches / {nb} (the trace's steps are batches)"
    return ms, source


def _option(profiler, folder: str) -> str:
    """The profiler option set's name: the folder's under ``profiler_<N>gpu``, else "default"."""
    parts = folder.replace("\\", "/").split("/")
    if any(p.startswith("profiler_") for p in parts):
        return parts[-1]
    return "default"
