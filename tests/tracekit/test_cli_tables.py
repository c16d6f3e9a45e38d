"""``tracekit analyze --tables kernels,operators`` on hand-built traces: every kernel with its
calls, times, launching op and launch configuration, every op with its CPU and GPU time, in text
(largest first, small rows folded into 'others') and in JSON (every row)."""

from __future__ import annotations

import json
import re

import pytest

from tests.tracegen import US, TraceBuilder
from tests.tracekit.test_cli_analyze import run
from tracekit.report import schema

BIG = {"grid": [4, 2, 1], "block": [256, 1, 1], "registers per thread": 64, "shared memory": 1024,
       "est. achieved occupancy %": 50}
WIDE = {**BIG, "grid": [8, 1, 1]}


def builder(rank: int = 0, world: int | None = None) -> TraceBuilder:
    """Two steps; each: aten::mm launches gemm_k twice (100 us with grid [4, 2, 1], 50 us with
    [8, 1, 1]: two launch configurations), aten::relu launches relu_k (20 us, the builder's
    default configuration), aten::copy_ a host-to-device memcpy (10 us), aten::tiny tiny_k
    (0.5 us: under 1 % of the GPU time)."""
    b = TraceBuilder(rank=rank, world_size=world) if world else TraceBuilder()
    for k in range(2):
        t0 = 1000.0 * k
        b.profiler_step(k + 1, t0, 900)
        b.cpu_op("aten::mm", t0 + 10, 60)
        c = b.runtime("cudaLaunchKernel", t0 + 20, 5)
        b.kernel("gemm_k", t0 + 100, 100, launched_by=c, args=BIG)
        c = b.runtime("cudaLaunchKernel", t0 + 40, 5)
        b.kernel("gemm_k", t0 + 210, 50, launched_by=c, args=WIDE)
        b.cpu_op("aten::relu", t0 + 80, 30)
        c = b.runtime("cudaLaunchKernel", t0 + 90, 5)
        b.kernel("relu_k", t0 + 300, 20, launched_by=c)
        b.cpu_op("aten::copy_", t0 + 120, 40)
        c = b.runtime("cudaMemcpyAsync", t0 + 130, 5)
        b.memcpy(t0 + 330, 10, launched_by=c)
        b.cpu_op("aten::tiny", t0 + 170, 20)
        c = b.runtime("cudaLaunchKernel", t0 + 175, 5)
        b.kernel("tiny_k", t0 + 350, 0.5, launched_by=c)
    return b


@pytest.fixture()
def trace_file(tmp_path):
    return builder().write(tmp_path / "t.json")


