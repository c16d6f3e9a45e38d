"""Helper processes that decode pieces of the trace while the main process decodes others.

Decoding (msgspec) and column extraction hold the GIL, so on one core they are the loader's
bottleneck while gunzip (which releases it) leaves the second core mostly idle. The helper is
forked (never spawned: it must start in milliseconds and share the imported modules), so it is
used only where fork is safe: Linux, and no other thread running in the process at the time.

``N_HELPERS`` of them (``Helpers``), each with its own slots. Pieces travel through an
anonymous shared mapping of two slots per helper (no copy through a pipe); the
helper answers each with the piece's columns (small numpy arrays) and its own name list, which
``Columns.add_part`` maps onto the main process's codes. If the helper cannot decode a piece
(the main process cut it inside an event, which it would have retried at an earlier cut) or
dies, ``HelperFailed`` makes the loader read the file again without it.
"""

from __future__ import annotations

import mmap

from tracekit._fork import ENV_DISABLE, available

SLOT_BYTES = (8 << 20) + (1 << 16)
"""A piece bigger than this is decoded in the main process."""
N_SLOTS = 2


class HelperFailed(Exception):
    """The helper could not decode a piece or went away: read again without it."""


class Helper:
    """The main process's handle on the helper: ``submit`` pieces, ``collect`` results."""

    def __init__(self, proc, conn, buf: mmap.mmap) -> None:
        self.proc = proc
        self.conn = conn
        self.buf = buf
        self.free = list(range(N_SLOTS))
        self.n_elements = 0
        self.pieces = 0

    @classmethod
    def start(cls, decode) -> Helper | None:
        """A helper that decodes pieces with ``decode(columns, piece, 0) -> elements`` (the
        reader's ``decode_into``), None where none can be forked."""
        if not available():
            return None
        import multiprocessing as mp  # here, not at import: only big traces start a helper

        ctx = mp.get_context("fork")
        buf = mmap.mmap(-1, SLOT_BYTES * N_SLOTS)  # MAP_SHARED | MAP_ANONYMOUS: seen by the child
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, buf, decode), name="tracekit-decode",
                           daemon=True)
        proc.start()
        child.close()
        return cls(proc, parent, buf)

    def submit(self, index: int, view: memoryview) -> bool:
        """Hands the piece to the helper if a slot is free; False if it must be decoded here."""
        if not self.free or len(view) > SLOT_BYTES:
            return False
        slot = self.free.pop()
        off = slot * SLOT_BYTES
        self.buf[off : off + len(view)] = view
        try:
            self.conn.send((index, slot, len(view)))
        except OSError as exc:
            raise HelperFailed(str(exc)) from None
        return True

    def collect(self, sink, *, wait: bool = False) -> None:
        """Passes every finished piece to ``sink.add_part``; with ``wait``, all outstanding ones."""
        while len(self.free) < N_SLOTS and (wait or self.conn.poll()):
            try:
                index, slot, result = self.conn.recv()
            except (EOFError, OSError) as exc:
                raise HelperFailed(f"helper process went away ({exc})") from None
            self.free.append(slot)
            if isinstance(result, BaseException) or result is None:
                raise HelperFailed(f"piece {index} did not decode in the helper: {result!r}")
            n_elements, part = result
            self.n_elements += n_elements
            self.pieces += 1
            sink.add_part(index, part)

    def finish(self, sink) -> None:
        self.collect(sink, wait=True)

    def close(self) -> None:
        if len(self.free) < N_SLOTS:
            # pieces still out (an error or Ctrl-C here): their answers are not wanted, and the
            # helper may be blocked sending one, so stop it rather than wait
            self.proc.terminate()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()
        self.buf.close()


N_HELPERS = 2
"""Helper processes a big trace is decoded by. With one, the main process (which also cuts the
pieces, copies them out and merges the results) took ~60% of the work and set the wall time
(508 MB stand-in: main thread 2.8-3.3 CPU-s, helper 1.7-1.9); with two, the main process
decodes a piece only when all four slots are taken, and the two cores share the work."""


class Helpers:
    """Several helpers behind one ``Helper``'s interface: a piece goes to the one with the
    most free slots."""

    def __init__(self, helpers: list[Helper]) -> None:
        self.helpers = helpers

    @classmethod
    def start(cls, decode, n: int = N_HELPERS) -> Helpers | None:
        helpers = []
        for _ in range(n):
            h = Helper.start(decode)
            if h is None:
                break
            helpers.append(h)
        return cls(helpers) if helpers else None

    @property
    def n_elements(self) -> int:
        return sum(h.n_elements for h in self.helpers)

    @property
    def pieces(self) -> int:
        return sum(h.pieces for h in self.helpers)

    def submit(self, index: int, view: memoryview) -> bool:
        h = max(self.helpers, key=lambda h: len(h.free))
        return h.submit(index, view)

    def collect(self, sink, *, wait: bool = False) -> None:
        for h in self.helpers:
            h.collect(sink, wait=wait)

    def finish(self, sink) -> None:
        for h in self.helpers:
            h.finish(sink)

    def close(self) -> None:
        for h in self.helpers:  # every one, even when closing another failed
            try:
                h.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def _serve(conn, buf: mmap.mmap, decode_into) -> None:
    """The helper's loop: decode the piece in a slot (with ``decode_into``), answer with its
    columns."""
    import signal

    import msgspec  # here, not at import: the loader imports it only when it parses

    from tracekit.trace._columns import Columns

    # Ctrl-C goes to the whole process group: the main process handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    mv = memoryview(buf)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, slot, length = msg
        off = slot * SLOT_BYTES
        piece = mv[off : off + length]
        cols = Columns()
        try:
            n = decode_into(cols, piece, 0)
        except msgspec.DecodeError:
            n = None
        except Exception as exc:  # handed back; the main process reads again without us
            n = exc
        piece.release()
        reply = (index, slot, (n, cols.export()) if isinstance(n, int) else n)
        try:
            conn.send(reply)
        except OSError:  # the main process went away
            return


__all__ = ["Helper", "Helpers", "HelperFailed", "available", "ENV_DISABLE", "N_HELPERS"]
