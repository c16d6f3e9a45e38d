"""Object arrays of strings that repeat, without a Python object per element.

``np.full(n, "other", dtype=object)`` and ``np.where(mask, "a", "b").astype(object)`` go through a
fixed-width string array and make a new ``str`` for every element: on a trace of a million events
that is tens of milliseconds per column (and the memory of a million small objects). These put
references to the one given object in every element instead; the values are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def full(n: int, value: Any) -> np.ndarray:
    """An object array of ``n`` references to ``value``."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def where(mask: np.ndarray, yes: Any, no: Any) -> np.ndarray:
    """Object array: ``yes`` where ``mask``, else ``no``; each either one object or an array
    of ``mask``'s shape."""
    mask = np.asarray(mask, dtype=bool)
    out = full(mask.size, no) if np.ndim(no) == 0 else np.array(no, dtype=object)
    if np.ndim(yes) == 0:
        out[mask] = yes
    else:
        out[mask] = np.asarray(yes, dtype=object)[mask]
    return out


__all__ = ["full", "where"]
