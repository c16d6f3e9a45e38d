"""Inferred cross-stream waits against the recorded ones, on real traces (issue 9, section 1).

For each trace that records ``cuda_sync`` waits (runtime traces with
``enable_cuda_sync_events``): ``tracekit.graph.wait_agreement`` (the recorded waits dropped,
every wait inferred, the two compared), one line per trace, then the pooled precision and
recall over all of them (target >= 0.95 both; a recorded wait that does not name its producer,
``wait_on_stream`` -1 as torch 2.11 with CUDA 13 writes them, is matched by its consumer only;
the test is
``tests/tracekit/test_graph.py::test_inferred_waits_against_recorded_real_traces``).

    python -m bench.wait_agreement 'sample_traces/**/*.json.gz'
"""

from __future__ import annotations

import argparse
import glob
import sys



def main(argv=None) -> int:
    from tracekit.graph import wait_agreement
    from tracekit.phases import default_rules
    from tracekit.trace import load

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="trace files or glob patterns (** recurses)")
    args = ap.parse_args(argv)
    rules = default_rules()
    paths = sorted({p for pat in args.paths for p in (glob.glob(pat, recursive=True) or [pat])})
    n_traces = right = inferred = matched = truth = 0
    print("| trace | recorded | naming their producer | binding | inferred | matched | precision | recall |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        for t in load(path, progress=False).traces:
            a = wait_agreement(t, rules)
            if a is None or not a["recorded_binding"]:
                continue
            n_traces += 1
            right += round((a["precision"] or 0) * a["inferred"])
            inferred += a["inferred"]
            matched += a["matched"]
            truth += a["recorded_binding"]
            fmt = (lambda v: "-" if v is None else f"{v:.4f}")
            print(f"| {path} | {a['recorded']} | {a['recorded_producer']} | {a['recorded_binding']} | {a['inferred']} | "
                  f"{a['matched']} | {fmt(a['precision'])} | {fmt(a['recall'])} |")
    print(f"\n{n_traces} traces with binding recorded waits: pooled precision "
          f"{right / inferred if inferred else float('nan'):.4f} ({right} of {inferred} inferred), "
          f"recall {matched / truth if truth else float('nan'):.4f} ({matched} of {truth} recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
