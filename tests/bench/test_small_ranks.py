"""``bench.small_ranks --in-process``: a tiny rank's CPU in one process per tree, the two taking
turns; run on two tiny ranks with this tree on both sides."""

from __future__ import annotations

from bench.common import REPO
from bench.small_ranks import in_process, make_ranks


def test_in_process_times_each_tree_in_turns(tmp_path):
    data = make_ranks(tmp_path / "small4", 4)
    assert sorted(p.name for p in data.iterdir()) == [f"rank{r}.json" for r in range(4)]
    got = in_process({"this": REPO, "baseline": REPO}, data, 2, 3)
    assert len(got["this_ms_per_rank"]) == len(got["baseline_ms_per_rank"]) == 3
    assert all(0 < x < 10_000 for x in got["this_ms_per_rank"] + got["baseline_ms_per_rank"])
    assert len(got["cpu_ratios"]) == 3 and got["cpu_ratio_ci95"][0] <= got["cpu_ratio_median"]
    assert got["cpu_ratio_median"] <= got["cpu_ratio_ci95"][1]
