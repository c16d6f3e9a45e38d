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


# ---- 8. analyze: the first screen, numbered sections, one unit, whole names, small rows folded ------

SAMPLES = [REPO / "sample_traces" / "pipelines_1gpu" / "sparse" / "trace_rank0.json.gz",
           REPO / "sample_traces" / "public" / "hta_sampled_rank0.json.gz"]


@pytest.fixture(scope="module")
def analyzed_text(tmp_path_factory):
    """``tracekit analyze`` of the bundled traces (HTA's section included), and their reports."""
    from tracekit import api

    cache = tmp_path_factory.mktemp("glance-cache")
    out = {}
    for p in SAMPLES:
        import subprocess
        import sys

        text = subprocess.run([sys.executable, "-c", "from tracekit.cli import main; main()", "analyze", str(p),
                               "--hta", "--cache-dir", str(cache)], capture_output=True, text=True, check=True).stdout
        out[p.parent.name] = (text, api.reports(p, cache_dir=cache, with_hta=True).ranks[0])
    return out


@pytest.mark.parametrize("which", ["sparse", "public"])
def test_the_first_screen_answers(analyzed_text, which):
    text, rep = analyzed_text[which]
    first = text.splitlines()[:40]
    screen = "\n".join(first)
    ex = rep["explain"]
    if ex["bound_share"] is None:  # the bound the trace's limits decided (the sampled public trace's)
        assert f"What bounds the step: {ex['bound']}, not what the path through the recorded events says" in screen
        assert "warning: " in screen  # and why, on the first screen
    else:
        assert f"What bounds the step: {ex['bound']}, {100 * ex['bound_share']:.1f}% of the critical path" in screen
    helps = [f for f in ex["findings"] if f.get("helps", True)]
    assert "What to do first: " + (helps[0]["fix"] if helps else "no known fix") in screen
    h = rep["headline"]
    assert "Headline" in screen and f"{h['step_gpu_p90_ns'] / 1e6:,.3f}" in screen
    assert screen.index("What bounds") < screen.index("What to do first") < screen.index("Headline")
    assert any(line.startswith("Below: 1. Findings") for line in first)  # what follows, said on the first screen


@pytest.mark.parametrize("which", ["sparse", "public"])
def test_sections_numbered_as_printed_in_ms_with_whole_names(analyzed_text, which):
    text, rep = analyzed_text[which]
    numbers = [int(m.group(1)) for m in re.finditer(r"^(\d+)\. ", text, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 7
    below = next(line for line in text.splitlines() if line.startswith("Below: "))
    assert below.count(";") == len(numbers) - 1
    # one unit for the times of every table: ms (a column head says so, none says us)
    lines = text.splitlines()
    heads = [lines[i - 1] for i, line in enumerate(lines) if i and re.fullmatch(r"\s*-+(\s+-+)*", line)]
    assert heads and not [h for h in heads if re.search(r"\bus\b|µs", h)]
    assert "times in us" not in text
    hta = text[re.search(r"^\d+\. HTA", text, re.M).start():]
    assert "times in ms" in hta
    assert not re.search(r"\s-\d", hta), "a negative time in HTA's section"
    tops = [r for r in rep["hta"]["top_kernels"] if (r["sum (us)"] or 0) >= 0]
    totals = [float(m.group(1).replace(",", "")) for m in
              re.finditer(r"^\s+\S+\s+\d+\s+([\d,]+\.\d{3})\s", hta.split("top kernels by total")[1], re.M)]
    assert totals == sorted(totals, reverse=True)  # sorted by total
    # no name cut: every kernel HTA lists and every category on the critical path written whole
    for r in tops[:10]:
        assert str(r["name"]) in hta or "folded:" in hta
    assert "..." not in text.replace("... ", "")  # no clipped cell (a '... N more' line is not one)
    crit = text[re.search(r"^\d+\. Critical path per step", text, re.M).start():]
    for st in rep["explain"]["steps"]:  # each step's largest categories, named whole
        for cat in list(st["breakdown"])[:3]:
            assert re.search(rf"{re.escape(cat)} [\d,]+\.\d\d", crit), cat


def test_small_stall_call_sites_are_folded(tmp_path, capsys):
    from tests.tracegen import TraceBuilder

    b = TraceBuilder()
    b.profiler_step(1, 0, 5000)
    b.cpu_op("aten::item", 10, 1000)
    b.runtime("cudaStreamSynchronize", 20, 900)  # one big stall
    for i in range(30):  # and 30 call sites of a 1 us stall each
        b.cpu_op(f"aten::op{i}", 1100 + 100 * i, 5)
        b.runtime("cudaStreamSynchronize", 1101 + 100 * i, 1)
    b.kernel("k", 4000, 10, launch_at=4000)
    path = b.write(tmp_path / "t.json")
    code, out, err = run(["analyze", path, "--no-hta", "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0, err
    sync = out[re.search(r"^\d+\. Sync stalls", out, re.M).start():]
    sync = sync[:re.search(r"^\d+\. ", sync[3:], re.M).start() + 3]
    table = sync.split("by call site")[1].split("by phase")[0]
    assert "aten::item > cudaStreamSynchronize" in table
    assert re.search(r"others \(30 call sites, each under 1\.0% of the stall time\)", table)
    assert len([line for line in table.splitlines() if "aten::op" in line]) == 0
