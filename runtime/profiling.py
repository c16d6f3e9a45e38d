"""The runtime's Kineto profiler: one set of settings for every trace the runtime writes.

Every trace carries ``[memory]`` events (allocator state at each allocation and free) when
asked, and, where this torch has the option, ``cuda_sync`` events: Kineto's record of each
stream wait, event synchronize and stream/device synchronize (``wait_on_stream``,
``wait_on_cuda_event_record_corr_id``), which tracekit's dependency graph reads instead of
inferring cross-stream waits. The option is ``torch.profiler._ExperimentalConfig(
enable_cuda_sync_events=True)``, an experimental API: where it is missing or refused, the
profiler runs without it and :func:`cuda_sync_events` says why.

What the profiler records is a :class:`ProfilerOptions` (the runtime's default: ``[memory]`` and
``cuda_sync`` events, no shapes, no stacks); :data:`PROFILER_OPTIONS` names the sets the
profiler-overhead benchmark compares (each option toggled from the default, and the set
TorchRec's own benchmark uses).

CUPTI is torn down at the end of every trace (``TEARDOWN_CUPTI=1``, :func:`cupti_teardown`):
Kineto leaves it attached otherwise, and every CUDA call after the first trace of a process
pays its callbacks. In ``bench.pipelines`` (torch 2.11, CUDA 13) the runs after a process's
first trace ran 5-100 % slower untraced on the host-bound presets than the rounds before it
(the second trace run of a preset, the next preset's rounds); bench/NOTES-explain.md, "The trace
runs after the first".
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
from dataclasses import dataclass
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


TEARDOWN_ENV = "TEARDOWN_CUPTI"
"""Kineto's switch: ``"1"`` calls ``cuptiFinalize`` when a trace ends (read at each teardown)."""


def cupti_teardown() -> str:
    """Sets ``TEARDOWN_CUPTI=1`` unless the caller set it (``0`` keeps CUPTI attached, as Kineto
    does by default and as CUDA graphs under CUPTI need); returns the value in force."""
    return os.environ.setdefault(TEARDOWN_ENV, "1")


def cuda_sync_events() -> str:
    """``"on"``, or ``"off: <why>"``: whether this torch's profiler writes cuda_sync events."""
    return _experimental_config()[1]


@dataclass(frozen=True)
class ProfilerOptions:
    """What the Kineto profiler records besides CPU ops, runtime calls and GPU activities."""

    memory: bool = True
    """``profile_memory``: a ``[memory]`` event at every allocation and free."""
    cuda_sync: bool = True
    """cuda_sync events (stream waits, event and stream synchronizes), where this torch has them."""
    record_shapes: bool = False
    """``record_shapes``: the input shapes (and types, concrete inputs) of every op."""
    with_stack: bool = False
    """``with_stack``: the Python stack of every op (python_function events)."""
    with_flops: bool = False
    """``with_flops``: estimated FLOPs of matmuls and convolutions (needs shapes: TorchRec's set)."""
    with_modules: bool = False
    """``with_modules``: the nn.Module hierarchy of every op (TorchRec's set)."""


PROFILER_OPTIONS: dict[str, ProfilerOptions] = {
    "default": ProfilerOptions(),
    "no_memory": ProfilerOptions(memory=False),
    "no_sync": ProfilerOptions(cuda_sync=False),
    "bare": ProfilerOptions(memory=False, cuda_sync=False),
    "shapes": ProfilerOptions(record_shapes=True),
    "stack": ProfilerOptions(with_stack=True),
    # torchrec.distributed.benchmark.base._run_benchmark_core (TorchRec 1.6.1): record_shapes,
    # profile_memory, with_flops, with_modules, with_stack only with --export_stacks; no cuda_sync
    "torchrec": ProfilerOptions(cuda_sync=False, record_shapes=True, with_flops=True, with_modules=True),
}
"""Named option sets: the runtime's default, each option toggled from it, and TorchRec's."""


def make_profiler(
    device: torch.device,
    *,
    schedule: Callable[[int], Any] | None,
    on_trace_ready: Callable[[profile], None] | None,
    memory: bool = True,
    options: ProfilerOptions | None = None,
) -> profile:
    """A ``torch.profiler.profile`` with the runtime's settings: CPU (+ CUDA on a GPU)
    activities and ``options`` (default :class:`ProfilerOptions`: ``[memory]`` events (unless
    ``memory`` is False) and cuda_sync events where available, no shapes or stacks: they cost
    host time on steps of thousands of ops). CUPTI is torn down when the trace ends
    (:func:`cupti_teardown`), so that the steps after it run as untraced ones do."""
    o = options or ProfilerOptions(memory=memory)
    cupti_teardown()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(
        activities=acts,
        schedule=schedule,
        on_trace_ready=on_trace_ready,
        profile_memory=o.memory,
        record_shapes=o.record_shapes,
        with_stack=o.with_stack,
        with_flops=o.with_flops,
        with_modules=o.with_modules,
        experimental_config=_experimental_config()[0] if o.cuda_sync else None,
    )


class TraceHandlerError(RuntimeError):
    """The named trace handler failed on the trace (a threshold it checks failed): the run
    stops with its message."""


def trace_handler(spec: str | None, out: str | Path, rank: int, *, check_max: tuple[str, ...] = (),
                  check_min: tuple[str, ...] = ()) -> Callable[[profile], None]:
    """The profiler's ``on_trace_ready``: ``spec`` None writes the trace to
    ``<out>/trace_rank<rank>.json.gz``; ``"module:factory"`` imports ``factory`` and calls it as
    ``factory(out, file_name="trace_rank{rank}.json.gz", check_max=..., check_min=...)`` (the
    signature of ``tracekit.on_trace_ready``, which also reads the trace and says in the log what
    bounds the steps). The runtime does not import tracekit: the caller names the handler
    (``tracekit run --analyze``)."""
    if spec is None:
        if check_max or check_min:
            raise ValueError("check thresholds need a trace handler that evaluates them")
        path = str(Path(out) / f"trace_rank{rank}.json.gz")
        return lambda p: p.export_chrome_trace(path)
    module, _, name = spec.partition(":")
    factory = getattr(importlib.import_module(module), name)
    handler = factory(str(out), file_name="trace_rank{rank}.json.gz", check_max=tuple(check_max),
                      check_min=tuple(check_min))

    def run(p: profile) -> None:
        try:
            handler(p)
        except Exception as e:  # the handler is the caller's: its failure is the run's, in one line
            raise TraceHandlerError(f"{spec}: {e}") from e

    return run


def trace_counts(path: str | Path) -> dict:
    """What a trace the profiler wrote holds, to check that its settings took effect: events in
    all, ``cuda_sync`` events (by name: Stream Sync, Event Sync, Stream Wait Event, ...),
    ``[memory]`` events, GPU kernels."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    sync: dict[str, int] = {}
    cats: dict[str, int] = {}
    for e in events:
        cat = str(e.get("cat", "?"))
        cats[cat] = cats.get(cat, 0) + 1
        if cat == "cuda_sync":
            sync[e.get("name", "?")] = sync.get(e.get("name", "?"), 0) + 1
    return {
        "events": len(events),
        "cuda_sync": sum(sync.values()),
        "cuda_sync_by_name": sync,
        "memory": sum(1 for e in events if e.get("name") == "[memory]"),
        "kernels": sum(1 for e in events if e.get("cat") == "kernel"),
        "by_cat": cats,
        "bytes": path.stat().st_size,
    }
