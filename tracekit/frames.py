"""Small tables built at a fraction of pandas' cost, the same tables.

``pd.DataFrame({name: column, ...}, copy=False)`` checks, aligns and infers every column (its
``dict_to_mgr``: ~0.1-0.2 ms whatever the rows, ~0.6 ms on a loaded machine), and a rank of a
job builds some forty such tables: a job of a thousand tiny rank files paid it forty thousand
times (docs/limits.md). ``frame`` hands pandas the columns as they will be stored
(``DataFrame._from_arrays`` without its checks) where that cannot change the table: every column
a 1-D numpy array of a bool or numeric dtype, or a ``pd.Categorical``, all of one length, and at
most ``SMALL_ROWS`` rows (a bigger table keeps pandas' own path: its checks cost nothing beside
its rows, and the columns stay unconsolidated as there). A column of Python objects (a numpy
array of dtype object: strings, for which pandas 3 infers its ``str`` dtype) is converted by
pandas' own per-column step (``sanitize_array``, what its constructor calls on it); anything else
takes pandas' whole path. The column names' Index is built once per process for each tuple of
names (``pd.Index`` infers its dtype: ~25 us a table). The result equals
pandas' (columns, dtypes, values, a ``RangeIndex``: ``tests/tracekit/test_frames.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

SMALL_ROWS = 4096
"""Up to this many rows a table is built without pandas' checks."""
FAST = True
"""False: every table built and every column read through pandas' own constructor and
``df[name]`` (tests hold the two ways to the same results)."""


def frame(data: Mapping[str, object], *, copy: bool = True) -> pd.DataFrame:
    """``pd.DataFrame(data)`` (``data``: column name -> column; ``copy=False``:
    ``pd.DataFrame(data, copy=False)``, the table holding the arrays given), built fast where
    that gives the same table (the module docstring)."""
    arrays = list(data.values())
    n = len(arrays[0]) if arrays else 0
    if not FAST or not arrays or n > SMALL_ROWS:
        return pd.DataFrame(data) if copy else pd.DataFrame(data, copy=False)
    objects = []
    for i, a in enumerate(arrays):
        if _stored_as_is(a, n):
            continue
        if _SANITIZE is None or type(a) is not np.ndarray or a.dtype.kind not in "OU" or \
                a.ndim != 1 or a.shape[0] != n:
            return pd.DataFrame(data) if copy else pd.DataFrame(data, copy=False)
        objects.append(i)
    if copy:
        arrays = [a.copy() for a in arrays]
    index = pd.RangeIndex(n)
    for i in objects:  # what pandas' constructor does to such a column (its ``_homogenize``)
        arrays[i] = _strings(arrays[i]) or _SANITIZE(arrays[i], index, dtype=None, copy=False)
    return _from_arrays(arrays, _columns(tuple(data)), index)


