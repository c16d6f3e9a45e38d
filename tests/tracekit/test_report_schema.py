"""Every JSON document the commands write conforms to ``tracekit.report.schema``, and the
checker finds what departs from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.tracegen import TraceBuilder
from tests.tracekit.test_cli_analyze import run
from tests.tracekit.test_report import full_builder
from tracekit.report import keys, schema

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "issue5" / "issue5_inplace_standard.json.gz"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A runtime trace with its memory snapshot beside it, a hand-made trace, and a directory of
    two ranks."""
    d = tmp_path_factory.mktemp("schema")
    shutil.copy(SAMPLE, d / "a.json.gz")
    shutil.copy(SAMPLE.with_suffix("").with_suffix(".pickle"), d / "a.pickle")
    full_builder().write(d / "b.json.gz")
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        b.profiler_step(1, 0, 100 * (rank + 1))
        b.kernel("k", 10, 5, launch_at=1)
        b.write(d / "job" / f"rank{rank}.json")
    return d


def _json(argv, capsys, ok=(0,)):
    code, out, err = run(argv, capsys)
    assert code in ok, err
    return json.loads(out)


def test_analyze_documents_conform(files, capsys):
    doc = _json(["analyze", files / "a.json.gz", "--hta", "--format", "json", "--no-cache"], capsys)
    (r,) = doc["analyses"]
    assert r["snapshot"] is not None and r["hta"] is not None and r["explain"] is not None
    assert schema.problems(doc, schema.AnalyzeDocument) == []
    doc = _json(["analyze", files / "b.json.gz", files / "job", "--format", "json", "--no-cache"],
                capsys)
    assert len(doc["analyses"]) == 3 and len(doc["jobs"]) == 1
    assert schema.problems(doc, schema.AnalyzeDocument) == []


def test_explain_compare_check_documents_conform(files, capsys):
    a, b = files / "a.json.gz", files / "b.json.gz"
    doc = _json(["explain", b, "--step", "2", "--what-if", "host=2", "--format", "json",
                 "--no-cache"], capsys)
    assert doc["explain"][0]["path"]
    assert schema.problems(doc, schema.ExplainDocument) == []
    doc = _json(["explain", b, "--format", "json", "--no-cache"], capsys)
    assert schema.problems(doc, schema.ExplainDocument) == []
    doc = _json(["compare", a, b, "--format", "json", "--no-cache"], capsys)
    assert schema.problems(doc, schema.CompareDocument) == []
    doc = _json(["check", b, files / "job", "--max", "stall_total=1ns", "--min",
                 "comm_overlap_ratio=90%", "--format", "json", "--no-cache"], capsys, ok=(1,))
    assert not doc["passed"] and schema.problems(doc, schema.CheckDocument) == []


def test_the_checker_finds_each_departure(files, capsys):
    doc = _json(["analyze", files / "b.json.gz", "--format", "json", "--no-cache"], capsys)
    r = doc["analyses"][0]
    del r["headline"]["stall_count"]
    r["steps"]["extra"] = 1
    r["overlap"]["streams"][0]["busy_ns"] = "12"
    r["gaps"]["mean_gap_ns"] = True
    r["platform"] = "tpu"
    r["explain"]["steps"][0]["bound"] = "memory"
    assert sorted(schema.problems(doc, schema.AnalyzeDocument)) == sorted([
        "$.analyses[0].headline: no key 'stall_count' (Headline)",
        "$.analyses[0].steps: key 'extra' not in Steps",
        "$.analyses[0].overlap.streams[0].busy_ns: str '12', not int",
        "$.analyses[0].gaps.mean_gap_ns: bool 'True', not float | null",
        "$.analyses[0].platform: 'tpu' not one of ['cuda', 'rocm', 'cpu']",
        "$.analyses[0].explain.steps[0].bound: str 'memory', not 'host' | 'gpu' | "
        "'communication' | 'sync' | null",
    ])


def test_the_key_orders_are_the_schema_s():
    assert keys.HEADLINE_KEYS == tuple(schema.Headline.__annotations__)
    assert keys.RANK_KEYS == tuple(schema.Rank.__annotations__)
    assert keys.SECTION_KEYS == keys.RANK_KEYS[keys.RANK_KEYS.index("explain"):]
    assert set(keys.TEXT_KEYS) <= set(keys.HEADLINE_KEYS)
