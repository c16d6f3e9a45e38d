"""Which ranks the balanced what-if reads again (``tracekit.ranks.whatif.balanced``): a rank it
scales, and one whose skeleton does not show its input dist permuting the features by owner
(``whatif.permutes``, from the skeleton's ``input_dist_gpu``: the layout's permutation may change
it); a rank whose input dist permutes and that it does not scale keeps its skeleton, unread. On
tiny hand-built ranks (``test_balance_permutation._rank``, ``jobhelp.write_job``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tests.tracekit.ranks.jobhelp import write_job
from tests.tracekit.ranks.test_balance_permutation import _rank
from tests.tracekit.ranks.test_jobgraph_whatifs import _ids_and_embeddings
from tracekit.analyses import collectives
from tracekit.analyses.explain import view_graph
from tracekit.analyses.skeleton import cut_nodes, input_dist_gpu
from tracekit.phases import default_rules
from tracekit.ranks import JobConfig, analyze_job, jobgraph, whatif

READ: list[str] = []


@dataclass(frozen=True)
class _Reads(whatif.RankSkeletonTask):
    """``RankSkeletonTask`` that notes each path it reads (in this process: one worker)."""

    def __call__(self, path: str):
        READ.append(path)
        return super().__call__(path)


def _names(trace, *, cut_first_gpu_of: str | None = None):
    rules = default_rules()
    _, g, _ = view_graph(trace, rules)
    nodes, _ = cut_nodes(g, collectives.kernel_events(trace, rules))
    if cut_first_gpu_of:
        hit = np.flatnonzero(np.array([cut_first_gpu_of in str(n) for n in g.name]))
        nodes = np.union1d(nodes, hit)
    return input_dist_gpu(g, nodes)


@pytest.mark.parametrize("kernel", [False, True, "void at::native::vectorized_gather_kernel<16, long>"])
def test_the_skeleton_names_the_input_dists_gpu_work(tmp_path, kernel):
    """The input dist's GPU activities by name (the splits' copy; the ``index_select`` or
    gather where the rank permutes): ``permutes`` says what ``permutation_change`` finds on the
    graph (it adds nothing where True); a name among the cuts is left out; a skeleton without
    the list (cached before it) is unknown."""
    trace = _rank(tmp_path, permutes=kernel)
    names = _names(trace)
    assert "Memcpy HtoD (Pinned -> Device)" in names and list(names) == sorted(set(names))
    assert whatif.permutes({"input_dist_gpu": list(names)}) is bool(kernel)
    rules = default_rules()
    _, g, _ = view_graph(trace, rules)
    nodes, _ = cut_nodes(g, collectives.kernel_events(trace, rules))
    cuts = np.zeros(g.n, bool)
    cuts[nodes] = True
    assert (whatif.permutation_change(g, g.dur.copy(), cuts) is None) is bool(kernel)
    if kernel:
        name = "indexSelect" if kernel is True else "gather"
        assert not any(name in n for n in _names(trace, cut_first_gpu_of=name))
    assert whatif.permutes({"kernels": [0]}) is None and whatif.permutes(None) is None


def test_the_balanced_what_if_reads_only_the_ranks_it_may_change(tmp_path):
    """Two ranks whose ids' all-to-all is imbalanced (no GPU phase to scale: only their
    transfers change): every rank read again where the skeletons do not say their input dist
    permutes (none here), or do not say at all; a rank whose skeleton says it permutes is not
    read and keeps its skeleton, and the contention-free prediction is the same as when it is
    read (an unchanged rank reduced again is its skeleton)."""
    write_job(tmp_path / "job", _ids_and_embeddings({0: 300_000, 1: 50_000}), world=2, steps=3)
    rep = analyze_job(tmp_path / "job", cache_dir=tmp_path / "cache", whole=False, workers=1,
                      config=JobConfig(balance_what_if=False))
    ctx = rep.graph
    assert all(ri.skeleton["input_dist_gpu"] == [] for ri in ctx.inputs)
    paths = {int(r["rank"]): whatif.source_path(r) for r in rep.ranks}

    def balanced(say: dict):
        """The what-if with rank -> the names its skeleton gives (absent: no list)."""
        inputs = []
        for ri in ctx.inputs:
            sk = {k: v for k, v in ri.skeleton.items() if k != "input_dist_gpu"}
            if ri.rank in say:
                sk["input_dist_gpu"] = say[ri.rank]
            inputs.append(jobgraph.RankInput(rank=ri.rank, skeleton=sk, offset_ns=ri.offset_ns,
                                             instance=ri.instance, transfer=ri.transfer,
                                             received=ri.received))
        READ.clear()
        row = whatif.balanced(rep.ranks, rep.job, jobgraph.Context(
            inputs=inputs, names=ctx.names, graph=ctx.graph, schedule=ctx.schedule),
            JobConfig(), task=_Reads(cache_dir=str(tmp_path / "cache")), workers=1)
        return row, sorted(READ)

    gather = ["void at::native::vectorized_gather_kernel<16, long>"]
    both, read = balanced({0: [], 1: []})
    assert read == sorted(paths.values()) and both["ranks_changed"] == [0, 1]
    assert balanced({})[1] == read  # cached before the list: read to know
    one, read = balanced({0: [], 1: gather})
    assert read == [paths[0]] and one["ranks_changed"] == [0]
    none, read = balanced({0: gather, 1: gather})
    assert read == [] and none["ranks_changed"] == []
    assert one["saving_ns"] == both["saving_ns"] == none["saving_ns"]
    assert one["predicted_ns"] == both["predicted_ns"] == none["predicted_ns"]
