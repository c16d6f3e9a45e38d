"""tracekit where the trace is made: a ``torch.profiler`` handler that writes the trace, reads it
and says in the training log what bounds the steps, and the profiler settings tracekit reads best.

    import torch, tracekit

    with torch.profiler.profile(**tracekit.profiler_kwargs(),
                                schedule=torch.profiler.schedule(wait=5, warmup=2, active=5),
                                on_trace_ready=tracekit.on_trace_ready("traces", check_max=["stall_total=5ms"])) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

``on_trace_ready(dir)`` is a drop-in for ``torch.profiler.tensorboard_trace_handler(dir)``: each
time the profiler hands over a trace it writes it gzipped as ``<dir>/trace-rank<R>.json.gz``
(``trace-<name>-rank<R>.json.gz`` with ``name``; TorchRec's benchmark writes ``trace-<name>.json``;
a later cycle of the same rank adds ``-step<N>``), where ``R`` is the process's
``torch.distributed`` rank (0 without a process group), so that a job's directory is what
``tracekit analyze DIR`` reads as one job. Then it analyses the file (tracekit's own sections,
not HTA's) and writes a few lines to ``log`` (default: ``sys.stderr``): the steps, the bound
and the top finding of ``tracekit explain`` with its predicted saving, and any other finding of
the report (the embedding bandwidth's). With thresholds (``check_max`` / ``check_min``:
``tracekit check``'s ``--max`` / ``--min`` specs) a failed one raises ``CheckFailed`` out of
``prof.step()``: the job stops there (``fail=False``: the lines say so and the job goes on).

``profiler_kwargs()`` returns the ``torch.profiler.profile`` arguments tracekit recommends: CPU
and (where there is a GPU) CUDA activities, ``record_shapes`` (the embedding bandwidth reads the
ops' shapes), ``profile_memory`` (the allocator section), and Kineto's ``cuda_sync`` events where
this torch has the option (``_ExperimentalConfig(enable_cuda_sync_events=True)``; explain reads
them instead of inferring cross-stream waits). Stacks stay off (they cost host time per op).

torch is imported only when these are called: it stays out of tracekit's required dependencies.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Callable

from tracekit.errors import TracekitError


class CheckFailed(TracekitError):
    """A threshold given to ``on_trace_ready`` failed on the trace just written."""

    exit_code = 1


def cuda_sync_config() -> tuple[Any, str]:
    """(``torch.profiler._ExperimentalConfig`` with cuda_sync events on, or None; "on" or
    "off: <why>")."""
    import torch

    make = getattr(torch.profiler, "_ExperimentalConfig", None)
    if make is None:
        return None, f"off: torch {torch.__version__} has no torch.profiler._ExperimentalConfig"
    try:
        return make(enable_cuda_sync_events=True), "on"
    except (TypeError, ValueError, RuntimeError) as e:  # an older torch without the keyword
        return None, f"off: torch {torch.__version__} refused enable_cuda_sync_events ({e})"


def profiler_kwargs(*, shapes: bool = True, memory: bool = True, cuda_sync: bool = True,
                    cuda: bool | None = None) -> dict:
    """The ``torch.profiler.profile`` keyword arguments tracekit recommends (see the module
    docstring); each can be switched off. ``cuda``: profile CUDA activity (default: when
    ``torch.cuda.is_available()``)."""
    import torch
    from torch.profiler import ProfilerActivity

    if cuda is None:
        cuda = torch.cuda.is_available()
    kw: dict = {
        "activities": [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
        "record_shapes": shapes,
        "profile_memory": memory,
        "with_stack": False,
    }
    if cuda_sync:
        config, _ = cuda_sync_config()
        if config is not None:
            kw["experimental_config"] = config
    return kw


def _rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except (ImportError, RuntimeError):
        pass
    return int(os.environ.get("RANK", "0") or 0)


def _ms(ns: float | None) -> str:
    return "–" if ns is None else f"{ns / 1e6:.3f} ms"


def _value(key: str, v: float) -> str:
    """A headline figure in its unit."""
    if key.endswith("_ns"):
        return _ms(v)
    if key.endswith("_bytes"):
        return f"{v / 2**30:.3f} GiB"
    if key.endswith(("_ratio", "_fraction", "_share")):
        return f"{100 * v:.1f} %"
    return f"{v:g}"


def summary_lines(rank: dict, *, top: int = 1) -> list[str]:
    """What the training log gets from one rank's report object (``tracekit.report.to_dict``):
    steps, bound, the top ``top`` explain findings with their predicted saving, the other
    sections' findings."""
    h = rank.get("headline") or {}
    out = []
    steps = h.get("steps") or 0
    line = f"{steps} steps"
    if h.get("step_gpu_p50_ns") is not None:
        line += f", step P50 {_ms(h.get('step_gpu_p50_ns'))} on the GPU"
    if h.get("step_cpu_p50_ns") is not None:
        line += f", {_ms(h.get('step_cpu_p50_ns'))} on the CPU"
    out.append(line)
    e = rank.get("explain") or {}
    if e.get("bound"):
        share = e.get("bound_share")
        out.append(f"bound: {e['bound']}" + (f" ({100 * share:.0f} % of the critical path)"
                                             if share is not None else ""))
    findings = [f for f in (e.get("findings") or []) if f.get("kind", "time") == "time"]
    findings.sort(key=lambda f: -(f.get("saving_ns") or 0))
    for f in findings[:top]:
        save = f.get("saving_ns")
        frac = f.get("saving_fraction")
        txt = f"top fix: {f.get('fix') or f.get('title')}"
        if save is not None:
            txt += f" (predicted saving {_ms(save)} per step"
            txt += f", {100 * frac:.1f} %)" if frac is not None else ")"
        out.append(txt)
    if not findings and e:
        out.append("no fix found to predict a saving for")
    for f in (rank.get("embedding_bw") or {}).get("findings") or []:
        out.append(f["title"])
    for w in rank.get("warnings") or []:
        out.append(f"warning: {w}")
    return out


