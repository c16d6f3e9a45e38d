"""The compiled replay (``tracekit.graph._replaycore``) against replay.py's numpy blocks: the
same start and end for every node, on random plans (lanes, in-lane chains broken or not, cross
edges, duplicate edges, what-if edges) and on the plans explain replays for real traces."""

from __future__ import annotations

import glob

import numpy as np
import pytest

from tracekit.graph import build_graph
from tracekit.graph import replay as rp
from tracekit.graph import whatif as wi
from tracekit.graph.model import EdgeKind
from tracekit.phases import default_rules

pytestmark = pytest.mark.skipif(rp._core is None, reason="the compiled replay is not built here")


def _both(p: rp.Plan, monkeypatch) -> None:
    s1, e1 = rp.replay(p)
    with monkeypatch.context() as m:
        m.setattr(rp, "_core", None)
        s2, e2 = rp.replay(p)
    assert np.array_equal(s1, s2) and np.array_equal(e1, e2)


def _random_plan(r: np.random.Generator) -> rp.Plan:
    n = int(r.integers(1, 400))
    n_lanes = int(r.integers(1, 8))
    lane = r.integers(0, n_lanes, n)
    lane_is_cpu = r.random(n_lanes) < 0.5
    src, dst, kind = [], [], []
    last: dict[int, int] = {}
    for i in range(n):  # program/stream order, sometimes left out (a chain broken)
        k = int(lane[i])
        if k in last and r.random() < 0.85:
            src.append(last[k])
            dst.append(i)
            kind.append(int(EdgeKind.PROGRAM if lane_is_cpu[k] else EdgeKind.STREAM))
        last[k] = i
    for _ in range(int(r.integers(0, 2 * n))):  # cross-lane, queue and what-if edges
        a, b = sorted(r.choice(n, 2, replace=False)) if n > 1 else (0, 0)
        if a < b:
            src.append(int(a))
            dst.append(int(b))
            kind.append(int(r.choice([EdgeKind.LAUNCH, EdgeKind.QUEUE, EdgeKind.PROGRAM])))
    m = len(src)
    start = np.sort(r.integers(0, 10 ** 6, n)).astype(np.int64)
    return rp.Plan(start=start, dur=r.integers(0, 5000, n).astype(np.int64), lane=lane.astype(np.int64),
                   lane_is_cpu=lane_is_cpu, src=np.array(src, np.int64), dst=np.array(dst, np.int64),
                   kind=np.array(kind, np.int8), lag=r.integers(-50, 500, m).astype(np.int64))


@pytest.mark.parametrize("seed", range(40))
def test_random_plans(seed, monkeypatch):
    _both(_random_plan(np.random.default_rng(seed)), monkeypatch)


@pytest.mark.parametrize("path", sorted(glob.glob("sample_traces/*/*.json.gz")
                                        + glob.glob("sample_traces/*/*/*.json.gz"))[:8])
def test_real_traces_and_their_what_ifs(path, monkeypatch):
    from tracekit.trace import load

    for t in load(path, use_cache=False).traces:
        g = build_graph(t, default_rules())
        _both(rp.Plan.of(g), monkeypatch)
        for spec in ("host=0.5", "sync:Synchronize", "kernel:.*=2"):
            ch, _ = wi.spec_change(g, wi.parse_spec(spec))
            p = wi.plan(g, ch)
            _both(p, monkeypatch)


def test_an_edge_backwards_is_refused():
    p = rp.Plan(start=np.zeros(2, np.int64), dur=np.ones(2, np.int64), lane=np.zeros(2, np.int64),
                lane_is_cpu=np.array([True]), src=np.array([1]), dst=np.array([0]),
                kind=np.array([int(EdgeKind.LAUNCH)], np.int8), lag=np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="backwards"):
        rp.replay(p)
