"""``tracekit._fastnp``: ``r_`` gives what ``np.r_[...]`` gives and ``isin`` what ``np.isin``
gives (the same values, dtype and shape, or the same exception), whatever the items; and
``phases.name_matches``' answers kept per process are the answers searched afresh."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import phases
from tracekit._fastnp import SMALL_TABLE, isin, r_

DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64, np.float32,
          np.float64, object]
SCALARS = [0, 1, -1, 300, 2**63, True, False, 2.5, float("nan"), np.int8(3), np.uint64(2**64 - 1),
           np.float32(1.5), np.int64(-7), np.bool_(True)]


@st.composite
def arrays(draw, max_size: int = 6) -> np.ndarray:
    dt = np.dtype(draw(st.sampled_from(DTYPES)))
    n = draw(st.integers(0, max_size))
    if dt.kind == "O":
        return np.array(draw(st.lists(st.sampled_from(["a", "b", 1, 2.0, None]), min_size=n,
                                      max_size=n)) or [], dtype=object)[:n]
    if dt.kind == "b":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        vals = st.one_of(st.integers(-3, 3), st.sampled_from([info.min, info.max]))
        return np.array([v for v in draw(st.lists(vals, min_size=n, max_size=n))
                         if info.min <= v <= info.max], dtype=dt)
    return np.array(draw(st.lists(st.floats(allow_infinity=False, width=32), min_size=n,
                                  max_size=n)), dtype=dt)


def _outcome(f):
    try:
        return f()
    except Exception as exc:  # the same kind of error, or none
        return type(exc)


def _same(a, b) -> bool:
    if isinstance(a, type) or isinstance(b, type):
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and \
        all(x is y or x == y or (x != x and y != y)
            for x, y in zip(np.ravel(a).tolist(), np.ravel(b).tolist()))


item = st.one_of(arrays(), st.sampled_from(SCALARS), st.lists(st.integers(-2, 2), max_size=3),
                 st.just(np.zeros((), np.int64)), st.just(np.zeros((2, 2), np.int32)))


@settings(max_examples=400, deadline=None)
@given(st.lists(item, min_size=1, max_size=5))
def test_r_is_numpys(items):
    got = _outcome(lambda: r_(*items))
    want = _outcome(lambda: np.r_[tuple(items)])
    assert _same(got, want), (items, got, want)


@settings(max_examples=400, deadline=None)
@given(arrays(max_size=12), st.one_of(arrays(max_size=SMALL_TABLE + 2),
                                      st.lists(st.sampled_from(SCALARS[:8]), max_size=4)))
def test_isin_is_numpys(values, table):
    got = _outcome(lambda: isin(values, table))
    want = _outcome(lambda: np.isin(values, table))
    assert _same(got, want), (values, table, got, want)


def test_isin_takes_a_series_and_big_tables():
    s = pd.Series(np.array([1, 5, 9, 5], np.int8))
    assert isin(s, [5]).tolist() == [False, True, False, True]
    big = np.arange(100)
    assert isin(np.array([3, 200]), big).tolist() == [True, False]


@pytest.mark.parametrize("rx", ["gemm", r"^a.*b$", re.compile("Pageable"), re.compile("x", re.I)])
def test_name_matches_kept_answers_are_searched_answers(rx):
    names = pd.Index(["gemm_kernel", "aXb", "Pageable", "X" * 2000, "other", "ab"])
    codes = np.array([0, 1, 2, 3, 4, 5, -1, 2, 0])
    phases._MATCHED.clear()
    first = phases.name_matches(codes, names, rx)  # searched, the short names kept
    assert phases._MATCHED
    again = phases.name_matches(codes, names, rx)  # from what was kept
    find = (rx if not isinstance(rx, str) else re.compile(rx)).search
    want = np.array([c >= 0 and find(names[c]) is not None for c in codes])
    assert first.tolist() == again.tolist() == want.tolist()
    assert all(len(k[1]) <= phases.MATCH_MEMO_NAME for k in phases._MATCHED)


def test_name_matches_keeps_a_bounded_number_of_answers(monkeypatch):
    monkeypatch.setattr(phases, "MATCH_MEMO_SIZE", 3)
    phases._MATCHED.clear()
    names = pd.Index([f"k{i}" for i in range(10)])
    got = phases.name_matches(np.arange(10), names, "k[0-4]")
    assert got.tolist() == [True] * 5 + [False] * 5
    assert len(phases._MATCHED) <= 3
