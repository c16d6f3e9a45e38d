"""tracekit explain: findings and predicted savings on hand-built traces (answers worked out by
hand, times in us), on the runtime's real before/after pairs, and the command."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.tracegen import US, TraceBuilder, load_built
from tests.tracekit.test_cli_analyze import run
from tracekit.analyses import explain
from tracekit.analyses.snapshot import compute_snapshot
from tracekit.graph import fixes, whatif
from tracekit.graph.model import EdgeKind
from tracekit.phases import default_rules
from tracekit.report import explain_dict
from tracekit.trace import load

RULES = default_rules()
TRACED = explain.ExplainConfig(untraced=False)
"""These tests check the graph's mechanics on the trace as recorded (the untraced estimate:
tests/tracekit/test_overhead.py)."""


def _finding(r, fid):
    got = [f for f in r.findings if f["id"] == fid]
    return got[0] if got else None


def writeback_trace(tmp_path):
    """The dedup's unique() syncs the host on a 110-us backward kernel."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 300)
    b.kernel("bwd_long", 25, 115, launched_by=b.runtime("cudaLaunchKernel", 20, 1))
    b.annotation("## backward 0 ##", 50, 200)
    b.cpu_op("aten::_unique2", 60, 90)
    b.runtime("cudaStreamSynchronize", 62, 86)  # waits until 140, returns at 148
    b.kernel("emb_update", 165, 10, launched_by=b.runtime("cudaLaunchKernel", 160, 1))
    b.annotation("## optimizer 0 ##", 255, 20)
    b.kernel("opt", 265, 5, launched_by=b.runtime("cudaLaunchKernel", 260, 1))
    return b


def test_writeback(tmp_path):
    r = explain.compute(load_built(writeback_trace(tmp_path), tmp_path), RULES, config=TRACED)
    f = _finding(r, "precomputed_writeback")
    assert f is not None and "1 host syncs" in f["evidence"]
    # (every launch latency 4 us: the model explains the whole trace) sync gone: the host runs
    # 0..20 launch 21..(41)..62 sync (0 us)..(12)..74 launch 75..(99)..174 launch 175..(39)..214
    # end marker; bwd_long 25..140, emb_update 141..151 (a stream's gap: 1 us), opt 179..184:
    # the step takes 214 us
    assert f["observed_step_ns"] == 300 * US
    assert f["predicted_step_ns"] == 214 * US and f["saving_ns"] == 86 * US
    assert f["saving_fraction"] == pytest.approx(86 / 300)
    assert _finding(r, "async_delta_copy") is None
    assert r.bound == "host"
    assert r.findings[0]["id"] == "precomputed_writeback"  # fixes come first


def test_async_delta(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 300)
    b.kernel("bwd", 10, 100, launched_by=b.runtime("cudaLaunchKernel", 5, 1))
    b.annotation("## delta_tracking ##", 50, 110)
    c = b.runtime("cudaMemcpyAsync", 60, 90)  # to pageable memory: blocks until the copy ends
    b.memcpy(111, 38, direction="DtoH", dst="Pageable", launched_by=c)
    b.kernel("opt", 165, 5, launched_by=b.runtime("cudaLaunchKernel", 160, 1))
    r = explain.compute(load_built(b, tmp_path), RULES, config=TRACED)
    f = _finding(r, "async_delta_copy")
    assert f is not None
    # the copy leaves the main stream and the call no longer waits (1 us, the median call):
    # host 0..5, call 5..6, (54) copy call 60..61, (10) launch 71..72, (139) end marker 211;
    # opt follows bwd on the stream: 111..116 (a stream's gap: 1 us). Step: 211 us.
    assert f["predicted_step_ns"] == 211 * US and f["saving_ns"] == 89 * US
    assert _finding(r, "precomputed_writeback") is None


