"""What the page calls things: a trace by its variant, a GPU stream by its role, a CPU thread by
its name. Pure functions of what tracekit computed (phases of the GPU activities, the
trace's thread names) and of the run's ``metrics.json`` beside a trace, which the reference
runtime writes (``tracekit run``): plain JSON, read here, never the runtime's code.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

PIPELINES = {"base": "Base", "sparse": "SparseDist", "fused": "FusedSparseDist", "semi": "SemiSync"}
"""``metrics.json``'s ``pipeline`` -> the name TorchRec gives the pipeline (TrainPipeline<name>)."""

OPTIONS = {
    ("fused", "lookup_stream", "new"): "new lookup stream",
    ("fused", "lookup_stream", "current"): "lookup on the main stream",
    ("fused", "lookup_placement", "step_start"): "lookup at step start",
    ("fused", "lookup_placement", "after_data_dist"): "lookup after data dist",
    ("fused", "emb_backward", "separate"): "separate embedding backward",
    ("semi", "semi_lookup_placement", "after_forward"): "lookup after forward",
}
"""A pipeline's non-default options in ``metrics.json``'s ``config`` (the runtime's TrainConfig
fields: pipeline, field, value) -> the words the variant's name carries; the defaults (lookup
stream ``data_dist``, placements ``before_optimizer`` and ``after_backward``, FusedSparseDist's
embedding backward ``with_dense``) and a config without the field add none (but SemiSync's and
FusedSparseDist's: runs from before those options placed the lookup after the forward, and ran
the embedding backward in a separate autograd call)."""


@dataclass(frozen=True)
class Variant:
    """What a source is, as far as its files say."""

    name: str
    """Short name for legends and columns: the pipeline and GPU count from ``metrics.json``
    (``FusedSparseDist · 2 GPUs``), else the source's short label."""
    group: str
    """The run it belongs to (sources of one group are compared by default): the folder that
    holds the run's variant folders, else the file's folder plus the first two ``_``-separated
    words of its name (``issue5_delta_*``)."""
    pipeline: str | None = None
    """``metrics.json``'s ``pipeline`` (``base``/``sparse``/``fused``/``semi``), if any."""
    preset: str | None = None
    """``metrics.json``'s ``preset`` (the model and batch the run used: ``multitask_b32k``), if
    any: what tells apart two runs of one pipeline (``distinct``)."""


