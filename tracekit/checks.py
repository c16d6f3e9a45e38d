"""Thresholds over the headline figures: what ``tracekit check`` gates a CI job on.

A threshold is ``KEY=VALUE`` for one of ``report.HEADLINE_KEYS`` (the unit suffix ``_ns`` or
``_bytes`` of the key may be left out), with the value in the key's unit or with a unit of its
own: times take ``ns``, ``us``, ``ms``, ``s``; sizes take ``B``, ``KB``, ``MB``, ``GB``,
``KiB``, ``MiB``, ``GiB``; ratios take a plain number (0..1) or a percentage (``15%``).
``evaluate`` is pure: headline dict + thresholds -> one row per check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracekit.errors import TracekitError
from tracekit.report import HEADLINE_KEYS, TEXT_KEYS, unit_of

_TIME = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
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


def _resolve_key(name: str) -> str:
    name = name.strip()
    for k in (name, name + "_ns", name + "_bytes"):
        if k in _NUMERIC:
            return k
    raise ThresholdError(f"no headline figure {name!r} (one of: {', '.join(_NUMERIC)})")


def parse(spec: str, *, upper: bool) -> Threshold:
    """``"stall_total=5ms"`` -> Threshold("stall_total_ns", 5e6, upper)."""
    if "=" not in spec:
        raise ThresholdError(f"threshold {spec!r} is not KEY=VALUE")
    name, value = spec.split("=", 1)
    key = _resolve_key(name)
    m = re.fullmatch(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)\s*", value)
    if not m:
        raise ThresholdError(f"threshold {spec!r}: {value!r} is not a number")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit:
        kind = unit_of(key)
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


def evaluate(headline: dict, thresholds: list[Threshold]) -> list[CheckRow]:
    rows = []
    for t in thresholds:
        v = headline.get(t.key)
        ok = v is not None and (v <= t.bound if t.upper else v >= t.bound)
        rows.append(CheckRow(t.key, "<=" if t.upper else ">=", t.bound,
                             None if v is None else float(v), bool(ok)))
    return rows
