"""A collective launched in the pinned step that ends in the counted one (``tracekit.graph.
skeleton``'s open cuts): with one counted step, its end is the job's (the last member's arrival
and its transfer), not the end the traced wait gave it in the rank's replay alone."""

from __future__ import annotations

from tests.tracekit.ranks.jobhelp import A2A, Coll, comm_args, rank_builder
from tracekit.ranks import JobConfig, analyze_job


def _job(d, *, early_us: float) -> None:
    """Two ranks, two profiled steps of 1,000 us (the first pinned, one counted), each rank a
    60-us GEMM a step on its main stream and three all-to-alls on a stream of their own: one in
    step 1 (both at 100 us), one in step 2 (both at 1,300 us), and the one between that rank 1
    launches at ``early_us`` (inside step 1 when below 1,000) and rank 0 at 1,200 us, both
    ending at 1,210 us (rank 1's kernel waits for rank 0 in the trace). In step 2 each host
    synchronizes on it before launching the GEMM."""
    colls = [Coll("0", "all_to_allv", 1, {0: 100.0, 1: 100.0}, 110.0),
             Coll("0", "all_to_allv", 2, {0: 1200.0, 1: early_us}, 1210.0),
             Coll("0", "all_to_allv", 2, {0: 1300.0, 1: 1300.0}, 1310.0)]
    for r in (0, 1):
        b = rank_builder(r, 2, device=r, base_us=1_000_000.0)
        b.profiler_step(1, 0.0, 999.0)
        b.kernel("gemm_kernel", 150, 700, stream=7,
                 launched_by=b.runtime("cudaLaunchKernel", 140, 5))
        b.cpu_op("aten::host_work", 800.0, 190.0)
        b.profiler_step(2, 1000.0, 300.0)
        # 100 us of host work, then the host waits for the middle all-to-all and launches the
        # step's GEMM
        b.cpu_op("aten::host_work", 1005.0, 100.0)
        b.runtime("cudaStreamSynchronize", 1110.0 if r else 1205.0, 102.0 if r else 7.0)
        b.kernel("gemm_kernel", 1220, 60, stream=7,
                 launched_by=b.runtime("cudaLaunchKernel", 1214, 5))
        for seq, c in enumerate(colls):
            args = {**comm_args(c, r, 2), "Seq": seq}
            at = c.starts[r] - 6
            b.cpu_op("record_param_comms", at - 0.5, 3.0, args={**args, "Rank": r})
            b.kernel(A2A, c.starts[r], c.end - c.starts[r], stream=17, args=args,
                     launched_by=b.runtime("cudaLaunchKernel", at, 2))
        b.write(d / f"trace_rank{r}.json.gz")


def test_a_collective_waiting_across_the_pinned_step_is_no_own_work(tmp_path):
    """Rank 1 launches the middle all-to-all 400 us before its pinned step ends and rank 0 200
    us after: in the trace rank 1's kernel lasts 410 us, 210 of them in the counted step. Its
    end is the barrier's (rank 0's arrival) and its transfer; rank 1's own work in the counted
    step holds no communication (before: the traced wait, 0.212 ms of its 0.296 ms, and the
    job's step was rank 1's 0.296) and its wait for rank 0 is told as a wait (0.199 ms)."""
    d = tmp_path / "job"
    d.mkdir()
    _job(d, early_us=600.0)
    g = analyze_job(d, cache_dir=tmp_path / "cache", whole=False, workers=1,
                    config=JobConfig(balance_what_if=False)).job["graph"]
    by = {r["rank"]: r for r in g["ranks"]}
    assert g["counted_steps"] == [2]
    assert by[1]["own_classes"]["communication"] < 20_000
    assert by[1]["wait_ns"] > 100_000
    assert any(w["rank"] == 0 for w in by[1]["waits_for"])
    # the job's step is rank 0's own work and transfer (before: rank 1's, its wait counted)
    assert g["step_ns"] == by[0]["own_ns"] + by[0]["transfer_ns"]
