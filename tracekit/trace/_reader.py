"""Streams a Kineto JSON(.gz) file as decoded chunks of events, with bounded memory.

The file is read and gunzipped in a background thread (ISA-L's inflate, else zlib: both
release the GIL, so this overlaps with decoding on the other core). The main thread finds the
``traceEvents`` array, cuts the decompressed stream at event boundaries (a ``}`` followed by
``,`` and ``{``) and decodes each piece as a JSON array: with the compiled scanner
(``_fastscan``, through ``Columns.add_raw``) where it reads the piece, else with msgspec. A cut that falls inside an event (a ``},{`` inside its args
or a string) cannot decode as an array of whole events, so it is retried at an earlier cut; a
successful decode is therefore always a run of whole events. For big traces a thread running
the scanner (``_scanthread``), or where it is not built forked helper processes (``_parallel``),
decode most of the pieces while the main thread decodes others.

At the end of the file the rest (last events, ``]``, the keys after the array) is decoded as a
document. If the data stops early (a crashed job's trace) every complete event before the cut
is kept and ``truncated`` says where the cut was.
"""

from __future__ import annotations

import codecs
import queue
import re
import threading
import zlib

try:  # ISA-L's inflate: the same bytes, ~2.5x less CPU than zlib's (0.3 vs 0.75 s on 508 MB)
    from isal import isal_zlib as _inflate
    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate.error)
except ImportError:  # pragma: no cover - isal is a dependency; zlib where it has no wheel
    _inflate = zlib
    _INFLATE_ERRORS = (zlib.error,)
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec

from tracekit.errors import EmptyTraceError, InputError, TraceFormatError
from tracekit.trace._parallel import Helper, Helpers, HelperFailed
from tracekit.trace._scanthread import ScanThread
from tracekit.trace._schema import Event, decode_events as _decode_events

_READ_PLAIN = 16 << 20  # bytes per read of an uncompressed file
_READ_GZ = 1 << 20  # compressed bytes per read (~15 MB once inflated)
_INFLATE = 16 << 20  # decompressed bytes per zlib call, at most
_CHUNK = 8 << 20  # decode once this much is pending
MAX_PENDING = 64 << 20
"""No event is this big: this many bytes without a decodable event means the JSON is broken."""
MAX_PREFIX = 64 << 20
"""``traceEvents`` must start within this many (decompressed) bytes: a gzip bomb or a device
of zeros is refused after reading this much, not after filling memory."""
MAX_WHOLE = 1 << 30
"""A layout the streaming reader cannot cut (``traceEvents`` not a plain top-level key) is
read whole, up to this many decompressed bytes."""
_BOM = b"\xef\xbb\xbf"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_EVENT_BOUNDARY = re.compile(rb'\}\s*,\s*\{(?=\s*"(?:ph|name|cat|pid|tid|ts)")')
_BYTE = re.compile(r"\(byte (\d+)\)")


@dataclass
class Header:
    """What the reader learned besides the events."""

    metadata: dict = field(default_factory=dict)
    truncated: str | None = None
    """Why the trace is incomplete (None when it is whole)."""
    n_elements: int = 0
    """Elements of ``traceEvents`` decoded (all phases)."""
    warnings: list[str] = field(default_factory=list)
    """What the reader repaired (bytes that are not UTF-8), one sentence each."""


