"""Small tables built at a fraction of pandas' cost, the same tables.

``pd.DataFrame({name: column, ...}, copy=False)`` checks, aligns and infers every column (its
``dict_to_mgr``: ~0.1-0.2 ms whatever the rows, ~0.6 ms on a loaded machine), and a rank of a
job builds some forty such tables: a job of a thousand tiny rank files paid it forty thousand
times (docs/limits.md). ``frame`` hands pandas the columns as they will be stored
(``DataFrame._from_arrays`` without its checks) where that cannot change the table: every column
a 1-D numpy array of a bool or numeric dtype, or a ``pd.Categorical``, all of one length, and at
most ``SMALL_ROWS`` rows (a bigger table keeps pandas' own path: its checks cost nothing beside
its rows, and the columns stay unconsolidated as there). A column of Python objects (strings:
pandas 3 infers its ``str`` dtype) or anything else takes pandas' path too. The result equals
pandas' (columns, dtypes, values, a ``RangeIndex``: ``tests/tracekit/test_frames.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

SMALL_ROWS = 4096
"""Up to this many rows a table is built without pandas' checks."""


def frame(data: Mapping[str, object], *, copy: bool = True) -> pd.DataFrame:
    """``pd.DataFrame(data)`` (``data``: column name -> column; ``copy=False``:
    ``pd.DataFrame(data, copy=False)``, the table holding the arrays given), built fast where
    that gives the same table (the module docstring)."""
    arrays = list(data.values())
    n = len(arrays[0]) if arrays else 0
    if not arrays or n > SMALL_ROWS or not all(_stored_as_is(a, n) for a in arrays):
        return pd.DataFrame(data) if copy else pd.DataFrame(data, copy=False)
    if copy:
        arrays = [a.copy() for a in arrays]
    return pd.DataFrame._from_arrays(arrays, columns=pd.Index(list(data)), index=pd.RangeIndex(n),
                                     verify_integrity=False)


def _stored_as_is(a: object, n: int) -> bool:
    """Whether pandas stores ``a`` as it is (no conversion, no inference) as a column of ``n``
    rows."""
    if type(a) is np.ndarray:
        return a.ndim == 1 and a.dtype.kind in "biuf" and a.shape[0] == n
    return type(a) is pd.Categorical and len(a) == n


_COLUMN_ARRAY = getattr(pd.DataFrame, "_get_column_array", None)
"""pandas' own column read without a Series (pandas 2.x and 3.x; not public API: where a pandas
lacks it, ``column`` and ``categorical`` read through ``df[name]``, the same arrays, slower)."""


def column(df: pd.DataFrame, name: str, dtype: object = None) -> np.ndarray:
    """``df[name].to_numpy(dtype)``, the same array, without the Series pandas builds for it
    (~15 us a read whatever the rows; a rank of a job reads its small tables' columns some 250
    times). A numeric or bool numpy column in its own dtype (or ``dtype`` None) is a read-only view of the
    table's, as pandas gives it; in another ``dtype`` a fresh, writable copy. Anything else (a
    Categorical, strings, datetimes, repeated column names, not a DataFrame) is read through
    pandas."""
    if type(df) is pd.DataFrame and _COLUMN_ARRAY is not None:
        loc = df.columns.get_loc(name)
        if type(loc) is int:
            a = _COLUMN_ARRAY(df, loc)
            if type(a) is np.ndarray and a.ndim == 1 and a.dtype.kind in "biuf":
                if dtype is None or a.dtype == np.dtype(dtype):
                    a = a.view()
                    a.flags.writeable = False
                    return a
                return a.astype(dtype)
    return df[name].to_numpy() if dtype is None else df[name].to_numpy(dtype)


def categorical(df: pd.DataFrame, name: str) -> pd.Categorical | None:
    """The column ``name`` of ``df`` when pandas stores it as a Categorical: ``df[name].array``,
    the same object, without the Series built for it; None for a column of another kind."""
    a = None
    if type(df) is pd.DataFrame and _COLUMN_ARRAY is not None:
        loc = df.columns.get_loc(name)
        if type(loc) is int:
            a = _COLUMN_ARRAY(df, loc)
    if a is None:
        a = df[name].array
    return a if type(a) is pd.Categorical else None


__all__ = ["SMALL_ROWS", "categorical", "column", "frame"]
