"""``bench.small_ranks``: ``--in-process`` (a tiny rank's CPU in one process per tree, the two
taking turns; run on two tiny ranks with this tree on both sides) and ``--plain``'s files."""

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


def test_plain_ranks_have_no_distributed_info_and_warn_once(tmp_path):
    """``--plain N``: issue 29's rank files without ``distributedInfo``, each loaded as rank 0
    with one warning line for them all."""
    from bench.small_ranks import make_plain, run

    data = make_plain(tmp_path / "plain3", 3)
    assert sorted(p.name for p in data.iterdir()) == ["r000.json", "r001.json", "r002.json"]
    assert all("distributedInfo" not in p.read_text() for p in data.iterdir())
    got = run(["analyze", str(data), "--no-hta", "--no-cache", "--workers", "1"], REPO, 300)
    assert got["rc"] == 0 and got["cpu_s"] > 0
