"""glibc's malloc told to keep the memory a one-shot process frees, for its next allocations.

By default glibc hands a freed block of more than a few MB back to the kernel, and maps fresh
pages for the next one: each page is zeroed and faulted in again. The parse of a big trace regrows
its pending text (8-24 MB) after every piece it cuts, ~60 times for the 508 MB-JSON stand-in, and
the analyses build and drop arrays of a million rows: ~130,000 page faults in the parse alone.
With big blocks from the heap (``M_MMAP_THRESHOLD`` at its maximum, 32 MiB), the heap kept
(``M_TRIM_THRESHOLD`` 1 GiB) and grown 64 MiB at a time (``M_TOP_PAD``), the parse faults half
as often and the cold ``tracekit analyze`` of the stand-in took 1.96-2.09 s instead of 2.16-2.36
s (bench/NOTES-load.md, 2026-11-24 session 2). The price is a process that keeps its peak
memory until it ends: only the CLI's one-shot cold path asks for it (``tracekit.api``), never a
library caller or the dashboard's server. Elsewhere than glibc: nothing.
"""

from __future__ import annotations

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))
"""(mallopt parameter, value): glibc's malloc.h numbers."""


def keep_freed_memory() -> bool:
    """Apply ``SETTINGS`` to this process (and the children it forks); False where this is not
    glibc (or a setting is refused)."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, ImportError):  # musl and others: no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)


__all__ = ["keep_freed_memory"]
