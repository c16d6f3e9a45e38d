"""The what-ifs across ranks (``tracekit.ranks.whatif``) on tiny hand-built jobs
(``tests/tracekit/ranks/jobhelp.py``): when each applies and what it changes."""

from __future__ import annotations

import pytest

from tests.tracekit.ranks.jobhelp import Coll, write_job
from tracekit.ranks import analyze_job


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
