"""``tracekit.frames.frame``: the table pandas' constructor gives, whatever the columns;
``tracekit.frames.column``: the array pandas' ``df[name].to_numpy(dtype)`` gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import frames
from tracekit.frames import SMALL_ROWS, column, frame, of_rows, with_columns

DTYPES = [np.int64, np.int32, np.int16, np.int8, np.uint8, np.float64, np.float32, bool]


@st.composite
def columns(draw) -> dict:
    n = draw(st.sampled_from([0, 1, 3, 17, SMALL_ROWS, SMALL_ROWS + 1]))
    out = {}
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["num", "num", "cat", "obj", "str_cat", "readonly", "unicode",
                                     "str_none", "dicts", "text"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**31)))
        if kind in ("num", "readonly"):
            a = (rng.integers(-1000, 1000, n) * draw(st.sampled_from([1, 10**12]))).astype(
                draw(st.sampled_from(DTYPES)))
            if kind == "readonly":
                a.flags.writeable = False
        elif kind == "cat":
            cats = pd.Index(draw(st.lists(st.text(max_size=4), min_size=1, max_size=5, unique=True)))
            a = pd.Categorical.from_codes(rng.integers(-1, len(cats), n), categories=cats)
        elif kind == "str_cat":  # strings: pandas infers a str dtype, frame must too
            a = np.array([f"s{x}" for x in rng.integers(0, 5, n)], dtype=object)
        elif kind == "unicode":  # a numpy str array: pandas makes it str too
            a = np.array([f"u{x}" for x in rng.integers(0, 5, n)], dtype=str)
        elif kind == "str_none":  # strings and missing values (None, NaN)
            a = np.array([(None, np.nan, "a", "bb")[x] for x in rng.integers(0, 4, n)],
                         dtype=object)
        elif kind == "text":  # any strings (dates, numbers, "nan" written as text): str too
            words = draw(st.lists(st.one_of(st.text(max_size=6), st.sampled_from(
                ["2020-01-01", "1.5", "nan", "None", "True", "12:00"])), min_size=1, max_size=4))
            a = np.array([words[x % len(words)] for x in rng.integers(0, 8, n)], dtype=object)
        elif kind == "dicts":  # what no inference turns into anything but objects
            a = np.empty(n, dtype=object)
            a[:] = [{"k": int(x)} if x else [int(x)] for x in rng.integers(0, 3, n)]
        else:
            a = np.array([None if x == 0 else int(x) for x in rng.integers(0, 3, n)], dtype=object)
        out[draw(st.sampled_from(["a", "b", "ts", "name", f"c{i}"])) + str(i)] = a
    return out


@settings(max_examples=150, deadline=None, derandomize=True)
@given(columns())
def test_frame_is_pandas_frame(data):
    for copy in (True, False):
        got = frame(data, copy=copy)
        want = pd.DataFrame(data) if copy else pd.DataFrame(data, copy=False)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert got.index.equals(want.index) and type(got.index) is type(want.index)
        assert got.columns.dtype == want.columns.dtype and list(got.columns) == list(want.columns)


def _blocks(df: pd.DataFrame) -> list:
    return [(type(b).__name__, str(b.dtype), b.mgr_locs.as_array.tolist(), b.values.shape,
             b.values.flags.writeable if isinstance(b.values, np.ndarray) else None)
            for b in df._mgr.blocks]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(columns(), st.booleans())
def test_frame_builds_pandas_blocks(data, shared_dtype):
    """``frames._from_arrays`` (the blocks' layout kept per tuple of dtypes) builds the blocks
    pandas' ``_from_arrays`` builds: the same block types, dtypes, columns in each, shapes."""
    if shared_dtype:  # two categorical columns of one dtype object: pandas groups them
        cats = [k for k, v in data.items() if isinstance(v, pd.Categorical)]
        if cats:
            a = data[cats[0]]
            data = {**data, "again": pd.Categorical.from_codes(a.codes, dtype=a.dtype)}
    for copy in (True, False):
        got = frame(data, copy=copy)
        old = frames._PLACEMENT
        frames._PLACEMENT = None
        try:
            want = frame(data, copy=copy)
        finally:
            frames._PLACEMENT = old
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert _blocks(got) == _blocks(want)
        assert got._mgr.is_consolidated() == want._mgr.is_consolidated()
        assert got._mgr.blknos.tolist() == want._mgr.blknos.tolist()
        assert got._mgr.blklocs.tolist() == want._mgr.blklocs.tolist()


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-5, 5), st.floats(allow_nan=True)),
                          st.one_of(st.none(), st.text(max_size=3)),
                          st.sampled_from([{}, {"a": 1}, [1], (2,)])), max_size=4),
       st.lists(st.text(max_size=3), min_size=3, max_size=3, unique=True))
