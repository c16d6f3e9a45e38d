"""The compiled scanner (``tracekit.trace._fastscan``) against msgspec's path, piece by piece.

``Columns.add_raw`` reads a piece with the scanner, or declines (None) and the reader decodes
it with msgspec as before. The promise: whenever it reads a piece, the columns, names, args,
thread names and counts are exactly msgspec's; whenever msgspec would fail on a piece (not JSON,
bytes that are not UTF-8 in a string it keeps), the scanner declines. Checked on generated
pieces full of the odd values real and damaged traces hold, and on every public and sample
trace through the whole loader.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.trace import _columns, loader
from tracekit.trace._columns import Columns
from tracekit.trace._schema import decode_events

pytestmark = pytest.mark.skipif(_columns._fastscan is None, reason="the scanner is not built here")

PUBLIC = Path(__file__).resolve().parents[3] / "shared" / "traces" / "public"


def _normal(cols: Columns) -> dict:
    """A Columns' content with name codes as strings (the two paths number names differently)."""
    names = cols.names.values_
    ev = []
    for index, p in cols._ev:
        d = {k: v.tolist() for k, v in p.items() if k != "_args"}
        d["name"] = [names[i] for i in p["name"].tolist()]
        d["launch"] = [cols.launches.values_[i] if i >= 0 else None for i in p["launch"].tolist()]
        a = p["_args"]
        d["_args"] = None if a is None else {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                             for k, v in a.items()}
        ev.append((index, d))
    mem = [(i, {k: (v.tolist(), str(v.dtype)) for k, v in p.items()}) for i, p in cols._mem]
    dtypes = [(i, {k: str(v.dtype) for k, v in p.items() if k != "_args"}) for i, p in cols._ev]
    return {"ev": ev, "mem": mem, "dtypes": dtypes, "threads": cols._thread_names,
            "cats": set(cols.kind_of), "neg": cols.negative_durations,
            "problems": dict(cols.problems), "dropped": dict(cols.dropped),
            "n_events": cols.n_events, "n_memory": cols.n_memory}


def _both(piece: bytes) -> tuple[int | None, dict | None, object]:
    """(elements the scanner read or None, its columns, msgspec's columns or its exception)."""
    fast = Columns()
    n = fast.add_raw(piece, 3)
    try:
        events = decode_events(piece)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        return n, None, exc
    slow = Columns()
    slow(events, 3)
    slow.n_elements = len(events)
    return n, _normal(fast) if n is not None else None, (len(events), _normal(slow))


def _check(piece: bytes) -> bool:
    n, fast, slow = _both(piece)
    if isinstance(slow, Exception):
        assert n is None, (piece, slow)
        return False
    if n is None:
        return False
    assert n == slow[0], piece
    assert fast == slow[1], piece
    return True


# ---- generated pieces ---------------------------------------------------------------------------

_NAMES = ["aten::add", "cudaLaunchKernel", "ProfilerStep#3", "## optimizer 1 ##", "ncclKernel_AllReduce",
          "record_param_comms", "caf\u00e9", "tab\there", 'quote"d', "back\\slash", "emoji \U0001F600",
          "", "[memory]", "thread_name", "Memcpy HtoD (Pageable -> Device)"]
_CATS = ["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy", "gpu_memset", "user_annotation",
         "gpu_user_annotation", "python_function", "cuda_sync", "cuda_driver", "Operator",
         "Kernel", "Runtime", "weird_cat", ""]


def _num(r: random.Random, kind: str) -> str:
    """The text of a JSON value for a time or a duration."""
    base = r.choice([0, 1, 17, 1712195495519689, 1623142623460111, 999999999999999])
    c = r.random()
    if c < 0.35:
        return str(base)
    if c < 0.7:
        return f"{base}.{r.randint(0, 999):0{r.randint(1, 3)}d}"
    return r.choice([f"{base}.{r.randint(0, 99999):05d}", f"{base}e-3", "1.5E2", "-2.25", "-0",
                     "9223372036854775807", "18446744073709551616", "1e300", "1e999", "-0.0",
                     '"12"', "null", "true", "[1]", "0.1234567890123456789", "123456789012345678901",
                     "4.9e-324", "63.813", "2.5"])


def _intval(r: random.Random) -> str:
    return r.choice(["0", "-1", "7", "123456", "9223372036854775807", "-9223372036854775808",
                     "9223372036854775808", "18446744073709551615", "300", "-129", "40000",
                     "1.0", "1e3", '"5"', "null", "true", "[1, 2]", "{}"])