def fused_trace(tmp_path, *, fused: bool):
    """Three steps of lookup 20 -> dense forward 30 -> dense backward 40 -> embedding backward
    30 -> optimizer 20 us, launched far ahead: all on one stream (SparseDist), or the lookup
    and the embedding backward on a side stream (FusedSparseDist)."""
    b = TraceBuilder()
    side = 9 if fused else 7
    gpu = 10.0
    for i in (1, 2, 3):
        c = (i - 1) * 10.0
        b.profiler_step(i, c, 10)
        b.annotation(f"## forward {i} ##", c + 0.5, 2.3)
        b.kernel("tbe::detail::pooled_forward_kernel", gpu, 20, stream=side,
                 launched_by=b.runtime("cudaLaunchKernel", c + 1, 0.5))
        b.kernel("dense_fwd", gpu + 20, 30, launched_by=b.runtime("cudaLaunchKernel", c + 2, 0.5))
        b.annotation(f"## backward {i} ##", c + 2.9, 0.9)
        b.kernel("dense_bwd", gpu + 50, 40, launched_by=b.runtime("cudaLaunchKernel", c + 3, 0.5))
        b.annotation(f"## emb_backward {i} ##", c + 3.9, 0.9)
        b.kernel("emb_bwd", gpu + 90, 30, stream=side,
                 launched_by=b.runtime("cudaLaunchKernel", c + 4, 0.5))
        b.annotation(f"## optimizer {i} ##", c + 4.9, 0.9)
        b.kernel("adam", gpu + (90 if fused else 120), 20,
                 launched_by=b.runtime("cudaLaunchKernel", c + 5, 0.5))
        gpu += 140
    return load_built(b, tmp_path)


def test_fused_sparse_dist(tmp_path):
    r = explain.compute(fused_trace(tmp_path, fused=False), RULES)
    f = _finding(r, "fused_sparse_dist")
    assert f is not None and "embedding backward" in f["evidence"]
    # traced: each step ends with its optimizer, 140 us apart (steps 2 and 3 count). Moved:
    # the embedding backward (after the dense backward) and the next lookup (after it) run on
    # a side stream; the optimizer follows the dense backward at once; the next dense forward
    # waits for the lookup: dense_bwd end + 30 + 20. A step: 30 + 40 + 50 = 120 us. The
    # counted steps are replayed from the state the trace was in at step 1's end (150, its
    # optimizer's end; ``whatif.pin_of``): step 2's lookup starts after step 1's embedding
    # backward (130), its dense forward at 150, its embedding backward ends at 250: 100 us;
    # step 3 120 us; the mean 110 us: the contention-free replay.
    # The fix's prediction is the contention-aware replay (the change shares the GPU): the
    # embedding backward and the optimizer, now beside each other for 20 us, each end 20 us
    # later (``whatif.CONTENTION_SHARE``: two kernels filling the SMs take as long as one after
    # the other). This GPU is never idle, so the steady step stays 140 us (step 3); only step
    # 2, whose lookup starts after step 1's embedding backward, gains: 120 us, the mean 130.
    assert f["observed_step_ns"] == 140 * US
    assert f["predicted_step_ns"] == 130 * US and f["saving_ns"] == 10 * US
    assert f["saving_contention_ns"] == f["saving_ns"]
    trace = fused_trace(tmp_path / "again", fused=False)
    _, g, _ = explain.view_graph(trace, RULES)
    p = whatif.predict(g, fixes.detect_fused(trace, g, RULES, fixes.FixConfig()).change)
    assert p.free_ns == 110 * US and p.saving_free_ns == 30 * US
    assert [s[3] for s in p.steps[1:]] == [120 * US, 140 * US]
    r2 = explain.compute(fused_trace(tmp_path / "f", fused=True), RULES)
    assert _finding(r2, "fused_sparse_dist") is None
    wi = r2.what_ifs.set_index("id")
    assert not wi.loc["fused_sparse_dist", "applies"]


