"""``tracekit diff A B`` (tracekit.analyses.diff): on the sparse vs fused pipeline traces the
lookup moves off the main stream and the optimizer overlaps it; on two ranks of one job the
rank that waited at the all-to-all shows it; on hand-made traces exact per-step figures and
added/removed ops and kernels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tracegen import US, TraceBuilder
from tests.tracekit.test_cli_analyze import run
from tracekit import api
from tracekit.report import schema

REPO = Path(__file__).resolve().parents[2]
PIPES = REPO / "sample_traces" / "pipelines_1gpu"
JOB = REPO / "sample_traces" / "ranks_2gpu_straggler"


@pytest.fixture(scope="module")
def sparse_fused(tmp_path_factory):
    cache = tmp_path_factory.mktemp("diffcache")
    return api.diff_paths(PIPES / "sparse" / "trace_rank0.json.gz", PIPES / "fused" / "trace_rank0.json.gz",
                          cache_dir=cache)


def test_sparse_to_fused_the_lookup_leaves_the_main_stream(sparse_fused):
    d = sparse_fused
    s = d.streams.set_index(["stream", "phase"])
    # SparseDist looks up on the main stream; FusedSparseDist on a side stream, none on main
    assert s.loc[("main", "lookup"), "a_ns"] > 0 and s.loc[("main", "lookup"), "b_ns"] == 0
    side = [k for k in s.index if k[1] == "lookup" and k[0].startswith("side")]
    assert side and sum(s.loc[k, "b_ns"] for k in side) > 0 and all(s.loc[k, "a_ns"] == 0 for k in side)
    assert any(line.startswith("lookup moved from main to side") for line in d.summary), d.summary
    # and the optimizer overlaps it in B, never in A
    ov = d.overlaps.set_index(["phase_a", "phase_b"])
    assert ov.loc[("lookup", "optimizer"), "a_ns"] == 0 and ov.loc[("lookup", "optimizer"), "b_ns"] > 0
    # the step: B's is shorter, as the traces' steps say
    st = d.step.set_index("figure")
    a, b = api.open(PIPES / "sparse" / "trace_rank0.json.gz"), api.open(PIPES / "fused" / "trace_rank0.json.gz")
    assert st.loc["step_gpu_ns", "a"] == pytest.approx(a.steps().steps["gpu_ns"].mean())
    assert st.loc["step_gpu_ns", "b"] == pytest.approx(b.steps().steps["gpu_ns"].mean())
    assert st.loc["step_gpu_ns", "delta"] < 0
    # the critical path: the embedding backward and the lookup leave it (they ran beside the optimizer)
    cp = d.critical_path.set_index("category")
    assert cp.loc["compute:lookup", "b_ns"] < cp.loc["compute:lookup", "a_ns"]
    # FusedSparseDist's own annotation: an op only B has
    added = d.ops[d.ops["status"] == "added"]["name"].tolist()
    assert "## start_embedding_lookup {i} ##" in added
    # per phase: every activity inside the steps counted once (the streams add up to the phases)
    for col in ("a_ns", "b_ns"):
        assert d.streams.groupby("phase")[col].sum().reindex(d.phases["phase"]).to_numpy() == \
            pytest.approx(d.phases[col].to_numpy())


def test_two_ranks_of_one_job(tmp_path):
    d = api.diff_paths(JOB, JOB, rank_a=0, rank_b=1, cache_dir=tmp_path)
    assert (d.a["rank"], d.b["rank"]) == (0, 1)
    k = d.kernels.set_index("name")
    a2a = next(n for n in k.index if "SendRecv" in n)
    # rank 1 slept 2 ms before its all-to-all: rank 0's all-to-all kernel waited that long for it
    assert k.loc[a2a, "a_ns"] - k.loc[a2a, "b_ns"] > 1.5e6
    assert k.loc[a2a, "status"] == "both"
    # rank 1's step waits on its host: the sleep, which explain counts as host time or, with nothing
    # in the trace that woke the thread, as time its model does not explain
    cp = d.critical_path.set_index("category").reindex(["host", "unexplained"]).fillna(0.0)
    assert cp["b_ns"].sum() - cp["a_ns"].sum() > 1.5e6
    with pytest.raises(Exception, match="name one"):
        api.diff_paths(JOB, JOB, cache_dir=tmp_path)


def _trace(path, *, extra: bool, slow: float) -> Path:
    b = TraceBuilder()
    for k in range(2):
        t0 = 1000.0 * k
        b.profiler_step(k + 1, t0, 800)
        b.cpu_op("aten::mm", t0 + 10, 50)
        b.kernel("gemm", t0 + 100, slow, launch_at=t0 + 20)
        if extra:
            b.cpu_op("aten::relu", t0 + 200, 20)
            b.kernel("relu_k", t0 + 300, 5, launch_at=t0 + 205)
        else:
            b.cpu_op("aten::add", t0 + 200, 20)
            b.kernel("add_k", t0 + 300, 4, launch_at=t0 + 205)
    return b.write(path)


def test_exact_per_step_and_added_removed(tmp_path, capsys):
    a = _trace(tmp_path / "a.json", extra=False, slow=30)
    b = _trace(tmp_path / "b.json", extra=True, slow=20)
    d = api.diff_paths(a, b, cache_dir=tmp_path / "c")
    k = d.kernels.set_index("name")
    assert (k.loc["gemm", "a_ns"], k.loc["gemm", "b_ns"], k.loc["gemm", "delta_ns"]) == (30 * US, 20 * US, -10 * US)
    assert k.loc["gemm", "a_calls"] == 1 and k.loc["gemm", "status"] == "both"
    assert k.loc["relu_k", "status"] == "added" and k.loc["add_k", "status"] == "removed"
    o = d.ops.set_index("name")
    assert o.loc["aten::relu", "status"] == "added" and o.loc["aten::add", "status"] == "removed"
    assert o.loc["aten::mm", "a_gpu_ns"] == 30 * US and o.loc["aten::mm", "b_gpu_ns"] == 20 * US
    # the CLI: text and JSON, the same figures
    code, out, err = run(["diff", a, b, "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0, err
    assert "Where the step's time moved" in out and "ops: 1 only in B, 1 only in A" in out
    titles = [line for line in out.splitlines() if line[:3].rstrip(".").isdigit() and ". " in line[:4]]
    assert [t.split(". ")[0] for t in titles] == [str(i) for i in range(1, len(titles) + 1)]  # numbered as printed
    code, out, err = run(["diff", a, b, "--format", "json", "--cache-dir", tmp_path / "c"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert schema.problems(doc, schema.DiffDocument) == []
    rows = {r["name"]: r for r in doc["diff"]["kernels"]}
    assert rows["gemm"]["delta_ns"] == -10 * US


def test_bad_input_is_one_line(tmp_path, capsys):
    a = _trace(tmp_path / "a.json", extra=False, slow=30)
    code, out, err = run(["diff", a, tmp_path / "missing.json"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "missing.json" in err
    code, out, err = run(["diff", JOB, a, "--rank-a", "7"], capsys)
    assert code == 2 and "no rank 7" in err and err.count("\n") == 1
    code, out, err = run(["diff", a, a, "--out", a], capsys)
    assert code == 2 and err.count("\n") == 1
