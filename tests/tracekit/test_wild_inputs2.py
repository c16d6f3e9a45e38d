"""Issue 29, "inputs from the wild, round 2": every kind of report as a test, each on a tiny
trace built by a helper. The promise (docs/limits.md): one clear line on stderr and exit 2, or
exit 0 with the figures and a warning for any that may be off; never a traceback, a hang,
unbounded memory, a modified input, or a wrong number without a warning."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from bench.wild_inputs import local_server, same_correlation
from tests.tracegen import TraceBuilder, load_built
from tracekit import patterns, phases
from tracekit.analyses import allocator, collectives, overlap
from tracekit.cli import main
from tracekit.phases import default_rules


def run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return e.value.code, out, err.splitlines()


def one_error(code, err, *words):
    assert code == 2 and len(err) == 1 and err[0].startswith("tracekit: error: "), (code, err)
    for w in words:
        assert w in err[0], err


def analyze_json(path, capsys, *extra):
    code, out, err = run(["analyze", path, "--format", "json", "--no-hta", "--no-cache", *extra],
                         capsys)
    return code, (json.loads(out) if out else None), err


def small(b: TraceBuilder | None = None, **kw) -> TraceBuilder:
    b = b or TraceBuilder(**kw)
    b.profiler_step(1, 0, 1000)
    b.kernel("gemm", 100, 50, launch_at=10)
    return b


# ---- a trace can hang tracekit or take all memory ----------------------------------------------


def test_a_crafted_kernel_name_costs_linear_time():
    """``"tbe::" * 20000`` against the default kernel rule ``\\btbe::...`` took 139 s."""
    name = "tbe::" * 20_000
    t0 = time.perf_counter()
    got = phases._first_match(pd.Index([name, name + "x", "tbe::pooled_forward_v2_kernel"]),
                              default_rules().kernels)
    assert time.perf_counter() - t0 < 2.0
    lookup = [r.phase for r in default_rules().kernels].index("lookup")
    assert got.tolist() == [-1, -1, lookup]


def test_user_patterns_are_linear_or_refused(tmp_path, capsys):
    path = small().write(tmp_path / "t.json")
    rules = tmp_path / "r.toml"
    rules.write_text("[[kernel]]\nphase = 'x'\npattern = '(?=gemm)g'\n")
    code, _, err = run(["analyze", path, "--rules", rules, "--no-cache"], capsys)
    one_error(code, err, "lookaround")
    code, _, err = run(["explain", path, "--what-if", "kernel:(a)\\1=2"], capsys)
    one_error(code, err, "backreferences")
    # an exponential pattern under a backtracking engine: linear here
    t0 = time.perf_counter()
    assert patterns.compile("(a+)+$").search("a" * 50_000 + "b") is None
    assert time.perf_counter() - t0 < 1.0


def test_thousands_of_streams_cost_thousands_of_pairs(tmp_path, capsys):
    b = TraceBuilder()
    b.profiler_step(1, 0, 10_000)
    for s in range(1000):
        b.kernel("k", 10 + s, 5, stream=s + 1, launch_at=1)
    t0 = time.perf_counter()
    code, doc, err = analyze_json(b.write(tmp_path / "s.json"), capsys)
    assert time.perf_counter() - t0 < 30
    assert code == 0 and err == [
        f"tracekit: warning: {tmp_path / 's.json'}: device 0 has 1,000 streams: the pairwise "
        "overlap is of its 64 busiest",
        f"tracekit: warning: {tmp_path / 's.json'}: device 0: 1,000 streams with activities that "
        "may have waited on another stream; waits inferred into the 256 with the most"]
    o = load_built(b, tmp_path / "l")
    got = overlap.compute(o, default_rules())
    assert len(got.streams) == 1000 and len(got.pairs) == 64 * 63 // 2


def test_recorded_stream_waits_cost_linear_time(tmp_path):
    """30 k recorded ``Stream Wait Event``s took 6.6 s, 120 k 94 s (a pass over every activity
    per wait); each wait still joins its producer to its consumer."""
    from bench.wild_inputs import waits as recorded_waits
    from tracekit.graph import build_graph
    from tracekit.graph.model import EdgeKind
    from tracekit.trace import load

    n = 3000
    recorded_waits(n)(tmp_path)  # the runner's reproduction: n "a" on stream 7, each waited on by a "b" on 8
    trace = load(tmp_path / "waits.json", use_cache=False, progress=False).traces[0]
    t0 = time.perf_counter()
    g = build_graph(trace, default_rules())
    assert time.perf_counter() - t0 < 20
    waits = g.edge_kind == int(EdgeKind.WAIT_RECORDED)
    assert waits.sum() == n
    assert set(g.name[g.src[waits]].astype(str)) == {"a"}
    assert set(g.name[g.dst[waits]].astype(str)) == {"b"}
    # the producer of each wait is the "a" of its own round
    assert (g.start[g.dst[waits]] - g.start[g.src[waits]] == 4000).all()


def test_world_size_of_a_trillion_is_one_line(tmp_path, capsys):
    d = tmp_path / "job"
    for r in range(2):
        small(rank=r, world_size=10**12).write(d / f"rank{r}.json")
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1"], capsys)
    one_error(code, err, "999,999,999,998 ranks of world size 1,000,000,000,000 have no trace "
                         "file: 2-999,999,999,999")


# ---- tracebacks --------------------------------------------------------------------------------


def test_a_zero_us_nonzero_beside_a_launch_and_a_sync(tmp_path, capsys):
    b = TraceBuilder()
    b.profiler_step(1, 0, 1000)
    b.cpu_op("aten::nonzero", 100, 0)
    c = b.runtime("cudaLaunchKernel", 100, 0)
    b.kernel("k", 101, 5, launched_by=c)
    b.runtime("cudaStreamSynchronize", 100, 0)
    code, out, err = run(["explain", b.write(tmp_path / "z.json"), "--format", "json"], capsys)
    assert code == 0 and err == [] and json.loads(out)["explain"][0]["steps"]


@pytest.mark.parametrize("declared", [10**30, -1])
def test_a_rank_that_is_no_rank(tmp_path, capsys, declared):
    d = tmp_path / "job"
    small(rank=0, world_size=2).write(d / "a_rank0.json")
    small(rank=declared, world_size=2).write(d / "b_odd.json")
    code, out, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1"], capsys)
    assert code == 0, err
    assert err == [f"tracekit: warning: {d / 'b_odd.json'}: distributedInfo.rank "
                   f"{str(declared)[:20] + '...' if declared > 0 else declared} is not a rank "
                   "(0 to 2,147,483,647); loaded as rank 1"]
    assert out.startswith(f"== job {d}: 2 ranks read of world size 2 (complete)")
    code, out, _ = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1", "--format",
                        "json"], capsys)
    assert json.loads(out)["jobs"][0]["ranks_read"] == 2


def test_memory_bytes_beyond_any_gpu(tmp_path, capsys):
    b = small()
    for i in range(3):
        b.memory(10 + i, 2**62)  # no totals: allocated would be rebuilt from Bytes
    b.memory(20, 1024)
    code, doc, err = analyze_json(b.write(tmp_path / "m.json"), capsys)
    assert code == 0 and len(err) == 1 and "2^52 (4 PiB) or more" in err[0]
    assert doc["analyses"][0]["headline"]["peak_allocated_bytes"] == 1024


def test_memory_totals_beyond_int64_are_said(tmp_path):
    b = small()
    b.memory(10, 1024, total_allocated=1024, total_reserved=4096)
    b.memory(11, 1024, total_allocated=2**53, total_reserved=2**53)
    a = allocator.compute(load_built(b, tmp_path), default_rules())
    assert a.peak_reserved == 4096 and a.peak_allocated == 1024
    assert len(a.warnings) == 1 and "may be understated" in a.warnings[0]


def test_a_profiler_step_beyond_int64(tmp_path, capsys):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1" + "0" * 25, 0, 1000)
    b.kernel("gemm", 100, 50, launch_at=10)
    code, out, err = run(["analyze", b.write(tmp_path / "p.json"), "--format", "json", "--hta",
                          "--no-cache"], capsys)
    assert code == 0 and err == []
    a = json.loads(out)["analyses"][0]
    assert a["headline"]["steps"] == 0 and "beyond int64" in a["hta"]["reason"]


# ---- wrong numbers without a warning -----------------------------------------------------------


def test_a_negative_ts_is_left_out_and_said(tmp_path, capsys):
    b = small()
    b.kernel("late", 300, 50, launch_at=20)
    doc = b.to_dict()
    k = next(e for e in doc["traceEvents"] if e.get("name") == "late")
    k["ts"] = -k["ts"]
    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps(doc))
    code, got, err = analyze_json(bad, capsys)
    # the same trace without that kernel (its launch kept)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e is not k]
    ref_path = tmp_path / "ref.json"
    ref_path.write_text(json.dumps(doc))
    _, ref, _ = analyze_json(ref_path, capsys)
    assert code == 0 and got["analyses"][0]["headline"] == ref["analyses"][0]["headline"]
    assert len(err) == 1 and "ts negative" in err[0] and "'late'" in err[0]


def test_one_correlation_id_for_every_call_is_said(tmp_path, capsys):
    same_correlation(tmp_path)  # the runner's reproduction: three launches, correlation id 7
    code, _, err = analyze_json(tmp_path / "c.json", capsys)
    assert code == 0 and len(err) == 1
    assert "3 runtime calls share a correlation id with another (id 7: 3 calls)" in err[0]


def test_collective_sizes_beyond_any_job(tmp_path):
    b = TraceBuilder(rank=0, world_size=2)
    b.profiler_step(1, 0, 100)
    args = {"Collective name": "all_to_allv", "In msg nelems": 2**60, "Out msg nelems": 30,
            "dtype": "Long", "Process Group Name": "0", "Group size": 2}
    b.kernel("ncclDevKernel_SendRecv", 20, 5, stream=17, launch_at=11, args=args)
    c = collectives.compute(load_built(b, tmp_path), default_rules())
    assert c.kernels["in_bytes"].tolist() == [-1] and c.kernels["out_bytes"].tolist() == [240]
    assert (c.by_type[["in_bytes", "out_bytes"]] >= 0).all().all()
    assert len(c.warnings) == 1 and "1 PiB" in c.warnings[0]


def test_busy_time_beyond_int64_is_not_wrapped(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    for dev in (0, 1):
        b.kernel("k", 10, 5e15, device=dev, launch_at=1)  # 5e18 ns each
    got = overlap.compute(load_built(b, tmp_path), default_rules())
    assert got.gpu_busy_ns == 10**19 and got.compute_ns == 10**19


def test_an_event_longer_than_a_day_is_named_in_a_warning(tmp_path, capsys):
    """Two 5e18 ns kernels: figures far outside any physical range (a step of 58 years), kept
    with a warning naming the longest event (docs/limits.md)."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.kernel("gemm_short", 10, 50, device=0, launch_at=1)
    for dev in (0, 1):
        b.kernel(f"k{dev}", 10 + dev, 5e15 + dev, device=dev, launch_at=1)  # 5e18 ns
    code, doc, err = analyze_json(b.write(tmp_path / "t.json"), capsys)
    assert code == 0 and len(err) == 1, err
    assert err[0].startswith("tracekit: warning: ") and "2 events last longer than a day" in err[0]
    assert "the longest: kernel 'k1' at ts 1000011.000 us, 5,000,000,000,000.001 ms" in err[0]
    assert doc["analyses"][0]["warnings"] == [err[0].split(": ", 3)[3]]
    # a day is the limit: an event of 23 hours is no warning
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.kernel("k", 10, 23 * 3600e6, launch_at=1)
    code, _, err = analyze_json(b.write(tmp_path / "u.json"), capsys)
    assert code == 0 and err == []


