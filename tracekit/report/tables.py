"""The text helpers every renderer shares: figures as a person reads them, and plain tables.

Standard library only: a cached report prints without numpy or pandas.
"""

from __future__ import annotations

from typing import Any


def ms(ns: Any, digits: int = 3) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:,.{digits}f}"


def pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_bytes(b: Any) -> str:
    """Bytes as a person reads them (``1.50 GiB``); ``-`` for unknown."""
    if b is None or (isinstance(b, (int, float)) and b < 0):
        return "-"
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= f:
            return f"{b / f:,.2f} {unit}"
    return f"{int(b)} B"


def unit_of(key: str) -> str:
    """How a headline figure is shown: ``ms`` (``*_ns``), ``bytes``, ``ratio`` or ``count``."""
    if key.endswith("_ns"):
        return "ms"
    if key.endswith("_bytes"):
        return "bytes"
    return "ratio" if key in ("comm_overlap_ratio", "unused_fraction", "bound_share",
                              "embedding_forward_share", "embedding_backward_share") else "count"


def fmt_figure(v: Any, unit: str, signed: bool = False) -> str:
    """A headline figure in ``unit`` (see ``unit_of``), as ``compare`` writes it."""
    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ""
    if unit == "ms":
        return f"{sign}{v / 1e6:,.3f}"
    if unit == "bytes":
        return sign + fmt_bytes(v) if v >= 0 else "-" + fmt_bytes(-v)
    if unit == "ratio":
        return f"{sign}{100 * v:.1f}%" if not signed else f"{sign}{100 * v:.1f} pp"
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f"{sign}{v:,}"


def num(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return "-" if v is None else v


def us(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


def share(part: Any, whole: Any) -> str:
    return f"{100 * part / whole:.0f}%" if part is not None and whole else "-"


def bound_text(b: Any, share: Any) -> str:
    if b is None:
        return "-"
    return f"{b} {pct(share)}" if share is not None else str(b)


def ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    out, run = [], []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def table(headers: list[str], rows: list[list[Any]], indent: str = "  ", *, left_last: bool = False) -> str:
    """A plain text table: first column left-aligned, the others right-aligned; with
    ``left_last`` the last column is left-aligned and not padded (a long name, written whole
    after the figures, so that the figures stay in columns)."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if left_last:
        widths[-1] = 0
    lines = []
    for j, r in enumerate(cells):
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])] + \
            ([r[-1] if left_last else r[-1].rjust(widths[-1])] if len(r) > 1 else [])
        lines.append(indent + "  ".join(parts).rstrip())
        if j == 0:
            lines.append(indent + "  ".join("-" * (w or len(headers[-1])) for w in widths))
    return "\n".join(lines)


def clip(s: str, n: int = 90) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def limited(rows: list, n: int) -> tuple[list, str]:
    return (rows[:n], f"  ... {len(rows) - n} more (see --format json)\n") if len(rows) > n \
        else (rows, "")
