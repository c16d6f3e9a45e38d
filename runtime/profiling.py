"""The runtime's Kineto profiler: one set of settings for every trace the runtime writes.

Every trace carries ``[memory]`` events (allocator state at each allocation and free) when
asked, and, where this torch has the option, ``cuda_sync`` events: Kineto's record of each
stream wait, event synchronize and stream/device synchronize (``wait_on_stream``,
``wait_on_cuda_event_record_corr_id``), which tracekit's dependency graph reads instead of
inferring cross-stream waits. The option is ``torch.profiler._ExperimentalConfig(
enable_cuda_sync_events=True)``, an experimental API: where it is missing or refused, the
profiler runs without it and :func:`cuda_sync_events` says why.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile


@lru_cache(maxsize=1)
def _experimental_config() -> tuple[Any, str]:
    """(config or None, a word on it): the experimental config with cuda_sync events on."""
    make = getattr(torch.profiler, "_ExperimentalConfig", None)
    if make is None:
        return None, f"off: torch {torch.__version__} has no torch.profiler._ExperimentalConfig"
    try:
        return make(enable_cuda_sync_events=True), "on"
    except (TypeError, ValueError, RuntimeError) as e:  # an older torch without the keyword
        return None, f"off: torch {torch.__version__} refused enable_cuda_sync_events ({e})"


def cuda_sync_events() -> str:
    """``"on"``, or ``"off: <why>"``: whether this torch's profiler writes cuda_sync events."""
    return _experimental_config()[1]


def make_profiler(
    device: torch.device,
    *,
    schedule: Callable[[int], Any] | None,
    on_trace_ready: Callable[[profile], None] | None,
    memory: bool = True,
) -> profile:
    """A ``torch.profiler.profile`` with the runtime's settings: CPU (+ CUDA on a GPU)
    activities, ``[memory]`` events when ``memory``, cuda_sync events where available, no
    shapes or stacks (they cost host time on steps of thousands of ops)."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(
        activities=acts,
        schedule=schedule,
        on_trace_ready=on_trace_ready,
        profile_memory=memory,
        record_shapes=False,
        with_stack=False,
        experimental_config=_experimental_config()[0],
    )


def trace_counts(path: str | Path) -> dict:
    """What a trace the profiler wrote holds, to check that its settings took effect: events in
    all, ``cuda_sync`` events (by name: Stream Sync, Event Sync, Stream Wait Event, ...),
    ``[memory]`` events, GPU kernels."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    sync: dict[str, int] = {}
    for e in events:
        if e.get("cat") == "cuda_sync":
            sync[e.get("name", "?")] = sync.get(e.get("name", "?"), 0) + 1
    return {
        "events": len(events),
        "cuda_sync": sum(sync.values()),
        "cuda_sync_by_name": sync,
        "memory": sum(1 for e in events if e.get("name") == "[memory]"),
        "kernels": sum(1 for e in events if e.get("cat") == "kernel"),
    }
