"""``tracekit._fastnp``: ``r_`` gives what ``np.r_[...]`` gives and ``isin`` what ``np.isin``
gives (the same values, dtype and shape, or the same exception), whatever the items; and
the answers ``phases`` keeps per process (``_kept``) are those asked afresh."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import phases
from tracekit._fastnp import SMALL_KEYS, SMALL_TABLE, factorize, index_of, isin, r_

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
    phases._KEPT.clear()
    first = phases.name_matches(codes, names, rx)  # searched, the short names kept
    assert phases._KEPT
    again = phases.name_matches(codes, names, rx)  # from what was kept
    find = (rx if not isinstance(rx, str) else re.compile(rx)).search
    want = np.array([c >= 0 and find(names[c]) is not None for c in codes])
    assert first.tolist() == again.tolist() == want.tolist()
    assert all(len(k[1]) <= phases.KEPT_NAME for k in phases._KEPT)


def test_kept_answers_are_bounded(monkeypatch):
    monkeypatch.setattr(phases, "KEPT_ANSWERS", 3)
    phases._KEPT.clear()
    names = pd.Index([f"k{i}" for i in range(10)])
    got = phases.name_matches(np.arange(10), names, "k[0-4]")
    assert got.tolist() == [True] * 5 + [False] * 5
    assert len(phases._KEPT) <= 3


def test_kept_answers_of_two_rule_sets_stay_apart():
    """The same names against two rule sets (two tuples of rules, each named by its id and
    held while answers about it are kept): each set's own answers."""
    phases._KEPT.clear()
    names = pd.Index(["aten::mm", "## forward ##", "ProfilerStep#7",
                      "ProfilerStep#99999999999999999999"])
    one = (phases.PhaseRule(phase="fwd", pattern="forward"),)
    two = (phases.PhaseRule(phase="mm", pattern="mm"),
           phases.PhaseRule(phase="fwd", pattern="forward"))
    for _ in range(2):
        assert phases._first_match(names, one).tolist() == [-1, 0, -1, -1]
        assert phases._first_match(names, two).tolist() == [0, 1, -1, -1]
        assert phases._captured_int(names, r"ProfilerStep#(\d+)").tolist() == [-1, -1, 7, -1]
        assert phases._captured_int(names, r"(\d)").tolist() == [-1, -1, 7, 9]


NAMES = ["gemm_kernel", "ncclDevKernel_AllReduce", "ProfilerStep#3", "## forward ##",
         "cudaStreamSynchronize", "aten::mm", "Memcpy HtoD (Pageable -> Device)", "x" * 1500]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=8, unique=True),
       st.lists(st.integers(-1, 7), max_size=20))
def test_per_used_name_of_few_names_is_per_used_name(names, codes):
    """Of few names, every name asked (``FEW_NAMES``): the same values as of the used ones."""
    cats = pd.Index(names)
    codes = np.array([c if c < len(names) else -1 for c in codes], np.int64)
    rules = phases.default_rules()
    fs = [(lambda n: np.asarray(n.astype(str), dtype=object), ""),
          (lambda n: phases._first_match(n, rules.kernels), -1),
          (lambda n: phases._captured_int(n, rules.profiler_step), -1),
          (lambda n: np.array([len(str(x)) > 20 for x in n.tolist()], bool), False),
          (lambda n: np.array([str(x)[:3] for x in n.tolist()]), "")]  # a str width: not taken
    for f, fill in fs:
        got = _outcome(lambda: phases.per_used_name(codes, cats, f, fill))
        old = phases.FEW_NAMES
        phases.FEW_NAMES = 0
        try:
            want = _outcome(lambda: phases.per_used_name(codes, cats, f, fill))
        finally:
            phases.FEW_NAMES = old
        assert _same(got, want)


def _same_factorized(got, want) -> None:
    assert type(got[1]) is type(want[1])
    assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0])
    assert got[1].dtype == want[1].dtype and list(got[1]) == list(want[1])


@given(arrays(max_size=12), st.booleans())
@settings(max_examples=400, deadline=None)
def test_factorize_is_pandas(values, sort):
    _same_factorized(factorize(values, sort=sort), pd.factorize(values, sort=sort))


@given(st.lists(st.sampled_from(["gemm", "b", "a", "", "ä", "a10", "a2", "Z"]), max_size=12),
       st.booleans())
@settings(max_examples=300, deadline=None)
def test_factorize_of_strings_is_pandas(names, sort):
    values = np.array(names, dtype=object) if names else np.zeros(0, object)
    _same_factorized(factorize(values, sort=sort), pd.factorize(values, sort=sort))


def test_factorize_of_many_keys_is_pandas():
    values = np.arange(3 * SMALL_KEYS, dtype=np.int64) % 7
    _same_factorized(factorize(values, sort=True), pd.factorize(values, sort=True))


@given(st.lists(st.integers(-5, 5), max_size=8), st.lists(st.integers(-7, 7), max_size=8))
@settings(max_examples=400, deadline=None)
def test_index_of_is_get_indexer(keys, values):
    k, v = np.array(keys, np.int64), np.array(values, np.int64)
    if len(set(keys)) < len(keys):  # pandas refuses keys that repeat; so does index_of
        with pytest.raises(Exception) as want:
            pd.Index(k).get_indexer(v)
        with pytest.raises(type(want.value)):
            index_of(k, v)
        return
    got, want = index_of(k, v), pd.Index(k).get_indexer(v)
    assert got.dtype == want.dtype and np.array_equal(got, want)
