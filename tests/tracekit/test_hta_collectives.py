"""The collectives tracekit matches across ranks (``tracekit.analyses.collectives``: group,
collective name, sequence number, message sizes, read from torch's metadata on each NCCL kernel)
are the ones HTA parses from the same kernels: traceinsight (HTA >= 0.6) reads ``Collective
name``, ``In/Out msg nelems``, ``dtype`` by default and ``Seq`` (``seq_num``) when asked.
On the real 2-GPU NCCL jobs in sample_traces/ (torch 2.11 on H200s): the collective of every
kernel and the bytes it moves agree; their kernels carry no ``Seq`` (both read -1)."""

from __future__ import annotations

import logging
import shutil
import warnings

import numpy as np
import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.analyses import collectives
from tracekit.phases import default_rules
from tracekit.trace import load

hta = pytest.importorskip("hta", reason="HTA (traceinsight) is not installed")

JOBS = ["ranks_2gpu_straggler", "pipelines_2gpu/sparse"]


def _hta_parse(directory):
    from hta.common.trace import Trace
    from hta.configs.parser_config import ParserConfig

    cfg = ParserConfig.get_default_cfg()
    names = {a.name for a in cfg.get_args()}
    if "collective_name" not in names:
        pytest.skip("this HTA does not parse collective names by default (HolisticTraceAnalysis < 0.6)")
    avail = ParserConfig.get_all_available_args()
    if "nccl::seq" in avail:
        cfg.add_args([avail["nccl::seq"]])
    log = logging.getLogger("hta")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = Trace(trace_dir=str(directory), parser_config=cfg)  # as TraceAnalysis, with Seq
            t.load_traces(include_last_profiler_step=True, use_multiprocessing=False)
            return t
    finally:
        log.setLevel(level)


@pytest.mark.parametrize("job", JOBS)
def test_collectives_match_htas_parse(job, tmp_path):
    src = SAMPLE_TRACES / job
    if not src.is_dir():
        pytest.skip(f"{src} not committed")
    for f in sorted(src.glob("*.json.gz")):
        shutil.copy(f, tmp_path / f.name)
    t = _hta_parse(tmp_path)
    ts = load(tmp_path, use_cache=False)
    table = t.symbol_table.get_sym_table()
    for tr in ts.traces:
        ours = collectives.compute(tr, default_rules()).kernels
        assert len(ours) > 0
        df = t.get_trace(tr.rank)
        nccl = df[(df["stream"] >= 0) & (df["collective_name"].astype(str) != "")]
        # HTA's times are microseconds from the job's first event; match kernels by order
        assert len(nccl) == len(ours[ours["collective"] != ""]), (job, tr.rank)
        theirs = nccl.sort_values("ts", kind="stable")
        mine = ours.sort_values("ts", kind="stable")
        assert list(mine["collective"]) == list(theirs["collective_name"].astype(str)), (job, tr.rank)
        # Seq: these torch 2.11 traces write none on the kernels (-1 on both sides); where a
        # trace writes it, it is the same field both read
        assert "seq_num" in theirs.columns
        assert list(mine["seq"]) == list(theirs["seq_num"].astype(np.int64)), (job, tr.rank)
        # the sizes: tracekit's bytes are HTA's element counts times the dtype's size
        per = mine["in_bytes"].to_numpy()
        want = theirs["in_msg_nelems"].to_numpy(np.int64) * np.array(
            [collectives.DTYPE_BYTES.get(d, -1) for d in theirs["msg_dtype"].astype(str)])
        assert (per == want).all(), (job, tr.rank)
