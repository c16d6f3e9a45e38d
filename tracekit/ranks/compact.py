"""A rank's summary held compactly: what grows with its collectives as numpy columns.

A job of 1,024 ranks of ~1,000 collectives each holds a million collective kernels and as many
skeleton terms in the client. As JSON-shaped Python values (a dict of ten entries per kernel, a
list entry per term and column) each costs hundreds of bytes of objects; as columns, 8 bytes a
value. ``compact(summary)`` turns a rank's ``collectives.kernels`` into ``KernelRows`` (columns,
read as the same rows), its process groups' rank lists and its ``skeleton``'s lists into arrays;
``plain`` turns them back into JSON values. The per-rank work compacts what it sends
(``tracekit.ranks.work.summary``): it pickles larger (int64 where pickle writes a small int in
1-5 bytes) and unpickles into a few arrays instead of a million objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tracekit import _fastnp as fnp

KERNEL_TEXT = ("group", "collective")
"""The text columns of ``schema.CollectiveKernelRow`` (held as codes into a few names)."""
KERNEL_INT = ("seq", "index", "step", "stream", "ts", "end", "in_bytes", "out_bytes")
"""Its integer columns (int64)."""
KERNEL_COLUMNS = ("group", "collective", "seq", "index", "step", "stream", "ts", "end",
                  "in_bytes", "out_bytes")
"""Every column, in the row's key order."""
SKELETON_INT = ("kernels", "arrive", "end", "steps", "done")
"""The skeleton's per-cut and per-step integer lists (``pinned`` is bool)."""


class KernelRows(Sequence):
    """A rank's collective kernels (``schema.CollectiveKernelRow`` each) as columns; indexing
    and iterating give the same dicts as the list it was made from (built on each access:
    the job reads the columns, ``column``)."""

    __slots__ = ("_int", "_codes", "_names")

    def __init__(self, ints: dict[str, np.ndarray], codes: dict[str, np.ndarray],
                 names: dict[str, tuple]):
        self._int = ints
        self._codes = codes
        self._names = names

    @classmethod
    def of(cls, rows: list[dict]) -> KernelRows:
        """The columns of ``rows`` (each with every key of ``KERNEL_COLUMNS``)."""
        n = len(rows)
        ints = {c: np.fromiter((r[c] for r in rows), np.int64, n) for c in KERNEL_INT}
        codes, names = {}, {}
        for c in KERNEL_TEXT:
            seen: dict = {}
            codes[c] = np.fromiter((seen.setdefault(r[c], len(seen)) for r in rows), np.int32, n)
            names[c] = tuple(seen)
        return cls(ints, codes, names)

    def __len__(self) -> int:
        return int(self._int["seq"].size)

    def column(self, name: str) -> np.ndarray:
        """One column: int64 for the integer ones, an object array of str for the text ones."""
        if name in self._int:
            return self._int[name]
        names = np.empty(len(self._names[name]), dtype=object)
        names[:] = self._names[name]
        return names[self._codes[name]] if names.size else np.empty(0, dtype=object)

    def _row(self, i: int) -> dict:
        out = {}
        for c in KERNEL_COLUMNS:
            out[c] = (self._names[c][int(self._codes[c][i])] if c in self._codes
                      else int(self._int[c][i]))
        return out

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("kernel row out of range")
        return self._row(i)

    def __iter__(self):
        return (self._row(j) for j in range(len(self)))

    def tolist(self) -> list[dict]:
        return list(self)

    def __eq__(self, other) -> bool:
        if isinstance(other, KernelRows):
            other = other.tolist()
        return isinstance(other, list) and self.tolist() == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"KernelRows({len(self)} kernels)"

    def __getstate__(self):
        return self._int, self._codes, self._names

    def __setstate__(self, state) -> None:
        self._int, self._codes, self._names = state


def kernel_column(kernels, name: str) -> np.ndarray:
    """Column ``name`` of a rank's ``collectives.kernels``, ``KernelRows`` or a list of rows."""
    if isinstance(kernels, KernelRows):
        return kernels.column(name)
    if name in KERNEL_TEXT:
        out = np.empty(len(kernels), dtype=object)
        out[:] = [r[name] for r in kernels]
        return out
    return np.fromiter((r[name] for r in kernels), np.int64, len(kernels))


def compact_skeleton(sk: dict | None) -> dict | None:
    """``schema.Skeleton`` with its lists as arrays (int64; ``pinned`` bool; the terms' phase
    an object array of one str object per distinct name)."""
    if not isinstance(sk, dict):
        return sk
    out = dict(sk)
    for k in SKELETON_INT:
        if k in out:
            out[k] = np.asarray(out[k], np.int64)
    if "pinned" in out:
        out["pinned"] = np.asarray(out["pinned"], bool)
    t = out.get("terms")
    if isinstance(t, dict):
        t = dict(t)
        for k, v in t.items():
            t[k] = _texts(v) if k == "phase" else np.asarray(v, np.int64)
        out["terms"] = t
    return out