def on_trace_ready(
    dir_name: str | os.PathLike,
    name: str | None = None,
    *,
    check_max: list[str] | tuple[str, ...] = (),
    check_min: list[str] | tuple[str, ...] = (),
    fail: bool = True,
    analyze: bool = True,
    log: IO[str] | None = None,
    file_name: str | None = None,
    rules_path: str | os.PathLike | None = None,
) -> Callable[[Any], None]:
    """A ``torch.profiler.profile(on_trace_ready=...)`` handler (see the module docstring).

    ``name``: a label in the file name; ``file_name``: the whole name instead, with ``{rank}``
    (and ``{name}``) filled in, e.g. ``"trace_rank{rank}.json.gz"``; it must end ``.json.gz``.
    ``check_max`` / ``check_min``: thresholds (``"stall_total=5ms"``, ``"comm_overlap_ratio=80%"``),
    parsed now: a bad one raises ``ThresholdError`` before the training starts. ``fail``: raise
    ``CheckFailed`` when one fails (else only say so). ``analyze=False``: write the trace only.
    ``log``: where the lines go (default ``sys.stderr``); ``rules_path``: a phase-rules file.
    """
    from tracekit import checks

    thresholds = ([checks.parse(s, upper=True) for s in check_max]
                  + [checks.parse(s, upper=False) for s in check_min])
    if file_name is not None and not file_name.endswith(".json.gz"):
        raise ValueError(f"file_name {file_name!r} must end .json.gz (the trace is gzipped)")
    directory = os.fspath(dir_name)
    written: set[str] = set()

    def handler(prof) -> None:
        out = log if log is not None else sys.stderr
        rank = _rank()
        if file_name is not None:
            base = file_name.format(rank=rank, name=name or "trace")
        else:
            base = f"trace-{name}-rank{rank}.json.gz" if name else f"trace-rank{rank}.json.gz"
        path = os.path.join(directory, base)
        if path in written:  # a later cycle of the same profiler: keep the earlier file
            path = path[: -len(".json.gz")] + f"-step{prof.step_num}.json.gz"
        os.makedirs(directory, exist_ok=True)
        prof.export_chrome_trace(path)  # torch gzips a name ending .gz
        written.add(path)
        print(f"[tracekit] wrote {path}", file=out, flush=True)
        if not analyze and not thresholds:
            return
        from tracekit.api import report_for_path

        report = report_for_path(path, rules_path=rules_path, with_hta=False, use_cache=False,
                                 progress=False)[0]
        for line in summary_lines(report):
            print(f"[tracekit] {line}", file=out, flush=True)
        if not thresholds:
            return
        rows = checks.evaluate(report.get("headline") or {}, thresholds, report)
        bad = [r for r in rows if not r.passed]
        for r in rows:
            val = "not measured" + (f" ({r.reason})" if r.reason else "") if r.value is None \
                else _value(r.key, r.value)
            print(f"[tracekit] check {r.key} {r.op} {_value(r.key, r.bound)}: {val}: "
                  f"{'ok' if r.passed else 'FAILED'}", file=out, flush=True)
        if bad and fail:
            raise CheckFailed(f"{len(bad)} of {len(rows)} tracekit checks failed on {path}: "
                              + ", ".join(f"{r.key} {r.op} {_value(r.key, r.bound)}" for r in bad))

    return handler


__all__ = ["CheckFailed", "cuda_sync_config", "on_trace_ready", "profiler_kwargs", "summary_lines"]
