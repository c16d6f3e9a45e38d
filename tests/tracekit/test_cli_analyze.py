"""``tracekit analyze`` through ``tracekit.cli.main``: good input, every bad input, the cache."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from tests.tracegen import TraceBuilder
from tests.tracekit.test_report import full_builder
from tracekit import api, loaded, report, reportcache
from tracekit.cli import main


def run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return e.value.code, out, err


@pytest.fixture()
def trace_file(tmp_path):
    return full_builder().write(tmp_path / "run.json.gz")


def test_text(trace_file, tmp_path, capsys):
    code, out, err = run(["analyze", trace_file, "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0, err
    assert err == ""
    assert "Headline" in out
    for title in ("Steps", "Stream overlap", "Optimizer", "Sync stalls", "Allocator"):
        assert re.search(rf"^\d+\. {title}", out, re.M), title
    assert "steps from ProfilerStep: 3" in out


def test_json_to_file(trace_file, tmp_path, capsys):
    dest = tmp_path / "out.json"
    code, out, err = run(["analyze", trace_file, "--format", "json", "--out", dest, "--no-cache"],
                         capsys)
    assert code == 0 and out == ""
    doc = json.loads(dest.read_text())
    assert set(doc) == {"tracekit_version", "format", "analyses", "jobs"}
    (r,) = doc["analyses"]
    assert tuple(r) == report.RANK_KEYS
    assert r["headline"]["steps"] == 3 and r["rank"] == 0


def test_directory_and_rank(tmp_path, capsys):
    d = tmp_path / "ranks"
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        b.profiler_step(1, 0, 100 * (rank + 1))
        b.kernel("k", 10, 5, launch_at=1)
        b.write(d / f"rank{rank}.json")
    code, out, _ = run(["analyze", d, "--format", "json", "--no-cache"], capsys)
    assert code == 0
    assert [r["rank"] for r in json.loads(out)["analyses"]] == [0, 1]
    code, out, _ = run(["analyze", d, "--format", "json", "--rank", 1, "--no-cache"], capsys)
    (r,) = json.loads(out)["analyses"]
    assert r["rank"] == 1 and r["headline"]["step_cpu_p90_ns"] == 200_000


def test_loader_warning_on_stderr(tmp_path, capsys):
    data = json.dumps(full_builder().to_dict()).encode()
    path = tmp_path / "crashed.json"
    path.write_bytes(data[: len(data) * 2 // 3])  # a crashed job's truncated trace
    code, out, err = run(["analyze", path, "--no-cache"], capsys)
    assert code == 0
    assert err.startswith("tracekit: warning: ") and "Headline" in out


def _bad_inputs(tmp_path):
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "notjson.json").write_text("this is not json")
    (tmp_path / "notkineto.json").write_text('{"foo": 1}')
    (tmp_path / "corrupt.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    (tmp_path / "bad.toml").write_text("[[annotation]\n")
    (tmp_path / "badre.toml").write_text('[[kernel]]\nphase = "x"\npattern = "(("\n')
    good = full_builder().write(tmp_path / "good.json")
    return good


@pytest.mark.parametrize("args, message", [
    (["analyze", "{t}/missing.json"], "no such file"),
    (["analyze", "{t}/empty_dir"], "no trace files"),
    (["analyze", "{t}/notjson.json"], "not valid JSON"),
    (["analyze", "{t}/notkineto.json"], "not a Kineto trace"),
    (["analyze", "{t}/corrupt.json.gz"], "gzip"),
    (["analyze", "{t}/empty.json"], "traceEvents is empty"),
    (["analyze", "--rules", "{t}/bad.toml", "{t}/good.json"], "invalid TOML"),
    (["analyze", "--rules", "{t}/badre.toml", "{t}/good.json"], "invalid regular expression"),
    (["analyze", "--rules", "{t}/nope.toml", "{t}/good.json"], "rules file not found"),
    (["analyze", "--rank", "5", "{t}/good.json"], "no rank 5"),
    (["analyze", "--out", "{t}/good.json", "{t}/good.json"], "would be overwritten"),
])
def test_bad_input(tmp_path, capsys, args, message):
    good = _bad_inputs(tmp_path)
    before = good.read_bytes()
    argv = [a.format(t=tmp_path) for a in args] + ["--cache-dir", str(tmp_path / "cache")]
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("tracekit: error: ") and message in err
    assert "Traceback" not in err
    assert good.read_bytes() == before  # input never modified


def test_console_script_bad_input_no_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(tmp_path / "x.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == f"tracekit: error: {tmp_path / 'x.json'}: no such file or directory"


def test_console_script_leaves_complete_output_and_cache(trace_file, tmp_path):
    # ``tracekit.cli.run`` skips the interpreter's teardown: everything must be out before
    from tracekit.trace import cache as trace_cache

    cache, out = tmp_path / "c", tmp_path / "out.json"
    argv = [sys.executable, "-m", "tracekit.cli", "analyze", str(trace_file), "--format", "json",
            "--cache-dir", str(cache)]
    p = subprocess.run(argv + ["--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    doc = json.loads(out.read_text())  # whole
    st = trace_cache.stamp(str(trace_file))  # the trace cache's entry is whole too
    assert trace_cache.read(trace_cache.entry_path(str(cache), st), st).info["platform"]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=60)  # warm, to a pipe
    assert piped.returncode == 0 and json.loads(piped.stdout) == doc


def test_report_cache_hit_and_miss(trace_file, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "c"
    code, first, _ = run(["analyze", trace_file, "--cache-dir", cache], capsys)
    assert code == 0
    assert len(os.listdir(cache / "reports")) == 1
    calls = []
    real = loaded.loading
    monkeypatch.setattr(loaded, "loading", lambda *a, **k: calls.append(a) or real(*a, **k))
    code, second, _ = run(["analyze", trace_file, "--cache-dir", cache], capsys)
    assert code == 0 and second == first and calls == []  # served from the report cache
    # other rules: a miss
    rules = tmp_path / "r.toml"
    rules.write_text('[gap]\nlookup = "forward"\n')
    code, third, _ = run(["analyze", trace_file, "--rules", rules, "--cache-dir", cache], capsys)
    assert code == 0 and len(calls) == 1 and third != first
    # the trace changes: a miss
    b = full_builder()
    b.profiler_step(9, 5000, 10)
    b.write(trace_file)
    code, fourth, _ = run(["analyze", trace_file, "--cache-dir", cache], capsys)
    assert code == 0 and len(calls) == 2 and "steps from ProfilerStep: 4" in fourth
    # a corrupt entry is ignored and rewritten
    for f in (cache / "reports").iterdir():
        f.write_text("{not json")
    code, fifth, _ = run(["analyze", trace_file, "--cache-dir", cache], capsys)
    assert code == 0 and fifth == fourth and len(calls) == 3
    code, _, _ = run(["analyze", trace_file, "--no-cache", "--cache-dir", cache], capsys)
    assert len(calls) == 4


def test_warm_path_imports_no_pandas(trace_file, tmp_path):
    cache = tmp_path / "c"
    code = ("import sys\nfrom tracekit.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('pandas', 'numpy', 'hta') if m in sys.modules),"
            " file=sys.stderr)\n")
    argv = [sys.executable, "-c", code, "analyze", str(trace_file), "--cache-dir", str(cache)]
    cold = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert "'numpy', 'pandas'" in cold.stderr
    warm = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in warm.stderr
    assert warm.stdout == cold.stdout


def test_analyze_path_returns_traces_and_fills_the_report_cache(trace_file, tmp_path):
    from tracekit.analyses import Analysis

    ((trace, a),) = api.analyze_path(trace_file, cache_dir=tmp_path / "c")
    assert isinstance(a, Analysis) and trace.rank == 0 and len(a.steps.steps) == 3
    hit = api.cached_report(str(trace_file), cache_dir=tmp_path / "c")
    assert hit is not None and hit[0]["headline"] == report.to_dict(a)["headline"]


def test_gzip_and_plain_agree(tmp_path, capsys):
    b = full_builder()
    plain = b.write(tmp_path / "p.json")
    with gzip.open(tmp_path / "g.json.gz", "wb") as f:
        f.write(plain.read_bytes())
    _, a, _ = run(["analyze", plain, "--format", "json", "--no-cache"], capsys)
    _, g, _ = run(["analyze", tmp_path / "g.json.gz", "--format", "json", "--no-cache"], capsys)
    ha, hg = json.loads(a)["analyses"][0], json.loads(g)["analyses"][0]
    assert ha["headline"] == hg["headline"] and ha["syncs"] == hg["syncs"]


def test_no_hta(trace_file, tmp_path, capsys):
    cache = tmp_path / "c"
    code, out, _ = run(["analyze", trace_file, "--format", "json", "--no-hta", "--cache-dir", cache],
                       capsys)
    assert code == 0 and json.loads(out)["analyses"][0]["hta"] is None
    code, out, _ = run(["analyze", trace_file, "--format", "json", "--cache-dir", cache], capsys)
    hta = json.loads(out)["analyses"][0]["hta"]
    assert hta is not None  # not served the --no-hta report
    assert len(os.listdir(cache / "reports")) == 2


def test_report_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(reportcache, "MAX_REPORTS", 2)
    for i in range(4):
        reportcache.store(tmp_path, f"k{i}", [])
        os.utime(tmp_path / "reports" / f"k{i}.json", ns=(i * 10**9, i * 10**9))
    assert sorted(os.listdir(tmp_path / "reports")) == ["k2.json", "k3.json"]


def test_analyze_path_with_rules_objects_shares_the_cli_cache(trace_file, tmp_path):
    from tracekit.phases import Rules, default_rules, load_rules

    cache = tmp_path / "c"
    api.analyze_path(trace_file, rules=default_rules(), cache_dir=cache, with_hta=False)
    assert api.cached_report(str(trace_file), cache_dir=cache, with_hta=False) is not None
    f = tmp_path / "r.toml"
    f.write_text('[gap]\nlookup = "forward"\n')
    api.analyze_path(trace_file, rules=load_rules(f), cache_dir=cache, with_hta=False)
    hit = api.cached_report(str(trace_file), rules_path=f, cache_dir=cache, with_hta=False)
    assert hit is not None and hit[0]["rules"] == str(f)
    # rules built in code have no file: stored under their digest, never served for a file
    r = load_rules(f)
    custom = Rules(annotations=r.annotations, kernels=r.kernels, lookup_phase="backward",
                   source=str(f))
    api.analyze_path(trace_file, rules=custom, cache_dir=cache, with_hta=False)
    hit = api.cached_report(str(trace_file), rules_path=f, cache_dir=cache, with_hta=False)
    assert len(os.listdir(cache / "reports")) == 3
    assert hit[0]["gaps"]["note"] == "matched by batch index"  # lookup = "forward", the file's
    ((_, a),) = api.analyze_path(trace_file, rules=custom, use_cache=False, with_hta=False)
    assert a.gaps.note == "no GPU activity in phase 'backward'"