def _metrics(path: str) -> dict | None:
    """``metrics.json`` of the run a trace file or per-rank directory belongs to, if any."""
    d = path if os.path.isdir(path) else os.path.dirname(path)
    try:
        with open(os.path.join(d, "metrics.json"), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def variant(path: str, label: str) -> Variant:
    """The variant name and run group of the source at ``path`` (shown as ``label`` otherwise)."""
    path = os.path.abspath(path)
    m = _metrics(path)
    run_dir = path if os.path.isdir(path) else os.path.dirname(path)
    if m is not None and isinstance(m.get("pipeline"), str):
        pipe = m["pipeline"]
        name = PIPELINES.get(pipe, pipe)
        cfg = dict(m["config"]) if isinstance(m.get("config"), dict) else {}
        if pipe == "semi":  # runs from before the option had TorchRec's placement
            cfg.setdefault("semi_lookup_placement", "after_forward")
        if pipe == "fused":  # runs from before the option cut the backward in two autograd calls
            cfg.setdefault("emb_backward", "separate")
        options = [words for (p, k, v), words in OPTIONS.items() if p == pipe and cfg.get(k) == v]
        if pipe == "semi" and isinstance(cfg.get("start_batch"), int) and cfg["start_batch"] > 0:
            options.append(f"exact until batch {cfg['start_batch']}")
        if cfg.get("inplace_copy_batch_to_gpu"):
            options.append("in-place copy")
        if options:
            name += f" ({', '.join(options)})"
        ws = m.get("world_size")
        if isinstance(ws, int) and ws > 0:
            name += f" · {ws} GPU" + ("s" if ws > 1 else "")
        preset = m.get("preset") if isinstance(m.get("preset"), str) and m.get("preset") else None
        return Variant(name, os.path.dirname(run_dir), pipe, preset)
    stem = os.path.basename(path).split(".")[0]
    return Variant(label, os.path.join(run_dir, "_".join(stem.split("_")[:2])))


def distinct(names: list[str], variants: list[Variant | None], labels: list[str]) -> list[str]:
    """``names`` made unique, so that no two traces of a page read alike: a name two traces
    share gets its run's preset (``FusedSparseDist · 1 GPU · multitask_b4k``) where that tells
    them apart, else its label (``… · multitask/fused/trace_rank0``)."""
    out = list(names)
    for attempt in ("preset", "label"):
        seen: dict[str, list[int]] = {}
        for i, n in enumerate(out):
            seen.setdefault(n, []).append(i)
        for same in seen.values():
            if len(same) < 2:
                continue
            for i in same:
                v = variants[i]
                extra = (v.preset if v is not None else None) if attempt == "preset" else labels[i]
                if extra and not out[i].endswith(f" · {extra}"):
                    out[i] = f"{out[i]} · {extra}"
    return out


# ---- GPU streams by role -----------------------------------------------------------------------

MAIN_PHASES = ("forward", "backward", "optimizer", "zero_grad")
"""Phases of the dense model: the stream that runs most of them is the main stream."""


def stream_roles(busy: dict[tuple[int, int], dict[str, float]], copy_busy: dict[tuple[int, int], float]) -> dict[tuple[int, int], str]:
    """A role per (device, stream) from the busy time of each phase on it (``busy``) and of its
    memcpy/memset activities (``copy_busy``): ``main`` (most dense forward/backward/optimizer
    time on its device), ``NCCL`` (mostly communication kernels), ``memcpy`` (mostly the batch
    copy or copies), ``data-dist`` (mostly input distribution), ``lookup`` (mostly embedding
    lookup and its backward), ``compute`` (other dense work), else ``other``."""
    roles: dict[tuple[int, int], str] = {}
    main_by_dev: dict[int, tuple[float, tuple[int, int]]] = {}
    for key, phases in busy.items():
        dense = sum(phases.get(p, 0.0) for p in MAIN_PHASES)
        if dense > 0 and dense > main_by_dev.get(key[0], (0.0, key))[0]:
            main_by_dev[key[0]] = (dense, key)
    mains = {k for _, k in main_by_dev.values()}
    for key, phases in busy.items():
        total = sum(phases.values()) or 1.0
        share = lambda *names: sum(phases.get(n, 0.0) for n in names) / total  # noqa: E731
        if key in mains:
            role = "main"
        elif share("communication") >= 0.5:
            role = "NCCL"
        elif share("batch_copy") >= 0.5 or copy_busy.get(key, 0.0) / total >= 0.5:
            role = "memcpy"
        elif share("input_dist") >= 0.5:
            role = "data-dist"
        elif share("lookup", "emb_backward") >= 0.5:
            role = "lookup" if share("input_dist") < 0.1 else "data-dist + lookup"
        elif share(*MAIN_PHASES) >= 0.5:
            role = "compute"
        else:
            role = "other"
        roles[key] = role
    return roles


def stream_label(device: int, stream: int, role: str | None, n_devices: int) -> str:
    """``main · stream 7`` (``GPU 1 · main · stream 7`` when the trace has several GPUs)."""
    text = f"{role} · stream {stream}" if role else f"stream {stream}"
    return text if n_devices <= 1 else f"GPU {device} · {text}"


# ---- CPU threads -------------------------------------------------------------------------------

def thread_label(tid: int, name: str | None, is_main: bool) -> str:
    """A CPU thread as the page names it: Kineto's thread name without its boilerplate
    (``thread 745 (pt_autograd_0)`` -> ``pt_autograd_0 745``), with ``main`` for the thread
    that runs the steps (``main python3 629``); ``thread 745`` without a name."""
    base = f"thread {tid}"
    if name:
        n = name.strip()
        if n.startswith("thread ") and "(" in n and n.endswith(")"):
            n = n[n.index("(") + 1:-1]
        base = n if str(tid) in n else f"{n} {tid}"
    return f"main {base}" if is_main else base
