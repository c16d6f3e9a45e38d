"""Regular expressions run on names from a trace, in time linear in the name.

A trace is untrusted input, and so are the patterns of a rules file (``--rules``) and of a
``--what-if``: Python's ``re`` backtracks, so one pattern on one crafted name can take minutes
(``\\btbe::.*\\b(linearize|...)`` on ``"tbe::" * 20000``: 139 s) or, with nested repeats, longer
than the universe. Every pattern that meets a name from a trace is compiled here, with RE2
(``google-re2``), whose time is linear in the name and whose memory is bounded (``max_mem``).

RE2's syntax is Python's without lookaround (``(?=...)``, ``(?<!...)``) and backreferences
(``\\1``); ``\\w``, ``\\d`` and ``\\b`` are ASCII (names in traces are). A pattern RE2 cannot
run is refused with ``PatternError`` saying why.
"""

from __future__ import annotations

from functools import lru_cache

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would write its parse errors on stderr


class PatternError(ValueError):
    """A pattern that cannot be compiled, or that only a backtracking engine could run."""


@lru_cache(maxsize=512)
def compile(pattern: str):  # noqa: A001 - the module is used as ``patterns.compile``
    """``pattern`` compiled with RE2: an object with ``search(text)`` (a match or None),
    ``groups`` and ``pattern``, as ``re.compile``'s."""
    if not isinstance(pattern, str):
        raise PatternError("a pattern must be a string")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) \
            else str(exc)
        if any(k in why for k in ("(?=", "(?!", "(?<", "\\1", "\\2", "\\3", "\\4", "\\5", "\\6",
                                   "\\7", "\\8", "\\9")):
            why += " (lookaround and backreferences are not supported: their time can grow " \
                   "without bound in the name)"
        raise PatternError(why) from None


def searcher(pattern):
    """A ``str -> bool``: whether ``pattern`` (a string, or a compiled pattern) is found."""
    rx = compile(pattern) if isinstance(pattern, str) else pattern
    search = rx.search
    return lambda text: search(text) is not None


MAX_NUMBER = 2**63 - 1
"""A number captured from a name (step, batch index) above this is not read (-1)."""


def captured_int(pattern, text: str) -> int:
    """Group 1 of ``pattern`` found in ``text`` as an int, -1 where it is not found, not
    digits, or beyond int64."""
    rx = compile(pattern) if isinstance(pattern, str) else pattern
    m = rx.search(text)
    if m is None:
        return -1
    g = m.group(1)
    if g is None:
        return -1
    g = g.strip()
    if not g.isascii() or not g.isdigit() or len(g) > 19:
        return -1
    v = int(g)
    return v if v <= MAX_NUMBER else -1


__all__ = ["PatternError", "compile", "searcher", "captured_int", "MAX_NUMBER"]
