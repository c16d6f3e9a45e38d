"""bench/pipelines.py --profile-options (the profiler-overhead question, issue 24) on the
CPU: one trace run per traced variant and option set, each with its untraced and traced steps
(host and timer), the option set taking effect in the trace, the layout the lead commits, and
the size limits that drop a trace but keep its figures."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.profiling import PROFILER_OPTIONS, ProfilerOptions

REPO = Path(__file__).resolve().parents[2]


def _bench(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench.pipelines", "--device", "cpu", "--plan", "tiny:sparse+fused",
           "--rounds", "2", "--min-rounds", "2", "--passes", "1", "--warmup-steps", "1", "--steps", "2", "--profile-steps", "2",
           "--date", "20000101", "--out", str(out), *extra]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def windows_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("windows")
    r = _bench(out, "--profile-options", "no_memory,shapes,torchrec", "--window-traces-max-mb", "0.45")
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_option_sets_are_the_runtime_default_toggled_and_torchrecs():
    assert PROFILER_OPTIONS["default"] == ProfilerOptions(memory=True, cuda_sync=True, record_shapes=False, with_stack=False)
    assert PROFILER_OPTIONS["no_memory"] == ProfilerOptions(memory=False)
    assert PROFILER_OPTIONS["stack"] == ProfilerOptions(with_stack=True)
    # TorchRec 1.6.1's benchmark: record_shapes, profile_memory, with_flops, with_modules, no cuda_sync
    t = PROFILER_OPTIONS["torchrec"]
    assert (t.record_shapes, t.memory, t.with_flops, t.with_modules, t.cuda_sync, t.with_stack) == (True, True, True, True, False, False)


def test_one_window_per_variant_and_option_with_untraced_and_traced_steps(windows_out):
    doc = json.loads((windows_out / "results.json").read_text())
    (p,) = doc["presets"]
    wins = p["windows"]
    # options outer ("default" first, added), variants alternating from one option to the next
    assert [(w["option"], w["variant"]) for w in wins] == [
        ("default", "sparse"), ("default", "fused"), ("no_memory", "fused"), ("no_memory", "sparse"),
        ("shapes", "sparse"), ("shapes", "fused"), ("torchrec", "fused"), ("torchrec", "sparse")]
    for w in wins:
        assert w["profiler"] == {k: getattr(PROFILER_OPTIONS[w["option"]], k) for k in w["profiler"]}
        assert len(w["step_ms"]) == len(w["host_step_ms"]) == 3  # max(3, timed) untraced timed steps
        assert len(w["traced_step_ms"]) == len(w["traced_host_step_ms"]) == 2
        assert len(w["profiler_warmup_step_ms"]) == 2 and all(x > 0 for x in w["traced_step_ms"] + w["step_ms"])
        assert w["t"][0] < w["t"][1] and w["host_probe_us"] > 0
        n = w["trace_counts"]
        assert n["events"] == sum(n["by_cat"].values()) and n["bytes"] > 0
        assert (n["memory"] > 0) == PROFILER_OPTIONS[w["option"]].memory
    # the default windows are the pipeline sample traces (and the proof's pairs)
    assert p["traces"]["sparse"]["dir"] == "sample_traces/pipelines_1gpu/sparse"
    assert {w["dir"] for w in wins if w["option"] == "no_memory"} == {
        "sample_traces/profiler_1gpu/tiny/sparse/no_memory", "sample_traces/profiler_1gpu/tiny/fused/no_memory"}
    md = (windows_out / "results.md").read_text()
    assert "Trace runs by profiler option set" in md and "| shapes | sparse |" in md


def test_option_sets_take_effect_in_the_traces(windows_out):
    c = windows_out / "commit"

    def events(rel: str) -> list[dict]:
        return json.loads(gzip.open(c / rel / "trace_rank0.json.gz").read())["traceEvents"]

    default = events("sample_traces/pipelines_1gpu/sparse")
    assert any(e.get("name") == "[memory]" for e in default)
    assert not any("Input Dims" in (e.get("args") or {}) for e in default if e.get("cat") == "cpu_op")
    assert not any(e.get("name") == "[memory]" for e in events("sample_traces/profiler_1gpu/tiny/sparse/no_memory"))
    shapes = events("sample_traces/profiler_1gpu/tiny/sparse/shapes")
    assert any("Input Dims" in (e.get("args") or {}) for e in shapes if e.get("cat") == "cpu_op")
    m = json.loads((c / "sample_traces/profiler_1gpu/tiny/fused/shapes/metrics.json").read_text())
    assert m["config"]["profiler"]["record_shapes"] is True and m["variant"] == "fused"
    assert len(m["trace_run"]["traced_step_ms"]) == len(m["trace_run"]["traced_host_step_ms"]) == 2 and m["device"] and m["date_utc"]
    assert len(m["trace_run"]["step_ms"]) == len(m["trace_run"]["host_step_ms"]) == 3
    readme = (c / "sample_traces/profiler_1gpu/README.md").read_text()
    assert "`tiny/fused/shapes/`" in readme and "default" not in readme.split("\n- ")[1]


def test_the_size_limit_drops_traces_and_keeps_their_figures(windows_out):
    doc = json.loads((windows_out / "results.json").read_text())
    wins = [w for w in doc["presets"][0]["windows"] if w["option"] != "default"]
    kept = [w for w in wins if w["trace"] == "kept"]
    dropped = [w for w in wins if w["trace"] != "kept"]
    # 0.45 MiB in all for the non-default windows' traces: the first ones stay, then they go
    assert kept and dropped and wins.index(kept[-1]) < wins.index(dropped[0])
    c = windows_out / "commit"
    for w in dropped:
        assert "passed 0.45 MiB" in w["trace"] and w["trace_counts"]["events"] > 0 and len(w["traced_step_ms"]) == 2
        assert not (c / w["dir"] / "trace_rank0.json.gz").exists() and (c / w["dir"] / "metrics.json").exists()
    for w in kept:
        assert (c / w["dir"] / "trace_rank0.json.gz").exists()


def test_an_unknown_option_set_is_one_line_and_exit_2(tmp_path):
    r = _bench(tmp_path, "--profile-options", "default,shapez")
    assert r.returncode == 2 and "unknown --profile-options ['shapez']" in r.stderr and "Traceback" not in r.stderr


def test_window_variants_limit_the_non_default_sets(tmp_path):
    r = _bench(tmp_path, "--profile-options", "default,no_memory,no_sync", "--window-variants", "sparse")
    assert r.returncode == 0, r.stderr[-3000:]
    wins = json.loads((tmp_path / "results.json").read_text())["presets"][0]["windows"]
    assert [(w["option"], w["variant"]) for w in wins] == [("default", "sparse"), ("default", "fused"), ("no_memory", "sparse"),
                                                           ("no_sync", "sparse")]
    r = _bench(tmp_path / "bad", "--window-variants", "sparse,fusd")
    assert r.returncode == 2 and "unknown --window-variants" in r.stderr
