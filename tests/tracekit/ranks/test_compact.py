"""A rank's summary held as columns (``tracekit.ranks.compact``): the same values as the JSON
report it comes from, and the same job built from it."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.ranks import analyze_job
from tracekit.ranks.compact import KernelMap, KernelRows, kernel_maps, lookup, plain
from tracekit.ranks.work import summary

STRAGGLER = SAMPLE_TRACES / "ranks_2gpu_straggler"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    whole = analyze_job(STRAGGLER, cache_dir=cache, whole=True, workers=1)
    part = analyze_job(STRAGGLER, cache_dir=cache, whole=False, workers=1)
    return whole, part


def test_a_summary_holds_its_kernels_and_skeleton_as_columns(jobs):
    whole, part = jobs
    for w, s in zip(whole.ranks, part.ranks):
        kern = s["collectives"]["kernels"]
        assert isinstance(kern, KernelRows) and len(kern) == len(w["collectives"]["kernels"]) > 0
        assert kern == w["collectives"]["kernels"] and kern[-1] == w["collectives"]["kernels"][-1]
        assert kern[1:3] == w["collectives"]["kernels"][1:3]
        assert isinstance(s["skeleton"]["terms"]["lag"], np.ndarray)
        assert isinstance(s["collectives"]["groups"][0]["ranks"], np.ndarray)
        # back to JSON values: the whole report's sections, as a summary keeps them
        back = plain(s)
        assert back["collectives"] == w["collectives"] and back["skeleton"] == w["skeleton"]
        json.dumps(back)
        # pickled (a worker's result) and read back: the same rows
        again = pickle.loads(pickle.dumps(s))
        assert again["collectives"]["kernels"] == w["collectives"]["kernels"]
        assert summary(w)["collectives"]["kernels"] == kern


def test_the_job_from_summaries_is_the_job_from_whole_reports(jobs):
    """The job's every figure, its graph and what-ifs included, the same from the compacted
    summaries as from the whole reports (JSON lists)."""
    whole, part = jobs
    assert whole.job["graph"]["what_ifs"]
    assert json.dumps(part.job, sort_keys=True) == json.dumps(whole.job, sort_keys=True)


def test_kernel_maps_read_as_dicts():
    rank = np.array([1, 0, 1, 0, 1])
    kernel = np.array([7, 3, 2, 3, 9])
    maps = kernel_maps(rank, kernel, instance=np.array([10, 11, 12, 13, 14]))
    m0, m1 = maps[0]["instance"], maps[1]["instance"]
    assert dict(m0.items()) == {3: 13}  # a (rank, kernel) given twice: the last row's
    assert dict(m1.items()) == {2: 12, 7: 10, 9: 14} and m1 == {2: 12, 7: 10, 9: 14}
    assert m1[7] == 10 and m1.get(8, -1) == -1 and 8 not in m1 and 9 in m1
    assert lookup(m1, np.array([9, 8, 2]), -1).tolist() == [14, -1, 12]
    assert lookup({2: 12}, np.array([9, 2]), -1).tolist() == [-1, 12]
    new = m1.replaced({7: 70})
    assert isinstance(new, KernelMap) and dict(new.items()) == {2: 12, 7: 70, 9: 14}
    assert m1[7] == 10  # unchanged
