"""Group-by in numpy for the per-name tables (operators, kernels): integer keys in, one row per
group out, in time linear in the rows (pandas' groupby with several aggregations costs a
second on a million rows; these a tenth of that)."""

from __future__ import annotations

import numpy as np


def codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as integer codes and the distinct values they index (first seen first)."""
    import pandas as pd

    c, uniq = pd.factorize(np.asarray(values), sort=False)
    return c.astype(np.int64), np.asarray(uniq)


def groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per row, the id of its group of equal ``keys`` (non-negative integer arrays), the row of
    each group's first member, and the number of groups (ids in order of the keys)."""
    key = np.zeros(len(keys[0]), np.int64)
    for k in keys:
        k = np.asarray(k, np.int64)
        key = key * (int(k.max()) + 1 if k.size else 1) + k
    uniq, first, gid = np.unique(key, return_index=True, return_inverse=True)
    return gid.reshape(-1), first, len(uniq)


def total(gid: np.ndarray, n: int, values: np.ndarray | None = None) -> np.ndarray:
    """Sum of ``values`` per group (the count without them)."""
    if values is None:
        return np.bincount(gid, minlength=n).astype(np.int64)
    v = np.asarray(values)
    out = np.bincount(gid, weights=v, minlength=n)
    return np.rint(out).astype(np.int64) if v.dtype.kind in "iu" else out


def extreme(gid: np.ndarray, n: int, values: np.ndarray, largest: bool) -> np.ndarray:
    """Min (or max) of ``values`` per group."""
    order = np.argsort(gid, kind="stable")
    g, v = gid[order], np.asarray(values)[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if g.size else np.zeros(0, np.int64)
    red = (np.maximum if largest else np.minimum).reduceat(v, starts) if g.size else v[:0]
    out = np.zeros(n, v.dtype)
    out[g[starts]] = red
    return out


def mode(gid: np.ndarray, n: int, code: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per group, the ``code`` (>= 0) with the most rows (or the largest sum of ``weights``),
    ties to the smallest code; -1 for a group with no code >= 0."""
    keep = code >= 0
    g, c = gid[keep], code[keep]
    out = np.full(n, -1, np.int64)
    if not g.size:
        return out
    pair, inv = np.unique(g * (int(c.max()) + 1) + c, return_inverse=True)
    w = np.bincount(inv.reshape(-1), weights=None if weights is None else np.asarray(weights, np.float64)[keep])
    pg, pc = pair // (int(c.max()) + 1), pair % (int(c.max()) + 1)
    order = np.lexsort((pc, -w, pg))  # per group: the largest weight first, then the smallest code
    first = order[np.r_[True, pg[order][1:] != pg[order][:-1]]]
    out[pg[first]] = pc[first]
    return out


def distinct(gid: np.ndarray, n: int, code: np.ndarray) -> np.ndarray:
    """How many different ``code`` (>= 0) each group has."""
    keep = code >= 0
    if not keep.any():
        return np.zeros(n, np.int64)
    g, c = gid[keep], code[keep]
    pair = np.unique(g * (int(c.max()) + 1) + c)
    return np.bincount(pair // (int(c.max()) + 1), minlength=n).astype(np.int64)


def joined(gid: np.ndarray, n: int, code: np.ndarray, names: list[str]) -> list[str]:
    """Per group, its different ``names[code]`` in the order of ``names``, ", "-joined."""
    pair = np.unique(gid * (len(names) + 1) + code) if gid.size else np.zeros(0, np.int64)
    out: list[list[str]] = [[] for _ in range(n)]
    for g, c in zip((pair // (len(names) + 1)).tolist(), (pair % (len(names) + 1)).tolist()):
        out[g].append(names[c])
    return [", ".join(x) for x in out]
