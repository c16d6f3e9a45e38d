"""Time HTA's figures two ways on one trace: HTA's own ``TraceAnalysis`` (its JSON parse + its
four analyses) vs tracekit's load + the bridge (``tracekit.analyses.hta``) + the same four HTA
analyses. It times only; that the two give the same tables is tests/tracekit/test_hta_bridge.py's
job.

    python -m bench.hta_bridge [TRACE] [--repeat N]

TRACE defaults to ../shared/traces/public/hta_ns_resolution_rank0.json.gz. Prints one line per
measured phase (best of N runs, wall-clock seconds) and the speed-up of the parse/bridge step.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import warnings

from bench.common import REPO

DEFAULT = REPO.parent / "shared" / "traces" / "public" / "hta_ns_resolution_rank0.json.gz"


def hta_analyses(ta_or_t, via_trace_analysis: bool):
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis

    t = ta_or_t.t if via_trace_analysis else ta_or_t
    return (
        BreakdownAnalysis.get_temporal_breakdown(t, visualize=False),
        [BreakdownAnalysis.get_idle_time_breakdown(t, 30, r, None, visualize=False)[0]
         for r in t.get_ranks()],
        BreakdownAnalysis.get_gpu_kernel_breakdown(t, visualize=False, include_memory_kernels=True),
        CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False),
    )


CPU: dict[str, float] = {}


def best(fn, repeat: int, label: str = "") -> tuple[float, object]:
    """Best wall time of ``repeat`` runs; the best CPU time (all threads) goes to CPU[label]."""
    times, cpus, out = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    CPU[label] = min(cpus)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    logging.getLogger("hta").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")

    from hta.trace_analysis import TraceAnalysis

    from tracekit.analyses import hta as H
    from tracekit.trace import load

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(args.trace, d)
        t_hta_load, ta = best(lambda: TraceAnalysis(trace_dir=d), args.repeat, "hta_load")
        t_hta_an, _ = best(lambda: hta_analyses(ta, True), args.repeat, "hta_an")
        t_tk_load, ts = best(lambda: load(args.trace, use_cache=False), args.repeat, "tk_load")
        cache = tempfile.mkdtemp()
        load(args.trace, cache_dir=cache)
        t_tk_cached, _ = best(lambda: load(args.trace, cache_dir=cache), args.repeat, "tk_cached")
        shutil.rmtree(cache)
        t_bridge, t = best(lambda: H.to_hta(ts.traces), args.repeat, "bridge")
        t_br_an, _ = best(lambda: hta_analyses(t, False), args.repeat, "br_an")
        t_compute, res = best(lambda: H.compute(ts), args.repeat, "compute")

    print(f"trace: {args.trace} (best of {args.repeat}; wall s, CPU s)")
    rows = [
        ("HTA TraceAnalysis load (JSON parse, align, filter)", t_hta_load, "hta_load"),
        ("HTA's four analyses on it", t_hta_an, "hta_an"),
        ("tracekit load, cold (no cache)", t_tk_load, "tk_load"),
        ("tracekit load, from its cache", t_tk_cached, "tk_cached"),
        ("bridge: tracekit Trace -> HTA Trace (to_hta)", t_bridge, "bridge"),
        ("HTA's four analyses on the bridged trace", t_br_an, "br_an"),
        ("tracekit.analyses.hta.compute (bridge + analyses)", t_compute, "compute"),
    ]
    for label, wall, key in rows:
        print(f"{label:52s} {wall:8.3f} {CPU[key]:8.3f}")
    print(f"{'  HTA total (load + analyses)':52s} {t_hta_load + t_hta_an:8.3f} "
          f"{CPU['hta_load'] + CPU['hta_an']:8.3f}")
    print(f"{'  tracekit cold (load + compute)':52s} {t_tk_load + t_compute:8.3f} "
          f"{CPU['tk_load'] + CPU['compute']:8.3f}")
    print(f"{'  tracekit cached (load + compute)':52s} {t_tk_cached + t_compute:8.3f} "
          f"{CPU['tk_cached'] + CPU['compute']:8.3f}")
    print(f"HTA load / bridge: {t_hta_load / t_bridge:.0f}x wall, "
          f"{CPU['hta_load'] / CPU['bridge']:.0f}x CPU; HTA load / (tracekit cold load + bridge): "
          f"{t_hta_load / (t_tk_load + t_bridge):.1f}x wall, "
          f"{CPU['hta_load'] / (CPU['tk_load'] + CPU['bridge']):.1f}x CPU")
    print(f"available={res.available} notes={list(res.notes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