def _strval(r: random.Random) -> str:
    return r.choice(['"allreduce"', '"nccl:all_to_all"', '"[0, 1]"', '""', '"caf\\u00e9"',
                     '"\\ud83d\\ude00"', '"x\\ny"', "7", "null", '["a"]', '"\\u0041"', '"float"'])


_INT_KEYS = ["External id", "external id", "correlation", "stream", "device", "bytes", "Bytes",
             "Total Allocated", "Total Reserved", "Addr", "Device Type", "Device Id",
             "wait_on_stream", "wait_on_cuda_event_record_corr_id", "wait_on_cuda_event_id",
             "Process Group ID", "Group size", "In msg nelems", "Out msg nelems", "Seq", "Rank",
             "Src Rank", "Dst Rank"]
_STR_KEYS = ["name", "Collective name", "Process Group Name", "Process Group Description",
             "Process Group Ranks", "In split size", "Out split size", "dtype"]
_SKIPPED = ['"Input Dims": [[2048, 64], [64], []]', '"Concrete Inputs": ["", "", "1"]',
            '"Ev Idx": 3', '"Fwd thread id": 1', '"x": {"a": [1, {"b": null}], "c": -1.5e10}',
            '"blob": "\\u00e9\\"\\\\/"', '"t": true, "f": false', '"big": 1e999',
            '"raw": "\xc3\xa9"',
            # a kernel's launch configuration (read by ``_schema.Launch``), odd values too
            '"grid": [512, 16, 1]', '"block": [128,1,1]', '"registers per thread": 32',
            '"shared memory": 13056', '"est. achieved occupancy %": 25', '"grid": [2, 1, 1]',
            '"est. achieved occupancy %": 12.5', '"grid": "x"', '"block": [1, -2, 3]',
            '"registers per thread": null', '"shared memory": 1e999']


def _args(r: random.Random, odd: float) -> str:
    items = []
    for _ in range(r.randint(0, 6)):
        c = r.random()
        if c < 0.45:
            k = r.choice(_INT_KEYS)
            v = _intval(r) if r.random() < odd * 3 else str(r.choice([-1, 0, 3, 7, 4096, 2 ** 40]))
            items.append(f'"{k}": {v}')
        elif c < 0.65:
            k = r.choice(_STR_KEYS)
            v = _strval(r) if r.random() < odd * 3 else json.dumps(r.choice(_NAMES[:6]))
            items.append(f'"{k}": {v}')
        else:
            items.append(r.choice(_SKIPPED))
    sep = r.choice([",", ", ", ",\n      "])
    return "{" + sep.join(items) + "}"


def _event(r: random.Random, odd: float) -> str:
    """One element: mostly a well-formed event, with probability ``odd`` per field something
    unusual (a wrong type, a missing key, an escape, a duplicate key)."""
    ph = r.choice(["X", "X", "X", "X", "i", "M", "f", "s", "C"])
    name = r.choice(_NAMES)
    if ph == "i" and r.random() < 0.7:
        name = "[memory]"
    if ph == "M" and r.random() < 0.7:
        name = "thread_name"
    fields = {
        "ph": json.dumps(ph),
        "cat": json.dumps(r.choice(_CATS)),
        "name": json.dumps(name, ensure_ascii=r.random() < 0.5),
        "pid": r.choice(["1102", "0", "7", '"Spans"', '"stream 7"', '" 12 "']),
        "tid": r.choice(["1262", "7", "0", '"stream 3"', '"abc"']),
        "ts": _num(r, "ts") if r.random() < odd * 3 else f"{1712195495519689 + r.randint(0, 10 ** 6)}.{r.randint(0, 999):03d}",
        "dur": _num(r, "dur") if r.random() < odd * 3 else f"{r.randint(0, 5000)}.{r.randint(0, 999):03d}",
        "args": _args(r, odd),
    }
    if ph == "M":
        labels = ["python3", "stream 7", ""] + (["caf\u00e9"] if odd else [])
        fields["args"] = '{"name": ' + json.dumps(r.choice(labels)) + "}"
    for k in list(fields):
        c = r.random()
        if c < odd * 0.3:
            del fields[k]
        elif c < odd * 0.5:
            fields[k] = r.choice(["null", "1.5", '"x"', "[]", "{}", "true", '"\\ud800"', '"a\x01b"',
                                  '"\xff\xfe"', "-", "01", '"\\q"'])
    items = [f'"{k}": {v}' for k, v in fields.items()]
    r.shuffle(items)
    if r.random() < odd:
        items.append(r.choice(['"ph": "X"', '"name": "dup"', '"args": {"External id": 99}',
                               '"id": 4, "bp": "e"', '"ts": 5']))
    if r.random() < odd * 0.2:
        items.insert(0, r.choice(['"p\\u0068": "X"', '"\xff": 1']))
    sep = r.choice([", ", ",", ",\n    "])
    return "{" + sep.join(items) + "}"