def test_figures_outside_the_span_are_warned_of(tmp_path, monkeypatch):
    """``plausible.check``: a step or a busy time longer than the trace's span (times its
    devices), or negative (an int64 sum that wrapped), is a warning; the figures of a sane
    trace are none."""
    import dataclasses

    from tracekit import steps as steps_mod
    from tracekit.analyses import plausible

    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.profiler_step(2, 100, 100)
    b.kernel("k", 10, 50, launch_at=1)
    b.kernel("k", 110, 50, launch_at=101, device=1)
    t = load_built(b, tmp_path)
    rules = default_rules()
    st, ov = steps_mod.compute(t, rules), overlap.compute(t, rules)
    assert plausible.trace_span(t) == (10**9, 10**9 + 200_000) and plausible.check(t, st, ov) == ()
    monkeypatch.setattr(plausible, "SPAN_CHUNK", 2)  # the span's end summed piece by piece
    assert plausible.trace_span(t) == (10**9, 10**9 + 200_000)
    monkeypatch.undo()
    long = st.steps.copy()
    long.loc[1, "step_ns"] = 10**12
    got = plausible.check(t, dataclasses.replace(st, steps=long), ov)
    assert len(got) == 1 and "the step time of 1 step is outside 0 to the trace's span, 0.200 ms" in got[0]
    assert "(step 2: 1,000,000.000 ms)" in got[0]
    wrapped = dataclasses.replace(ov, gpu_busy_ns=-8_446_744_073_709_551_616)
    got = plausible.check(t, st, wrapped)
    assert len(got) == 1 and got[0].startswith("gpu_busy_ns -8,446,744,073,709.552 ms is outside")
    assert "its 2 devices (0.400 ms)" in got[0]
    streams = ov.streams.copy()
    streams.loc[0, "busy_ns"] = 300_000
    got = plausible.check(t, st, dataclasses.replace(ov, streams=streams))
    assert len(got) == 1 and "busy time 0.300 ms is outside 0 to the trace's span" in got[0]
    # a GPU busy time beyond one device's span but within span x devices is physical
    assert plausible.check(t, st, dataclasses.replace(ov, gpu_busy_ns=390_000)) == ()


