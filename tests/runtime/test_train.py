"""runtime.train and ``tracekit run``: files written, their content, and one-line errors."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tracekit.cli import main as tracekit_main

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "--tables", "3", "--rows", "200", "--dim", "8", "--batch-size", "16", "--dense-arch", "16",
    "--over-arch", "16", "--num-dense", "4", "--warmup-steps", "1", "--steps", "3", "--profile-steps", "2",
]


def _tracekit(argv: list[str]) -> int:
    try:
        tracekit_main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_tracekit_run_writes_trace_and_metrics(tmp_path, capfd):
    out = tmp_path / "run"
    rc = _tracekit(["run", "--pipeline", "fused", "--out", str(out), "--weighted", *TINY])
    captured = capfd.readouterr()
    assert rc == 0, captured.err
    assert "step 10/10" in captured.err  # progress while it runs (1 + 3 + 1 + 2 + 3 tail steps)
    assert sorted(os.listdir(out)) == ["metrics.json", "metrics_rank0.json", "trace_rank0.json.gz"]
    m = json.loads((out / "metrics.json").read_text())
    assert m["pipeline"] == "fused" and m["world_size"] == 1
    assert m["ranks"][0]["steps_trained"] == 10 and len(m["ranks"][0]["step_ms"]) == 3
    assert 0 < m["step_ms_p50"] <= m["step_ms_p90"] and m["qps"] > 0
    assert m["config"]["model"]["num_embeddings"] == [200, 200, 200]
    assert m["versions"]["torch"] == torch.__version__
    trace = json.loads(gzip.open(out / "trace_rank0.json.gz").read())
    assert trace["distributedInfo"]["world_size"] == 1
    names = {e.get("name") for e in trace["traceEvents"]}
    # the profiled steps are 5 and 6 (step 4 is the profiler's warm-up), then 3 tail steps
    assert {"ProfilerStep#5", "ProfilerStep#6"} <= names and "ProfilerStep#7" not in names
    for label in ("forward", "backward", "optimizer"):
        assert f"## {label} 5 ##" in names and f"## {label} 6 ##" in names
        assert f"## {label} 7 ##" not in names
    # fused issues batch i+1's lookup in step i, before the optimizer (lookup_placement)
    assert {"## start_embedding_lookup 6 ##", "## start_embedding_lookup 7 ##"} <= names
    assert "## start_embedding_lookup 5 ##" not in names and "## start_embedding_lookup 8 ##" not in names
    # the pipeline is full while traced: step 6 distributes and copies batch 7, which exists
    # only because of the tail steps
    assert "## start_sparse_data_dist 7 ##" in names and "## copy_batch_to_gpu 8 ##" in names
    assert "[memory]" in names


def test_tracekit_run_refuses_a_non_empty_out_dir(tmp_path, capfd):
    (tmp_path / "mine.txt").write_text("user data")
    rc = _tracekit(["run", "--out", str(tmp_path), *TINY])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not empty" in err[0]
    assert (tmp_path / "mine.txt").read_text() == "user data"


def test_tracekit_run_without_torch_is_one_line(tmp_path, capfd, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    rc = _tracekit(["run", "--out", str(tmp_path / "x")])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["tracekit: error: the run command needs torch: pip install 'tracekit[runtime]'"]
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_is_one_line(tmp_path, capfd):
    rc = _tracekit(["run", "--device", "cuda", "--out", str(tmp_path / "x"), *TINY])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["tracekit: error: --device cuda but torch sees no CUDA GPU"]


def test_tracekit_never_imports_runtime_or_torch():
    code = (
        "import sys, tracekit.cli, tracekit.commands.run; "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('runtime')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_train_config_errors_are_one_line(capsys):
    from runtime.train import main

    assert main(["--pipeline", "fused", "--batch-size", "0", "--out", "/nonexistent/x"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["runtime.train: error: batch_size must be > 0, got 0"]
    assert main(["--main-stream-priority", "-5", "--out", "/nonexistent/x"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["runtime.train: error: main_stream_priority must be in -3..0, got -5"]
    with pytest.raises(SystemExit) as e:
        main(["--pipeline", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("runtime.train: error: argument --pipeline: invalid choice")


def test_every_tracekit_run_option_reaches_runtime_train():
    """The launcher's argv parses in runtime.train into the config the options name."""
    from tracekit.commands.run import build_argv, command
    from runtime.train import build_parser, config_from_args

    ctx = command.make_context("run", [
        "--pipeline", "semi", "--device", "cpu", "--out", "o", "--steps", "7", "--warmup-steps", "2",
        "--profile-steps", "1", "--lookup-stream", "new", "--lookup-placement", "after_data_dist", "--start-batch", "3",
        "--inplace-copy", "--memory-snapshot", "--tf32", "--main-stream-priority", "-2", "--tables", "5", "--rows", "77", "--dim", "12",
        "--dense-arch", "9,8", "--over-arch", "7,6", "--task-heads", "4", "--embedding-optimizer", "sgd", "--embedding-backend",
        "reference", "--dense-optimizer", "adagrad", "--dense-lr", "0.25", "--no-dense-foreach", "--batch-size", "11",
        "--pooling-factor", "2.5", "--distribution", "uniform", "--num-dense", "4", "--weighted",
        "--distinct-batches", "0", "--seed", "6", "--record-shapes", "--check-max", "stall_total=5ms",
        "--check-min", "steps=2",
    ])
    opts = dict(ctx.params)
    opts.pop("nproc_per_node")
    cfg = config_from_args(build_parser().parse_args(build_argv(opts)))
    assert (cfg.pipeline, cfg.device, cfg.out, cfg.timed_steps, cfg.warmup_steps, cfg.profile_steps) == ("semi", "cpu", "o", 7, 2, 1)
    assert (cfg.lookup_stream, cfg.lookup_placement, cfg.start_batch) == ("new", "after_data_dist", 3)
    assert cfg.inplace_copy_batch_to_gpu and cfg.memory_snapshot and cfg.allow_tf32 and cfg.main_stream_priority == -2
    m, d = cfg.model, cfg.data
    assert m.num_embeddings == (77,) * 5 and m.embedding_dim == 12 and m.dense_arch == (9, 8) and m.over_arch == (7, 6)
    assert m.task_heads == 4
    assert (m.embedding_optimizer, m.embedding_backend, m.num_dense, m.seed) == ("sgd", "reference", 4, 6)
    assert (cfg.dense_optimizer.kind, cfg.dense_optimizer.lr, cfg.dense_optimizer.foreach) == ("adagrad", 0.25, False)
    assert (d.batch_size, d.pooling_factor, d.distribution, d.weighted, d.distinct_batches, d.seed) == (11, 2.5, "uniform", True, 0, 6)
    assert cfg.profiler.record_shapes and cfg.trace_handler == "tracekit.handler:on_trace_ready"
    assert cfg.check_max == ("stall_total=5ms",) and cfg.check_min == ("steps=2",)