def of_rows(data: list, columns: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """``pd.DataFrame(data, columns=columns)`` (``data``: a list of rows, each a tuple or list
    of the columns' values): of no rows (most of a small trace's tables of rows: ~0.3 ms each
    through pandas), a table of empty object columns built here, as pandas builds it; of a few
    rows, the columns pandas infers from the rows (its own ``to_arrays``, ~60 us) handed to
    ``frame`` (pandas' per-column checks and its columns' Index cost ~0.1 ms more); else, or
    with repeated column names, pandas'."""
    if not FAST:
        return pd.DataFrame(data, columns=columns)
    names = tuple(columns)
    if not data:
        return _from_arrays([np.empty(0, dtype=object) for _ in names], _columns(names),
                            pd.RangeIndex(0))
    if _TO_ARRAYS is None or type(data) is not list or len(data) > SMALL_ROWS or \
            type(data[0]) not in (tuple, list) or len(set(names)) != len(names):
        return pd.DataFrame(data, columns=columns)
    arrays, _ = _TO_ARRAYS(data, _columns(names))  # what pandas' constructor does with rows
    return frame(dict(zip(names, arrays)), copy=False)


class Later:
    """A table built when first read: ``build(*args)`` (a module-level function, so that a
    result holding one pickles). Held by a ``BuiltWhenRead`` result's field."""

    __slots__ = ("build", "args")

    def __init__(self, build, *args) -> None:
        self.build, self.args = build, args

    @property
    def rows(self) -> list | None:
        """The rows of a table of rows (``Later(of_rows, rows, columns)``), else None: what a
        writer that needs only some of its values can read without building it."""
        return self.args[0] if self.build is of_rows else None


class BuiltWhenRead:
    """A (frozen) dataclass some of whose fields may hold a ``Later``: reading such a field
    builds its table once and keeps it, so every reader (``dataclasses.fields``, ``replace``,
    ``==``, a copy, pickling) sees the table; ``unbuilt(name)`` is the ``Later`` while it is
    not built yet (else None). A rank of a job whose worker writes only part of a result
    (``tracekit.report.to_dict(keys=...)``) never builds the tables nobody reads."""

    def __getattribute__(self, name: str):
        value = object.__getattribute__(self, name)
        if type(value) is Later:
            value = value.build(*value.args)
            object.__setattr__(self, name, value)
        return value

    def unbuilt(self, name: str) -> Later | None:
        value = object.__getattribute__(self, name)
        return value if type(value) is Later else None

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in object.__getattribute__(self, "__dict__")}


try:  # pandas' own conversion of a column given to its constructor (not public API)
    from pandas.core.construction import sanitize_array as _SANITIZE
except ImportError:  # a pandas without it: such tables take pandas' whole path, slower
    _SANITIZE = None

try:  # pandas' own conversion of rows given to its constructor into columns (not public API)
    from pandas.core.internals.construction import to_arrays as _TO_ARRAYS
except ImportError:  # a pandas without it: tables of rows take pandas' whole path, slower
    _TO_ARRAYS = None


def _string_array():
    """The array type and dtype pandas' constructor gives a numpy column of Python strings
    (pandas 3: its ``str`` dtype), or None where it keeps them as objects."""
    if _SANITIZE is None:
        return None
    probe = _SANITIZE(np.array(["a"], dtype=object), pd.RangeIndex(1), dtype=None, copy=False)
    if type(probe) is np.ndarray or not hasattr(type(probe), "_from_sequence"):
        return None
    return type(probe), probe.dtype


_STRING_ARRAY = _string_array()


def _strings(a: np.ndarray):
    """A numpy column of only Python strings (no missing value) as pandas' constructor stores
    it: its string array, built as its inference builds it (``lib.maybe_convert_objects``
    ends in the same ``_from_sequence``), without that inference's scan (~30 us a column); None
    for any other column (or a pandas without the str dtype)."""
    if _STRING_ARRAY is None or a.dtype != object or not a.size or \
            not _IS_STRING_ARRAY(a, skipna=False):
        return None
    cls, dtype = _STRING_ARRAY
    return cls._from_sequence(a, dtype=dtype)


try:  # pandas' own test for an array of only strings (not public API)
    from pandas._libs.lib import is_string_array as _IS_STRING_ARRAY
except ImportError:
    _IS_STRING_ARRAY = None
    _STRING_ARRAY = None


