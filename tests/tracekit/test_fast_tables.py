"""A rank's per-trace path builds its small tables without pandas' constructor checks
(``tracekit.frames``: ``frame``, ``of_rows``, ``column``) and a job's worker writes only what the
job reads of a rank (``to_dict(keys=...)``, explain brief): every figure must be exactly what
pandas' own constructors and the whole report give. Held on varied traces built with
``tests/tracegen.py`` and on real small ranks of the tree, byte for byte as JSON."""

from __future__ import annotations

import json
import random

import pytest

from tests.conftest import SAMPLE_TRACES
from tests.tracegen import TraceBuilder
from tracekit import emptyresult, frames
from tracekit.loaded import loading
from tracekit.ranks.compact import plain
from tracekit.ranks.work import SUMMARY_KEYS, summary

KERNELS = ["gemm_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "embedding_forward_kernel",
           "elementwise_kernel", "tbe::fwd_kernel"]
OPS = ["aten::mm", "aten::add_", "Optimizer.step#SGD.step", "aten::nonzero"]
ANNOTATIONS = ["## forward ##", "## backward ##", "## optimizer ##"]


def _random_trace(seed: int) -> TraceBuilder:
    """A trace of 0-4 ProfilerSteps with kernels on 1-3 streams, CPU ops, annotations,
    memcpys, syncs and [memory] events, as ``seed`` draws them."""
    rng = random.Random(seed)
    b = TraceBuilder(rank=rng.choice([0, 1, 3]), world_size=rng.choice([None, 4]))
    nsteps = rng.randint(0, 4)
    t = 0.0
    for s in range(max(nsteps, 1)):
        span = rng.uniform(200, 3000)
        if nsteps:
            b.profiler_step(s + 1, t, span)
        for _ in range(rng.randint(0, 10)):
            x = t + rng.uniform(0, span * 0.8)
            what = rng.random()
            if what < 0.45:
                b.kernel(rng.choice(KERNELS), x + rng.uniform(1, 50), rng.uniform(1, 200),
                         launch_at=x, stream=rng.choice([7, 7, 13, 20]))
            elif what < 0.6:
                b.cpu_op(rng.choice(OPS), x, rng.uniform(1, 100))
            elif what < 0.7:
                b.annotation(rng.choice(ANNOTATIONS), x, rng.uniform(10, 300))
            elif what < 0.8:
                b.memcpy(x + 3, rng.uniform(1, 60), launch_at=x)
            elif what < 0.9:
                b.cuda_sync(x, rng.uniform(1, 80))
            else:
                b.memory(x, rng.randint(1, 1 << 20), total_allocated=rng.randint(1 << 20, 1 << 30),
                         total_reserved=1 << 31)
        t += span + rng.uniform(0, 100)
    return b


def _tiny(rank: int) -> TraceBuilder:
    """A rank of issue 29's job of tiny ranks (``bench/small_ranks.py``)."""
    b = TraceBuilder(rank=rank, world_size=1000)
    for s in range(3):
        b.profiler_step(s + 1, 1000.0 * s, 900)
        b.kernel("gemm_kernel", 1000.0 * s + 10, 100, launch_at=1000.0 * s + 5)
    return b


REAL = ["public/hta_sampled_rank0.json.gz", "ranks_2gpu_lite_hot/trace_rank0.json.gz",
        "ranks_2gpu_lite_hot/trace_rank1.json.gz",
        "profiler_1gpu/dense_heavy/sparse/no_memory/trace_rank0.json.gz"]


def _reports(path, *, fast: bool, keys=None) -> str:
    """The rank objects of ``path`` as JSON text (source left out), computed afresh with the
    fast tables on or off."""
    emptyresult.forget()  # a kept empty result is computed again, the same way
    old = frames.FAST
    frames.FAST = fast
    try:
        with loading(str(path), use_cache=False, progress=False) as traces:
            ranks = [lt.report(with_hta=False, keys=keys) for lt in traces]
    finally:
        frames.FAST = old
        emptyresult.forget()
    for r in ranks:
        r.pop("source", None)
    return json.dumps(ranks, sort_keys=True)


def _cases(tmp_path):
    out = []
    for seed in range(12):
        out.append(_random_trace(seed).write(tmp_path / f"random{seed}.json"))
    out += [_tiny(r).write(tmp_path / f"tiny{r}.json") for r in (0, 7)]
    out += [SAMPLE_TRACES / p for p in REAL]
    return out


def test_the_fast_tables_give_pandas_results(tmp_path):
    for path in _cases(tmp_path):
        assert _reports(path, fast=True) == _reports(path, fast=False), path


def test_what_a_job_reads_of_a_rank_is_the_same_brief(tmp_path):
    for path in _cases(tmp_path):
        whole = [plain(summary(r)) for r in json.loads(_reports(path, fast=True))]
        brief = [plain(summary(r)) for r in json.loads(_reports(path, fast=True,
                                                                   keys=SUMMARY_KEYS))]
        assert json.dumps(brief, sort_keys=True) == json.dumps(whole, sort_keys=True), path
        assert all(set(r) <= set(SUMMARY_KEYS) for r in json.loads(
            _reports(path, fast=True, keys=SUMMARY_KEYS)))


@pytest.mark.parametrize("seed", [3, 5])
def test_the_random_traces_have_something_to_compare(tmp_path, seed):
    """The comparison is not of empty reports: the random traces have steps, GPU work and an
    explain section with a bound."""
    r = json.loads(_reports(_random_trace(seed).write(tmp_path / "t.json"), fast=True))[0]
    assert r["headline"]["steps"] >= 1 and r["explain"]["steps"]
    assert r["overlap"]["streams"] and r["explain"]["bound"] is not None


def test_explain_tables_built_when_read_are_the_same(tmp_path):
    """``ExplainResult``'s tables are built when first read (``frames.BuiltWhenRead``): the
    brief explain a job reads is the same from their rows as from the built tables, and a
    result pickles with its tables built."""
    import pickle

    from tracekit.analyses.explain import ExplainResult
    from tracekit.report.serialise import explain_dict

    for path in _cases(tmp_path)[:8] + [_cases(tmp_path)[-1]]:
        with loading(str(path), use_cache=False, progress=False) as traces:
            e = traces[0].explain()
            assert isinstance(e, ExplainResult) and e.unbuilt("steps") is not None
            from_rows = explain_dict(e, brief=True)
            assert e.unbuilt("steps") is not None  # the brief built no table
            e.steps, e.breakdown  # noqa: B018 (built)
            assert e.unbuilt("steps") is None and e.unbuilt("breakdown") is None
            assert json.dumps(explain_dict(e, brief=True)) == json.dumps(from_rows), path
            clone = pickle.loads(pickle.dumps(e))  # every table built, in both
            assert clone.unbuilt("what_ifs") is None and e.unbuilt("lanes") is None
            assert json.dumps(explain_dict(clone)) == json.dumps(explain_dict(e)), path
