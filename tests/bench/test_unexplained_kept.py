"""bench.unexplained_kept: its grid's rule is the code's at the code's thresholds, the tallies,
and bad input (the runner reads GPU runs)."""

from __future__ import annotations

import pytest

from bench import unexplained_kept as uk
from tracekit.graph import overhead as oh

ROWS = [  # traced, estimate, taken out (ms), unexplained share, error
    (93.0, 94.0, 25.4, 0.219, 0.52),   # the session-8 rank: both clauses
    (20.0, 20.2, 1.9, 0.08, 0.30),     # above the traced step
    (40.0, 39.0, 8.0, 0.05, 0.20),     # little unexplained
    (40.0, 30.0, 8.0, 0.30, 0.02),     # followed the host time taken out
    (30.0, 30.0, 2.0, 0.10, 0.01),     # GPU-bound: little taken out
]


@pytest.mark.parametrize("t,e,k,u,err", ROWS)
def test_grid_rule_is_the_codes(t, e, k, u, err):
    r = {"traced_ms": t, "estimate_ms": e, "taken_ms": k, "unexplained_share": u}
    code = oh.unexplained_kept(t * 1e6, e * 1e6, k * 1e6, u) is not None
    assert uk.fires(r, oh.UNEXPLAINED_KEPT, oh.TAKEN_MATTERS, oh.FOLLOWED, oh.ABOVE_TAKEN) == code


def test_tally():
    rows = [{"traced_ms": t, "estimate_ms": e, "taken_ms": k, "unexplained_share": u,
             "error": err, "range_warned": False} for t, e, k, u, err in ROWS]
    t = uk.tally(rows, lambda r: uk.fires(r, 0.10, 0.10, 0.5, 0.05))
    assert t == {"runs": 5, "off": 3, "off_flagged": 2, "silent_off": 3, "silent_off_flagged": 2,
                 "within": 2, "within_flagged": 0}


def test_bad_input_exit_2(tmp_path, capsys):
    assert uk.main(["--set", f"x={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--set" in err
    assert uk.main(["--set", f"x={tmp_path}"]) == 2  # no run with its untraced step beside it
    assert "no trace" in capsys.readouterr().err


def test_joined_figures_of_a_job(tmp_path):
    """``--joined``: each rank of a complete job on the job's graph, with its warnings
    (``tracekit.ranks.job.joined_estimate``), as a row ``tally`` reads."""
    from tests.tracekit.test_overhead import two_rank_job

    two_rank_job(tmp_path)
    got = uk.joined_figures(str(tmp_path))
    assert sorted(got) == [0, 1]
    assert got[0]["joined_range_warned"] and not got[0]["joined_flagged"]
    row = {"measured_ms": got[0]["joined_ms"] / 1.2, **got[0]}
    j = uk.as_joined(row)
    assert j["error"] == pytest.approx(0.2) and j["range_warned"] and not j["flagged"]
    assert uk.as_joined({"measured_ms": 1.0}) is None