def _from_arrays(arrays: list, columns: pd.Index, index: pd.Index) -> pd.DataFrame:
    """``pd.DataFrame._from_arrays(arrays, columns=columns, index=index,
    verify_integrity=False)``: the same blocks (pandas' ``_form_blocks``: the numpy columns of
    one dtype stacked into one 2-D block, in the order of their dtypes' first columns, a
    categorical or string column a block of its own), their grouping and block types looked up
    once per process for each tuple of column dtypes (``_LAYOUTS``) instead of worked out for
    every table (~30 us of a small table's ~60). Columns of any other kind (datetimes, other
    extension arrays): pandas' own ``_from_arrays``."""
    layout = _layout(arrays)
    if layout is None:
        return pd.DataFrame._from_arrays(arrays, columns=columns, index=index,
                                         verify_integrity=False)
    n = len(index)
    blocks = []
    for stacked, dtype, where, block_type in layout:
        if stacked:  # pandas' ``_stack_arrays``: a fresh 2-D array, one row per column
            values = np.empty((len(where), n), dtype=dtype)
            for row, i in enumerate(where):
                values[row] = arrays[i]
            blocks.append(block_type(values, placement=_PLACEMENT(where), ndim=2))
        else:
            blocks.append(block_type(arrays[where], placement=_PLACEMENT(where), ndim=2))
    mgr = _MANAGER(blocks, [columns, index], verify_integrity=False)
    mgr._consolidate_inplace()
    return pd.DataFrame._from_mgr(mgr, axes=mgr.axes)


_LAYOUTS: dict[tuple, list | None] = {}
"""A tuple of column dtypes -> the blocks pandas builds of such columns: (stacked, dtype,
positions, block type) each, positions a tuple of column positions for a stacked block, one
position for an extension array's; None: built by pandas."""


def _layout(arrays: list) -> list | None:
    """The blocks of ``arrays`` (``_LAYOUTS``), None where pandas must build them."""
    if _PLACEMENT is None:
        return None
    key = []
    for i, a in enumerate(arrays):
        t = type(a)
        if t is np.ndarray:
            if a.ndim != 1 or a.dtype.kind not in "biufO":
                return None
            key.append(a.dtype)
        elif t in _EXTENSION_ARRAYS:
            # pandas groups extension columns by their dtype object (one block each still)
            dt = a.dtype
            key.append(("ea", next(j for j in range(i + 1) if arrays[j].dtype is dt)))
        else:
            return None
    key = tuple(key)
    try:
        return _LAYOUTS[key]
    except KeyError:
        pass
    groups: dict = {}
    for i, k in enumerate(key):
        groups.setdefault(k, []).append(i)
    layout: list | None = []
    for where in groups.values():
        dtype = arrays[where[0]].dtype
        block_type = _BLOCK_TYPE(dtype)
        if isinstance(dtype, np.dtype):
            layout.append((True, dtype, tuple(where), block_type))
        elif getattr(dtype, "_supports_2d", True) is False:
            layout.extend((False, None, i, block_type) for i in where)
        else:
            layout = None
            break
    if len(_LAYOUTS) < 4096:  # bounded, as ``_COLUMNS``
        _LAYOUTS[key] = layout
    return layout


try:  # pandas' own parts of a table (not public API): without them, ``_from_arrays`` is pandas'
    from pandas._libs.internals import BlockPlacement as _PLACEMENT
    from pandas.core.internals.blocks import get_block_type as _BLOCK_TYPE
    from pandas.core.internals.managers import BlockManager as _MANAGER
    pd.DataFrame._from_mgr  # noqa: B018 - pandas 2.1+
except (ImportError, AttributeError):
    _PLACEMENT = None


_COLUMNS: dict[tuple, pd.Index] = {}