def _text(blocks: Iterator, path: str, clean: Header | None) -> Iterator[bytes | Exception]:
    """The decompressed blocks as UTF-8 JSON text: a UTF-8 byte-order mark dropped, UTF-16
    refused with a clear message; with ``clean`` (a Header), bytes that are not UTF-8 replaced
    by U+FFFD and counted in a warning."""
    first = True
    decoder = codecs.getincrementaldecoder("utf-8")("replace") if clean is not None else None
    replaced = 0
    for block in blocks:
        if first and not isinstance(block, Exception):
            first = False
            if block.startswith(_BOM):
                block = block[len(_BOM):]
            elif block[:2] in (b"\xff\xfe", b"\xfe\xff") or re.match(rb"\s?\0[{\[]|[{\[]\0", block):
                raise TraceFormatError("is UTF-16 (or other non-UTF-8) text; tracekit reads UTF-8 "
                                       "JSON (convert it: iconv -f UTF-16 -t UTF-8)", path=path)
        if decoder is not None and not isinstance(block, Exception):
            text = decoder.decode(block)
            fixed = text.encode()
            replaced += text.count("\ufffd") - block.count(b"\xef\xbf\xbd")
            block = fixed
        yield block
    if decoder is not None:
        tail = decoder.decode(b"", final=True)
        replaced += tail.count("\ufffd")
        if tail:
            yield tail.encode()
        clean.warnings.append(f"holds {max(replaced, 1):,} bytes that are not UTF-8 (inside strings: "
                              "names or args); read with U+FFFD in their place")


