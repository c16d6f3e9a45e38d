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
- ``index_of(keys, values)`` is ``pd.Index(keys).get_indexer(values)`` for integer keys that
  do not repeat (each value's position in ``keys``, -1 for none): a binary search instead of the
  Index pandas builds and hashes (~0.1 ms a call).
- ``factorize(values, sort=False)`` is ``pd.factorize(values, sort=sort)`` (codes, distinct
  values): for at most ``SMALL_KEYS`` integers or Python strings, numbered by a dict (pandas'
  hash table costs ~20-30 us a call whatever the size; explain and profile make a dozen calls
  a trace on tables of a few rows); anything else (floats, a missing value) by pandas.
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


__all__ = ["SMALL_KEYS", "SMALL_TABLE", "factorize", "index_of", "isin", "r_"]


def index_of(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``pd.Index(keys).get_indexer(values)`` for 1-D integer arrays; keys that repeat go to
    pandas (which refuses them)."""
    o = np.argsort(keys, kind="stable")
    sk = keys[o]
    if sk.size > 1 and not (sk[1:] != sk[:-1]).all():
        import pandas as pd

        return pd.Index(keys).get_indexer(values)
    if not sk.size:
        return np.full(np.shape(values), -1, np.intp)
    at = np.minimum(np.searchsorted(sk, values), sk.size - 1)
    return np.where(sk[at] == values, o[at], -1).astype(np.intp)


SMALL_KEYS = 256
"""Up to this many values ``factorize`` numbers them with a dict."""


def factorize(values, *, sort: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, sort=sort)`` for a 1-D array (the module docstring)."""
    import pandas as pd

    a = values if type(values) is np.ndarray else None
    if a is None or a.ndim != 1 or a.size > SMALL_KEYS or a.dtype.kind not in "iuO":
        return pd.factorize(values, sort=sort)
    items = a.tolist()
    if a.dtype.kind == "O" and not all(type(x) is str for x in items):
        return pd.factorize(values, sort=sort)
    first: dict = {}
    codes = np.fromiter((first.setdefault(x, len(first)) for x in items), np.intp,
                        count=len(items))
    uniq = np.array(list(first), dtype=a.dtype) if first else np.zeros(0, a.dtype)
    if sort and uniq.size > 1:
        order = np.array(sorted(range(uniq.size), key=uniq.__getitem__), np.intp)
        rank = np.empty(uniq.size, np.intp)
        rank[order] = np.arange(uniq.size)
        codes, uniq = rank[codes], uniq[order]
    return codes, uniq
