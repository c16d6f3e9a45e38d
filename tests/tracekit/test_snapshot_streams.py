"""tracekit.analyses.snapshot_streams: a hand-built trace and snapshot whose stream matching was
worked out by hand, the address majority, and the real issue-5 pairs in sample_traces/."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tests.tracegen import TraceBuilder
from tracekit.analyses.snapshot_streams import address_handles
from tracekit.api import analyze_path

REPO = Path(__file__).resolve().parents[2]
SIDE, FEW, SPLIT, IDLE = 0x5A00, 0x5B00, 0x5C00, 0x5D00  # cudaStream_t handles of side streams
BASE = 0x7F00_0000_0000


def _snapshot(history: list[tuple[int, int]]) -> dict:
    """One segment per handle, and an alloc + free_requested history entry per (addr, handle)."""
    segs = [{"device": 0, "address": BASE + (i << 30), "total_size": 1 << 20, "stream": h, "blocks": []}
            for i, h in enumerate((0, SIDE, FEW, SPLIT, IDLE))]
    entries = [{"action": a, "addr": addr, "size": 256, "stream": h, "time_us": 1}
               for addr, h in history for a in ("alloc", "free_requested")]
    return {"segments": segs, "device_traces": [entries]}


def _build(tmp_path: Path) -> Path:
    """A trace where each allocation sits in an op whose work lands on a known CUPTI stream:

    - default stream (handle 0): 3 allocations in aten::empty inside aten::add, whose kernel runs
      on stream 7 (the innermost op launched nothing: its parent votes);
    - SIDE: 4 batch copies, the allocation in aten::empty_strided inside aten::to whose
      aten::copy_ launches a memcpy HtoD on stream 20 -> named stream 20, 4 of 4;
    - FEW: 2 allocations on stream 24 -> too few votes;
    - SPLIT: 3 allocations on stream 30 and 2 on stream 7 -> 60%, no clear majority;
    - one SIDE allocation whose op launched on streams 20 and 7: no vote; one allocation at an
      address the snapshot does not know: not counted; IDLE: no allocation at all.
    """
    b = TraceBuilder()
    history, t, n = [], 0.0, 0

    def alloc(handle: int | None, streams: list[int], *, nested: bool) -> None:
        nonlocal t, n
        addr = BASE + 0x1000 * (n + 1)
        n += 1
        if handle is not None:
            history.append((addr, handle))
        b.cpu_op("aten::to" if nested else "aten::add", t, 20)
        if nested:
            b.cpu_op("aten::empty_strided", t + 1, 2)
            b.memory(t + 2, 256, addr=addr)
            b.cpu_op("aten::copy_", t + 5, 10)
            for i, s in enumerate(streams):
                b.memcpy(t + 100 + i, 1, stream=s, launch_at=t + 6 + i)
        else:
            b.cpu_op("aten::empty", t + 1, 2)
            b.memory(t + 2, 256, addr=addr)
            for i, s in enumerate(streams):
                b.kernel("k", t + 100 + i, 1, stream=s, launch_at=t + 6 + i)
        t += 200

    for _ in range(3):
        alloc(0, [7], nested=False)
    for _ in range(4):
        alloc(SIDE, [20], nested=True)
    alloc(SIDE, [20, 7], nested=True)
    for _ in range(2):
        alloc(FEW, [24], nested=False)
    for s in (30, 30, 30, 7, 7):
        alloc(SPLIT, [s], nested=False)
    alloc(None, [20], nested=True)
    path = b.write(tmp_path / "run.json")
    (tmp_path / "run.pickle").write_bytes(pickle.dumps(_snapshot(history)))
    return path


def test_hand_built_matching(tmp_path):
    [(_, a)] = analyze_path(_build(tmp_path), use_cache=False, with_hta=False)
    m = a.snapshot_streams
    rows = {int(r.handle): r for r in m.streams.itertuples(index=False)}
    assert set(rows) == {0, SIDE, FEW, SPLIT, IDLE}
    assert (rows[0].cupti_stream, rows[0].votes, rows[0].matched, rows[0].how) == (7, 3, 3, "default stream")
    assert (rows[SIDE].cupti_stream, rows[SIDE].votes, rows[SIDE].matched, rows[SIDE].how) == (20, 4, 4, "matched")
    assert (rows[FEW].cupti_stream, rows[FEW].votes, rows[FEW].matched, rows[FEW].how) == (-1, 2, 2, "too few votes")
    assert (rows[SPLIT].cupti_stream, rows[SPLIT].votes, rows[SPLIT].matched) == (-1, 3, 5)
    assert rows[SPLIT].how == "no clear majority" and rows[SPLIT].share == pytest.approx(0.6)
    assert (rows[IDLE].cupti_stream, rows[IDLE].matched, rows[IDLE].how) == (-1, 0, "too few votes")
    assert m.votes[(0, SPLIT)] == {30: 3, 7: 2}
    assert m.allocations == 3 + 5 + 2 + 5 and m.voting == 3 + 4 + 2 + 5  # the two-stream op does not vote
    # the JSON report leaves the per-address table out
    from tracekit.report import to_dict

    assert "addresses" not in to_dict(a)["snapshot"]


def test_hand_built_thresholds(tmp_path):
    from tracekit.analyses import snapshot_streams
    from tracekit.trace import load

    path = _build(tmp_path)
    trace = load(path, use_cache=False, progress=False).traces[0]
    with open(tmp_path / "run.pickle", "rb") as f:
        addresses = address_handles(pickle.load(f))
    m = snapshot_streams.compute(trace, addresses, [(0, 0), (0, FEW), (0, SPLIT)], min_votes=2, min_share=0.6)
    rows = {int(r.handle): r for r in m.streams.itertuples(index=False)}
    assert (rows[FEW].cupti_stream, rows[FEW].how) == (24, "matched")
    assert (rows[SPLIT].cupti_stream, rows[SPLIT].how) == (30, "matched")


def test_address_majority():
    data = {"segments": [{"device": 0, "address": 0x1000, "total_size": 512, "stream": 9,
                          "blocks": [{"address": 0x1000, "size": 256, "state": "active_allocated"},
                                     {"address": 0x1100, "size": 256, "state": "inactive"}]}],
            "device_traces": [[{"action": "alloc", "addr": 0x1000, "stream": 5},
                               {"action": "free_requested", "addr": 0x1000, "stream": 5},
                               {"action": "free_completed", "addr": 0x1000, "stream": 5},
                               {"action": "segment_alloc", "addr": 0x1000, "stream": 9},
                               {"action": "alloc", "addr": 0x2000, "stream": 9}], []]}
    a = address_handles(data)
    got = {(int(r.device), int(r.addr)): (int(r.stream), int(r.entries)) for r in a.itertuples(index=False)}
    # 3 block entries on 5 beat the active block on 9; segment actions and inactive blocks do not count
    assert got == {(0, 0x1000): (5, 4), (0, 0x2000): (9, 1)}


@pytest.mark.parametrize("name, expected", [
    ("issue5_inplace_standard", {0: (7, 365, 365), 591794080: (14, 12, 12)}),
    ("issue5_inplace_inplace", {0: (7, 365, 365)}),
])
def test_real_issue5_pairs(name, expected):
    """Our runtime's H200 runs with a snapshot beside the trace: the batch copy's side stream
    (handle 591794080) is the memcpy stream 14 of the timeline, by its 12 HtoD copies."""
    path = REPO / "sample_traces" / "issue5" / f"{name}.json.gz"
    if not path.exists() or not path.with_name(f"{name}.pickle").exists():
        pytest.skip("sample_traces/issue5 not present")
    [(trace, a)] = analyze_path(path, use_cache=False, with_hta=False)
    rows = {int(r.handle): (int(r.cupti_stream), int(r.votes), int(r.matched)) for r in a.snapshot_streams.streams.itertuples(index=False)}
    assert rows == expected
    ev = trace.events
    work = ev[(ev["stream"] == 14) & ev["kind"].isin([3, 4, 5])]
    assert set(work["kind"]) == {4}  # the GPU work on stream 14: memcpys only
