"""``bench.wild_inputs``: what it counts as a broken promise (tiny inputs, no timing)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from bench import wild_inputs as w


def test_negative_figures_are_found_but_not_unknowns():
    doc = {"analyses": [{"headline": {"gpu_busy_ns": -8, "sent_bytes": -1, "steps": -3},
                         "kernels": [{"in_bytes": -9_200_000_000_000_000_000}]}]}
    got = w._negative_figures(doc)
    assert got == [".analyses[0].headline.gpu_busy_ns=-8",
                   ".analyses[0].kernels[0].in_bytes=-9200000000000000000"]
    assert w._warnings_in({"analyses": [{"warnings": ["a", "b"]}], "jobs": [{"warnings": []}]}) == 2


def test_state_sees_a_changed_file_and_a_fifo_replaced(tmp_path: Path):
    (tmp_path / "t.json").write_text("{}")
    os.mkfifo(tmp_path / "out.fifo")
    before = w._state(tmp_path)
    assert before["out.fifo"] == "p"
    (tmp_path / "t.json").write_text("{ }")
    os.unlink(tmp_path / "out.fifo")
    (tmp_path / "out.fifo").write_text("x")
    after = w._state(tmp_path)
    assert {k for k in before if before[k] != after[k]} == {"t.json", "out.fifo"}


def test_a_refused_annotation_holds_and_a_wrong_exit_breaks():
    case = next(c for c in w.CASES if c.name == "annotate_rules")
    got = w.run_case(case, timeout=60)
    assert got["held"] and got["rc"] == 2 and got["stderr_lines"] == 1, got
    wrong = dataclasses.replace(case, rc=0, lines=None)  # the same inputs, another promise
    got = w.run_case(wrong, timeout=60)
    assert not got["held"] and "exit 2, not 0" in got["problems"]