def test_json_every_kernel_and_op_largest_first(trace_file, tmp_path, capsys):
    code, out, err = run(["analyze", trace_file, "--tables", "kernels,operators", "--format", "json",
                          "--no-hta", "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert schema.problems(doc, schema.AnalyzeDocument) == []
    (t,) = doc["tables"]
    assert t["rank"] == 0 and t["source"] == doc["analyses"][0]["source"]
    k = t["kernels"]
    gpu = 2 * (100 + 50 + 20 + 10 + 0.5) * US
    assert k["gpu_ns"] == gpu
    rows = k["rows"]
    assert [(r["name"], r["grid"]) for r in rows] == [
        ("gemm_k", "[4, 2, 1]"), ("gemm_k", "[8, 1, 1]"), ("relu_k", "[1, 1, 1]"),
        ("Memcpy HtoD (Pinned -> Device)", ""), ("tiny_k", "[1, 1, 1]")]
    big, wide, relu, copy, tiny = rows
    assert (big["calls"], big["total_ns"], big["mean_ns"], big["max_ns"]) == (2, 200 * US, 100 * US, 100 * US)
    assert big["share"] == pytest.approx(200 * US / gpu)
    assert (big["launched_by"], big["block"], big["registers"], big["shared_memory"], big["occupancy"],
            big["configs"]) == ("aten::mm", "[256, 1, 1]", 64, 1024, 50, 2)
    assert wide["total_ns"] == 100 * US and wide["configs"] == 2
    assert (relu["launched_by"], relu["block"], relu["registers"], relu["shared_memory"]) == \
        ("aten::relu", "[128, 1, 1]", 32, 0)
    # a memcpy records no launch configuration: blank and null, never a made-up figure
    assert (copy["kind"], copy["grid"], copy["block"], copy["registers"], copy["occupancy"]) == \
        ("memcpy", "", "", None, None)
    assert copy["launched_by"] == "aten::copy_"
    assert tiny["total_ns"] == 1 * US
    ops = {r["name"]: r for r in t["operators"]["rows"]}
    mm = ops["aten::mm"]
    assert (mm["calls"], mm["cpu_total_ns"], mm["gpu_self_ns"], mm["gpu_total_ns"]) == (2, 120 * US, 300 * US, 300 * US)
    assert ops["ProfilerStep#{step}"]["gpu_total_ns"] == gpu and ops["ProfilerStep#{step}"]["kind"] == "annotation"
    assert t["operators"]["unlaunched_gpu_ns"] == 0
    gpu_totals = [r["gpu_total_ns"] for r in t["operators"]["rows"]]
    assert gpu_totals == sorted(gpu_totals, reverse=True)


def test_text_sorted_by_total_small_rows_folded(trace_file, tmp_path, capsys):
    code, out, err = run(["analyze", trace_file, "--tables", "kernels", "--no-hta", "--cache-dir", tmp_path / "c"],
                         capsys)
    assert code == 0, err
    head = re.search(r"^(\d+)\. Kernels ", out, re.M)
    assert head and f"{head.group(1)}. Kernels" in out.split("Below: ")[1].splitlines()[0]
    body = out[head.end():]
    lines = [ln for ln in body.splitlines()[4:] if ln.strip()]  # past the title, the summary, the heads, the rule
    names = [ln.split()[-1] for ln in lines[:4]]
    assert names[:3] == ["gemm_k", "gemm_k", "relu_k"] and "Memcpy" in lines[3]
    assert "[4, 2, 1]" in lines[0] and "aten::mm" in lines[0] and "0.200" in lines[0]  # total ms
    # tiny_k (0.5 % of the GPU time) is folded: the others row holds its calls and time
    assert "tiny_k" not in body
    others = next(ln for ln in lines if "others (1 rows" in ln)
    assert others.split()[:2] == ["2", "0.001"]
    assert "Operators" not in out  # only the table asked for


def test_limit_folds_the_rows_past_it(trace_file, tmp_path, capsys):
    code, out, _ = run(["analyze", trace_file, "--tables", "kernels,operators", "--limit", "2", "--no-hta",
                        "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0
    kern = out.split(". Kernels ")[1].split(". Operators ")[0]
    assert "relu_k" not in kern
    others = next(ln for ln in kern.splitlines() if "others (3 rows" in ln)
    assert others.split()[:2] == ["6", "0.061"]  # relu_k, the memcpy and tiny_k: 2 calls each, 30.5 us a step
    ops = out.split(". Operators ")[1]
    assert re.search(r"others \(\d+ ops", ops)


def test_a_directory_without_rank_lists_each_ranks_tables(tmp_path, capsys):
    d = tmp_path / "job"
    for r in (0, 1):
        builder(r, 2).write(d / f"rank{r}.json")
    code, out, err = run(["analyze", d, "--tables", "kernels", "--no-cache"], capsys)
    assert code == 0, err
    assert len(re.findall(r"^== .*rank[01]\.json  \(rank [01]\): tables$", out, re.M)) == 2
    code, out, _ = run(["analyze", d, "--tables", "operators", "--rank", "1", "--format", "json", "--no-cache"], capsys)
    doc = json.loads(out)
    assert [(t["rank"], t["kernels"], len(t["operators"]["rows"]) > 0) for t in doc["tables"]] == [(1, None, True)]


@pytest.mark.parametrize("given", ["kernel", "kernels,nope", ","])
def test_an_unknown_table_is_one_line_and_exit_2(trace_file, tmp_path, capsys, given):
    code, out, err = run(["analyze", trace_file, "--tables", given, "--cache-dir", tmp_path / "c"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tracekit: error: --tables: no table named")
    assert "kernels, operators" in err


def test_step_picks_one_steps_rows(trace_file, tmp_path, capsys):
    """``--step N``: the rows of step N alone (each step here launches the same kernels once), a
    kernel's share of that step's GPU time; the text's titles say which step."""
    code, out, err = run(["analyze", trace_file, "--tables", "kernels,operators", "--step", "2", "--format", "json",
                          "--no-hta", "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert schema.problems(doc, schema.AnalyzeDocument) == []
    (t,) = doc["tables"]
    assert t["step"] == 2
    step_gpu = (100 + 50 + 20 + 10 + 0.5) * US
    k = t["kernels"]
    assert k["gpu_ns"] == step_gpu
    big = k["rows"][0]
    assert (big["name"], big["grid"], big["calls"], big["total_ns"]) == ("gemm_k", "[4, 2, 1]", 1, 100 * US)
    assert big["share"] == pytest.approx(100 * US / step_gpu)
    assert sum(r["calls"] for r in k["rows"]) == 5
    o = t["operators"]
    assert o["gpu_ns"] == step_gpu and o["unlaunched_gpu_ns"] is None
    ops = {r["name"]: r for r in o["rows"]}
    assert (ops["aten::mm"]["calls"], ops["aten::mm"]["gpu_self_ns"], ops["aten::mm"]["cpu_total_ns"]) == (1, 150 * US, 60 * US)
    # over all steps (no --step): "step" is null, two calls a kernel configuration
    code, out, _ = run(["analyze", trace_file, "--tables", "kernels", "--format", "json", "--no-hta",
                        "--cache-dir", tmp_path / "c"], capsys)
    (t,) = json.loads(out)["tables"]
    assert t["step"] is None and t["kernels"]["rows"][0]["calls"] == 2
    code, out, _ = run(["analyze", trace_file, "--tables", "kernels,operators", "--step", "1", "--no-hta",
                        "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0
    assert re.search(r"^\d+\. Kernels \(.*, in step 1\)$", out, re.M)
    assert re.search(r"^\d+\. Operators \(every host op, in step 1\)$", out, re.M)
    assert "over all steps" not in out.split(". Kernels (")[1]
    assert "0.180 ms of GPU time launched by these ops" in out


@pytest.mark.parametrize("args, says", [
    (["--tables", "kernels", "--step", "7"], "--step 7: no such step in rank 0 (steps: 1-2)"),
    (["--step", "1"], "--step goes with --tables"),
])
def test_a_step_that_is_not_there_is_one_line_and_exit_2(trace_file, tmp_path, capsys, args, says):
    code, out, err = run(["analyze", trace_file, *args, "--no-hta", "--cache-dir", tmp_path / "c"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tracekit: error: ") and says in err
