"""Peak memory bandwidth of known GPUs, matched on the name Kineto writes in ``deviceProperties``.

``peak_hbm(name, extra=())`` returns the first ``GpuPeak`` whose pattern matches the device's
name (``re.search``, case-insensitive): first the ``extra`` entries (a rules file's ``[[gpu]]``
tables, ``tracekit.phases``), then ``KNOWN_GPUS``, most specific patterns first. The figures are
the vendors' data-sheet peaks of device memory (HBM, or GDDR where noted), in GB/s (10^9 bytes
per second); a kernel never reaches them (a device-to-device copy reaches ~90 %: 4.3 of 4.8 TB/s
measured on an H200, ``bench/results/tbe-h200-*.md``), so a share of peak reads against that.

A rules file overrides or adds a GPU::

    [[gpu]]
    pattern = 'H100 80GB HBM3'   # re.search on deviceProperties' name, case-insensitive
    hbm_gbps = 3350
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model's peak device-memory bandwidth."""

    pattern: str
    """Regular expression searched (case-insensitive) in ``deviceProperties[].name``."""
    hbm_gbps: float
    """Peak device-memory bandwidth, GB/s (10^9 bytes/s), read and write together."""
    label: str = ""
    """The model as a person names it (``H100 SXM``); the pattern when empty."""
    source: str = "built-in table"
    """Where the figure comes from: the built-in table, or a rules file's path."""

    @property
    def name(self) -> str:
        return self.label or self.pattern


KNOWN_GPUS: tuple[GpuPeak, ...] = (
    # NVIDIA Blackwell
    GpuPeak(r"GB300|B300", 8000, "B300"),
    GpuPeak(r"GB200|B200", 8000, "B200"),
    # NVIDIA Hopper: the PCIe and NVL H100s before the SXM one (whose name says only "HBM3")
    GpuPeak(r"H100 PCIe", 2000, "H100 PCIe"),
    GpuPeak(r"H100 NVL", 3900, "H100 NVL"),
    GpuPeak(r"GH200.*144|GH200 144", 4900, "GH200 144GB"),
    GpuPeak(r"GH200", 4000, "GH200 96GB"),
    GpuPeak(r"H200", 4800, "H200"),
    GpuPeak(r"H800", 3350, "H800 SXM"),
    GpuPeak(r"H100", 3350, "H100 SXM"),
    GpuPeak(r"H20\b", 4000, "H20"),
    # NVIDIA Ampere
    GpuPeak(r"A100.*80GB.*PCIe|A100 80GB PCIe", 1935, "A100 80GB PCIe"),
    GpuPeak(r"A100.*80GB", 2039, "A100 80GB SXM"),
    GpuPeak(r"A100", 1555, "A100 40GB"),
    GpuPeak(r"A800.*80GB", 2039, "A800 80GB"),
    GpuPeak(r"A30\b", 933, "A30"),
    GpuPeak(r"A10G", 600, "A10G (GDDR6)"),
    GpuPeak(r"A10\b", 600, "A10 (GDDR6)"),
    # NVIDIA Ada / Volta / Turing (GDDR, or HBM2 on V100)
    GpuPeak(r"L40S|L40\b", 864, "L40S (GDDR6)"),
    GpuPeak(r"L4\b", 300, "L4 (GDDR6)"),
    GpuPeak(r"V100.*32GB|V100-SXM2-32GB", 900, "V100 32GB"),
    GpuPeak(r"V100", 900, "V100"),
    GpuPeak(r"T4\b", 320, "T4 (GDDR6)"),
    # AMD Instinct (ROCm writes the marketing name); an MI250X shows each of its two dies as a
    # device of its own: half the package's 3.2768 TB/s each
    GpuPeak(r"MI355X|MI350X", 8000, "MI355X"),
    GpuPeak(r"MI325X", 6000, "MI325X"),
    GpuPeak(r"MI300X", 5300, "MI300X"),
    GpuPeak(r"MI300A", 5300, "MI300A"),
    GpuPeak(r"MI250X|MI250", 1638.4, "MI250X (one die)"),
    GpuPeak(r"MI210", 1638.4, "MI210"),
)
"""The built-in table: most specific patterns first (the first match wins)."""


def peak_hbm(name: str | None, extra: tuple[GpuPeak, ...] = ()) -> GpuPeak | None:
    """The first entry of ``extra`` then ``KNOWN_GPUS`` whose pattern matches ``name``; None
    for an unknown GPU or no name."""
    if not name:
        return None
    key = (name, extra)
    try:  # a device's name asked again (every rank of a job asks about the same one or two)
        return _FOUND[key]
    except (KeyError, TypeError):
        pass
    got = next((g for g in (*extra, *KNOWN_GPUS) if re.search(g.pattern, name, re.IGNORECASE)),
               None)
    try:
        if len(_FOUND) >= 1024:  # bounded: names come from the traces
            _FOUND.clear()
        _FOUND[key] = got
    except TypeError:  # an entry that cannot be hashed: asked afresh each time
        pass
    return got


_FOUND: dict[tuple, GpuPeak | None] = {}
"""``peak_hbm``'s answers in this process, by (name, extra): a pure function of them, whose
~30 pattern searches cost ~30 us a call."""


def device_names(metadata: dict) -> dict[int, str]:
    """``deviceProperties`` of a trace's metadata as device id -> name (absent or malformed
    entries left out)."""
    props = metadata.get("deviceProperties")
    out: dict[int, str] = {}
    if not isinstance(props, list):
        return out
    for i, p in enumerate(props):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            continue
        dev = p.get("id", i)
        if isinstance(dev, int) and not isinstance(dev, bool):
            out[dev] = p["name"]
    return out


__all__ = ["GpuPeak", "KNOWN_GPUS", "device_names", "peak_hbm"]
