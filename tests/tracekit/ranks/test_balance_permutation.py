"""The balanced what-if's layout permutation (``tracekit.ranks.whatif.permutation_change``) on a
tiny hand-built rank: what it lengthens, by how much, and where it adds nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tracegen import TraceBuilder, load_built
from tracekit.analyses import collectives
from tracekit.analyses.explain import view_graph
from tracekit.analyses.skeleton import cut_nodes
from tracekit.graph.model import NodeKind
from tracekit.phases import default_rules
from tracekit.ranks import whatif

LOOKUP = "void tbe::detail::pooled_forward_lite_kernel<float>"
COPY = "void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<float>"


def _rank(tmp_path, *, permutes: bool):
    """Three steps of 1 ms: the input dist (a splits copy, and an ``index_select`` of the ids
    where ``permutes``), the forward (a lookup, then the pooled embeddings' copy of 40 us and a
    small copy of 5 us after it, a copy of 60 us before the lookup: the ids'), the backward (a
    copy of 30 us). Every kernel launched 10 us before it runs by a 4-us call."""
    b = TraceBuilder()
    for i in range(3):
        t0 = i * 1000.0
        b.profiler_step(i + 1, t0, 990)

        def k(name, at, dur, stream=7):
            b.kernel(name, at + 10, dur, stream=stream, launched_by=b.runtime("cudaLaunchKernel", at, 4))

        b.annotation(f"## start_sparse_data_dist {i} ##", t0 + 5, 60)
        k("Memcpy HtoD (Pinned -> Device)", t0 + 10, 5, stream=30)
        if permutes:
            k(permutes if isinstance(permutes, str) else
              "void at::native::(anonymous namespace)::indexSelectSmallIndex<long>", t0 + 30, 8, stream=30)
        b.annotation(f"## forward {i} ##", t0 + 100, 400)
        k(COPY, t0 + 105, 60)
        k(LOOKUP, t0 + 180, 50)
        k(COPY, t0 + 250, 40)
        k(COPY, t0 + 300, 5)
        b.annotation(f"## backward {i} ##", t0 + 520, 400)
        k(COPY, t0 + 530, 30)
    return load_built(b, tmp_path)


def _change(trace):
    rules = default_rules()
    _, g, _ = view_graph(trace, rules)
    nodes, _ = cut_nodes(g, collectives.kernel_events(trace, rules))
    cuts = np.zeros(g.n, bool)
    cuts[nodes] = True
    return g, whatif.permutation_change(g, g.dur.copy(), cuts)


def test_the_permutation_lengthens_the_pooled_copies_by_the_ratio(tmp_path):
    """Without a permutation in the input dist, each step's first copy after the lookup (40 us,
    not the ids' 60 us before it nor the 5 us after it) and the backward's longest copy (30 us)
    get ``PERMUTE_COPY_RATIO`` times themselves longer, and each launch's host time is added
    once more before it; nothing else changes."""
    g, got = _change(_rank(tmp_path, permutes=False))
    assert got is not None
    r = whatif.PERMUTE_COPY_RATIO
    longer = np.flatnonzero(got["dur"] != g.dur)
    assert sorted(int(g.dur[i]) for i in longer) == [30_000] * 3 + [40_000] * 3
    assert all(g.kind[i] == NodeKind.GPU for i in longer)
    assert (got["dur"][longer] - g.dur[longer]).tolist() == \
        [int(round(r * float(g.dur[i]))) for i in longer]
    assert got["added"] == int(round(r * 40_000)) + int(round(r * 30_000))
    # host: the lag into each lengthened kernel's launch grows by the call and the lag before it
    grown = np.flatnonzero(got["lag"] != g.lag)
    assert grown.size == 6
    calls = set(g.dst[grown].tolist())
    assert calls == {int(g.launcher[i]) for i in longer}
    for e in grown:
        c = int(g.dst[e])
        assert got["lag"][e] - g.lag[e] == g.dur[c] + g.lag[e]


@pytest.mark.parametrize("kernel", [True, "void at::native::vectorized_gather_kernel<16, long>",
                                    "void fbgemm_gpu::permute_2D_data_kernel<int, long>"])
def test_a_trace_that_already_permutes_gets_nothing(tmp_path, kernel):
    """An ``index_select`` (or a gather, TorchRec's permute) in the input dist: the layout already
    permutes, balancing adds none."""
    _, got = _change(_rank(tmp_path, permutes=kernel))
    assert got is None


@pytest.mark.parametrize("permutes", [False, True])
def test_the_skeleton_reports_what_it_added(tmp_path, permutes):
    """``changed_skeletons(permute=True)`` says per step how much GPU work it added; without
    ``permute`` (every other what-if) it adds none."""
    trace = _rank(tmp_path, permutes=permutes)
    out = whatif.changed_skeletons(trace, default_rules(), {}, permute=True)
    if permutes:
        assert "permutation_ns" not in out
    else:
        assert out["permutation_ns"] == int(round(whatif.PERMUTE_COPY_RATIO * 40_000)) + \
            int(round(whatif.PERMUTE_COPY_RATIO * 30_000))
    assert "permutation_ns" not in whatif.changed_skeletons(trace, default_rules(), {})


def test_the_host_bound_warning_says_what_the_permutation_leaves_out():
    """A host-bound job the balanced replay added the permutation to: the warning gives its cost
    per rank and what is not in it; without one, the warning of the hot traces' silence."""
    host = {"rank": 0, "class": "host", "share": 0.72}
    row = {"helps": False, "permutation_ns": {"0": 309_975, "1": 310_921}}
    w = whatif.balanced_warning(row, host)
    assert w.startswith("the job is bound by rank 0's host (72% of its critical path)")
    assert "(0.310-0.311 ms a step of GPU work on each rank" in w
    assert "regrouping of the ids on the host is not in it" in w
    same = whatif.balanced_warning({**row, "permutation_ns": {"0": 150_000, "1": 150_200}}, host)
    assert "(0.150 ms a step" in same
    assert "14 of 14 measured" in whatif.balanced_warning({"helps": False}, host)
    assert whatif.balanced_warning({**row, "helps": True}, host) is None


def _ctx(step_ns: float):
    from types import SimpleNamespace

    return SimpleNamespace(schedule=SimpleNamespace(step_ns=step_ns))


@pytest.mark.parametrize("period, ranks, saving", [
    # the 4-rank jobs_trim hot job balanced: the period 0.682 ms longer (rank 0's first counted
    # completion earlier, rank 1's last as before), the slowest rank's own period as before
    (10.904e6 + 682_000, (12.489e6, 12.489e6), 0.0),
    # both edges move the same way: the one nearer no change
    (10.0e6 + 100_000, (11.0e6, 11.0e6 + 150_000), -100_000.0),
    (10.0e6 - 300_000, (11.0e6, 11.0e6 - 200_000), 200_000.0),
    # they differ in sign: no change
    (10.0e6 - 300_000, (11.0e6, 11.0e6 + 200_000), 0.0),
])
def test_the_balanced_row_reads_both_edges_of_the_counted_steps(period, ranks, saving):
    """``_row``'s ``rank_periods``: the job's period and the slowest rank's own, each an edge
    of two counted steps; the row predicts the saving nearer no change, keeps the period's."""
    base = 10.904e6 if period > 10.9e6 else 10.0e6
    rp0, rp1 = ranks
    row = whatif._row("x", "x", _ctx(base), [0], period, period, rank_periods=(rp0, rp1, rp1))
    assert row["saving_ns"] == pytest.approx(saving)
    if saving != base - period:
        assert row["period_saving_ns"] == pytest.approx(base - period)
        assert "predicted as the one nearer no change" in row["note"]
    without = whatif._row("x", "x", _ctx(base), [0], period, period)
    assert without["saving_ns"] == pytest.approx(base - period)


def test_the_slowest_ranks_own_period():
    """``jobgraph.rank_period``: each rank's last counted completion less its first, over the
    steps between; the largest; None with one counted step."""
    from types import SimpleNamespace

    import pandas as pd

    from tracekit.ranks import jobgraph

    jg = SimpleNamespace(ranks=[SimpleNamespace(rank=0), SimpleNamespace(rank=1)],
                         steps={0: np.array([10, 11, 12]), 1: np.array([10, 11, 12])},
                         pinned_first={0: True, 1: True})
    rows = [(0, 10, 0, 100, False), (0, 11, 100, 1_000, True), (0, 12, 1_000, 2_000, True),
            (1, 10, 0, 50, False), (1, 11, 50, 700, True), (1, 12, 700, 1_900, True)]
    w = pd.DataFrame(rows, columns=["rank", "step", "start", "end", "counted"])
    assert jobgraph.rank_period(jg, w) == 1_200  # rank 1: 1900 - 700; the job's period 1000
    assert jobgraph._period(jg, w) == 1_000
    one = SimpleNamespace(ranks=jg.ranks, steps={0: np.array([10, 11]), 1: np.array([10, 11])},
                          pinned_first={0: True, 1: True})
    assert jobgraph.rank_period(one, w[w["step"] <= 11]) is None
