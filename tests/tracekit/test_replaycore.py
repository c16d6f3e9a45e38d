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
        # a slower host too (no --what-if asks for one: a factor is at least 1)
        for ch in [wi.with_host(g, wi.Change(), 0.5)] + [
                wi.spec_change(g, wi.parse_spec(spec))[0]
                for spec in ("host=2", "sync:Synchronize", "kernel:.*=2")]:
            p = wi.plan(g, ch)
            _both(p, monkeypatch)


def test_an_edge_backwards_is_refused():
    p = rp.Plan(start=np.zeros(2, np.int64), dur=np.ones(2, np.int64), lane=np.zeros(2, np.int64),
                lane_is_cpu=np.array([True]), src=np.array([1]), dst=np.array([0]),
                kind=np.array([int(EdgeKind.LAUNCH)], np.int8), lag=np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="backwards"):
        rp.replay(p)


def _walks_both(start, end, binding, src, lag, sinks, t_from, monkeypatch) -> None:
    from tracekit.graph import critical as cr

    args = (start, end, binding, src, lag, sinks, t_from)
    got = cr._walks(*args, python=lambda: cr._Walker.__new__(cr._Walker))
    with monkeypatch.context() as m:
        m.setattr(cr, "_core", None)
        w = cr._Walker.__new__(cr._Walker)
        w.start, w.end, w.binding, w.src, w.lag = (a.tolist()
                                                   for a in (start, end, binding, src, lag))
        want = cr._walks(*args, python=lambda: w)
        alone = [cr._Walker.walk(w, int(s), int(end[s]), int(f)) for s, f in zip(sinks, t_from)]
    assert len(got) == len(want) == 5
    for a, b in zip(got, want):
        assert a.dtype == np.int64 and np.array_equal(a, b)
    flat = [(i, *seg) for i, segs in enumerate(alone) for seg in segs]  # walk by walk, latest first
    assert [tuple(int(x) for x in r) for r in zip(*got)] == flat


@pytest.mark.parametrize("seed", range(30))
def test_compiled_walks_are_the_walkers(seed, monkeypatch):
    """Each walk back from a sink along the binding edges, compiled and in Python: the same
    segments in the same order, on random schedules (bindings left out, lags shorter and longer
    than the gaps they stand for: unexplained time, windows that begin before, inside or after
    a node)."""
    r = np.random.default_rng(seed)
    p = _random_plan(r)
    start, end = rp.replay(p)
    n, m = start.size, p.src.size
    binding = np.full(n, -1, np.int64)
    for e in r.permutation(m):  # one of the edges into each node, some nodes none
        if r.random() < 0.9:
            binding[p.dst[e]] = e
    k = int(r.integers(1, 40))
    sinks = r.integers(0, n, k).astype(np.int64)
    t_from = (end[sinks] - r.integers(-100, 10 ** 6, k)).astype(np.int64)
    lag = r.integers(0, 3000, p.src.size).astype(np.int64)  # another model's lags than p's
    _walks_both(start, end, binding, p.src.astype(np.int64), lag, sinks, t_from, monkeypatch)


def test_compiled_walks_on_real_traces(monkeypatch):
    from tracekit.graph import critical as cr
    from tracekit.trace import load

    for path in sorted(glob.glob("sample_traces/*/*.json.gz"))[:4]:
        for t in load(path, use_cache=False).traces:
            g = build_graph(t, default_rules())
            a = cr.step_paths(g)
            with monkeypatch.context() as m:
                m.setattr(cr, "_core", None)
                b = cr.step_paths(g)
            assert len(a) and a.equals(b)


def test_a_walk_along_an_edge_backwards_is_walked_in_python(monkeypatch):
    """The compiled walks refuse an edge that does not go to a higher id; the walk then runs in
    Python, as where they are not built."""
    from tracekit.graph import _replaycore as core
    from tracekit.graph import critical as cr

    start, end = np.array([0, 10], np.int64), np.array([5, 20], np.int64)
    binding, src, lag = np.array([0, -1], np.int64), np.array([1], np.int64), np.zeros(1, np.int64)
    sinks, t_from = np.array([0], np.int64), np.array([-5], np.int64)
    with pytest.raises(ValueError, match="backwards"):
        core.walks(start, end, binding, src, lag, sinks, t_from)
    w = cr._Walker.__new__(cr._Walker)
    w.start, w.end, w.binding, w.src, w.lag = (a.tolist() for a in (start, end, binding, src, lag))
    _, s, e, v, edge = cr._walks(start, end, binding, src, lag, sinks, t_from, python=lambda: w)
    assert (s.tolist(), e.tolist(), v.tolist(), edge.tolist()) == ([0, -5], [5, 0], [0, 1], [-1, -2])


@pytest.mark.parametrize("seed", range(6))
def test_points_are_replay_of_a_plan_without_lanes(seed, monkeypatch):
    """``replay_points`` (a job's graph: nodes without time or lanes) gives ``replay``'s times
    of the same plan, compiled and in numpy, edges sorted by destination or not."""
    r = np.random.default_rng(seed)
    n = int(r.integers(2, 300))
    m = int(r.integers(0, 4 * n))
    a, b = r.integers(0, n, m), r.integers(0, n, m)
    src, dst = np.minimum(a, b), np.maximum(a, b)
    keep = src < dst
    src, dst = src[keep].astype(np.int64), dst[keep].astype(np.int64)
    lag = r.integers(-50, 1000, src.size).astype(np.int64)
    release = np.where(r.random(n) < 0.2, r.integers(0, 5000, n), rp.NEG).astype(np.int64)
    z = np.zeros(n, np.int64)
    want, _ = rp.replay(rp.Plan(start=release, dur=z, lane=z, lane_is_cpu=np.array([True]),
                                src=src, dst=dst,
                                kind=np.full(src.size, int(EdgeKind.FIX), np.int8), lag=lag))
    o = np.argsort(dst, kind="stable")
    assert np.array_equal(rp.replay_points(release, src[o], dst[o], lag[o]), want)
    assert np.array_equal(rp.replay_points(release, src, dst, lag), want)  # unsorted
    with monkeypatch.context() as mp:
        mp.setattr(rp, "_core", None)
        assert np.array_equal(rp.replay_points(release, src[o], dst[o], lag[o]), want)
