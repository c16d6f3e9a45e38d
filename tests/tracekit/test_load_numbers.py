"""Exact microsecond-text -> nanosecond conversion (tracekit.trace._numbers) against Decimal."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.trace._numbers import BAD, MAX_NS, us_float_to_ns, us_text_to_ns

_int_part = st.integers(min_value=0, max_value=9_200_000_000_000_000 // 1000 - 1)
_token = st.one_of(
    _int_part.map(str),  # integer microseconds (legacy, most traces)
    st.tuples(_int_part, st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]:03d}"),  # Kineto ns
    st.tuples(_int_part, st.text("0123456789", min_size=1, max_size=6)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.tuples(st.integers(-10**9, 10**9), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]:02d}"),
)


def _ref(tok: str) -> int:
    d = Decimal(tok) * 1000
    # the fast paths round half up at the 4th decimal, the fallback half-even: both agree
    # except on an exact tie, which the reference accepts either way
    up, even = d.to_integral_value(ROUND_HALF_UP), d.to_integral_value(ROUND_HALF_EVEN)
    return {int(up), int(even)}


@settings(max_examples=200, deadline=None)
@given(st.lists(_token, min_size=1, max_size=40))
def test_matches_decimal(tokens):
    got = us_text_to_ns([t.encode() for t in tokens])
    assert got.dtype == np.int64 and len(got) == len(tokens)
    for tok, v in zip(tokens, got.tolist()):
        assert v in _ref(tok), (tok, v)


def test_shapes_of_every_path():
    cases = {
        b"1 2 3": [1000, 2000, 3000],  # all integers
        b"1712195495519689.047 1712195495519695.812": [1712195495519689047, 1712195495519695812],
        b"1.5 -2.25 7": [1500, -2250, 7000],  # mixed: digit-by-digit
        b"1e3 2.5E-1": [1_000_000, 250],  # exponents: Decimal
        b"abc 5": [BAD, 5000],  # not a number: BAD
    }
    for text, expected in cases.items():
        assert us_text_to_ns(text.split(b" ")).tolist() == expected, text
    assert us_text_to_ns([]).tolist() == []


def test_values_that_are_not_numbers_are_bad_and_shift_nothing():
    """Issue 14: a ts string with spaces shifted the times onto the wrong events; a numeric
    string, null, a missing ts (an empty token), 1e300 and ns written as µs read as numbers."""
    cases = [
        ([b'" 120 "', b"5", b"6"], [BAD, 5000, 6000]),  # spaces inside a string
        ([b'"120"', b"5"], [BAD, 5000]),  # a numeric string
        ([b"null", b"true", b"", b"[1, 2]", b"5"], [BAD, BAD, BAD, BAD, 5000]),
        ([b"1e300", b"5"], [BAD, 5000]),
        ([b"1700000000000000000", b"5"], [BAD, 5000]),  # ns written as us: beyond int64 ns
        ([b"1700000000000000000.123", b"5.5"], [BAD, 5500]),
        ([b"9223372036854775.807", b"1"], [BAD, 1000]),  # int64 max itself is not a time
        ([b"99999999999999999999", b"7"], [BAD, 7000]),  # numpy would clamp this
        ([b"1-2", b"3"], [BAD, 3000]),
        ([b"-5", b"1.0"], [-5000, 1000]),
    ]
    for raws, expected in cases:
        assert us_text_to_ns(raws).tolist() == expected, raws
    assert us_text_to_ns([b"9223372036854775"]).tolist() == [9223372036854775000]
    assert 9223372036854775000 <= MAX_NS


def test_durations_beyond_int64_or_nan_are_bad():
    got = us_float_to_ns(np.array([1.5, float("nan"), 1e300, -1e300, 2.0]))
    assert got.tolist() == [1500, BAD, BAD, BAD, 2000]