def _texts(values) -> np.ndarray:
    """An object array of ``values`` sharing one object per distinct text (pickled once)."""
    seen: dict = {}
    out = np.empty(len(values), dtype=object)
    out[:] = [seen.setdefault(v, v) for v in values]
    return out


def compact(rank: dict) -> dict:
    """``rank`` (a summary) with its collective kernels as ``KernelRows`` and its skeleton's
    lists as arrays (a new dict; ``rank`` itself is not changed)."""
    out = dict(rank)
    c = out.get("collectives")
    if isinstance(c, dict) and isinstance(c.get("kernels"), list) and all(
            tuple(r) == KERNEL_COLUMNS for r in c["kernels"]):
        out["collectives"] = {**c, "kernels": KernelRows.of(c["kernels"])}
    if isinstance(c, dict) and isinstance(c.get("groups"), list):
        # a group's ranks: the job's world on every rank of a 1,024-rank job
        out["collectives"] = {**out["collectives"], "groups": [
            {**g, "ranks": np.asarray(g["ranks"], np.int64)} if isinstance(g, dict) and
            isinstance(g.get("ranks"), list) and all(type(x) is int for x in g["ranks"]) else g
            for g in c["groups"]]}
    if isinstance(out.get("skeleton"), dict):
        out["skeleton"] = compact_skeleton(out["skeleton"])
    return out


def plain(value):
    """JSON values of a compacted summary (or any part of it): ``KernelRows`` as its rows,
    arrays as lists, numpy scalars as Python ones."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, KernelRows):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class KernelMap(Mapping):
    """A rank's collective kernel row -> a number (its instance, transfer, bytes), as two
    arrays (sorted keys, values); read as a dict (values as Python numbers)."""

    __slots__ = ("keys_", "values_")

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        self.keys_ = keys
        self.values_ = values

    def __getitem__(self, k):
        i = int(np.searchsorted(self.keys_, k))
        if i < self.keys_.size and self.keys_[i] == k:
            return self.values_[i].item()
        raise KeyError(k)

    def __iter__(self):
        return iter(self.keys_.tolist())

    def __len__(self) -> int:
        return int(self.keys_.size)

    def __repr__(self) -> str:
        return f"KernelMap({len(self)} kernels)"

    def items(self):
        return list(zip(self.keys_.tolist(), self.values_.tolist()))

    def values(self):
        return self.values_.tolist()

    def replaced(self, new: dict) -> KernelMap:
        """A copy with the values of the keys in ``new`` (keys it has) replaced."""
        v = self.values_.copy()
        if new:
            k = np.fromiter(new, np.int64, len(new))
            v[np.searchsorted(self.keys_, k)] = np.fromiter(new.values(), v.dtype, len(new))
        return KernelMap(self.keys_, v)

    def lookup(self, keys: np.ndarray, default) -> np.ndarray:
        """The values of ``keys`` (an int array), ``default`` where absent."""
        keys = np.asarray(keys, np.int64)
        i = np.minimum(np.searchsorted(self.keys_, keys), max(self.keys_.size - 1, 0))
        hit = (self.keys_[i] == keys) if self.keys_.size else np.zeros(keys.size, bool)
        out = np.full(keys.size, default, dtype=np.result_type(self.values_.dtype,
                                                               np.asarray(default).dtype))
        out[hit] = self.values_[i[hit]]
        return out


def lookup(mapping, keys, default) -> np.ndarray:
    """``mapping``'s values of ``keys`` (kernel rows), ``default`` where absent: a
    ``KernelMap``'s in one pass, a dict's one by one."""
    if isinstance(mapping, KernelMap):
        return mapping.lookup(keys, default)
    return np.array([mapping.get(int(k), default) for k in np.asarray(keys).tolist()])


def kernel_maps(rank: np.ndarray, kernel: np.ndarray, **values: np.ndarray) -> dict:
    """rank -> {name: ``KernelMap``} of each column in ``values``, per (rank, kernel) row (a
    (rank, kernel) given twice: the last row's value, as a dict built row by row keeps)."""
    rank = np.asarray(rank, np.int64)
    kernel = np.asarray(kernel, np.int64)
    o = np.lexsort((np.arange(rank.size), kernel, rank))
    r, k = rank[o], kernel[o]
    last = fnp.r_((r[1:] != r[:-1]) | (k[1:] != k[:-1]), True) if r.size else np.zeros(0, bool)
    o, r, k = o[last], r[last], k[last]
    bounds = np.flatnonzero(fnp.r_(True, r[1:] != r[:-1])) if r.size else np.zeros(0, np.int64)
    ends = fnp.r_(bounds[1:], r.size)
    out = {}
    for a, b in zip(bounds.tolist(), ends.tolist()):
        keys = k[a:b].copy()  # one array for the rank's maps
        out[int(r[a])] = {name: KernelMap(keys, np.asarray(v)[o[a:b]])
                          for name, v in values.items()}
    return out
