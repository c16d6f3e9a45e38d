"""tracekit.on_trace_ready: a tiny CPU model profiled through the handler (real torch.profiler)."""

from __future__ import annotations

import gzip
import io
import json

import pytest

torch = pytest.importorskip("torch")

import tracekit  # noqa: E402
from tracekit.checks import ThresholdError  # noqa: E402


def _train(tmp_path, handler, steps: int = 4, **kw):
    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(1000, 16, mode="sum")
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD([*emb.parameters(), *mlp.parameters()], lr=0.1)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=steps - 1, repeat=1)
    with torch.profiler.profile(**tracekit.profiler_kwargs(**kw), schedule=sched,
                                on_trace_ready=handler) as prof:
        for _ in range(steps):
            ids = torch.randint(0, 1000, (256,))
            offsets = torch.arange(0, 256, 8)
            loss = mlp(emb(ids, offsets)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()


def test_profiler_kwargs_on_cpu():
    kw = tracekit.profiler_kwargs(cuda=False)
    assert kw["record_shapes"] and kw["profile_memory"] and not kw["with_stack"]
    assert kw["activities"] == [torch.profiler.ProfilerActivity.CPU]
    assert "record_shapes" not in {k for k, v in tracekit.profiler_kwargs(shapes=False).items() if v is True}


def test_handler_writes_the_trace_and_says_what_it_found(tmp_path):
    log = io.StringIO()
    _train(tmp_path, tracekit.on_trace_ready(tmp_path / "traces", log=log), cuda=False)
    path = tmp_path / "traces" / "trace-rank0.json.gz"
    doc = json.loads(gzip.open(path).read())
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= names
    # record_shapes took effect: the embedding op carries its inputs
    bags = [e for e in doc["traceEvents"] if e.get("name") == "aten::embedding_bag"]
    assert bags and bags[0]["args"]["Input Dims"][0] == [1000, 16]
    text = log.getvalue()
    assert f"[tracekit] wrote {path}" in text
    assert "[tracekit] 3 steps" in text
    assert "bound: host" in text  # a CPU trace: nothing but the host


def test_thresholds_fail_the_job(tmp_path):
    log = io.StringIO()
    handler = tracekit.on_trace_ready(tmp_path, "tiny", check_max=["step_cpu_p50=1ns"],
                                      check_min=["steps=2"], log=log)
    with pytest.raises(tracekit.CheckFailed, match="1 of 2 tracekit checks failed"):
        _train(tmp_path, handler, cuda=False)
    assert (tmp_path / "trace-tiny-rank0.json.gz").is_file()
    text = log.getvalue()
    assert "check step_cpu_p50_ns <= 0.000 ms: " in text and "FAILED" in text
    assert "check steps >= 2: 3: ok" in text


def test_thresholds_warn_only_and_bad_specs_refused_early(tmp_path):
    log = io.StringIO()
    _train(tmp_path, tracekit.on_trace_ready(tmp_path, check_max=["step_cpu_p50=1ns"], fail=False,
                                             file_name="trace_rank{rank}.json.gz", log=log),
           cuda=False)
    assert (tmp_path / "trace_rank0.json.gz").is_file() and "FAILED" in log.getvalue()
    with pytest.raises(ThresholdError):
        tracekit.on_trace_ready(tmp_path, check_max=["stall_total=5"])
    with pytest.raises(ValueError):
        tracekit.on_trace_ready(tmp_path, file_name="t.json")


def test_tracekit_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, tracekit; tracekit.on_trace_ready; import tracekit.api; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
