"""The what-ifs across ranks (``tracekit.ranks.whatif``) on tiny hand-built jobs
(``tests/tracekit/ranks/jobhelp.py``): when each applies and what it changes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tracekit.ranks.jobhelp import Coll, write_job
from tracekit.ranks import JobConfig, analyze_job, jobgraph, whatif


def _ids_and_embeddings(hot: dict[int, int]) -> list[Coll]:
    """Per step, the pooled embeddings' exchange (4 M elements to each rank) and then the ids'
    all-to-all (``hot``: rank -> elements it receives)."""
    out = []
    for s in (1, 2, 3):
        t0 = (s - 1) * 1000.0
        out.append(Coll("0", "all_to_allv", s, {0: t0 + 100, 1: t0 + 110}, t0 + 200,
                        out_nelems={0: 4_000_000, 1: 4_000_000},
                        in_nelems={0: 4_000_000, 1: 4_000_000}))
        out.append(Coll("0", "all_to_allv", s, {0: t0 + 300, 1: t0 + 305}, t0 + 340,
                        out_nelems=hot, in_nelems={0: 175_000, 1: 175_000}))
    return out


@pytest.mark.parametrize("hot,applies", [({0: 300_000, 1: 50_000}, True),
                                         ({0: 175_000, 1: 175_000}, False)])
def test_balancing_applies_to_an_imbalanced_instance_the_totals_hide(tmp_path, hot, applies):
    """Rank 0 receives 6 x rank 1's ids (1.71 x the mean in that instance) beside a balanced
    exchange 13 x larger: over the job rank 0 receives only 1.03 x the mean, under the 1.1 the
    balanced what-if asks. It is gated on the largest instance's imbalance, so it is replayed;
    with the ids balanced too it is not (nothing to balance)."""
    write_job(tmp_path / "job", _ids_and_embeddings(hot), world=2, steps=3)
    rep = analyze_job(tmp_path / "job", cache_dir=tmp_path / "cache", whole=False, workers=1)
    a2a = rep.job["all_to_all"]
    ids = {w["id"] for w in rep.job["graph"]["what_ifs"]}
    if applies:
        assert a2a["imbalance"] == pytest.approx(4_300_000 / 4_175_000)
        assert a2a["instance_imbalance_max"] == pytest.approx(300_000 / 175_000)
        assert "all_to_all_balanced" in ids
        w = {x["id"]: x for x in rep.job["graph"]["what_ifs"]}["all_to_all_balanced"]
        assert w["predicted_ns"] == pytest.approx(w["step_ns"] - w["saving_ns"])
    else:
        assert a2a["instance_imbalance_max"] == pytest.approx(1.0)
        assert "all_to_all_balanced" not in ids


def _two_ranks(tmp_path):
    """Two ranks, three steps, one all-to-all a step (rank 1 arrives 20 us after rank 0)."""
    colls = [Coll("0", "all_to_allv", s, {0: (s - 1) * 1000.0 + 100, 1: (s - 1) * 1000.0 + 120},
                  (s - 1) * 1000.0 + 300) for s in (1, 2, 3)]
    write_job(tmp_path / "job", colls, world=2, steps=3)
    return analyze_job(tmp_path / "job", cache_dir=tmp_path / "cache", whole=False, workers=1,
                       config=JobConfig(balance_what_if=False))


def _longer(sk: dict, cut: int, ns: int) -> dict:
    """``sk`` with the kernel of cut ``cut`` ``ns`` longer in the rank's own replay."""
    end = list(sk["end"])
    end[cut] += ns
    return {**sk, "end": end}


def test_a_collective_the_change_lengthens_moves_its_data_that_much_longer(tmp_path):
    """A what-if's skeleton whose collective kernel runs 50 us longer in the rank's own replay
    (the contention-aware FusedSparseDist: the all-to-all shares the SMs with the embedding
    backward moved beside it) lengthens that rank's transfer by as much in the job's graph:
    its end moves 50 us, the other rank's end of the same instance does not. Before, the job
    kept the traced transfer and the contention-aware prediction lost that time (2 GPUs,
    dense_b16k: 1.306 ms against explain's 1.057 and 1.049 on each rank)."""
    rep = _two_ranks(tmp_path)
    ctx = rep.graph
    r0 = next(ri for ri in ctx.inputs if ri.rank == 0)
    sk = r0.skeleton
    cut = next(j for j, p in enumerate(sk["pinned"]) if not p and int(sk["kernels"][j]) in r0.transfer)
    k = int(sk["kernels"][cut])
    new = jobgraph.with_skeleton(r0, _longer(sk, cut, 50_000))
    assert new.transfer[k] == r0.transfer[k] + 50_000
    assert {j: v for j, v in new.transfer.items() if j != k} == \
        {j: v for j, v in r0.transfer.items() if j != k}
    base, jg0 = jobgraph.predict(ctx.inputs, {})
    sc, jg = jobgraph.predict(ctx.inputs, {0: new})

    def end_of(jg, sc, rank):
        v = np.flatnonzero((jg.kind == jobgraph.END) & (jg.rank == rank) & (jg.item == cut))
        return int(sc.t[v[0]])

    assert end_of(jg, sc, 0) - end_of(jg0, base, 0) == 50_000
    assert end_of(jg, sc, 1) == end_of(jg0, base, 1)
    # the same skeleton unchanged: nothing moves
    assert jobgraph.with_skeleton(r0, sk).transfer == r0.transfer


