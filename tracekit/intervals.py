"""Vectorised interval arithmetic on integer-nanosecond ``[start, end)`` intervals.

Everything here works on numpy arrays and sorts once; no Python loop runs per interval, so a
trace with millions of GPU activities costs a few sorts. A *union* is a pair of int64 arrays
``(starts, ends)`` of disjoint, sorted, non-touching intervals, as returned by ``union``.
"""

from __future__ import annotations

import numpy as np

Union = tuple[np.ndarray, np.ndarray]
"""Disjoint sorted intervals ``(starts, ends)``, both int64."""

EMPTY: Union = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def is_nondecreasing(a: np.ndarray) -> bool:
    """Whether ``a`` is sorted (ties allowed): a check that lets a sort of data that usually
    comes sorted (a trace's events are, by ts) be skipped."""
    return a.size < 2 or bool(np.all(a[1:] >= a[:-1]))


def union(starts: np.ndarray, ends: np.ndarray) -> Union:
    """Merge possibly overlapping intervals into a union (sort by start + cumulative max of ends).

    Empty intervals (end <= start) cover nothing and are dropped."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = e[order]
    reach = np.maximum.accumulate(e)
    # interval i opens a new group when it starts after everything before it has ended
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    group_start = np.flatnonzero(new)
    group_last = np.append(group_start[1:] - 1, s.size - 1)
    return s[group_start], reach[group_last]


def length(u: Union) -> int:
    """Total length of a union."""
    return int((u[1] - u[0]).sum())


def _sweep(unions: list[Union]) -> tuple[np.ndarray, np.ndarray]:
    """Every start and end of the given unions in time order, and how many of the unions cover
    the time from each of them to the next. At equal times the ends come first: touching
    intervals do not overlap."""
    starts = [u[0] for u in unions]
    t = np.concatenate(starts + [u[1] for u in unions])
    n = sum(x.size for x in starts)
    d = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((d, t))
    return t[order], np.cumsum(d[order])


def intersection_length(a: Union, b: Union) -> int:
    """|a ∩ b| for two unions."""
    if a[0].size == 0 or b[0].size == 0:
        return 0
    t, depth = _sweep([a, b])
    return int(np.diff(t)[depth[:-1] == 2].sum())


def intersection(a: Union, b: Union) -> Union:
    """a ∩ b as a union."""
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    t, depth = _sweep([a, b])
    opens = np.flatnonzero(depth[:-1] == 2)
    s, e = t[opens], t[opens + 1]
    keep = e > s
    return union(s[keep], e[keep])


def merge(*unions: Union) -> Union:
    """a ∪ b ∪ ... as a union."""
    parts = [u for u in unions if u[0].size]
    if not parts:
        return EMPTY
    return union(np.concatenate([u[0] for u in parts]), np.concatenate([u[1] for u in parts]))


def difference_length(a: Union, b: Union) -> int:
    """|a \\ b| for two unions."""
    return length(a) - intersection_length(a, b)


def covered_in_windows(u: Union, ws: np.ndarray, we: np.ndarray) -> np.ndarray:
    """For each window ``[ws[i], we[i])``, how much of it the union covers (int64 array)."""
    ws = np.asarray(ws, dtype=np.int64)
    we = np.asarray(we, dtype=np.int64)
    if u[0].size == 0 or ws.size == 0:
        return np.zeros(ws.size, np.int64)
    return np.maximum(covered_upto(u, we) - covered_upto(u, ws), 0)


def covered_upto(u: Union, t: np.ndarray) -> np.ndarray:
    """For each time t, how much of ``(-inf, t)`` the union covers (int64 array, non-decreasing
    in t)."""
    t = np.asarray(t, dtype=np.int64)
    s, e = u
    if s.size == 0:
        return np.zeros(t.size, np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])  # cum[k] = length of intervals 0..k-1
    k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
    full = cum[np.maximum(k - 1, 0)]
    last = np.where(k > 0, np.clip(t - s[np.maximum(k - 1, 0)], 0,
                                   (e - s)[np.maximum(k - 1, 0)]), 0)
    return np.where(k > 0, full + last, 0).astype(np.int64)


def next_free_start(u: Union, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each time t: whether the union covers t, and the start of the next interval at or after t.

    Returns ``(busy, next_start)``; ``next_start`` is -1 where no interval starts at or after t.
    """
    t = np.asarray(t, dtype=np.int64)
    if u[0].size == 0:
        return np.zeros(t.size, bool), np.full(t.size, -1, np.int64)
    s, e = u
    k = np.searchsorted(s, t, side="right") - 1  # last interval starting at or before t
    busy = (k >= 0) & (e[np.maximum(k, 0)] > t)
    nxt = np.searchsorted(s, t, side="left")  # first interval starting at or after t
    next_start = np.where(nxt < s.size, s[np.minimum(nxt, s.size - 1)], -1)
    return busy, next_start


def innermost_containers(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Parent of each interval: the innermost other interval containing it, or -1.

    ``starts`` must be sorted ascending with ties broken by ``ends`` descending (outer first).
    The parent of i is the nearest j < i with ends[j] >= ends[i] (any such j contains i, since
    it starts no later). Found by pointer jumping, vectorised over all intervals per round.
    """
    e = np.asarray(ends, dtype=np.int64)
    n = e.size
    p = np.arange(n, dtype=np.int64) - 1
    active = np.flatnonzero(p >= 0)
    while active.size:
        cand = p[active]
        bad = e[cand] < e[active]
        active = active[bad]
        p[active] = p[p[active]]
        active = active[p[active] >= 0]
    return p


def innermost_enclosing(
    starts: np.ndarray,
    ends: np.ndarray,
    parents: np.ndarray,
    qs: np.ndarray,
    qe: np.ndarray,
) -> np.ndarray:
    """For each query ``[qs, qe]``, the index of the innermost interval containing it, or -1.

    ``starts``/``ends`` sorted as for ``innermost_containers`` and ``parents`` its result.
    """
    qs = np.asarray(qs, dtype=np.int64)
    qe = np.asarray(qe, dtype=np.int64)
    if starts.size == 0 or qs.size == 0:
        return np.full(qs.size, -1, np.int64)
    idx = np.searchsorted(starts, qs, side="right").astype(np.int64) - 1
    todo = np.flatnonzero(idx >= 0)
    while todo.size:
        bad = ends[idx[todo]] < qe[todo]
        todo = todo[bad]
        idx[todo] = parents[idx[todo]]
        todo = todo[idx[todo] >= 0]
    return idx
