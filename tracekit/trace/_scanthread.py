"""A thread that runs the compiled scanner on pieces of a big trace while the main thread cuts
and adds the next ones.

``_fastscan.scan`` releases the GIL while it reads a piece, so where it is built a thread does
what the forked helper processes (``_parallel``) did, without a fork, without copying pieces
into shared memory and without pickling columns back: the piece is copied once (the reader
reuses its buffer), scanned in the thread, and its columns added by the main thread
(``Columns.add_scanned``) in the order the pieces complete (their index keeps the file order).

Same interface as ``_parallel.Helpers``. A piece the scanner declines is decoded with msgspec
in the main thread; one that is not a JSON array of whole events there (the reader cut it inside
an event, and would have retried at an earlier cut) raises ``HelperFailed``, and the loader
reads the file again without the thread, as it does for a helper process.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import msgspec

from tracekit.trace._parallel import ENV_DISABLE, HelperFailed

SLOTS = 2
"""Pieces handed to the thread and not yet added; beyond that the main thread scans itself."""


class ScanThread:
    def __init__(self, scan) -> None:
        self._scan = scan
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tracekit-scan")
        self._out: deque = deque()  # (index, piece bytes, future of the scan)
        self.n_elements = 0
        self.pieces = 0

    @classmethod
    def start(cls) -> ScanThread | None:
        """None where the scanner is not built, one CPU only, or ``TRACEKIT_LOAD_PARALLEL=0``."""
        from tracekit.trace._columns import _fastscan

        if _fastscan is None or os.environ.get(ENV_DISABLE, "1") == "0" or (os.cpu_count() or 1) < 2:
            return None
        return cls(_fastscan.scan)

    def submit(self, index: int, view: memoryview) -> bool:
        """Hands the piece to the thread if it has a free slot; False if it must be read here."""
        if len(self._out) >= SLOTS:
            return False
        data = bytes(view)
        self._out.append((index, data, self._pool.submit(self._scan, data)))
        return True

    def collect(self, sink, *, wait: bool = False) -> None:
        """Adds every scanned piece to ``sink`` (a ``Columns``); with ``wait``, all of them."""
        from tracekit.trace._schema import decode_events

        while self._out and (wait or self._out[0][2].done()):
            index, data, fut = self._out.popleft()
            got = fut.result()
            if got is not None:
                n = sink.add_scanned(data, index, got)
            else:
                n = None
            if n is None:  # declined: msgspec's path, here
                try:
                    events = decode_events(data)
                except msgspec.DecodeError as exc:
                    raise HelperFailed(f"piece {index} did not decode: {exc}") from None
                sink(events, index)
                n = len(events)
            self.n_elements += n
            self.pieces += 1

    def finish(self, sink) -> None:
        self.collect(sink, wait=True)

    def close(self) -> None:
        for _, _, fut in self._out:
            fut.cancel()
        self._out.clear()
        self._pool.shutdown(wait=True)


__all__ = ["ScanThread", "SLOTS"]