def _columns(names: tuple) -> pd.Index:
    """``pd.Index(list(names))``: built (its dtype inferred, ~25 us) once per process for each
    tuple of column names (a rank builds the same few dozen tables), handed out as a view of
    its own (an Index is immutable but for its ``name``, which a view does not share)."""
    try:
        idx = _COLUMNS[names]
    except KeyError:
        idx = pd.Index(list(names))
        if len(_COLUMNS) < 4096:  # bounded: names built from a trace's content could be many
            _COLUMNS[names] = idx
    except TypeError:  # a name that cannot be hashed: pandas' way (it refuses it too)
        return pd.Index(list(names))
    return idx._view()


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
    times): what pandas' ``to_numpy`` does, on the array the table stores. A numpy column
    (numbers, bools, objects) converted to ``dtype`` (None: its own) is a read-only view of
    the table's where the conversion copied nothing, as pandas gives it, else a fresh,
    writable array; an extension array (a Categorical, strings) gives its own ``to_numpy``.
    Anything else (repeated column names, datetimes, not a DataFrame) is read through
    pandas."""
    if FAST and type(df) is pd.DataFrame and _COLUMN_ARRAY is not None:
        loc = df.columns.get_loc(name)
        if type(loc) is int:
            a = _COLUMN_ARRAY(df, loc)
            if type(a) is np.ndarray and a.ndim == 1 and a.dtype.kind in "biufO":
                if dtype is None or a.dtype == np.dtype(dtype):
                    a = a.view()
                    a.flags.writeable = False
                    return a
                if a.dtype.kind != "O":
                    return a.astype(dtype)
                # pandas' ``IndexOpsMixin.to_numpy`` (no na_value, no copy asked)
                got = np.asarray(a, dtype=dtype)
                if got is a or np.shares_memory(a[:2], got[:2]):
                    got = got.view()
                    got.flags.writeable = False
                return got
            if type(a) in _EXTENSION_ARRAYS:  # ``Series.to_numpy`` of an extension dtype
                return a.to_numpy(dtype)
    return df[name].to_numpy() if dtype is None else df[name].to_numpy(dtype)


def with_columns(df: pd.DataFrame, values: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """``df.copy()`` with each column ``name`` of ``values`` (columns ``df`` has) set to
    ``values[name]`` (``copy[name] = values[name]``, one after the other): the same table (its
    columns, dtypes, values and index), built at once by ``frame`` where every column of ``df``
    and every new value is a 1-D numpy array of bools or numbers, the index a ``RangeIndex``
    from 0 and the column names unique (a copy and two assignments through pandas: ~0.15 ms
    whatever the rows; a rank of a job pays it once for its untraced graph's steps); else
    pandas' way."""
    n = len(df)
    fast = (FAST and type(df) is pd.DataFrame and _COLUMN_ARRAY is not None and
            n <= SMALL_ROWS and type(df.index) is pd.RangeIndex and df.index.start == 0 and
            df.index.step == 1 and not df.attrs and df.columns.is_unique and all(
                name in df.columns and _stored_as_is(v, n) and type(v) is np.ndarray
                for name, v in values.items()))
    if fast:
        data = {}
        for loc, name in enumerate(df.columns):
            a = _COLUMN_ARRAY(df, loc)
            if type(name) is not str or not _stored_as_is(a, n) or type(a) is not np.ndarray:
                fast = False
                break
            data[name] = values.get(name, a)
    if not fast:
        out = df.copy()
        for name, v in values.items():
            out[name] = v
        return out
    return frame(data)


_EXTENSION_ARRAYS = frozenset(t for t in (pd.Categorical, getattr(pd.arrays, "StringArray", None),
                                            getattr(pd.arrays, "ArrowStringArray", None))
                               if isinstance(t, type))
"""The extension arrays a tracekit table stores (categoricals, strings), whose own
``to_numpy`` is what a Series of them gives."""


def categorical(df: pd.DataFrame, name: str) -> pd.Categorical | None:
    """The column ``name`` of ``df`` when pandas stores it as a Categorical: ``df[name].array``,
    the same object, without the Series built for it; None for a column of another kind."""
    a = None
    if FAST and type(df) is pd.DataFrame and _COLUMN_ARRAY is not None:
        loc = df.columns.get_loc(name)
        if type(loc) is int:
            a = _COLUMN_ARRAY(df, loc)
    if a is None:
        a = df[name].array
    return a if type(a) is pd.Categorical else None


__all__ = ["SMALL_ROWS", "BuiltWhenRead", "Later", "categorical", "column", "frame", "of_rows",
           "with_columns"]
