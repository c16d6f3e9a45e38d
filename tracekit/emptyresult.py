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
A result that builds its tables when first read (``tracekit.frames.BuiltWhenRead``) gets its
frames' copies made when first read: a job's worker, which reads none of the syncs',
allocator's or embedding sections' tables, makes none (~20-100 us a frame).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Hashable
from typing import TypeVar

import pandas as pd

from tracekit.frames import BuiltWhenRead, Later

T = TypeVar("T")

_KEPT: dict[Hashable, object] = {}


def kept(key: Hashable, compute: Callable[[], T], **changes: object) -> T:
    """``compute()``'s result the first time ``key`` is asked, a copy of it afterwards
    (``fresh``), with the fields ``changes`` names set to their values (what
    ``dataclasses.replace`` gives: the result classes have no ``__post_init__``). ``key`` names
    the section and every input the result depends on (a rule's phase name...); ``compute``
    must give the same result for every trace that reaches this call."""
    try:
        value = _KEPT[key]
    except KeyError:
        value = _KEPT[key] = compute()
    return fresh(value, **changes)


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))


def fresh(value: T, **changes: object) -> T:
    """A copy of a result that shares nothing its holder could change with ``value``: a
    dataclass's (frozen or not) frames and series copied shallow (copy-on-write; for a
    ``BuiltWhenRead`` result, when first read), its scalars kept, anything else deep-copied;
    any other value deep-copied. ``changes``: fields set to these values instead (a dataclass)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        if changes:
            raise TypeError("changes apply to a dataclass result")
        return copy.deepcopy(value)
    later = isinstance(value, BuiltWhenRead)
    new = copy.copy(value)
    names = set()
    for f in dataclasses.fields(value):
        names.add(f.name)
        if f.name in changes:
            object.__setattr__(new, f.name, changes[f.name])
            continue
        x = getattr(value, f.name)
        if isinstance(x, (pd.DataFrame, pd.Series)):
            object.__setattr__(new, f.name, Later(shallow_copy, x) if later else
                               x.copy(deep=False))
        elif not isinstance(x, _IMMUTABLE):
            object.__setattr__(new, f.name, copy.deepcopy(x))
    if not names.issuperset(changes):
        raise TypeError(f"no such fields: {sorted(set(changes) - names)}")
    return new


def shallow_copy(x: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """``x.copy(deep=False)`` (a module-level function: a result holding a ``Later`` of it
    pickles)."""
    return x.copy(deep=False)


def forget() -> None:
    """Drop every kept result (tests: the next call computes again)."""
    _KEPT.clear()
