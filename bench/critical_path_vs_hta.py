"""tracekit's critical path against HTA 0.5's on the same ProfilerStep of the same trace.

HTA's critical path analysis (``TraceAnalysis.critical_path_analysis``) needs pandas < 3, which
tracekit's own environment does not have, so it runs in another Python (``--hta-python``: a venv
with ``pandas<3`` and ``HolisticTraceAnalysis==0.5.0``) and sends back its breakdown as JSON.
HTA's path covers the GPU work the ``ProfilerStep#N`` annotation launched (its graph holds the
events of the annotation's span and the GPU work they launched); tracekit's step window runs
from the previous step's completion to this step's: in a steady state the same work.

    python -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install 'pandas<3' HolisticTraceAnalysis==0.5.0
    python -m bench.critical_path_vs_hta TRACE --step N --hta-python /tmp/htavenv/bin/python

Classes compared (HTA's ``bound_by`` of each critical-path edge -> tracekit's segments):

| HTA                        | tracekit                                                  |
|----------------------------|-----------------------------------------------------------|
| cpu_bound                  | host, except launch latency                               |
| gpu_kernel_launch_overhead | host segments "launch latency before"                     |
| gpu_compute_bound          | compute:*, memcpy                                         |
| gpu_communication_bound    | communication                                             |
| gpu_kernel_kernel_overhead | idle (a stream idle before an activity)                   |
| (zero-weight sync edges)   | sync (a blocking call after its wait; cross-stream waits) |
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


HTA_SCRIPT = r"""
import json, os, shutil, sys, tempfile, time
from hta.trace_analysis import TraceAnalysis
path, step = sys.argv[1], sys.argv[2]
d = tempfile.mkdtemp()
shutil.copy(path, os.path.join(d, "rank-0.json.gz" if path.endswith(".gz") else "rank-0.json"))
t0 = time.time()
ta = TraceAnalysis(trace_dir=d)
t1 = time.time()
cp, ok = ta.critical_path_analysis(rank=0, annotation="ProfilerStep#" + step, instance_id=0)
t2 = time.time()
df = cp.get_critical_path_breakdown()
df["duration"] = df["duration"].astype(float)
ts = [cp.node_list[n].ts for n in cp.critical_path_nodes]
df0 = ta.t.get_trace(0)
ann = df0[df0["name"] == ta.t.symbol_table.get_sym_id_map()["ProfilerStep#" + step]].iloc[0]
out = {"load_s": t1 - t0, "cp_s": t2 - t1, "ok": bool(ok),
       "path_first_us": float(min(ts) - ann["ts"]), "path_last_us": float(max(ts) - ann["ts"]),
       "by_bound": {str(k): float(v) for k, v in df.groupby("bound_by")["duration"].sum().items()},
       "total_us": float(df["duration"].sum()), "edges": int(len(df))}
print(json.dumps(out))
"""


def classes_of(segs) -> dict[str, float]:
    """tracekit's path segments in HTA's classes (us)."""
    out: dict[str, float] = {}
    for r in segs.itertuples(index=False):
        c = r.category
        if c == "host":
            k = "gpu_kernel_launch_overhead" if r.what == "launch latency before" else "cpu_bound"
        elif c.startswith("compute:") or c == "memcpy":
            k = "gpu_compute_bound"
        elif c == "communication":
            k = "gpu_communication_bound"
        elif c == "idle":
            k = "gpu_kernel_kernel_overhead"
        else:
            k = c
        out[k] = out.get(k, 0.0) + r.dur / 1000
    return out


def ours(path: str, step: int) -> dict:
    from tracekit.graph import build_graph
    from tracekit.graph import critical as cr
    from tracekit.phases import default_rules
    from tracekit.trace import load

    t0 = time.perf_counter()
    t = load(path, use_cache=False, progress=False).traces[0]
    t1 = time.perf_counter()
    g = build_graph(t, default_rules())
    win = cr.step_windows(g)
    w = win[win["step"] == step]
    own = cr.step_paths(g, windows=w)
    t2 = time.perf_counter()
    a = int(g.steps.set_index("step").loc[step, "cpu_start"])
    return {"load_s": t1 - t0, "cp_s": t2 - t1,
            "profiler_step_us": float(g.steps.set_index("step").loc[step, "cpu_end"] - a) / 1000,
            "own_window": classes_of(own), "own_window_total_us": own["dur"].sum() / 1000,
            "window_from_us": (int(w["start"].iloc[0]) - a) / 1000,
            "window_to_us": (int(w["end"].iloc[0]) - a) / 1000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--hta-python", required=True)
    args = ap.parse_args(argv)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(HTA_SCRIPT)
    try:
        res = subprocess.run([args.hta_python, f.name, os.path.abspath(args.trace), str(args.step)],
                             capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    if res.returncode != 0:
        print(res.stderr[-3000:], file=sys.stderr)
        return 1
    hta = json.loads(res.stdout.strip().splitlines()[-1])
    mine = ours(args.trace, args.step)
    keys = ["cpu_bound", "gpu_kernel_launch_overhead", "gpu_compute_bound",
            "gpu_communication_bound", "gpu_kernel_kernel_overhead", "sync"]
    print(f"{args.trace}, ProfilerStep#{args.step} ({mine['profiler_step_us']:,.1f} us)")
    print(f"{'class (us)':30s} {'HTA 0.5':>12s} {'tracekit':>12s}")
    for k in keys:
        print(f"{k:30s} {hta['by_bound'].get(k, 0.0):12,.1f} {mine['own_window'].get(k, 0.0):12,.1f}")
    print(f"{'total on the path':30s} {hta['total_us']:12,.1f} {mine['own_window_total_us']:12,.1f}")
    print(f"from the annotation's start: HTA's path runs {hta['path_first_us']:,.1f} .. "
          f"{hta['path_last_us']:,.1f} us; tracekit's step window "
          f"{mine['window_from_us']:,.1f} .. {mine['window_to_us']:,.1f} us")
    print(f"time: HTA load {hta['load_s']:.2f} s + critical path {hta['cp_s']:.2f} s; tracekit load "
          f"{mine['load_s']:.2f} s + graph and path {mine['cp_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
