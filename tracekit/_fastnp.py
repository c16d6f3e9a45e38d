"""Two numpy calls without their fixed set-up cost, for arrays of any size: the same results.

A trace of a few events makes a few hundred calls of ``np.r_[...]`` and ``np.isin`` per
analysis; on arrays of a few elements each costs its set-up, not its work: ``np.r_`` ~6 us
(``AxisConcatenator`` checks every item for slices, directives and dimensions, then converts it
twice), ``np.isin`` ~20-30 us (it picks among three methods, takes the min and max of both
arrays, and sorts where the table is big). A job of a thousand tiny ranks paid ~1.5 ms of a
rank's ~19 ms there (py-spy, 2026-11-28).

- ``r_(a, b, ...)`` is ``np.r_[a, b, ...]`` for items that are arrays, sequences or scalars
  (no slices, no string directives): the items' ``np.result_type`` (scalars as weak Python
  values, as ``np.r_`` takes them), each item cast to it, concatenated.
- ``isin(values, table)`` is ``np.isin(values, table)``: where the values are integers, the
  table integers or booleans, and the table has at most ``SMALL_TABLE`` elements, one comparison per table element
  (what ``np.isin`` itself does for a small table, without choosing); else ``np.isin``.
"""

from __future__ import annotations

import numpy as np

_SCALAR_TYPES = frozenset(np.ScalarType)
"""What ``np.r_`` takes as a scalar (by exact type)."""

SMALL_TABLE = 8
"""The most table elements ``isin`` compares one by one."""


def r_(*items) -> np.ndarray:
    """``np.r_[*items]`` (no slices or string directives among ``items``)."""
    kinds = []
    arrays = []
    scalars = False
    for item in items:
        if type(item) in _SCALAR_TYPES:
            kinds.append(item)
            arrays.append(item)
            scalars = True
        else:
            a = item if type(item) is np.ndarray else \
                np.array(item, copy=None, subok=True, ndmin=1)
            if type(a) is not np.ndarray or a.ndim != 1:  # 0-d, 2-d, a subclass: as np.r_
                return np.r_[items]
            kinds.append(a.dtype)
            arrays.append(a)
    if not scalars and arrays and all(k == kinds[0] for k in kinds):
        return np.concatenate(arrays)
    if not arrays:
        return np.r_[items]
    dt = np.result_type(*kinds)
    # each item cast to ``dt`` into its place: what ``np.array(item, dtype=dt)`` gives
    out = np.empty(sum(1 if type(a) in _SCALAR_TYPES else a.size for a in arrays), dtype=dt)
    pos = 0
    for a in arrays:
        if type(a) in _SCALAR_TYPES:
            out[pos] = a
            pos += 1
        else:
            out[pos:pos + a.size] = a
            pos += a.size
    return out


def isin(values, table) -> np.ndarray:
    """``np.isin(values, table)``: the same booleans (see the module docstring)."""
    v = values if type(values) is np.ndarray else np.asarray(values)
    t = table if type(table) is np.ndarray else np.asarray(table)
    if t.size > SMALL_TABLE or v.dtype.kind not in "iu" or t.dtype.kind not in "biu":
        return np.isin(v, t)
    out = np.zeros(v.shape, dtype=bool)
    for x in t.ravel().tolist():  # Python ints (bools): compared by value, whatever v's dtype
        out |= v == x
    return out


__all__ = ["SMALL_TABLE", "isin", "r_"]