def test_of_rows_is_pandas_frame(data, names):
    got, want = of_rows(data, names), pd.DataFrame(data, columns=names)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert type(got.index) is type(want.index) and got.columns.dtype == want.columns.dtype


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-5, 5),
                   st.floats(allow_nan=True), st.text(max_size=3), st.sampled_from(
                       [np.int64(3), np.float64(0.5), np.nan, {}, {"a": 1}, [1], (2,), b"x"]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(1, 5).flatmap(lambda width: st.tuples(
    st.lists(st.one_of(st.tuples(*[VALUES] * width), st.lists(VALUES, min_size=width,
                                                              max_size=width)),
             min_size=1, max_size=9),
    st.lists(st.text(max_size=3), min_size=width, max_size=width))))
def test_of_rows_of_any_values_is_pandas_frame(case):
    """Rows of every kind of value (ints beyond int64, bools, numpy scalars, strings, None, NaN,
    objects; tuples or lists; repeated column names): ``of_rows`` gives pandas' table, or
    pandas' error."""
    data, names = case
    try:
        want = pd.DataFrame(data, columns=names)
    except Exception as exc:  # noqa: BLE001 (whatever pandas raises, of_rows must raise)
        with pytest.raises(type(exc)):
            of_rows(data, names)
        return
    got = of_rows(data, names)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert type(got.index) is type(want.index) and got.columns.dtype == want.columns.dtype
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]


def test_frames_do_not_share_their_columns_name():
    a = frame({"x": np.arange(2)})
    a.columns.name = "changed"
    assert frame({"x": np.arange(2)}).columns.name is None
    b = of_rows([], ["x"])
    b.columns.name = "changed"
    assert of_rows([], ["x"]).columns.name is None


def test_a_copied_frame_holds_none_of_the_arrays_given():
    ts, cat = np.arange(3, dtype=np.int64), pd.Categorical.from_codes([0, 1, 0], ["a", "b"])
    t = frame({"ts": ts, "name": cat})
    ts[0] = 99
    cat[0] = "b"
    assert t["ts"].tolist() == [0, 1, 2] and t["name"].tolist() == ["a", "b", "a"]


def test_columns_of_different_lengths_are_refused_as_pandas_does():
    with pytest.raises(ValueError):
        frame({"a": np.zeros(2, np.int64), "b": np.zeros(3, np.int64)})


READ_AS = [None, np.int64, np.float64, np.int32, bool, object]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(columns(), st.sampled_from(READ_AS), st.booleans())
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_column_is_pandas_column(data, dtype, after_setitem):
    df = frame(data)
    if after_setitem and len(df.columns):  # a column set afterwards: another block
        df[df.columns[0]] = df[df.columns[-1]]
    for name in df.columns:
        try:  # a float NaN read as an integer: numpy's RuntimeWarning, in both
            want = df[name].to_numpy() if dtype is None else df[name].to_numpy(dtype)
        except (TypeError, ValueError) as exc:
            with pytest.raises(type(exc)):
                column(df, name, dtype)
            continue
        got = column(df, name, dtype)
        assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape
        assert pd.Series(got, dtype=object).equals(pd.Series(want, dtype=object))  # NaN at NaN
        assert got.flags.writeable == want.flags.writeable, (name, dtype, want.dtype)
        if not got.flags.writeable and got.size:  # a view of the table's column, as pandas gives
            assert np.shares_memory(got, want)


def test_column_reads_what_pandas_reads_of_other_objects():
    df = pd.DataFrame([[1, 2]], columns=["a", "a"])  # repeated names: pandas' table of both
    np.testing.assert_array_equal(column(df, "a"), df["a"].to_numpy())
    by_name = {"a": pd.Series([1, 2])}  # not a DataFrame: read through pandas
    np.testing.assert_array_equal(column(by_name, "a", np.float64), [1.0, 2.0])
    with pytest.raises(KeyError):
        column(frame({"a": np.zeros(1)}), "b")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(columns(), st.data())
def test_with_columns_is_a_copy_with_columns_assigned(data, draw):
    """``with_columns(df, values)`` is ``df.copy()`` then ``copy[name] = value`` for each: the
    same table (values, dtypes, columns, index), ``df`` untouched, none of its arrays shared,
    whatever the columns (numbers built at once, anything else through pandas)."""
    df = frame(data)
    if draw.draw(st.booleans()) and len(df):  # an index that is not 0..n-1: pandas' way
        df.index = pd.RangeIndex(1, len(df) + 1)
    names = draw.draw(st.lists(st.sampled_from(list(df.columns)), unique=True, max_size=3))
    rng = np.random.default_rng(draw.draw(st.integers(0, 2**31)))
    values = {name: rng.integers(-5, 5, len(df)).astype(draw.draw(st.sampled_from(DTYPES)))
              for name in names}
    before = df.copy()
    got = with_columns(df, values)
    want = df.copy()
    for name, v in values.items():
        want[name] = v
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got.index.equals(want.index) and type(got.index) is type(want.index)
    assert got.columns.dtype == want.columns.dtype
    pd.testing.assert_frame_equal(df, before, check_exact=True)
    for name in got.columns:
        a = column(got, name)
        if isinstance(a, np.ndarray) and a.size:
            assert not np.shares_memory(a, column(df, name))
            if name in values:
                assert not np.shares_memory(a, values[name])
