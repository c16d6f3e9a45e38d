"""Group-by in numpy for the per-name tables (operators, kernels): integer keys in, one row per
group out, in time linear in the rows: keys are hashed (pandas' factorize, or a dict for a few: ``_fastnp.factorize``), never sorted, and
every figure is a ``bincount`` (pandas' groupby with several aggregations costs a second on a
million rows; sorting them, half of that)."""

from __future__ import annotations

import numpy as np

from tracekit import _fastnp as fnp


def codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as integer codes and the distinct values they index (first seen first)."""
    c, uniq = fnp.factorize(np.asarray(values), sort=False)
    return c.astype(np.int64), np.asarray(uniq)


def _combined(*keys: np.ndarray) -> np.ndarray:
    """One int64 per row that is equal exactly where all ``keys`` (non-negative) are."""
    key = np.zeros(len(keys[0]), np.int64)
    for k in keys:
        k = np.asarray(k, np.int64)
        key = key * (int(k.max()) + 1 if k.size else 1) + k
    return key


def first_rows(gid: np.ndarray, n: int) -> np.ndarray:
    """The row of each group's first member."""
    first = np.empty(n, np.int64)
    first[gid[::-1]] = np.arange(gid.size - 1, -1, -1, dtype=np.int64)
    return first


def groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per row, the id of its group of equal ``keys`` (non-negative integer arrays), the row of
    each group's first member, and the number of groups (ids in order of first appearance)."""
    gid, uniq = codes(_combined(*keys))
    return gid, first_rows(gid, len(uniq)), len(uniq)


def total(gid: np.ndarray, n: int, values: np.ndarray | None = None) -> np.ndarray:
    """Sum of ``values`` per group (the count without them)."""
    if values is None:
        return np.bincount(gid, minlength=n).astype(np.int64)
    v = np.asarray(values)
    out = np.bincount(gid, weights=v, minlength=n)
    return np.rint(out).astype(np.int64) if v.dtype.kind in "iu" else out


def extreme(gid: np.ndarray, n: int, values: np.ndarray, largest: bool) -> np.ndarray:
    """Min (or max) of ``values`` per group."""
    import pandas as pd

    grp = pd.Series(np.asarray(values)).groupby(gid, sort=True)
    out = grp.max() if largest else grp.min()
    return out.reindex(range(n)).to_numpy()


def mode(gid: np.ndarray, n: int, code: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per group, the ``code`` (>= 0) with the most rows (or the largest sum of ``weights``),
    ties to the smallest code; -1 for a group with no code >= 0."""
    keep = code >= 0
    g, c = gid[keep], code[keep]
    out = np.full(n, -1, np.int64)
    if not g.size:
        return out
    width = int(c.max()) + 1
    pid, pair = codes(g * width + c)
    w = np.bincount(pid, weights=None if weights is None else np.asarray(weights, np.float64)[keep])
    pg, pc = pair // width, pair % width
    order = np.lexsort((pc, -w, pg))  # per group: the largest weight first, then the smallest code
    first = order[fnp.r_(True, pg[order][1:] != pg[order][:-1])]
    out[pg[first]] = pc[first]
    return out


def distinct(gid: np.ndarray, n: int, code: np.ndarray) -> np.ndarray:
    """How many different ``code`` (>= 0) each group has."""
    keep = code >= 0
    if not keep.any():
        return np.zeros(n, np.int64)
    g, c = gid[keep], code[keep]
    width = int(c.max()) + 1
    _, pair = codes(g * width + c)
    return np.bincount(pair // width, minlength=n).astype(np.int64)


def joined(gid: np.ndarray, n: int, code: np.ndarray, names: list[str]) -> list[str]:
    """Per group, its different ``names[code]`` in the order of ``names``, ", "-joined."""
    width = len(names) + 1
    pair = np.sort(codes(gid * width + code)[1]) if gid.size else np.zeros(0, np.int64)
    out: list[list[str]] = [[] for _ in range(n)]
    for g, c in zip((pair // width).tolist(), (pair % width).tolist()):
        out[g].append(names[c])
    return [", ".join(x) for x in out]