def _encoded(text: str) -> bytes:
    # the generator writes raw "\xff" bytes as latin-1 characters: encode those as single bytes
    return text.encode("latin-1", "replace") if all(ord(c) < 256 for c in text) else text.encode()


@pytest.mark.parametrize("odd", [0.0, 0.02, 0.1, 0.4])
def test_scanner_reads_exactly_what_msgspec_reads(odd):
    r = random.Random(int(odd * 1000) + 1)
    read = declined = 0
    for _ in range(400):
        text = r.choice([",", ",\n  "]).join(_event(r, odd) for _ in range(r.randint(0, 12)))
        text = "[" + text + "]"
        if r.random() < odd * 0.2:
            text = text[: r.randint(0, len(text))]
        piece = text.encode("utf-8") if r.random() < 0.5 else _encoded(text)
        if _check(piece):
            read += 1
        else:
            declined += 1
    if odd == 0:  # clean pieces are read by the scanner, not handed back
        assert read > 300, (read, declined)
    elif odd < 0.2:  # both ways taken
        assert read > 20 and declined > 20, (read, declined)
    assert read + declined == 400


@pytest.mark.parametrize("piece, reads", [
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1.5,"dur":2}]', True),
    (b'[]', True),
    (b' [ ] ', True),
    (b'[{"ph":"X","cat":"cpu_op","name":"a\xff","pid":1,"tid":2,"ts":1,"dur":2}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2,"zz":"\xff"}]', True),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1.2345,"dur":2}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1e3,"dur":2}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":"1","dur":2}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":1e300}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"\\ud800","pid":1,"tid":2,"ts":1,"dur":2}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"\\ud83d\\ude00","pid":1,"tid":2,"ts":1,"dur":2}]', True),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":"Spans","tid":"stream 7","ts":1,"dur":2}]', True),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2,"args":{"External id":1.0}}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2,"args":{"External id":1,"External id":5}}]', True),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2},]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2}', False),
    (b'[{"ph":"i","name":"[memory]","pid":1,"tid":2,"ts":1,"args":{"Device Type":300}}]', True),
    (b'[{"ph":"M","name":"thread_name","pid":1,"tid":2,"ts":0,"args":{"name":"main"}}]', True),
    (b'[1, {"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2}]', False),
    (b'[{"name":"a","pid":1,"tid":2,"ts":1,"dur":2}]', False),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":-3.5}]', True),
    (b'[{"ph":"X","name":"a","pid":1,"tid":2,"ts":1,"dur":2}]', True),
    (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":-0,"dur":2}]', True),
])
def test_scanner_on_edge_cases(piece, reads):
    assert _check(piece) == reads


def test_scanner_reads_the_schema_s_keys():
    # a field added to _schema.Args must be added to _fastscan.c too (else the scanner is off)
    assert _columns._scanner_matches_schema(_columns._fastscan)


def test_deep_nesting_is_left_to_msgspec():
    deep = b"[" * 300 + b"]" * 300
    piece = b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":1,"dur":2,"args":{"x":' + deep + b"}}]"
    assert not _check(piece)


def _traces() -> list[Path]:
    found = sorted(SAMPLE_TRACES.rglob("*.json.gz"))
    if PUBLIC.is_dir():
        found += sorted(PUBLIC.glob("*.json.gz"))
    return found


@pytest.mark.parametrize("path", _traces(), ids=lambda p: p.name)
def test_loader_tables_the_same_with_and_without_the_scanner(path, monkeypatch):
    fast = loader.parse_file(str(path), threaded=False)
    monkeypatch.setattr(_columns, "_fastscan", None)
    slow = loader.parse_file(str(path), threaded=False)
    assert fast.names == slow.names and fast.info == slow.info and fast.arg_strings == slow.arg_strings
    for a, b in ((fast.events, slow.events), (fast.memory, slow.memory), (fast.args, slow.args)):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), (path, k)
