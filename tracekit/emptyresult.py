"""A section's result for a trace that has nothing for it, computed once per process.

A trace with no sync stall, no collective kernel, no ``[memory]`` event or no optimizer and
lookup activity gets, from the section that reads them, a result that no event of the trace
shapes: empty tables and totals of 0 (and a few fields that depend on the trace, which the
section sets itself). Built through pandas, those empty tables and their group-bys cost a few
milliseconds each, whatever the trace: a job of a thousand small rank files paid them a
thousand times (docs/limits.md). ``kept`` runs the section's own general code the first time a
process meets such a trace and hands out copies of that result afterwards: the same frames,
dtypes and index, at the cost of a copy. A frame is copied shallow: pandas' copy-on-write
(always on since pandas 3) copies its data on the first write to either, so no holder of one
copy can change another's (a deep copy of every frame cost ~1-4 ms a rank, twice a shallow one).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Hashable
from typing import TypeVar

import pandas as pd

T = TypeVar("T")

_KEPT: dict[Hashable, object] = {}


def kept(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``'s result the first time ``key`` is asked, a copy of it afterwards
    (``fresh``). ``key`` names the section and every input the result depends on (a rule's
    phase name...); ``compute`` must give the same result for every trace that reaches this
    call."""
    try:
        value = _KEPT[key]
    except KeyError:
        value = _KEPT[key] = compute()
    return fresh(value)


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))


def fresh(value: T) -> T:
    """A copy of a result that shares nothing its holder could change with ``value``: a
    dataclass's (frozen or not) frames and series copied shallow (copy-on-write), its scalars
    kept, anything else deep-copied; any other value deep-copied."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return copy.deepcopy(value)
    new = copy.copy(value)
    for f in dataclasses.fields(value):
        x = getattr(value, f.name)
        if isinstance(x, (pd.DataFrame, pd.Series)):
            object.__setattr__(new, f.name, x.copy(deep=False))
        elif not isinstance(x, _IMMUTABLE):
            object.__setattr__(new, f.name, copy.deepcopy(x))
    return new


def forget() -> None:
    """Drop every kept result (tests: the next call computes again)."""
    _KEPT.clear()
