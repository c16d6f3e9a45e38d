"""bench.explain_replay: the model's replay against each traced step, per trace."""

from __future__ import annotations

from bench import explain_replay as er
from tests.conftest import SAMPLE_TRACES


def test_a_trace_the_model_explains_and_one_it_does_not():
    good = er.measure(str(SAMPLE_TRACES / "issue5" / "issue5_delta_none.json.gz"))
    bad = er.measure(str(SAMPLE_TRACES / "ranks_2gpu_straggler" / "trace_rank1.json.gz"))
    assert [r["within"] for r in good] == [True] and good[0]["steps"] == 2
    assert good[0]["median_abs_error"] < 0.01 and not good[0]["lacks"]
    # rank 1 sleeps 2 ms before its all-to-all: nothing in the trace wakes it
    assert [r["within"] for r in bad] == [False]
    assert bad[0]["worst_error"] < -0.4 and "resumed with nothing in the trace" in bad[0]["lacks"]
    text = er.render(good + bad, "cmd", 1.0)
    assert "| within |" in text and "within the target: 1 of 2" in text
    assert "every trace outside it warned: True" in text