def test_tracekit_run_analyze_says_what_bounds_the_steps(tmp_path, capfd):
    """The runtime's trace through tracekit.on_trace_ready (named to it: the runtime does not
    import tracekit): the trace as before, the shapes of our TBE calls in it, the findings in
    the log, and a failed check that stops the run in one line."""
    out = tmp_path / "run"
    rc = _tracekit(["run", "--pipeline", "sparse", "--out", str(out), "--record-shapes", "--analyze",
                    "--embedding-backend", "reference", *TINY])
    err = capfd.readouterr().err
    assert rc == 0, err
    assert f"[tracekit] wrote {out / 'trace_rank0.json.gz'}" in err
    assert "[tracekit] 2 steps" in err and "[tracekit] bound: host" in err
    trace = json.loads(gzip.open(out / "trace_rank0.json.gz").read())
    fwd = [e for e in trace["traceEvents"] if e.get("name") == "tracekit_tbe::forward"]
    assert fwd and fwd[0]["args"]["Input Dims"][4:7] == [[], [], []]
    out2 = tmp_path / "run2"
    rc = _tracekit(["run", "--pipeline", "sparse", "--out", str(out2), "--check-min", "steps=100", *TINY])
    err = capfd.readouterr().err
    assert rc == 2 and "tracekit checks failed" in err.splitlines()[-1]
    assert (out2 / "trace_rank0.json.gz").is_file()


def test_a_cpu_run_with_the_defaults_is_small_and_its_analysis_true(tmp_path, capfd):
    """``tracekit run --pipeline fused`` on a CPU, as runtime/README suggests: the CPU defaults
    (a small model, few steps: seconds, not a minute), and a trace tracekit calls host-bound, with
    the host what-if applying (issue 26 item 10)."""
    from tracekit.commands.run import SIZES

    out = tmp_path / "run"
    rc = _tracekit(["run", "--pipeline", "fused", "--out", str(out)])
    captured = capfd.readouterr()
    assert rc == 0, captured.err
    m = json.loads((out / "metrics.json").read_text())
    cpu = SIZES["cpu"]
    assert m["config"]["model"]["num_embeddings"] == [cpu["rows"]] * cpu["tables"]
    assert len(m["ranks"][0]["step_ms"]) == cpu["steps"]
    rc = _tracekit(["explain", str(out / "trace_rank0.json.gz"), "--what-if", "host=2", "--format", "json",
                    "--cache-dir", str(tmp_path / "c")])
    captured = capfd.readouterr()
    assert rc == 0, captured.err
    ex = json.loads(captured.out)["explain"][0]
    # 100 % host: the critical path is host time and the time explain cannot attribute (the
    # run's own preemptions on a loaded machine: 3-9 % of it seen at load 4-5), never the GPU's
    assert {b["category"] for b in ex["breakdown"]} <= {"host", "unexplained"}, ex["breakdown"]
    assert ex["bound"] == "host" and ex["bound_share"] > 0.5
    assert ex["findings"] and ex["findings"][0]["id"] == "host" and ex["findings"][0]["saving_fraction"] > 0.3
    host = {w["id"]: w for w in ex["what_ifs"]}["host=2"]
    assert host["applies"] and host["saving_fraction"] > 0.3
