"""Build damaged trace files for tests: the inputs of issue 14 ("inputs from the wild"), made
from a good trace by code, never committed as blobs.

    doc = read_doc(path)                      # a trace file (.json or .json.gz) as a dict
    k = first(doc, cat="kernel")              # index of an event in doc["traceEvents"]
    doc["traceEvents"][k]["ts"] = None
    write_doc(doc, tmp_path / "bad.json")

Byte-level damage (``invalid_utf8``, ``nested``, ``gzip_bomb``, ``truncate``, ``utf16``, ``bom``)
writes the bytes itself. Every helper leaves its input untouched and returns the path written.
"""

from __future__ import annotations

import copy
import gzip
import json
import zlib
from pathlib import Path
from typing import Any


def read_doc(path: str | Path) -> dict[str, Any]:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def text_of(doc: dict[str, Any]) -> bytes:
    """The JSON text of ``doc`` (allow_nan off: the damage is written on purpose, not by json)."""
    return json.dumps(doc, allow_nan=False).encode()


def write_bytes(data: bytes, path: str | Path, *, gz: bool | None = None) -> Path:
    """``data`` at ``path``, gzipped when ``gz`` (default: when the name ends in .gz)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz is None:
        gz = path.name.endswith(".gz")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def write_doc(doc: dict[str, Any], path: str | Path, *, gz: bool | None = None) -> Path:
    return write_bytes(text_of(doc), path, gz=gz)


def first(doc: dict[str, Any], **match: Any) -> int:
    """Index of the first event whose keys equal ``match`` (``cat="kernel"``, ``ph="X"``)."""
    for i, e in enumerate(doc["traceEvents"]):
        if isinstance(e, dict) and all(e.get(k) == v for k, v in match.items()):
            return i
    raise KeyError(match)


def with_event(doc: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    """A copy of ``doc`` with event ``index``'s keys changed; a value ``DROP`` removes the key."""
    out = copy.deepcopy(doc)
    ev = out["traceEvents"][index]
    for k, v in changes.items():
        if v is DROP:
            ev.pop(k, None)
        else:
            ev[k] = v
    return out


DROP = object()
"""``with_event(doc, i, ts=DROP)``: remove the key."""


def without_event(doc: dict[str, Any], index: int) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    del out["traceEvents"][index]
    return out


def invalid_utf8(doc: dict[str, Any], index: int, path: str | Path) -> Path:
    """Event ``index``'s name with a byte that is not UTF-8 (0xff) in it."""
    marked = with_event(doc, index, name="\u2603MARK\u2603")
    data = text_of(marked).replace(b"\\u2603MARK\\u2603", b"a\xffb", 1)
    assert b"\xff" in data
    return write_bytes(data, path)


def nested(depth: int, path: str | Path, *, kind: str = "[]") -> Path:
    """A trace whose one event's args hold arrays (or objects) ``depth`` levels deep."""
    open_, close = (kind[0], kind[1]) if kind == "[]" else ('{"a":', "}")
    inner = open_ * depth + ("1" if kind == "[]" else "1") + close * depth
    text = ('{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,'
            '"dur":1,"args":{"deep":' + inner + "}}]}")
    return write_bytes(text.encode(), path)


def gzip_bomb(path: str | Path, n_bytes: int, fill: bytes = b"\0") -> Path:
    """A small gzip file that inflates to ``n_bytes`` of ``fill`` (about 1000:1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = fill * (1 << 20)
    with open(path, "wb") as f:
        left = n_bytes
        while left > 0:
            f.write(c.compress(block[: min(left, len(block))]))
            left -= len(block)
        f.write(c.flush())
    return Path(path)


def truncate(data: bytes, at: int, path: str | Path, *, gz: bool = False) -> Path:
    return write_bytes(data[:at], path, gz=gz)


def utf16(doc: dict[str, Any], path: str | Path) -> Path:
    return write_bytes(json.dumps(doc).encode("utf-16"), path, gz=False)


def bom(doc: dict[str, Any], path: str | Path) -> Path:
    return write_bytes(b"\xef\xbb\xbf" + text_of(doc), path, gz=False)


# ---- mutations for the property-based test ---------------------------------------------------

OTHER_TYPE = {
    "number": [None, "x", True, [1], {"a": 1}],  # ts, dur, pid, tid: anything but a number
    "string": [None, 7, True, [1], {"a": 1}],  # ph, cat, name
    "object": [None, 7, "x", True, [1]],  # args
}
"""Values of another JSON type than a field's own: a retyped number is never another number
(that would be a different, valid trace, which no reader can tell from the original)."""

FIELDS = {"ph": "string", "cat": "string", "name": "string", "pid": "number", "tid": "number",
          "ts": "number", "dur": "number", "args": "object"}
LINKED_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "Kernel", "Memcpy",
               "Memset", "Runtime")
"""Events Kineto always links by ``args.correlation``: dropping or retyping it is detectable."""


def read_events(doc: dict[str, Any]) -> list[int]:
    """Indices of the events tracekit reads: complete (``X``) and ``[memory]`` ones."""
    return [i for i, e in enumerate(doc["traceEvents"])
            if isinstance(e, dict) and (e.get("ph") == "X" or e.get("name") == "[memory]")]


def mutate_field(doc: dict[str, Any], index: int, field: str, value: Any) -> dict[str, Any]:
    """Event ``index`` with ``field`` (``args.correlation`` for an arg) set to ``value``
    (``DROP``: removed)."""
    out = copy.deepcopy(doc)
    ev = out["traceEvents"][index]
    if field.startswith("args."):
        ev = ev.setdefault("args", {})
        field = field[len("args."):]
    if value is DROP:
        ev.pop(field, None)
    else:
        ev[field] = value
    return out


def nest_args(doc: dict[str, Any], index: int, depth: int) -> bytes:
    """The JSON text with event ``index``'s args wrapped in ``depth`` arrays."""
    marked = mutate_field(doc, index, "args", "\u2603NEST\u2603")
    args = json.dumps(doc["traceEvents"][index].get("args", {})).encode()
    return text_of(marked).replace(b'"\\u2603NEST\\u2603"', b"[" * depth + args + b"]" * depth, 1)


def flip(data: bytes, at: int, byte: int) -> bytes:
    return data[:at] + bytes([byte]) + data[at + 1:]


DAMAGING_BYTES = (0xFF, 0x00, 0x1F, 0xC3)
"""Bytes that cannot stand in valid UTF-8 JSON text where they land (a control character, a
lone lead byte, 0xff): a flip to one of them is damage a reader can see, unlike a digit."""


def re_encode(doc: dict[str, Any], how: str) -> tuple[bytes, bool]:
    """(bytes, gzip them?) of ``doc`` in another encoding: ``gzip``, ``bom``, ``utf16``,
    ``indent``, ``double-gzip``."""
    text = text_of(doc)
    if how == "gzip":
        return text, True
    if how == "bom":
        return b"\xef\xbb\xbf" + text, False
    if how == "utf16":
        return json.dumps(doc).encode("utf-16"), False
    if how == "indent":
        return json.dumps(doc, indent=1).encode(), False
    if how == "double-gzip":
        return gzip.compress(text, mtime=0), True
    raise ValueError(how)
