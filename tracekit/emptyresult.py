"""A section's result for a trace that has nothing for it, computed once per process.

A trace with no sync stall, no collective kernel, no ``[memory]`` event or no optimizer and
lookup activity gets, from the section that reads them, a result that no event of the trace
shapes: empty tables and totals of 0 (and a few fields that depend on the trace, which the
section sets itself). Built through pandas, those empty tables and their group-bys cost a few
milliseconds each, whatever the trace: a job of a thousand small rank files paid them a
thousand times (docs/limits.md). ``kept`` runs the section's own general code the first time a
process meets such a trace and hands out deep copies of that result afterwards: the same
frames, dtypes and index, at the cost of a copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

_KEPT: dict[Hashable, object] = {}


def kept(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``'s result the first time ``key`` is asked, a deep copy of it afterwards.
    ``key`` names the section and every input the result depends on (a rule's phase name...);
    ``compute`` must give the same result for every trace that reaches this call."""
    try:
        value = _KEPT[key]
    except KeyError:
        value = _KEPT[key] = compute()
    return copy.deepcopy(value)


def forget() -> None:
    """Drop every kept result (tests: the next call computes again)."""
    _KEPT.clear()
