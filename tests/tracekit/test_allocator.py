"""Allocator figures from [memory] events: peaks, unused reserved bytes, allocations per step."""

from __future__ import annotations

import math

from tests.tracegen import TraceBuilder, load_built, ns
from tracekit.analyses import allocator
from tracekit.phases import default_rules


def test_peaks_and_unused(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 35)
    b.profiler_step(2, 35, 65)
    b.memory(10, 100, 100, 1000)
    b.memory(20, 300, 400, 1000)
    b.memory(30, 600, 1000, 2000)  # reserved peak: 2000 reserved, 1000 allocated
    b.memory(40, -600, 400, 2000)
    b.memory(50, 900, 1300, 2000)  # allocated peak
    b.memory(60, 5, 999, 999, device_type=0)  # host memory: ignored
    b.memory(70, 64, 64, 512, device=1)
    t = load_built(b, tmp_path)
    r = allocator.compute(t, default_rules())
    assert r.peak_allocated == 1300 and r.peak_reserved == 2000
    assert allocator.peak_reserved(t) == 2000
    assert r.unused_at_peak_reserved == 1000 and r.unused_fraction == 0.5
    assert not r.reconstructed and r.note == ""
    d = r.devices.set_index("device")
    assert d.loc[0, "peak_allocated_ts"] == ns(50) and d.loc[0, "peak_reserved_ts"] == ns(30)
    assert d.loc[0, "allocated_at_peak_reserved"] == 1000
    assert d.loc[0, "allocations"] == 4 and d.loc[0, "frees"] == 1
    assert d.loc[1, "unused_at_peak_reserved"] == 448
    s = r.series[r.series["device"] == 0]
    assert s["allocated"].tolist() == [100, 400, 1000, 400, 1300]
    assert s["reserved"].tolist() == [1000, 1000, 2000, 2000, 2000]
    ps = r.per_step
    assert ps[["step", "device", "allocations", "allocated_bytes"]].values.tolist() == [
        [1, 0, 3, 1000], [2, 0, 1, 900], [2, 1, 1, 64]]


def test_legacy_reconstructed(tmp_path):
    b = TraceBuilder(schema="legacy2021")
    b.memory(5, -50)  # frees memory allocated before the trace began
    b.memory(10, 100)
    b.memory(20, 200)
    b.memory(30, -250)
    t = load_built(b, tmp_path)
    r = allocator.compute(t, default_rules())
    assert allocator.peak_reserved(t) is None
    assert r.reconstructed
    assert r.series["allocated"].tolist() == [0, 100, 300, 50]  # raised by the 50 freed first
    assert r.peak_allocated == 300
    assert r.peak_reserved is None and r.unused_fraction is None
    assert r.series["reserved"].tolist() == [-1] * 4
    assert math.isnan(r.devices.loc[0, "unused_fraction"])
    assert "reconstructed" in r.note


def test_no_memory_events(tmp_path):
    b = TraceBuilder()
    b.kernel("k", 0, 1)
    t = load_built(b, tmp_path)
    r = allocator.compute(t, default_rules())
    assert allocator.peak_reserved(t) is None
    assert r.peak_allocated is None and r.series.empty and r.devices.empty
    assert "no [memory] events" in r.note


def test_peak_reserved_alone_skips_devices_without_totals(tmp_path):
    """``peak_reserved`` (explain's) equals ``compute``'s: a device whose allocated totals are
    all missing is reconstructed there, so its reserved figures do not count; host memory never."""
    b = TraceBuilder()
    b.memory(10, 100, 100, 1000, device=0)
    b.memory(20, 300, 400, 3000, device=0)
    b.memory(30, 200, None, 9000, device=1)  # no Total Allocated: device 1 reconstructed
    b.memory(40, 5, 999, 99999, device_type=0)  # host
    b.memory(50, 64, 64, 512, device=2)
    t = load_built(b, tmp_path)
    r = allocator.compute(t, default_rules())
    assert r.peak_reserved == 3000 == allocator.peak_reserved(t)
    assert bool(r.devices.set_index("device").loc[1, "reconstructed"])
