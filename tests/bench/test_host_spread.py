"""bench.host_spread: Spearman's rank correlation and bad input (the runner reads GPU runs)."""

from __future__ import annotations

import pytest

from bench import host_spread as hs
from bench import overhead_job_pace as jp


def test_spearman():
    assert hs.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert hs.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert hs.spearman([1, 2, 3], [1, 2, 3]) is None  # too few
    assert hs.spearman([1, 1, 1, 1], [1, 2, 3, 4]) is None  # no order
    assert hs.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9487, abs=1e-3)


@pytest.mark.parametrize("mod", [hs, jp])
def test_bad_set_exit_2(mod, tmp_path, capsys):
    assert mod.main(["--set", f"x={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--set" in err


def test_job_pace_bad_k(tmp_path, capsys):
    assert jp.main(["--set", f"x={tmp_path}", "--k", "a,b"]) == 2
    assert "--k" in capsys.readouterr().err