def issued_late_trace(tmp_path):
    """SparseDist on one stream, three steps, the host waiting for the GPU at the start of each
    optimizer (a device synchronize: it returns 0.5 us after the GPU's last work ends, at R),
    then launching four 2-us optimizer kernels 10 us apart (R+1, R+11, R+21, R+31: the GPU
    idles between them); the next step starts at R+36 and launches its lookup (20 us) 1 us
    later, its dense forward (30), backward (40) and embedding backward (30) right after
    (launch latency 2 us, stream gap 1 us). Each kernel is written where the GPU runs it."""
    b = TraceBuilder()
    s, free = 0.0, None  # step start, when the stream is next free (None: idle)

    def run(name, call_at, dur):
        nonlocal free
        at = call_at + 0.5 + 2 if free is None or free < call_at + 0.5 + 2 - 1 else free + 1
        b.kernel(name, at, dur, launched_by=b.runtime("cudaLaunchKernel", call_at, 0.5))
        free = at + dur
        return at + dur

    for i in (1, 2, 3):
        b.annotation(f"## forward {i} ##", s + 0.5, 2.3)
        run("tbe::detail::pooled_forward_kernel", s + 1, 20)
        run("dense_fwd", s + 2, 30)
        b.annotation(f"## backward {i} ##", s + 2.9, 0.9)
        run("dense_bwd", s + 3, 40)
        b.annotation(f"## emb_backward {i} ##", s + 3.9, 0.9)
        done = run("emb_bwd", s + 4, 30)
        r = done + 0.5
        b.annotation(f"## optimizer {i} ##", s + 4.9, r + 31.6 - (s + 4.9))
        b.runtime("cudaDeviceSynchronize", s + 5, r - (s + 5))
        for k in range(4):
            run("adam", r + 1 + 10 * k, 2)
        b.profiler_step(i, s, r + 36 - s)
        s = r + 36
    return load_built(b, tmp_path)


def test_fused_sparse_dist_issues_the_lookup_before_the_optimizer(tmp_path):
    trace = issued_late_trace(tmp_path)
    r = explain.compute(trace, RULES, config=TRACED)
    # as traced: a step runs from one synchronize's return R to the next: the optimizer's
    # kernels end at R+35.5; the lookup, launched at R+37, runs R+39.5..59.5; the forward, the
    # backward and the embedding backward follow (1-us gaps): 60.5..90.5, 91.5..131.5,
    # 132.5..162.5; the synchronize returns at R+163: 163 us a step.
    f = _finding(r, "fused_sparse_dist")
    assert f["observed_step_ns"] == 163 * US
    # each step's lookup launch (0.5 us) moves: 0.5 us of host time a step
    assert f["evidence"].endswith("the next lookup is issued in the forward, after the "
                                  "optimizer: issued before it, its launches move there with "
                                  "0.001 ms of host time per step")
    # FusedSparseDist issues the next lookup right after the backward, before the optimizer
    # (whose first call here is the synchronize): the lookup's launch moves there, and its
    # host time (the 0.5-us launch) leaves the forward for that point, where the host waits
    # anyway. On the side stream the lookup runs right behind the embedding backward, from
    # to R+19.5, while the host launches the optimizer; the next forward, launched at
    # R+37.5, starts at R+40 (its launch decides, no longer the lookup); the backward
    # 71..111, the embedding backward on the side stream right behind it 111..141: the
    # synchronize returns at R+141.5: 141.5 us, 21.5 saved (the lookup's 20 us, its launch's
    # 0.5 and the stream gap the embedding backward no longer waits). With contention the
    # lookup and the two optimizer kernels it overlaps (2 us each, in the GPU's idle time
    # between the optimizer's launches) each take the overlap longer, which the host's
    # launches hide: the same 141.5 us.
    _, g, _ = explain.view_graph(trace, RULES, TRACED)
    ch = fixes.detect_fused(trace, g, RULES, fixes.FixConfig()).change
    p = whatif.predict(g, ch)
    assert p.steps[2][3] == 141.5 * US and p.steps[2][4] == 141.5 * US
    assert p.free_ns == p.predicted_ns and f["saving_ns"] == pytest.approx(p.saving_ns)
    # the same what-if with the lookup launched where the trace launched it (the GPU work
    # moved only, as before this model): the lookup, launched at R+37, runs R+39.5..59.5 and
    # the forward waits for it: 161 us, only the two stream gaps saved
    keep = ch.add_lag == 0  # the what-if's other edges (the fused pipeline's order)
    launch = (g.edge_kind == int(EdgeKind.LAUNCH)) & (g.phase[g.dst] == "lookup")
    gpu_only = whatif.Change(drop=ch.drop & ~launch, add_src=ch.add_src[keep],
                             add_dst=ch.add_dst[keep], add_lag=ch.add_lag[keep], move=ch.move)
    q = whatif.predict(g, gpu_only)
    assert q.steps[2][3] == 161 * US


