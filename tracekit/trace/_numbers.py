"""Exact conversion of JSON microsecond numbers (as text) to integer nanoseconds.

Kineto writes ``ts`` in microseconds, either as integers (``1623142623460111``) or, since
PyTorch 2.1, with three decimals (``1712195495519689.047``). A float64 holds such an epoch time
only to 0.25 us, so the text is parsed exactly instead: ``round(ts * 1000)`` computed on the
decimal digits. The common shapes (all integers, all three decimals) are parsed by numpy in one
call; anything else by a vectorised digit-by-digit parse; exponents by Python's ``Decimal``.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

import numpy as np

_POW10 = 10 ** np.arange(19, dtype=np.int64)
_SPACE, _DOT, _MINUS, _ZERO_CH, _NINE = 32, 46, 45, 48, 57


BAD = np.iinfo(np.int64).min
"""What a time that cannot be read becomes (not a JSON number, missing, or beyond int64 ns):
the loader leaves such events out and says so."""
MAX_NS = np.iinfo(np.int64).max - 1
_MAX_US = MAX_NS // 1000
_NUMBER = re.compile(rb"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NUMBER_BYTES = b"0123456789.- "


def us_text_to_ns(raws: list) -> np.ndarray:
    """JSON values (``msgspec.Raw`` or bytes: the text of each, microseconds) -> int64 ns.

    A value that is not a JSON number (a string, null, an empty token for a missing key), or
    whose nanoseconds do not fit int64 (nanoseconds written as microseconds), becomes ``BAD``.
    """
    n = len(raws)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    joined = b" ".join(raws)
    # The fast paths see only digits, '.', '-' and exactly one space between non-empty tokens.
    if (joined.translate(None, _NUMBER_BYTES) or joined.count(b" ") != n - 1 or b"  " in joined
            or joined[:1] == b" " or joined[-1:] == b" "):
        return _slow_parse(raws)
    buf = np.frombuffer(joined, dtype=np.uint8)
    ndots = joined.count(b".")
    if ndots == 0:
        out = _fromstring(joined, n)
        if out is not None and bool(np.all(np.abs(out) <= _MAX_US)):
            return out * 1000
    if ndots == n:
        # All three-decimal numbers? then dropping the dots gives the nanoseconds directly.
        dots = np.flatnonzero(buf == _DOT)
        ends = np.append(np.flatnonzero(buf == _SPACE), len(buf))
        if len(ends) == n and bool(np.all(ends - dots == 4)):
            out = _fromstring(joined.replace(b".", b""), n)
            if out is not None and bool(np.all(np.abs(out) <= MAX_NS)):
                return out
    out = _vector_parse(buf, n)
    if out is not None:
        return out
    return _slow_parse(raws)


def _fromstring(text: bytes, n: int) -> np.ndarray | None:
    if not text.replace(b" ", b"").replace(b"-", b"").isdigit():
        return None
    try:
        out = np.fromstring(text, dtype=np.int64, sep=" ")  # exact integer parse in C; clamps
    except ValueError:  # "1-2"
        return None
    return out if len(out) == n else None


def _vector_parse(buf: np.ndarray, n: int) -> np.ndarray | None:
    """Tokens of the form ``-?digits(.digits)?``, rounded half-up at the 4th decimal."""
    is_sep = buf == _SPACE
    seps = np.flatnonzero(is_sep)
    if len(seps) != n - 1:
        return None
    ends = np.append(seps, len(buf))
    starts = np.concatenate(([0], seps + 1))
    if np.any(ends <= starts):
        return None
    is_digit = (buf >= _ZERO_CH) & (buf <= _NINE)
    is_dot = buf == _DOT
    neg = buf[starts] == _MINUS
    is_minus_ok = np.zeros(len(buf), dtype=bool)
    is_minus_ok[starts[neg]] = True
    if not np.all(is_digit | is_dot | is_sep | is_minus_ok):
        return None
    tok = np.cumsum(is_sep) - is_sep  # token index of every byte
    dot_pos = np.flatnonzero(is_dot)
    if np.any(np.bincount(tok[dot_pos], minlength=n) > 1):
        return None
    point = ends.copy()  # where the decimal point is (the end if none)
    point[tok[dot_pos]] = dot_pos
    dpos = np.flatnonzero(is_digit)
    if len(dpos) == 0:
        return None
    dtok = tok[dpos]
    if np.any(np.bincount(dtok, minlength=n) == 0):
        return None
    p = point[dtok]
    exp = np.where(dpos < p, p - dpos - 1 + 3, 3 - (dpos - p))
    if np.any(exp > 17):  # 10**18 ns and more: the slow parse checks the int64 range
        return None
    digit = buf[dpos].astype(np.int64) - _ZERO_CH
    contrib = np.where(exp >= 0, digit * _POW10[np.clip(exp, 0, 18)], 0)
    first = np.searchsorted(dtok, np.arange(n))
    val = np.add.reduceat(contrib, first)
    # round half-up on the first dropped decimal
    rnd = np.zeros(n, dtype=np.int64)
    sel = exp == -1
    rnd[dtok[sel]] = (digit[sel] >= 5).astype(np.int64)
    val = val + rnd
    return np.where(neg, -val, val)


def _slow_parse(raws: list) -> np.ndarray:
    """One value at a time: JSON numbers only (exponents too), rounded half-even."""
    out = np.full(len(raws), BAD, dtype=np.int64)
    for i, raw in enumerate(raws):
        tok = bytes(raw)
        if not _NUMBER.fullmatch(tok):
            continue
        try:
            v = Decimal(tok.decode("ascii")).scaleb(3).to_integral_value(ROUND_HALF_EVEN)
        except (InvalidOperation, ValueError):
            continue
        if v.is_finite() and abs(v) <= MAX_NS:
            out[i] = int(v)
    return out


def us_float_to_ns(values: np.ndarray) -> np.ndarray:
    """Durations (float microseconds) -> int64 ns, ``round(x*1000)``; NaN (a missing or
    unreadable ``dur``) and values beyond int64 ns become ``BAD``."""
    ns = np.rint(values * 1000.0)
    ok = np.abs(ns) <= float(_MAX_US) * 1000.0  # NaN compares False
    if bool(ok.all()):
        return ns.astype(np.int64)
    return np.where(ok, np.where(ok, ns, 0).astype(np.int64), BAD)
