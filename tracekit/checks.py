"""Thresholds over the headline figures: what ``tracekit check`` gates a CI job on.

A threshold is ``KEY=VALUE`` for one of ``report.HEADLINE_KEYS`` (the unit suffix ``_ns`` or
``_bytes`` of the key may be left out), with the value in the key's unit or with a unit of its
own: times take ``ns``, ``us``, ``ms``, ``s``; sizes take ``B``, ``KB``, ``MB``, ``GB``,
``KiB``, ``MiB``, ``GiB``; ratios take a plain number (0..1) or a percentage (``15%``).
A time or a size needs its unit (``stall_total=5`` is refused: 5 what?) unless the key is
written with its own (``stall_total_ns=5000``); ``us``, ``µs`` and ``μs`` are microseconds.
The value must be finite.
``evaluate`` is pure: headline dict + thresholds -> one row per check.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tracekit.errors import TracekitError
from tracekit.report.keys import HEADLINE_KEYS, TEXT_KEYS
from tracekit.report.tables import unit_of

_TIME = {"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9}
_SIZE = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_NUMERIC = [k for k in HEADLINE_KEYS if k not in TEXT_KEYS]


class ThresholdError(TracekitError):
    """A ``--max``/``--min`` argument that does not parse or names no headline figure."""


@dataclass(frozen=True)
class Threshold:
    key: str
    """A numeric key of the headline (``report.HEADLINE_KEYS``)."""
    bound: float
    """In the key's own unit (ns, bytes, ratio, count)."""
    upper: bool
    """True: the figure must be <= bound (``--max``); False: >= bound (``--min``)."""

    def __post_init__(self) -> None:
        if self.key not in _NUMERIC:
            raise ThresholdError(f"no headline figure {self.key!r}")


def _resolve_key(name: str) -> tuple[str, bool]:
    """The headline key, and whether ``name`` wrote its unit suffix."""
    name = name.strip()
    for k in (name, name + "_ns", name + "_bytes"):
        if k in _NUMERIC:
            return k, k == name
    raise ThresholdError(f"no headline figure {name!r} (one of: {', '.join(_NUMERIC)})")


def parse(spec: str, *, upper: bool) -> Threshold:
    """``"stall_total=5ms"`` -> Threshold("stall_total_ns", 5e6, upper)."""
    if "=" not in spec:
        raise ThresholdError(f"threshold {spec!r} is not KEY=VALUE")
    name, value = spec.split("=", 1)
    key, suffixed = _resolve_key(name)
    m = re.fullmatch(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%µμ]*)\s*", value)
    if not m:
        raise ThresholdError(f"threshold {spec!r}: {value!r} is not a number")
    number, unit = float(m.group(1)), m.group(2).lower()
    if not math.isfinite(number):
        raise ThresholdError(f"threshold {spec!r}: {m.group(1)} is not a finite number")
    kind = unit_of(key)
    if not unit and not suffixed and kind in ("ms", "bytes"):
        example = "5ms" if kind == "ms" else "60GiB"
        raise ThresholdError(f"threshold {spec!r}: give a unit ({'ns, us, ms, s' if kind == 'ms' else 'B, KiB, MiB, GiB, KB, MB, GB'}), "
                             f"e.g. {name.strip()}={example}")
    if unit:
        if kind == "ms" and unit in _TIME:
            number *= _TIME[unit]
        elif kind == "bytes" and unit in _SIZE:
            number *= _SIZE[unit]
        elif kind == "ratio" and unit == "%":
            number /= 100.0
        else:
            raise ThresholdError(f"threshold {spec!r}: unit {m.group(2)!r} does not fit {key}")
    return Threshold(key, number, upper)


@dataclass(frozen=True)
class CheckRow:
    key: str
    op: str
    bound: float
    value: float | None
    passed: bool
    """False also when the figure could not be measured (``value`` None): a gate on a figure
    the trace cannot give is a failed gate, not a silent pass."""
    reason: str | None = None
    """Why the figure could not be measured (``value`` None), from the report's sections."""


def unmeasured(rank: dict, key: str) -> str:
    """Why a headline figure of this rank's report (``tracekit.report.to_dict``) is null."""
    sec = lambda name: rank.get(name) or {}  # noqa: E731
    if key.startswith("step_"):
        steps = sec("steps")
        if not steps.get("steps"):
            return "no steps: no ProfilerStep#N annotations and no optimizer boundaries"
        return "no GPU activity inside the steps" if "gpu" in key else "no CPU step span"
    if key in ("peak_allocated_bytes", "peak_reserved_bytes", "unused_at_peak_reserved_bytes",
               "unused_fraction"):
        note = sec("allocator").get("note")
        if key != "peak_allocated_bytes" and sec("allocator").get("peak_allocated") is not None:
            note = "the [memory] events do not record reserved bytes (legacy Bytes only)"
        return note or "no [memory] events"
    if key.startswith("mean_gap"):
        return sec("gaps").get("note") or "no optimizer -> next lookup pair found"
    if key == "comm_overlap_ratio":
        if not sec("overlap").get("communication_ns"):
            return "no communication (NCCL/RCCL) activity in this trace"
    return "not measurable in this trace"


def evaluate(headline: dict, thresholds: list[Threshold], rank: dict | None = None) -> list[CheckRow]:
    """One row per threshold; ``rank`` (the whole report) gives the reason of a null figure."""
    rows = []
    for t in thresholds:
        v = headline.get(t.key)
        ok = v is not None and (v <= t.bound if t.upper else v >= t.bound)
        why = unmeasured(rank or {}, t.key) if v is None else None
        rows.append(CheckRow(t.key, "<=" if t.upper else ">=", t.bound,
                             None if v is None else float(v), bool(ok), why))
    return rows
