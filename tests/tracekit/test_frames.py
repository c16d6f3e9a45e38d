"""``tracekit.frames.frame``: the table pandas' constructor gives, whatever the columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.frames import SMALL_ROWS, frame

DTYPES = [np.int64, np.int32, np.int16, np.int8, np.uint8, np.float64, np.float32, bool]


@st.composite
def columns(draw) -> dict:
    n = draw(st.sampled_from([0, 1, 3, 17, SMALL_ROWS, SMALL_ROWS + 1]))
    out = {}
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["num", "num", "cat", "obj", "str_cat", "readonly"]))
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


def test_a_copied_frame_holds_none_of_the_arrays_given():
    ts, cat = np.arange(3, dtype=np.int64), pd.Categorical.from_codes([0, 1, 0], ["a", "b"])
    t = frame({"ts": ts, "name": cat})
    ts[0] = 99
    cat[0] = "b"
    assert t["ts"].tolist() == [0, 1, 2] and t["name"].tolist() == ["a", "b", "a"]


def test_columns_of_different_lengths_are_refused_as_pandas_does():
    with pytest.raises(ValueError):
        frame({"a": np.zeros(2, np.int64), "b": np.zeros(3, np.int64)})