def test_generic_and_user_what_ifs(tmp_path):
    r = explain.compute(load_built(writeback_trace(tmp_path), tmp_path), RULES,
                        config=explain.ExplainConfig(what_ifs=("kernel:bwd_long=2",
                                                               "kernel:nothing=2")))
    wi = r.what_ifs.set_index("id")
    assert wi.loc["kernel:bwd_long=2", "applies"]
    assert not wi.loc["kernel:nothing=2", "applies"]
    assert any("matches nothing" in w for w in r.warnings)
    assert _finding(r, "host") is not None  # host time is most of the critical path


def test_cpu_only(tmp_path):
    b = TraceBuilder()
    b.profiler_step(1, 0, 50)
    b.cpu_op("aten::mm", 5, 20)
    r = explain.compute(load_built(b, tmp_path), RULES)
    assert r.bound == "host" and r.bound_share == 1.0
    assert all(f["id"] == "host" for f in r.findings)
    json.dumps(explain_dict(r))


# ---- the runtime's before/after pairs (sample_traces, one H200 run each) -------------------------

def test_inplace_copy_predicts_peak_reserved():
    """Standard copy -> predicted peak reserved of the in-place one, against what the in-place run
    measured (bench/results/issue5-h200-20261121.md: 3.920 GiB), within 5%."""
    t = load("sample_traces/issue5/issue5_inplace_standard.json.gz", use_cache=False).traces[0]
    snap = compute_snapshot("sample_traces/issue5/issue5_inplace_standard.pickle")
    r = explain.compute(t, RULES, snapshot=snap)
    f = _finding(r, "inplace_batch_copy")
    assert f is not None and f["kind"] == "memory"
    measured = 3.920 * 2**30
    assert abs(f["predicted_peak_reserved_bytes"] - measured) <= 0.05 * measured
    t2 = load("sample_traces/issue5/issue5_inplace_inplace.json.gz", use_cache=False).traces[0]
    r2 = explain.compute(t2, RULES, snapshot=compute_snapshot(
        "sample_traces/issue5/issue5_inplace_inplace.pickle"))
    assert _finding(r2, "inplace_batch_copy") is None


@pytest.mark.parametrize("before,after,fid", [
    ("issue5_delta_blocking", "issue5_delta_async", "async_delta_copy"),
    ("issue5_writeback_legacy", "issue5_writeback_precomputed", "precomputed_writeback"),
])
def test_fix_found_before_not_after(before, after, fid):
    r = explain.compute(load(f"sample_traces/issue5/{before}.json.gz").traces[0], RULES)
    assert _finding(r, fid) is not None and _finding(r, fid)["saving_ns"] > 0
    r = explain.compute(load(f"sample_traces/issue5/{after}.json.gz").traces[0], RULES)
    assert _finding(r, fid) is None


# ---- the command --------------------------------------------------------------------------------

