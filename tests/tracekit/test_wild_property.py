"""Issue 14's promise, property-based: real traces mutated at random (truncated, bytes flipped,
fields dropped or retyped, args nested, re-encoded) through ``tracekit analyze``.

On every case: exit 0 or 2; at most 3 lines on stderr; no traceback; exit 2 is exactly one
``tracekit: error:`` line; the input's bytes unchanged; and with exit 0, a headline figure
that differs from the unmutated trace's comes with a warning.

The traces are the repository's own (``sample_traces/public``, ``tests/data``). CI runs a
fixed (derandomized) set of ``EXAMPLES`` cases (about 30 s on 2 cores);
``TRACEKIT_FUZZ_EXAMPLES=N`` runs N random ones instead.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import damage
from tests.conftest import SAMPLE_TRACES, TEST_DATA
from tracekit.cli import main

SOURCES = [SAMPLE_TRACES / "public" / "hta_sampled_rank0.json.gz",
           TEST_DATA / "dlrm_2stream_small.json.gz"]
EXAMPLES = int(os.environ.get("TRACEKIT_FUZZ_EXAMPLES", "60"))


def _run(path: Path, capsys) -> tuple[int, dict | None, str]:
    with pytest.raises(SystemExit) as e:
        main(["analyze", str(path), "--format", "json", "--no-hta", "--no-cache"])
    out, err = capsys.readouterr()
    code = e.value.code
    head = json.loads(out)["analyses"][0]["headline"] if code == 0 and out else None
    return code, head, err


@lru_cache(maxsize=None)
def _doc(i: int) -> dict:
    return damage.read_doc(SOURCES[i])


_BASELINE: dict[int, dict] = {}


def _baseline(i: int, tmp: Path, capsys) -> dict:
    if i not in _BASELINE:
        code, head, err = _run(SOURCES[i], capsys)
        assert code == 0 and err == "", err
        _BASELINE[i] = head
    return _BASELINE[i]


@st.composite
def mutation(draw):
    """(source index, what was done, bytes to write, gzip them?)."""
    i = draw(st.sampled_from(range(len(SOURCES))))
    doc = _doc(i)
    how = draw(st.sampled_from(["truncate", "flip", "flip-gz", "field", "nest", "re-encode"]))
    if how in ("truncate", "flip", "flip-gz"):
        text = damage.text_of(doc)
        if how == "flip-gz":
            import gzip

            data = gzip.compress(text, mtime=0)
            at = draw(st.integers(0, len(data) - 1))
            return i, f"flip-gz@{at}", damage.flip(data, at, draw(st.integers(0, 255))), False
        at = draw(st.integers(0, len(text) - 1))
        if how == "truncate":
            return i, f"truncate@{at}", text[:at], draw(st.booleans())
        byte = draw(st.sampled_from(damage.DAMAGING_BYTES))
        return i, f"flip@{at}={byte:#x}", damage.flip(text, at, byte), False
    events = damage.read_events(doc)
    k = draw(st.sampled_from(events))
    if how == "nest":
        depth = draw(st.one_of(st.integers(1, 5), st.integers(900, 3000)))
        return i, f"nest#{k}x{depth}", damage.nest_args(doc, k, depth), False
    if how == "re-encode":
        enc = draw(st.sampled_from(["gzip", "bom", "utf16", "indent", "double-gzip"]))
        data, gz = damage.re_encode(doc, enc)
        return i, f"re-encode:{enc}", data, gz
    fields = list(damage.FIELDS)
    if doc["traceEvents"][k].get("cat") in damage.LINKED_CATS:
        fields.append("args.correlation")
    field = draw(st.sampled_from(fields))
    kind = damage.FIELDS.get(field, "number")
    value = draw(st.sampled_from([damage.DROP, *damage.OTHER_TYPE[kind]]))
    label = f"field#{k}.{field}={'DROP' if value is damage.DROP else json.dumps(value)}"
    return i, label, damage.text_of(damage.mutate_field(doc, k, field, value)), draw(st.booleans())


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          derandomize="TRACEKIT_FUZZ_EXAMPLES" not in os.environ,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(case=mutation())
def test_the_promise_holds_on_mutated_real_traces(case, tmp_path, capsys):
    i, label, data, gz = case
    base = _baseline(i, tmp_path, capsys)
    path = damage.write_bytes(data, tmp_path / ("case.json.gz" if gz else "case.json"), gz=gz)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    code, head, err = _run(path, capsys)
    lines = err.splitlines()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, label
    assert "Traceback" not in err, (label, err)
    assert code in (0, 2), (label, code, err)
    assert len(lines) <= 3, (label, lines)
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), (label, lines)
        return
    assert all(ln.startswith("tracekit: warning: ") for ln in lines), (label, lines)
    changed = {k: (base[k], head[k]) for k in base if head[k] != base[k]}
    assert not changed or lines, (label, changed)