def _source(path: str, progress: Callable[[int], None] | None) -> Iterator[bytes | Exception]:
    """Yields decompressed blocks; a final ``EOFError`` item if a gzip stream stops early."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    with f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            while block := f.read(_READ_PLAIN):
                if progress:
                    progress(f.tell())
                yield block
            return
        d = _inflate.decompressobj(wbits=31)
        while True:
            block = f.read(_READ_GZ)
            if progress:
                progress(f.tell())
            if not block:
                break
            while block:
                try:  # at most _INFLATE bytes out per call: a gzip bomb inflates by pieces
                    out = d.decompress(block, _INFLATE)
                except _INFLATE_ERRORS as exc:
                    raise TraceFormatError(f"corrupt gzip data ({exc})", path=path) from None
                if out:
                    yield out
                if d.eof:
                    rest = d.unused_data
                    if rest[:2] == b"\x1f\x8b":  # another gzip member follows
                        d = _inflate.decompressobj(wbits=31)
                        block = rest
                        continue
                    block = b""  # trailing garbage after the gzip stream: ignored, like gzip(1)
                    d = None
                    break
                block = d.unconsumed_tail
            if d is None:
                break
        if d is not None and not d.eof:
            out = d.flush()
            if out:
                yield out
            yield EOFError("the gzip stream ends early")


def _threaded(gen: Iterator, maxsize: int = 3) -> Iterator:
    """Runs ``gen`` in a daemon thread, ``maxsize`` items ahead of the consumer."""
    q: queue.Queue = queue.Queue(maxsize=maxsize)
    stop = threading.Event()
    done = object()

    def run() -> None:
        try:
            for item in gen:
                if stop.is_set():
                    return
                q.put(item)
        except BaseException as exc:  # handed to the consumer, re-raised there
            q.put(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            return
        q.put(done)

    t = threading.Thread(target=run, name="tracekit-read", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, Exception) and not isinstance(item, EOFError):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock the producer so the thread ends
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.01)


def read_events(
    path: str,
    sink: Callable[[list[Event], int], None],
    *,
    progress: Callable[[int], None] | None = None,
    threaded: bool = True,
    helper: Helper | Helpers | ScanThread | None = None,
    clean_utf8: bool = False,
) -> Header:
    """Decodes ``path``'s events piece by piece into ``sink(events, piece_index)``.

    With a ``helper`` (helper processes), pieces are handed to it whenever it has a free slot
    and decoded here otherwise; its results reach the sink through ``helper.collect``.
    ``clean_utf8``: replace bytes that are not UTF-8 first (slower; ``read`` asks for it after
    a decode met one).
    """
    header = Header()
    src = _text(_source(path, progress), path, header if clean_utf8 else None)
    blocks = _threaded(src) if threaded else src
    try:
        return _read_events(path, blocks, sink, helper, header)
    finally:
        blocks.close()  # ends the reader thread (and closes the file) even on an error
        src.close()


def _read_events(path: str, blocks, sink, helper: Helper | Helpers | ScanThread | None,
                 header: Header) -> Header:
    gz_truncated: str | None = None
    index = 0  # pieces cut so far: their order in the file

    def run(view: memoryview) -> bool:
        """Decodes one piece (``[`` events ``]``), here or in the helper; False if it does not
        decode (the cut was inside an event)."""
        nonlocal index
        if helper is not None:
            helper.collect(sink)
            if helper.submit(index, view):
                index += 1
                return True
        try:
            header.n_elements += decode_into(sink, view, index)
        except msgspec.DecodeError:
            return False
        index += 1
        return True

    # Phase 1: find the traceEvents array, keep what precedes it for the metadata.
    pre = bytearray()
    consumed = 0  # stream offset of pending[0]
    pending: bytearray | None = None
    next_cut = _CHUNK
    for block in blocks:
        if isinstance(block, EOFError):
            gz_truncated = str(block)
            break
        if pending is None:
            start = max(0, len(pre) - 64)
            pre += block
            m = _KEY.search(pre, start)
            if m is None:
                if len(pre) > MAX_PREFIX:
                    raise TraceFormatError(f"no traceEvents array in its first {MAX_PREFIX >> 20} "
                                           "MiB: not a Kineto trace", path=path)
                continue
            prefix = bytes(pre[: m.start()])
            header.metadata.update(_header_metadata(prefix, path))
            # pending[0] is a spare byte that becomes '[' when a piece is decoded in place.
            pending = bytearray(b" ") + pre[m.end():]
            consumed = m.end() - 1
            pre = bytearray()
        else:
            try:
                pending += block
            except BufferError:  # a decoded event is still held elsewhere (see _cut): a copy
                pending = pending + block
        # Phase 2: cut whole events off the front, ~_CHUNK bytes at a time.
        if len(pending) >= next_cut:
            pending, consumed = _cut(pending, consumed, run, path)
            # if nothing could be cut off, wait for twice as much before trying again
            next_cut = min(2 * len(pending), MAX_PENDING + _CHUNK) if len(pending) >= _CHUNK else _CHUNK
    if pending is None:
        _no_events_array(bytes(pre), path, gz_truncated)
    if helper is not None:
        helper.finish(sink)
    # Phase 3: the rest is the last events, ']' and the keys that follow the array.
    _finish(pending, consumed, sink, index, header, path, gz_truncated)
    if helper is not None:
        header.n_elements += helper.n_elements
    return header


def decode_into(sink, data, index: int | None = None) -> int:
    """Decodes ``data`` (a JSON array of events) into ``sink``: by its compiled scanner
    (``sink.add_raw``) where that reads it, else with msgspec (``sink(events[, index])``; an
    empty piece is not passed). Returns the number of elements; raises ``msgspec.DecodeError``
    if ``data`` is not a JSON array."""
    add_raw = getattr(sink, "add_raw", None)
    if add_raw is not None:
        n = add_raw(data, 0 if index is None else index)
        if n is not None:
            return n
    events = _decode_events(data)
    if events or getattr(events, "problems", None):
        if index is None:
            sink(events)
        else:
            sink(events, index)
    return len(events)


def _cut(pending: bytearray, consumed: int, run: Callable[[memoryview], bool], path: str) -> tuple[bytearray, int]:
    """Hands every whole event in ``pending`` to ``run`` in pieces of about ``_CHUNK`` bytes;
    returns what is left after the last piece and its stream offset."""
    pos = 1  # start of the next piece in `pending`
    n = len(pending)
    while n - pos >= _CHUNK:
        m = _last_boundary(pending, pos + _CHUNK, pos) or _last_boundary(pending, n, pos)
        ok = False
        for _ in range(8):
            if m is None:
                break
            end = m.start() + 1  # just after the piece's last closing brace
            saved = pending[end]
            pending[pos - 1] = 0x5B  # '[' over the spare byte / the separator before the piece
            pending[end] = 0x5D  # ']'
            view = memoryview(pending)[pos - 1 : end + 1]
            ok = run(view)
            try:
                view.release()  # run() dropped the events (their raw ts values point in here)
            except BufferError:
                # Something still holds a decoded event of this piece (a stack sampler such as
                # a Dask worker's profiler keeps the frames it sampled): leave this buffer to it
                # and go on in a copy, which can then be cut and grown.
                pending = bytearray(pending)
            pending[end] = saved
            if ok:
                break
            m = _last_boundary(pending, m.start(), pos)
        if not ok:
            break
        pos = m.end() - 1  # the next piece starts at the '{' after the boundary
    if len(pending) - pos > MAX_PENDING:
        raise TraceFormatError(
            f"not valid JSON: no decodable event in {(len(pending) - pos) >> 20} MiB after byte {consumed + pos:,}",
            path=path,
        )
    if pos == 1:
        return pending, consumed
    # The byte before the next piece becomes the new spare byte. Deleting a bytearray's front
    # only moves its start pointer: no copy.
    try:
        del pending[: pos - 1]
    except BufferError:  # a decoded event is still held elsewhere (see above): a copy
        pending = pending[pos - 1 :]
    return pending, consumed + pos - 1


def _last_boundary(buf: bytearray, before: int, lo_limit: int = 0) -> re.Match | None:
    """The last event boundary starting in ``[lo_limit, before)``: Kineto's events start with
    "ph" or "name" (json.dumps'ed ones with any of the usual keys); any ``},{`` if none is found."""
    if buf.find(b"}", lo_limit, before) < 0:  # memchr: quick on a run without any (a bomb)
        return None
    end = min(len(buf), before + 4096)  # a boundary starting before ``before`` ends by here
    for rx in (_EVENT_BOUNDARY, _BOUNDARY):
        window = 1 << 16
        while True:
            lo = max(lo_limit, before - window)
            best = None
            for mm in rx.finditer(buf, lo, end):
                if mm.start() >= before:
                    break
                best = mm
            if best is not None:
                return best
            if lo == lo_limit:
                break
            window *= 8
    return None


def _header_metadata(prefix: bytes, path: str) -> dict:
    try:
        meta = msgspec.json.decode(prefix + b'"traceEvents":[]}')
    except msgspec.DecodeError:
        # "traceEvents" inside a string or a nested object: read the whole thing the slow way.
        raise _Fallback() from None
    if not isinstance(meta, dict):
        raise _Fallback()
    meta.pop("traceEvents", None)
    return meta


class _Fallback(Exception):
    """The streaming reader cannot handle this layout; decode the whole document."""


def _finish(pending: bytearray, consumed: int, sink, index: int, header: Header, path: str,
            gz_truncated: str | None) -> None:
    rest = bytes(pending[1:])
    doc = b'{"traceEvents":[' + rest
    try:
        tail = msgspec.json.decode(doc, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        msg = str(exc)
        # a cut right after a number's '.', '-', 'e' or '+' reads as an invalid number, not
        # as the end of the data: a cut too
        if "truncated" not in msg and not rest.rstrip()[-1:] in (b".", b"-", b"+", b"e", b"E"):
            off = _BYTE.search(msg)
            where = f" near byte {consumed + int(off.group(1)) - 15}" if off else ""
            raise TraceFormatError(f"not valid JSON{where}: {msg.split(' (byte')[0]}", path=path) from None
        _repair(rest, consumed, lambda ev: sink(ev, index), header, path)
        return
    events_raw = tail.pop("traceEvents")
    try:
        header.n_elements += decode_into(sink, events_raw, index)
    except msgspec.DecodeError as exc:  # pragma: no cover - the document decoded above
        raise TraceFormatError(f"not valid JSON: {exc}", path=path) from None
    for k, v in tail.items():
        header.metadata[k] = msgspec.json.decode(v)
    if gz_truncated:
        header.truncated = gz_truncated


def _repair(rest: bytes, consumed: int, sink, header: Header, path: str) -> None:
    """The data stops mid-event: keep the complete events before the cut."""
    cut = consumed + len(rest) + 1
    p = len(rest)
    tries = 0
    while tries < 4096:
        p = rest.rfind(b"}", 0, p)
        if p < 0:
            break
        tries += 1
        try:
            events = _decode_events(b"[" + rest[: p + 1] + b"]")
        except msgspec.DecodeError:
            continue
        header.n_elements += len(events)
        sink(events)
        break
    header.truncated = f"the trace is truncated (the JSON stops at byte {cut:,})"


def _no_events_array(data: bytes, path: str, gz_truncated: str | None) -> None:
    """The stream ended without a traceEvents array: say precisely what the file is."""
    if not data.strip():
        raise TraceFormatError("empty file" if not gz_truncated
                               else "corrupt or cut-short gzip: no data could be decompressed", path=path)
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"not valid JSON ({str(exc).split(' (byte')[0]})", path=path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError("not a Kineto trace (no traceEvents list)", path=path)
    raise EmptyTraceError("traceEvents is empty", path=path)  # pragma: no cover - found by the regex


def read_whole(path: str, sink: Callable[[list[Event]], None]) -> Header:
    """Slow path: the whole file in memory (at most ``MAX_WHOLE`` bytes), decoded as one
    document."""
    parts, size = [], 0
    for b in _text(_source(path, None), path, None):
        if isinstance(b, EOFError):
            continue
        size += len(b)
        if size > MAX_WHOLE:
            raise TraceFormatError(f"traceEvents is not a plain top-level key, and such a file is "
                                   f"read whole only up to {MAX_WHOLE >> 30} GiB", path=path)
        parts.append(b)
    data = b"".join(parts)
    try:
        doc = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise TraceFormatError("not a Kineto trace (no traceEvents list)", path=path) from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"not valid JSON ({str(exc).split(' (byte')[0]})", path=path) from None
    raw = doc.pop("traceEvents", None)
    header = Header(metadata={k: msgspec.json.decode(v) for k, v in doc.items()})
    if raw is None or not bytes(raw).lstrip().startswith(b"["):
        raise TraceFormatError("not a Kineto trace (no traceEvents list)", path=path)
    events = _decode_events(raw)
    header.n_elements = len(events)
    sink(events)
    return header


def _too_deep(path: str) -> TraceFormatError:
    return TraceFormatError("JSON nested too deeply (arrays or objects inside each other about "
                            "a thousand levels down): not a Kineto trace", path=path)


def read(path: str, sink, *, progress=None, threaded: bool = True, parallel: bool = False,
         reset: Callable[[], None], clean_utf8: bool = False) -> Header:
    """``read_events`` (with a helper process when ``parallel``), again without the helper if
    it fails, again replacing bytes that are not UTF-8 if a decode met one, and ``read_whole``
    for layouts that cannot be streamed. JSON nested deeper than msgspec decodes is an error."""
    # where the compiled scanner is built, a thread does the helpers' work (it releases the GIL)
    helper = (ScanThread.start() or Helpers.start(decode_into)) if parallel else None
    try:
        return read_events(path, sink, progress=progress, threaded=threaded, helper=helper,
                           clean_utf8=clean_utf8)
    except HelperFailed:
        reset()
        return read(path, sink, progress=progress, threaded=threaded, reset=reset,
                    clean_utf8=clean_utf8)
    except UnicodeDecodeError:
        if clean_utf8:  # pragma: no cover - the cleaned text is UTF-8
            raise TraceFormatError("not valid UTF-8", path=path) from None
        reset()
        return read(path, sink, progress=progress, threaded=threaded, reset=reset, clean_utf8=True)
    except _Fallback:
        reset()
        try:
            return read_whole(path, lambda ev: sink(ev, 0))
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"not valid UTF-8 near byte {exc.start:,} (a layout read "
                                   "whole, which is not repaired)", path=path) from None
        except RecursionError:
            raise _too_deep(path) from None
    except RecursionError:
        raise _too_deep(path) from None
    finally:
        if helper is not None:
            helper.close()
