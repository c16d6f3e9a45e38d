"""``tracekit.ranks.straggler.host_speeds``: how many times slower than a reference rank each
rank's host ran the same ops, from the ranks' profiles."""

from __future__ import annotations

import pytest

from tracekit.ranks.straggler import host_speeds


def _rank(rank: int, ops: dict[str, tuple[float, float]]) -> dict:
    return {"rank": rank, "profile": {"host_ops": [
        {"name": n, "self_ns": s, "count": c} for n, (s, c) in ops.items()]}}


BASE = {"aten::addmm": (100_000, 7), "aten::cat": (50_000, 7), "aten::relu": (20_000, 6),
        "aten::mm": (80_000, 13), "aten::bmm": (30_000, 3), "aten::empty": (10_000, 27)}


def test_the_same_ops_slower():
    slow = {n: (s * 1.25, c) for n, (s, c) in BASE.items()}
    assert host_speeds([_rank(0, BASE), _rank(1, slow)], 0) == {1: pytest.approx(1.25)}
    assert host_speeds([_rank(0, BASE), _rank(1, slow)], 1) == {0: pytest.approx(0.8)}


def test_annotations_and_other_counts_left_out():
    """An annotation whose self time holds a wait (the main thread in ``## backward ##``), the
    step's own annotation and an op run more often on one rank do not move it."""
    ref = {**BASE, "## backward # ##": (6_000_000, 1), "ProfilerStep##": (400_000, 1),
           "aten::index": (50_000, 1)}
    other = {**{n: (s * 1.1, c) for n, (s, c) in BASE.items()},
             "## backward # ##": (1_000_000, 1), "ProfilerStep##": (900_000, 1),
             "aten::index": (500_000, 3)}
    assert host_speeds([_rank(0, ref), _rank(1, other)], 0) == {1: pytest.approx(1.1)}


def test_one_op_holding_a_wait_moves_it_little():
    """The weighted median: one op 10x longer on the other rank (a sync inside it) does not
    set its speed."""
    other = {**{n: (s * 1.2, c) for n, (s, c) in BASE.items()},
             "aten::addmm": (1_000_000, 7)}
    assert host_speeds([_rank(0, BASE), _rank(1, other)], 0) == {1: pytest.approx(1.2)}


def test_too_few_ops_or_no_profile():
    few = {n: BASE[n] for n in list(BASE)[:4]}
    assert host_speeds([_rank(0, few), _rank(1, few)], 0) == {}
    assert host_speeds([{"rank": 0}, _rank(1, BASE)], 0) == {}


def _with_counts(rank: int, ops: dict[str, tuple[float, float]], counts: dict[str, float]):
    return {**_rank(rank, ops), "skeleton": {"op_counts": counts}}


def test_extra_op_shares_from_every_ops_count():
    """The median rank's profile lists only its largest ops: an op below its list is counted
    in its skeleton (``op_counts``) and is not taken for one it lacks."""
    from tracekit.ranks.straggler import extra_op_shares

    mine = _with_counts(1, {"aten::addmm": (100_000, 7), "## delay ##": (2_000_000, 1),
                            "aten::index": (60_000, 4)},
                        {"aten::addmm": 7, "## delay ##": 1, "aten::index": 4, "aten::add": 9})
    median = _with_counts(0, {"aten::addmm": (90_000, 7)},
                          {"aten::addmm": 7, "aten::index": 1, "aten::add": 9})
    got = extra_op_shares([median, mine], 1, 0)
    assert got == {"## delay ##": 1.0, "aten::index": pytest.approx(0.75)}
    assert extra_op_shares([_rank(0, BASE), mine], 1, 0) is None  # no counts: not known
