"""``tracekit analyze`` with a memory snapshot (``--snapshot`` or one found beside the trace), and
the text of the HTA and snapshot sections."""

from __future__ import annotations

import json
import pickle
import re

import pytest

from tests.tracegen import TraceBuilder
from tests.tracekit.test_cli_analyze import run
from tests.tracekit.test_snapshot import MB, SIDE, known_snapshot
from tracekit.report import rank_text


def small_trace(path):
    b = TraceBuilder(rank=0, world_size=1)
    for i in range(3):
        b.profiler_step(i + 1, 100 * i, 100)
        b.kernel(f"gemm_{i}", 100 * i + 20, 30, stream=7, launch_at=100 * i + 10)
        b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 100 * i + 40, 30, stream=20,
                 launch_at=100 * i + 15)
    return b.write(path)


def test_snapshot_option(tmp_path, capsys):
    trace = small_trace(tmp_path / "run.json.gz")
    snap = known_snapshot(tmp_path)  # tmp/run.pickle
    other = tmp_path / "other.pickle"
    other.write_bytes(snap.read_bytes())
    snap.unlink()  # nothing beside the trace: only --snapshot brings it in
    code, out, err = run(["analyze", trace, "--snapshot", other, "--format", "json", "--no-cache"],
                         capsys)
    assert code == 0, err
    (r,) = json.loads(out)["analyses"]
    s = r["snapshot"]
    assert s["source"] == str(other)
    assert (s["reserved"], s["reserved_off_main"], s["inactive_split"], s["pending_free"]) == (
        96 * MB, 64 * MB, 32 * MB, 4 * MB)
    assert {row["stream"] for row in s["streams"]} == {0, SIDE}

    code, out, err = run(["analyze", trace, "--snapshot", other, "--no-cache"], capsys)
    assert code == 0, err
    text = out[re.search(r"^\d+\. Memory snapshot", out, re.M).start():]
    assert "reserved on other streams (the main stream cannot reuse it)" in text
    assert "64.00 MiB (66.7%)" in text  # 64 of 96 MiB
    assert re.search(r"inactive split \(free pieces of segments in use\)\s+32\.00 MiB", text)
    assert re.search(rf"0\s+{SIDE}\s+1\s+64\.00 MiB\s+40\.00 MiB\s+4\.00 MiB", text)
    assert re.search(r"0 \(main\)\s+3\s+32\.00 MiB", text)
    # the side stream's pool: 20 MiB free, the largest piece 16 MiB, 2 pieces, 20% fragmented
    assert re.search(rf"{SIDE}\s+\(0, 0\)\s+large\s+64\.00 MiB\s+20\.00 MiB\s+16\.00 MiB\s+2\s+20\.0%",
                     text)


def test_snapshot_found_beside_the_trace(tmp_path, capsys):
    trace = small_trace(tmp_path / "run.json.gz")
    known_snapshot(tmp_path)  # writes tmp/run.pickle
    code, out, err = run(["analyze", trace, "--format", "json", "--cache-dir", tmp_path / "c"],
                         capsys)
    assert code == 0, err
    (r,) = json.loads(out)["analyses"]
    assert r["snapshot"]["reserved_off_main"] == 64 * MB
    assert r["snapshot"]["source"].endswith("run.pickle")


def test_bad_snapshot_is_one_line_exit_2(tmp_path, capsys):
    trace = small_trace(tmp_path / "run.json.gz")
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(b"cos\nsystem\n(S'echo hi'\ntR.")
    code, out, err = run(["analyze", trace, "--snapshot", evil, "--no-cache"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "refusing to load global os.system" in err
    assert "Traceback" not in err
    code, _, err = run(["analyze", trace, "--snapshot", tmp_path / "none.pickle", "--no-cache"],
                       capsys)
    assert code == 2 and "none.pickle: no such file" in err


def test_snapshot_needs_one_rank(tmp_path, capsys):
    d = tmp_path / "ranks"
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        b.profiler_step(1, 0, 100)
        b.kernel("k", 10, 5, launch_at=1)
        b.write(d / f"rank{rank}.json")
    snap = tmp_path / "s.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": []}))
    code, _, err = run(["analyze", d, "--snapshot", snap, "--no-cache"], capsys)
    assert code == 2 and "--snapshot goes with one trace, not 2 ranks" in err
    code, out, err = run(["analyze", d, "--rank", "1", "--snapshot", snap, "--no-cache",
                          "--format", "json"], capsys)
    assert code == 0, err
    (r,) = json.loads(out)["analyses"]
    assert r["rank"] == 1 and r["snapshot"]["reserved"] == 0


def test_out_may_not_overwrite_the_snapshot(tmp_path, capsys):
    trace = small_trace(tmp_path / "run.json.gz")
    snap = known_snapshot(tmp_path)
    before = snap.read_bytes()
    code, _, err = run(["analyze", trace, "--snapshot", snap, "--out", snap, "--no-cache"], capsys)
    assert code == 2 and "an input this command reads; it would be overwritten" in err
    assert snap.read_bytes() == before


def test_hta_section_text(tmp_path, capsys):
    pytest.importorskip("hta")
    trace = small_trace(tmp_path / "run.json.gz")
    code, out, err = run(["analyze", trace, "--no-cache"], capsys)
    assert code == 0, err
    text = out[re.search(r"^\d+\. HTA", out, re.M).start():]
    # steps 1 and 2 (step 3 is left out): GPU span 20..170 = 150 us, busy [20,70) + [120,170)
    # = 100, compute 2 x 30, NCCL 2 x 30 of which 2 x 10 under a gemm; in ms as every time
    assert "times in ms; window: the last ProfilerStep's GPU work left out" in text
    assert re.search(r"0\s+0\.150\s+0\.050 \(33\.33%\)\s+0\.060 \(40%\)\s+0\.040 \(26\.67%\)\s+33\.33%",
                     text)
    # each gemm launched after the previous kernel on its stream ended: all idle is host wait
    assert re.search(r"0\s+0\.140 \(100\.0%\)\s+-\s+0\.000 \(0\.0%\)", text)
    assert "COMPUTATION overlapping COMMUNICATION" in text
    assert re.search(r"COMMUNICATION\s+0\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+ncclKernel_AllReduce_RING_LL_Sum_float$", text, re.M)


def test_unavailable_sections_render(capsys):
    r = {"available": False, "reason": "the trace has no GPU activity"}
    assert rank_text._text_hta(r, 20) == "  not available: the trace has no GPU activity\n"
    empty = {"source": "s.pickle", "main_stream": 0, "reserved": 0, "allocated": 0, "free": 0,
             "pending_free": 0, "reserved_off_main": 0, "inactive_split": 0, "streams": [],
             "pools": [], "trace_entries": 0}
    text = rank_text._text_snapshot(empty, 20)
    assert "s.pickle (main stream: 0)" in text and "per stream" not in text