@pytest.mark.parametrize("spec", ["host=1e-21", "host=0.5", "kernel:gemm=0", "phase:x=1e400"])
def test_a_what_if_factor_below_one_is_refused(tmp_path, capsys, spec):
    code, _, err = run(["explain", small().write(tmp_path / "t.json"), "--what-if", spec], capsys)
    one_error(code, err, "the factor must be a finite number >= 1")


# ---- --scheduler -------------------------------------------------------------------------------


_server = local_server  # the runner's (bench/wild_inputs.py): one fake scheduler for both


@pytest.mark.parametrize("reply,words", [
    (None, "no answer within 2 s"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "does not speak Dask's protocol"),
])
def test_a_scheduler_that_is_not_one(tmp_path, reply, words):
    d = tmp_path / "job"
    small(rank=0, world_size=1).write(d / "rank0.json")
    port, close = _server(reply)
    try:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(d), "--scheduler",
                            f"tcp://127.0.0.1:{port}", "--scheduler-timeout", "2", "--no-cache"],
                           capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        close()
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert took < 30


@pytest.mark.parametrize("args,words", [
    (["--scheduler", "ucx://127.0.0.1:1"], "only tcp://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "nan"], "finite number"),
    (["--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "-1"], "finite number"),
])
def test_scheduler_arguments_are_checked(tmp_path, capsys, args, words):
    d = tmp_path / "job"
    small(rank=0, world_size=1).write(d / "rank0.json")
    code, _, err = run(["analyze", d, "--no-cache", *args], capsys)
    one_error(code, err, words)


def test_linear_patterns_agree_with_python_re_on_the_defaults():
    """The default rules say the same under RE2 as under Python's re on real names."""
    import re

    names = ["## forward 3 ##", "## optimizer ##", "Optimizer.step#Adam.step",
             "## start_sparse_data_dist 2 ##", "## KJTAllToAll wait() ##", "ncclKernel_AllReduce",
             "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float>",
             "tbe::pooled_forward_v2_kernel", "void tbe::(anonymous)::linearize_kernel<long>",
             "## inplace_copy_batch_to_gpu 7 ##", "aten::mm", "nccl:all_reduce"]
    r = default_rules()
    for rule in (*r.annotations, *r.kernels):
        py = re.compile(rule.pattern)
        assert [bool(py.search(n)) for n in names] == \
               [bool(rule.regex.search(n)) for n in names], rule.pattern
    assert np.array_equal(phases._captured_int(pd.Index(names), r.batch_index),
                          [3, -1, -1, 2, -1, -1, -1, -1, -1, 7, -1, -1])


# ---- inputs overwritten ------------------------------------------------------------------------


def test_annotate_never_writes_an_input_or_a_device(tmp_path):
    from tracekit.annotate import write_annotated
    from tracekit.errors import InputError

    src = small().write(tmp_path / "t.json.gz")
    tmp_named_input = tmp_path / "t.json.gz.tmp"  # an input named like the old temporary
    tmp_named_input.write_bytes(src.read_bytes())
    rules = tmp_path / "r.toml"
    rules.write_text("inherit = true\n")
    hard = tmp_path / "hard.json.gz"
    hard.hardlink_to(src)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    before = {p: p.read_bytes() for p in (src, tmp_named_input, rules)}
    for dest, words in [("", "needs a file name"), (src, "an input this command reads"),
                        (hard, "is linked to"), (rules, "an input this command reads"),
                        (fifo, "is a FIFO"), ("/dev/null", "is a character device"),
                        (tmp_path, "is a directory")]:
        with pytest.raises(InputError, match=words):
            write_annotated(str(src), str(dest), None, None, None, rules_path=str(rules))
    assert {p: p.read_bytes() for p in before} == before
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_annotate_next_to_an_input_named_like_its_temporary(tmp_path, capsys):
    """``explain --annotate t.json.gz t.json.gz.tmp`` truncated the input ``t.json.gz.tmp``."""
    src = small().write(tmp_path / "t.json.gz.tmp")
    data = src.read_bytes()
    code, _, err = run(["explain", src, "--annotate", tmp_path / "t.json.gz", "--no-cache"],
                       capsys)
    assert code == 0 and len(err) == 1 and "wrote" in err[0] and src.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz", "t.json.gz.tmp"]


# ---- smaller -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", [".", "-", "e", "5e-"])
def test_a_trace_cut_inside_a_number_is_repaired(tmp_path, capsys, tail):
    b = small()
    b.kernel("late", 300, 5.5, launch_at=20)
    text = json.dumps(b.to_dict())
    at = text.rindex('"dur": 5.5') + len('"dur": 5')  # the last kernel cut in its dur
    p = tmp_path / "cut.json"
    p.write_text(text[:at] + tail)
    code, doc, err = analyze_json(p, capsys)
    assert code == 0 and len(err) == 1 and "the trace is truncated" in err[0]


def test_odd_entries_of_a_rank_directory_are_named(tmp_path, capsys):
    d = tmp_path / "job"
    for r in range(2):
        small(rank=r, world_size=2).write(d / f"rank{r}.json")
    os.mkfifo(d / "fifo.json")
    (d / "loop.json").symlink_to("loop.json")
    (d / "dir.json").mkdir()
    t0 = time.monotonic()
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1",
                        "--format", "json"], capsys)
    assert time.monotonic() - t0 < 60  # the FIFO is never opened
    assert code == 2
    text = " ".join(err)
    for name, why in [("dir.json", "is a directory"), ("fifo.json", "is a FIFO"),
                      ("loop.json", "Too many levels of symbolic links")]:
        assert name in text and why in text, err


# ---- more than three lines ---------------------------------------------------------------------


def test_repeated_problems_fold_into_one_line(tmp_path, capsys):
    """500 rank files without distributedInfo gave 500 warning lines; 499 broken ones 499
    error lines: one line each, with a count and the first names; every one with --verbose
    and in the JSON output."""
    d = tmp_path / "plain"
    for r in range(12):
        small().write(d / f"r{r:02d}.json")
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1"], capsys)
    assert code == 0 and err == [
        f"tracekit: warning: {d}: 12 files: no usable distributedInfo.rank; loaded as rank 0 "
        "(r00.json, r01.json, r02.json and 9 more)"]
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1", "--verbose"],
                       capsys)
    assert len(err) == 12 and err[3].endswith("r03.json: no usable distributedInfo.rank; "
                                              "loaded as rank 3")
    b = tmp_path / "broken"
    small(rank=0, world_size=12).write(b / "rank00.json")
    for r in range(1, 12):
        (b / f"rank{r:02d}.json").write_text("not json")
    code, out, err = run(["analyze", b, "--no-cache", "--no-hta", "--workers", "1", "--format",
                          "json"], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"tracekit: error: {b}: 11 files: not valid JSON")
    assert err[0].endswith("(rank01.json, rank02.json, rank03.json and 8 more)")
    assert len(json.loads(out)["jobs"][0]["problems"]) == 11


