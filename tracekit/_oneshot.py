"""Settings of a one-shot process: the CLI's cold path (``tracekit.loaded.loading``,
``prefetch=True``).

A process that analyses one trace and ends can trade what a long-lived one cannot: the cyclic
garbage collector held off over the imports and the load (``hold_gc``, ``release_gc``), OpenBLAS
started with one thread (``one_blas_thread``) and glibc's malloc keeping what it frees
(``keep_freed_memory``). Only the CLI's cold path asks for them, never a library caller or the
dashboard's server (tests/tracekit/test_prefetch.py checks both). Each was measured on the cold
``tracekit analyze`` of a 42 MB and of a 508 MB trace (bench/NOTES-load.md, 2026-11-24).

glibc's malloc: by default it hands a freed block of more than a few MB back to the kernel, and
maps fresh pages for the next one: each page is zeroed and faulted in again. The parse of a big
trace regrows its pending text (8-24 MB) after every piece it cuts, ~60 times for the 508 MB-JSON stand-in, and
the analyses build and drop arrays of a million rows: ~130,000 page faults in the parse alone.
With big blocks from the heap (``M_MMAP_THRESHOLD`` at its maximum, 32 MiB), the heap kept
(``M_TRIM_THRESHOLD`` 1 GiB) and grown 64 MiB at a time (``M_TOP_PAD``), the parse faults half
as often and the cold ``tracekit analyze`` of the stand-in took 1.96-2.09 s instead of 2.16-2.36
s (bench/NOTES-load.md, 2026-11-24 session 2). The price is a process that keeps its peak
memory until it ends. Elsewhere than glibc: nothing.
"""

from __future__ import annotations

import gc
import os
import sys


def hold_gc() -> bool:
    """Turn the cyclic garbage collector off (True), unless it is off already (False).

    The CLI's cold path imports pandas and the analyses (~80,000 objects the collector tracks)
    and loads a trace: meanwhile the collector ran ~100 times, walking young objects and now and
    then all of them, for cycles that are not there (0.06-0.09 of the parent's ~0.75 CPU-s in a
    cold analyze of a 42 MB trace, bench/NOTES-load.md). A forked child's collections also
    write to every tracked object's header: pages it shares with the parent are copied."""
    if not gc.isenabled():
        return False
    gc.disable()
    return True


def release_gc() -> None:
    """After ``hold_gc``: freeze what is alive (later collections, in this process and in the
    children it forks, skip it; it is still freed when no longer referenced, only cycles among
    it are not collected: the process ends with the command) and turn the collector back on."""
    gc.freeze()
    gc.enable()


def one_blas_thread() -> None:
    """Ask numpy's OpenBLAS for one thread, unless the user chose a number or numpy is loaded
    already (it reads the variable when it loads). At load OpenBLAS starts a thread per core,
    ~0.07 CPU-s of a ~1 CPU-s cold analyze of a 42 MB trace on 2 cores, where the parse child
    and this process need both (bench/NOTES-load.md); no analysis calls BLAS. The variable is
    this one-shot process's, and so its children's."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# glibc's malloc (module docstring)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))
"""(mallopt parameter, value): glibc's malloc.h numbers."""


def keep_freed_memory() -> bool:
    """Apply ``SETTINGS`` to this process (and the children it forks); False where this is not
    glibc (or a setting is refused)."""
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


__all__ = ["hold_gc", "keep_freed_memory", "one_blas_thread", "release_gc"]
