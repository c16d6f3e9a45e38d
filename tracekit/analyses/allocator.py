"""Allocator: CUDA caching-allocator memory over time, from the trace's ``[memory]`` events.

Only GPU events count (device type CUDA, or HIP: ROCm's builds record 6), per device. For each device:
allocated and reserved bytes over time (the allocator's own totals after each event), both
peaks, and at the reserved peak (its first occurrence) the bytes reserved but not allocated
and their fraction of reserved (memory the allocator holds but does not use then).
Allocations per step: the number of events with positive bytes (and their sum) whose time lies
in each ``ProfilerStep#N``.

Legacy traces have ``Bytes`` only: allocated is then reconstructed as the cumulative sum of
bytes per device, raised so that it never goes below 0 (memory allocated before the trace
started is not seen, so it is a lower bound), and reserved is unknown (``reconstructed``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import phases
from tracekit.emptyresult import kept
from tracekit.phases import Rules
from tracekit.trace.model import Trace
from tracekit.frames import BuiltWhenRead, column

CUDA = 1  # c10::DeviceType::CUDA
HIP = 6  # c10::DeviceType::HIP: ROCm traces' device [memory] events
GPU_DEVICE_TYPES = (CUDA, HIP)
MAX_BYTES = 1 << 52
"""A ``[memory]`` event's ``Bytes`` (absolute) or total at or above this (4 PiB: more than any
GPU holds) is no reading of a real allocator: left out of the figures, with a warning. Below
it, sums over even 2**11 events stay inside int64."""


@dataclass(frozen=True)
class AllocatorResult(BuiltWhenRead):
    """Allocator figures in bytes; timestamps in ns."""

    series: pd.DataFrame
    """``device, ts, allocated, reserved`` after each CUDA memory event (reserved -1 unknown)."""
    devices: pd.DataFrame
    """Per device: ``device, events, allocations, frees, peak_allocated, peak_allocated_ts,
    peak_reserved, peak_reserved_ts, allocated_at_peak_reserved, unused_at_peak_reserved,
    unused_fraction, reconstructed`` (reserved figures -1/NaN when unknown)."""
    per_step: pd.DataFrame
    """``step, device, allocations, allocated_bytes`` for each ProfilerStep with events."""
    peak_allocated: int | None
    """Largest peak over devices; None without CUDA memory events."""
    peak_reserved: int | None
    """Largest peak over devices; None when unknown."""
    unused_at_peak_reserved: int | None
    """Of the device with the largest reserved peak."""
    unused_fraction: float | None
    reconstructed: bool
    """True when allocated was rebuilt from Bytes (no totals in the trace)."""
    note: str
    warnings: tuple[str, ...] = ()
    """Values left out of the figures (beyond ``MAX_BYTES``, totals missing on some events)."""


def peak_reserved(trace: Trace) -> int | None:
    """``compute(trace, rules).peak_reserved`` alone (explain's in-place copy finding needs
    only it): the largest reserved total of the GPU ``[memory]`` events of the devices whose
    totals the trace has (not ``reconstructed``), None when there is none. Without the series
    and the per-step table it costs a few numpy passes instead of ~6 ms on a 42 MB trace."""
    m = trace.memory
    gpu = fnp.isin(column(m, "device_type"), GPU_DEVICE_TYPES)
    if not gpu.any():
        return None
    alloc = _plausible(column(m, "total_allocated", np.int64)[gpu])
    res = _plausible(column(m, "total_reserved", np.int64)[gpu])
    _, dev = np.unique(column(m, "device_id")[gpu], return_inverse=True)
    has_totals = np.bincount(dev, weights=alloc >= 0) > 0  # per device: not all allocated < 0
    known = has_totals[dev] & (res >= 0)
    return int(res[known].max()) if known.any() else None


def _plausible(total: np.ndarray) -> np.ndarray:
    """A total, -1 (absent) where it is at or above ``MAX_BYTES``."""
    return np.where(total >= MAX_BYTES, -1, total)


def compute(trace: Trace, rules: Rules) -> AllocatorResult:
    """Allocator series and peaks (see the module docstring)."""
    gpu = fnp.isin(column(trace.memory, "device_type"), GPU_DEVICE_TYPES)
    if not gpu.any():
        # no GPU [memory] event: empty tables, the same for every such trace but for the note
        # (tracekit.emptyresult)
        return kept("allocator", lambda: _result(trace, rules, gpu), note=(
            "no [memory] events (profile with profile_memory=True)" if trace.memory.empty
            else "no GPU (CUDA or HIP) [memory] events (host memory only)"))
    return _result(trace, rules, gpu)


def _result(trace: Trace, rules: Rules, gpu: np.ndarray) -> AllocatorResult:
    """``compute`` of the GPU ``[memory]`` events (``gpu``: bool per event)."""
    m = trace.memory[gpu].sort_values("ts", kind="stable")
    huge = np.abs(column(m, "bytes", np.int64)) >= MAX_BYTES
    warnings = []
    if huge.any():
        warnings.append(f"{int(huge.sum()):,} GPU [memory] events with Bytes of 2^52 (4 PiB) or "
                        "more, more than any GPU holds: left out of the allocator's figures")
        m = m[~huge]
    series_parts, dev_rows = [], []
    any_rec = False
    for dev, d in m.groupby("device_id", sort=True):
        ts = column(d, "ts", np.int64)
        nbytes = column(d, "bytes", np.int64)
        alloc = _plausible(column(d, "total_allocated", np.int64))
        res = _plausible(column(d, "total_reserved", np.int64))
        rec = bool((alloc < 0).all())
        if rec:
            if np.abs(np.cumsum(nbytes, dtype=np.float64)).max(initial=0) >= 2.0**62:
                warnings.append(f"device {int(dev)}: the Bytes of its [memory] events add up "
                                "beyond int64: its allocated memory is not reconstructed")
                continue
            alloc = np.cumsum(nbytes)
            alloc = alloc + max(0, -int(alloc.min()))
            res = np.full(ts.size, -1, np.int64)
            any_rec = True
        else:
            lost = int(((alloc < 0) | ((res < 0) & bool((res >= 0).any()))).sum())
            if lost:
                warnings.append(f"device {int(dev)}: {lost:,} of its {ts.size:,} [memory] events "
                                "have no usable Total Allocated or Total Reserved (missing, or "
                                "beyond 2^52 bytes): its peaks are those of the others and may "
                                "be understated")
        series_parts.append(pd.DataFrame({"device": int(dev), "ts": ts, "allocated": alloc,
                                          "reserved": res}))
        ia = int(np.argmax(alloc))
        has_res = bool((res >= 0).any())
        ir = int(np.argmax(res)) if has_res else -1
        both = has_res and bool(alloc[ir] >= 0)  # both totals known at the reserved peak
        unused = int(res[ir] - alloc[ir]) if both else -1
        dev_rows.append((int(dev), ts.size, int((nbytes > 0).sum()), int((nbytes < 0).sum()),
                         int(alloc[ia]), int(ts[ia]),
                         int(res[ir]) if has_res else -1, int(ts[ir]) if has_res else -1,
                         int(alloc[ir]) if has_res else -1, unused,
                         unused / res[ir] if both and res[ir] > 0 else np.nan, rec))
    series = (pd.concat(series_parts, ignore_index=True) if series_parts else
              pd.DataFrame({c: np.zeros(0, np.int64) for c in ("device", "ts", "allocated",
                                                               "reserved")}))
    devices = pd.DataFrame(dev_rows, columns=[
        "device", "events", "allocations", "frees", "peak_allocated", "peak_allocated_ts",
        "peak_reserved", "peak_reserved_ts", "allocated_at_peak_reserved",
        "unused_at_peak_reserved", "unused_fraction", "reconstructed"])

    steps = phases.profiler_steps(trace, rules)
    step = phases.step_of(steps, column(m, "ts", np.int64))
    pos = (column(m, "bytes", np.int64) > 0) & (step >= 0)
    per_step = (pd.DataFrame({"step": step[pos], "device": column(m, "device_id", np.int64)[pos],
                              "bytes": column(m, "bytes", np.float64)[pos]})
                .groupby(["step", "device"]).agg(allocations=("bytes", "size"),
                                                 allocated_bytes=("bytes", "sum")).reset_index())
    # summed as floats (each < 2**52: no int64 wrap), whole again below int64's end
    per_step["allocated_bytes"] = per_step["allocated_bytes"].clip(upper=2.0**63 - 2**11)\
        .astype(np.int64)
    if devices.empty:
        note = ("no [memory] events (profile with profile_memory=True)" if trace.memory.empty
                else "no GPU (CUDA or HIP) [memory] events (host memory only)")
        return AllocatorResult(series, devices, per_step, None, None, None, None, False, note,
                               tuple(warnings))
    known = devices[devices["peak_reserved"] >= 0]
    top = known.loc[known["peak_reserved"].idxmax()] if not known.empty else None
    note = ("allocated reconstructed from Bytes (no totals in the trace): a lower bound, "
            "reserved unknown") if any_rec else ""
    return AllocatorResult(
        series=series, devices=devices, per_step=per_step,
        peak_allocated=int(devices["peak_allocated"].max()),
        peak_reserved=int(top["peak_reserved"]) if top is not None else None,
        unused_at_peak_reserved=int(top["unused_at_peak_reserved"]) if top is not None else None,
        unused_fraction=float(top["unused_fraction"]) if top is not None else None,
        reconstructed=any_rec, note=note, warnings=tuple(warnings),
    )