def test_many_kinds_of_problems_are_three_lines(tmp_path, capsys):
    d = tmp_path / "job"
    for r in range(2):
        small(rank=r, world_size=8).write(d / f"rank{r}.json")
    (d / "rank2.json").write_text("not json")
    (d / "rank3.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    os.mkfifo(d / "rank4.json")
    (d / "rank5.json").mkdir()
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1"], capsys)
    assert code == 2 and len(err) == 3 and all(e.startswith("tracekit: error: ") for e in err)
    assert err[2].endswith("more problems and warnings (every one: --verbose, or --format json)")
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta", "--workers", "1", "--verbose"],
                       capsys)
    assert code == 2 and len(err) == 5  # 4 files, and ranks 6-7 without one


def test_annotate_an_empty_name_and_the_rules_file(tmp_path, capsys):
    src = small().write(tmp_path / "t.json")
    rules = tmp_path / "r.toml"
    rules.write_text("inherit = true\n")
    data = rules.read_bytes()
    code, _, err = run(["explain", src, "--annotate", ""], capsys)
    one_error(code, err, "--annotate needs a file name")
    code, _, err = run(["explain", src, "--annotate", rules, "--rules", rules], capsys)
    one_error(code, err, "an input this command reads")
    assert rules.read_bytes() == data


