"""Issue 26's CLI points (8-10): what ``tracekit analyze`` prints first, bad input said in one
line, the docs' words held to the commands'."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tracekit.test_cli_analyze import run
from tests.tracekit.test_report import full_builder

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def trace_file(tmp_path):
    return full_builder().write(tmp_path / "run.json.gz")


# ---- 9. bad input: one line on stderr, exit 2 ------------------------------------------------------

def test_explain_of_a_missing_file_is_one_line(tmp_path, capsys):
    code, out, err = run(["explain", tmp_path / "nonexistent.json", "--step", "1"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "nonexistent.json: no such file or directory" in err
    assert "Traceback" not in err and "Error:" not in err.replace("error:", "")


def test_what_if_of_an_unknown_phase_names_the_known_ones(trace_file, tmp_path, capsys):
    code, out, err = run(["explain", trace_file, "--what-if", "phase:nosuch=2", "--cache-dir", tmp_path / "c"],
                         capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "no phase 'nosuch'" in err
    from tracekit.phases import default_rules

    for phase in default_rules().phase_names:  # every phase the rules know, named
        assert phase in err
    # a phase the rules know replays (here: optimizer, which the trace has)
    code, out, err = run(["explain", trace_file, "--what-if", "phase:optimizer=2", "--cache-dir", tmp_path / "c"],
                         capsys)
    assert code == 0, err
    assert re.search(r"phase:optimizer=2\s+yes", out)


def test_every_headline_figure_check_accepts_is_defined_in_the_docs():
    from tracekit.checks import parse
    from tracekit.report.keys import HEADLINE_KEYS, TEXT_KEYS

    metrics = (REPO / "docs" / "metrics.md").read_text()
    headline = metrics.split("## Headline", 1)[1].split("\n## ", 1)[0]
    for key in HEADLINE_KEYS:
        assert f"`{key}`" in headline, f"docs/metrics.md's Headline does not define {key}"
        if key not in TEXT_KEYS:
            parse(f"{key}=1", upper=True)  # check takes it
    assert parse("bound_share=50%", upper=False).bound == 0.5


def test_explain_docs_say_what_step_prints():
    """``--step`` prints a step's longest runs in time order: docs/explain.md and the option say so."""
    from tracekit.commands.explain import command

    doc = (REPO / "docs" / "explain.md").read_text()
    assert "longest runs first" not in doc
    assert "longest runs, in time order" in doc
    step = next(p for p in command.params if p.name == "step")
    assert "in time order" in step.help