@pytest.mark.parametrize("shares_gpu", [True, False])
def test_a_fix_that_shares_the_gpu_is_predicted_contention_aware(tmp_path, shares_gpu):
    """A fix whose change moves GPU work beside other work (``shares_gpu``) is predicted by the
    contention-aware replay, as explain predicts it on one rank; any other change by the
    contention-free one. Here the contention-aware skeletons have every rank's last step 50 us
    longer (its completion's terms), the contention-free ones are the ranks' own."""
    rep = _two_ranks(tmp_path)
    ctx = rep.graph
    skeletons = {}
    for ri in ctx.inputs:
        sk = ri.skeleton
        t = sk["terms"]
        last = len(sk["kernels"]) + len(sk["steps"]) - 1
        lag = [x + 50_000 if tg == last else x for tg, x in zip(t["target"], t["lag"])]
        aware = {**sk, "terms": {**t, "lag": lag}}
        skeletons[ri.rank] = {"free": sk, "contention": aware, "shares_gpu": shares_gpu}
    row = whatif.with_skeletons(ctx, "fix:x", "x on every rank", skeletons)
    assert row["predicted_contention_ns"] > row["step_ns"]
    assert row["saving_contention_ns"] == row["step_ns"] - row["predicted_contention_ns"]
    if shares_gpu:
        assert row["predicted_ns"] == row["predicted_contention_ns"]
        assert row["predicted_free_ns"] == pytest.approx(row["step_ns"])
    else:
        assert row["predicted_ns"] == pytest.approx(row["step_ns"])
        assert "predicted_free_ns" not in row
    assert row["saving_ns"] == row["step_ns"] - row["predicted_ns"]


def test_balancing_a_host_bound_job_warns(tmp_path):
    """Two host-bound ranks (1 ms of host work a step each) whose ids' all-to-all is imbalanced
    (rank 0 receives 6 x rank 1's): balancing scales GPU work the job's bound (a rank's host) is
    not on, so it predicts about no change and warns that host-bound jobs have measured slower
    balanced. A job bound otherwise (the unexplained time of ``_ids_and_embeddings``) does not
    warn."""
    from tests.tracekit.ranks.jobhelp import sleeper_job
    from tracekit.report.job_text import first_screen

    d = tmp_path / "job"
    d.mkdir()
    sleeper_job(d, host_us={0: 1000, 1: 1000}, out_nelems={0: 300_000, 1: 50_000})
    rep = analyze_job(d, cache_dir=tmp_path / "cache", whole=False, workers=1)
    g = rep.job["graph"]
    assert g["bound"]["class"] == "host" and g["bound"]["share"] >= 0.7
    w = {x["id"]: x for x in g["what_ifs"]}["all_to_all_balanced"]
    assert not w["helps"]
    assert w["warning"].startswith(f"the job is bound by rank {g['bound']['rank']}'s host (")
    assert "14 of 14 measured" in w["warning"]
    assert f"      warning: {w['warning']}" in first_screen(rep.job)
    write_job(tmp_path / "other", _ids_and_embeddings({0: 300_000, 1: 50_000}), world=2, steps=3)
    rep = analyze_job(tmp_path / "other", cache_dir=tmp_path / "cache", whole=False, workers=1)
    w = {x["id"]: x for x in rep.job["graph"]["what_ifs"]}["all_to_all_balanced"]
    assert rep.job["graph"]["bound"]["class"] == "unexplained" and "warning" not in w


def test_the_balanced_warning_asks_a_host_bound_job_it_does_not_help():
    row = {"helps": False}
    host = {"rank": 1, "class": "host", "share": 0.85}
    assert "rank 1's host (85% of its critical path)" in whatif.balanced_warning(row, host)
    assert whatif.balanced_warning({"helps": True}, host) is None
    assert whatif.balanced_warning(row, {**host, "share": 0.63}) is None  # 4-rank jobs_slim
    assert whatif.balanced_warning(row, {**host, "class": "gpu"}) is None
    assert whatif.balanced_warning(row, None) is None


def test_a_rank_window_longer_than_the_job_step_is_explained():
    """Pipelined steps overlap: a rank's window (its step's start to its end) can exceed the job
    step (the period between step ends); the text says why only where one does, by > 2 %."""
    from tracekit.report.job_text import window_note

    g = {"step_ns": 16_271_000.0, "ranks": [{"step_ns": 16_462_000.0}, {"step_ns": 19_156_000.0}]}
    note = window_note(g)
    assert note is not None and "the job step, 16.271 ms, is the period" in note
    assert window_note({**g, "ranks": [{"step_ns": 16_462_000.0}, {"step_ns": 16_500_000.0}]}) is None