def test_step_of_zero_us_events_is_a_step(tmp_path, capsys):
    """With every duration 0, ``--step 1`` said "no step 1 here (steps: 1, 2, 3)"."""
    b = TraceBuilder()
    for k in range(3):
        b.profiler_step(k + 1, 100 * k, 0)
        b.kernel("gemm", 100 * k + 10, 0, launch_at=100 * k + 1)
    code, out, err = run(["explain", b.write(tmp_path / "z.json"), "--step", "1", "--format",
                          "json"], capsys)
    assert code == 0 and err == [], err
    assert [s["step"] for s in json.loads(out)["explain"][0]["steps"]] == [1, 2, 3]
    code, _, err = run(["explain", tmp_path / "z.json", "--step", "9"], capsys)
    one_error(code, err, "no step 9 here (steps: 1, 2, 3)")


def test_thousands_of_streams_in_text(tmp_path, capsys):
    b = TraceBuilder()
    b.profiler_step(1, 0, 10_000)
    for s in range(300):
        b.kernel("k", 10 + s, 5, stream=s + 1, launch_at=1)
    code, out, err = run(["analyze", b.write(tmp_path / "s.json"), "--no-hta", "--no-cache"],
                         capsys)
    # both limits on stderr: the pairwise overlap's, and explain's inferred waits' (which
    # JSON alone said)
    assert code == 0 and len(err) == 2 and "pairwise overlap is of its 64 busiest" in err[0]
    assert "waits inferred into the 256 with the most" in err[1]
    assert "warning: device 0: 300 streams with activities that may have waited" in out
    code, out, err = run(["explain", tmp_path / "s.json", "--no-cache"], capsys)
    assert code == 0 and "waits inferred into the 256 with the most" in err[1]
    code, out, _ = run(["analyze", tmp_path / "s.json", "--no-hta", "--no-cache", "--format",
                        "json"], capsys)
    assert any("waits inferred into the 256" in w
               for w in json.loads(out)["analyses"][0]["warnings"])
    code, out, err = run(["analyze", tmp_path / "s.json", "--no-hta", "--no-cache"], capsys)
    matrix = out[out.index("pairwise overlap |busy"):]
    header = matrix.splitlines()[1]
    assert len(header.split()) == 64  # the busiest 64 streams' columns
