"""The ``Trace`` tables (see ``model.py``) from the columns a parse or the trace cache holds.

Apart from the parser (``_columns``, ``_reader``: msgspec, the compiled scanner) so that reading
a cached trace imports neither: the CLI's cold path forks its parse child before importing them,
and its parent only reads the entry the child wrote (``tracekit.trace.prefetch``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracekit.trace.model import ARG_COLUMNS, EVENT_COLUMNS, MEMORY_COLUMNS

if TYPE_CHECKING:  # imported where a table is built: parsing needs only numpy
    import pandas as pd


def events_frame(cols: dict[str, np.ndarray], names: list[str], launches: list[str]) -> pd.DataFrame:
    """The ``Trace.events`` DataFrame from ``event_arrays()`` columns, the name list and the
    launch configurations' (``launch``: codes into it, -1 none)."""
    import pandas as pd

    data = {}
    for c, dtype in EVENT_COLUMNS.items():
        a = cols[c]
        if c == "name":
            data[c] = pd.Categorical.from_codes(a, categories=pd.Index(names), validate=False)
        elif c == "launch":
            data[c] = pd.Categorical.from_codes(a, categories=pd.Index(launches, dtype=object), validate=False)
        else:
            data[c] = a.astype(dtype, copy=False)
    from tracekit.frames import frame

    return frame(data, copy=False)


_EMPTY: dict[str, pd.DataFrame] = {}


def _empty(table: str, build) -> pd.DataFrame:
    """A table of no rows (most traces have no args, many no ``[memory]`` event): the same
    frame whatever the trace (its categoricals have no categories left), built once per process
    and copied shallow (pandas' copy-on-write: a change to one copy changes no other); building
    it cost ~1 ms a trace, a third of a tiny rank's load."""
    got = _EMPTY.get(table)
    if got is None:
        got = _EMPTY[table] = build()
    return got.copy(deep=False)


def args_frame(cols: dict[str, np.ndarray], strings: list[str]) -> pd.DataFrame:
    """The ``Trace.args`` DataFrame from ``arg_arrays()`` columns and their string list."""
    if not len(cols["event"]):
        return _empty("args", lambda: _args_frame(cols, []))
    return _args_frame(cols, strings)


def _args_frame(cols: dict[str, np.ndarray], strings: list[str]) -> pd.DataFrame:
    import pandas as pd

    cats = pd.Index(strings, dtype=object)
    data = {}
    for c, dtype in ARG_COLUMNS.items():
        a = cols[c]
        if dtype == "category":
            data[c] = pd.Categorical.from_codes(a, categories=cats, validate=False).remove_unused_categories()
        else:
            data[c] = a.astype(dtype, copy=False)
    return pd.DataFrame(data, copy=False)


def memory_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """The ``Trace.memory`` DataFrame from ``memory_arrays()`` columns."""
    if not len(cols["ts"]):
        return _empty("memory", lambda: _memory_frame(cols))
    return _memory_frame(cols)


def _memory_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: cols[c].astype(t, copy=False) for c, t in MEMORY_COLUMNS.items()}, copy=False)


__all__ = ["args_frame", "events_frame", "memory_frame"]
