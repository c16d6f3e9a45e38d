"""bench.common's trace generators: the synthetic copies of a real trace and the profiled DLRM
loop, small, read back as JSON and by tracekit's loader."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

from bench.common.large_trace import LargeTraceConfig, write_large_trace
from bench.common.synthetic_trace import write_synthetic_trace
from tracekit.trace import load

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "sample_traces" / "public" / "hta_sampled_rank0.json.gz"


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_synthetic_copies_shift_renumber_and_stay_unique(tmp_path):
    src = [e for e in _events(SRC) if e.get("ph") != "M"]
    w = write_synthetic_trace(SRC, tmp_path / "syn.json.gz", copies=3, shapes=True, memory=True)
    got = _events(w.path)
    assert w.events == len(got)
    kinds = Counter(e.get("cat") for e in got)
    want = Counter(e.get("cat") for e in src)
    assert kinds["kernel"] == 3 * want["kernel"] and kinds["cpu_op"] == 3 * want["cpu_op"]
    mem = [e for e in got if e.get("name") == "[memory]"]
    assert len(mem) == 2 * kinds["kernel"] and sum(e["args"]["Bytes"] for e in mem) == 0
    corr = [e["args"]["correlation"] for e in got if e.get("cat") == "kernel" and "correlation" in e.get("args", {})]
    assert corr and len(corr) == len(set(corr))
    steps = [e["name"] for e in got if re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))]
    assert len(steps) == 3 * sum(1 for e in src if re.fullmatch(r"ProfilerStep#\d+", str(e.get("name"))))
    assert len(set(steps)) == len(steps)  # each copy's steps numbered on from the last
    assert all("Input Dims" in e["args"] for e in got if e.get("cat") == "cpu_op")
    t = load(str(w.path), use_cache=False).traces[0]
    assert t is not None


def test_large_trace_small_on_cpu(tmp_path):
    cfg = LargeTraceConfig(name="tiny", steps=2, tables=2, rows=64, dim=8, batch=16, pooling=2, stack=False)
    w = write_large_trace(tmp_path, cfg)
    assert w.path == tmp_path / "tiny.json.gz" and not (tmp_path / "tiny.json").exists()
    events = _events(w.path)
    assert w.events == len(events)
    names = {e.get("name") for e in events}
    assert {"## forward 3 ##", "## backward 4 ##", "## optimizer 4 ##"} <= names  # the 2 profiled steps (1 wait, 2 warm-up)
    assert sum(1 for n in names if str(n).startswith("ProfilerStep#")) == 2
    assert any(e.get("name") == "[memory]" for e in events)
    load(str(w.path), use_cache=False)