def test_command(tmp_path, capsys):
    src = writeback_trace(tmp_path).write(tmp_path / "wb.json.gz")
    cache = tmp_path / "c"
    code, out, err = run(["explain", src, "--cache-dir", cache], capsys)
    assert code == 0, err
    assert "Findings" in out and "precomputed writeback" in out and "bound: host" in out
    assert "estimated untraced" in out and "bound and findings: the estimated untraced step" in out
    code, out2, _ = run(["explain", src, "--cache-dir", cache], capsys)  # from the cache
    assert code == 0 and out2 == out
    code, out, err = run(["explain", src, "--traced", "--format", "json", "--step", "1", "--what-if",
                          "kernel:bwd_long=2", "--no-cache"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    (e,) = doc["explain"]
    assert e["bound"] == "host" and e["path"] and e["path"][0]["category"] == "host"
    assert [w["id"] for w in e["what_ifs"]][-1] == "kernel:bwd_long=2"
    assert sum(r["ns"] for r in e["path"]) == 300 * US


def test_annotate(tmp_path, capsys):
    src = writeback_trace(tmp_path).write(tmp_path / "wb.json.gz")
    before = src.read_bytes()
    dest = tmp_path / "annotated.json.gz"
    code, _, err = run(["explain", src, "--traced", "--annotate", dest, "--no-cache"], capsys)
    assert code == 0, err
    assert src.read_bytes() == before  # the input is never written
    doc = json.loads(gzip.open(dest).read())
    mine = [e for e in doc["traceEvents"] if e.get("cat", "").startswith("tracekit")]
    assert any(e["name"].startswith("sync stall") for e in mine)
    cp = [e for e in mine if e.get("ph") == "X" and e.get("tid") == 1]
    assert sum(e["dur"] for e in cp) == pytest.approx(300, abs=1e-3)  # us, the whole step
    assert any(e.get("ph") == "s" for e in mine) and any(e.get("ph") == "f" for e in mine)
    # the annotated copy is still a trace tracekit reads, with the original events
    assert len(load(dest, use_cache=False).traces[0].events) == \
        len(load(src, use_cache=False).traces[0].events) + len(cp) + \
        sum(1 for e in mine if e.get("ph") == "X" and e.get("tid") != 1)


@pytest.mark.parametrize("argv,msg", [
    (["--what-if", "kernel:x"], "--what-if"),
    (["--step", "7"], "no step 7"),
    (["--rank", "3"], "no rank 3"),
])
def test_bad_input(tmp_path, capsys, argv, msg):
    src = writeback_trace(tmp_path).write(tmp_path / "wb.json.gz")
    code, out, err = run(["explain", src, "--no-cache", *argv], capsys)
    assert code == 2 and msg in err and err.startswith("tracekit: error:")
    assert "Traceback" not in err


def test_annotate_refuses_the_input(tmp_path, capsys):
    src = writeback_trace(tmp_path).write(tmp_path / "wb.json.gz")
    code, _, err = run(["explain", src, "--annotate", src, "--no-cache"], capsys)
    assert code == 2 and "input" in err


def test_missing_file(tmp_path, capsys):
    code, _, err = run(["explain", tmp_path / "nope.json"], capsys)
    assert code == 2 and "no such file" in err


def test_explain_runs_no_hta_section(tmp_path, capsys, monkeypatch):
    """explain without --step does not run HTA's analyses (issue 24 item 7: they took twice
    the time of `analyze --no-hta` on a 54 MB trace); a report `analyze` kept, HTA's included,
    answers it when there is one."""
    from tracekit.analyses import hta

    def ran(*a, **k):
        raise AssertionError("explain ran the HTA section")

    src = writeback_trace(tmp_path).write(tmp_path / "wb.json.gz")
    monkeypatch.setattr(hta, "compute", ran)
    code, out, err = run(["explain", src, "--no-cache"], capsys)
    assert code == 0 and "Findings" in out, err
    cache = tmp_path / "c"
    code, out, err = run(["explain", src, "--cache-dir", cache], capsys)  # kept without HTA
    assert code == 0 and "Findings" in out, err
    monkeypatch.undo()
    cache2 = tmp_path / "c2"
    code, _, err = run(["analyze", src, "--cache-dir", cache2], capsys)  # HTA's auto
    assert code == 0, err
    monkeypatch.setattr(hta, "compute", ran)
    monkeypatch.setattr(explain, "compute", ran)  # nothing computed: analyze's report answers
    code, out2, err = run(["explain", src, "--cache-dir", cache2], capsys)
    assert code == 0 and out2 == out, err
