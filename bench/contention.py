"""What do kernels of two streams cost each other where they overlap? (issue 24: the
contention-aware what-if, ``tracekit.graph.whatif.CONTENTION_SHARE``)

A FusedSparseDist "after" trace runs the embedding backward and the lookup on a side stream
beside the main stream's backward and optimizer; its "before" trace (SparseDist) runs the same
kernels one after the other on one stream. For each such pair of a proof manifest whose two
traces are in the tree, over the counted steps (all but the first), traced view, per step:

- the *overlap*: how long compute kernels of two streams ran at once in the "after" trace
  (each kernel's time under another stream's kernels, summed, halved: a pair counted once;
  communication kernels left out: how long they run is set by their peers);
- what each stream paid: its kernels' extra duration against the same kernels in the
  "before" trace (matched by name where a name runs as many times a step in both) and, for
  the main stream (the one with the most kernel time), its kernels' extra late starts (the
  model's unexplained time before them: started later than their launch, stream and waits
  allow, as when a side stream's kernel holds the SMs), each over the overlap (no share where
  the overlap is under 0.1 ms a step).

Two kernels that each fill the SMs and share them at half speed pay the whole overlap each
(``CONTENTION_SHARE`` = 1: the pair takes as long as one after the other); kernels that leave
SMs free pay less.

    python -m bench.contention [MANIFEST] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone

from bench.common import write_result

DEFAULT_MANIFEST = "bench/results/proof-h200-20261127.json"
MIN_OVERLAP_NS = 100_000
"""A pair whose kernels overlap less than this a step gets no share (noise over little)."""


def _kernels(path: str):
    """(table of the counted steps' kernels, number of counted steps) of one trace, traced."""
    import numpy as np
    import pandas as pd

    from tracekit.analyses import explain
    from tracekit.graph import critical as cr
    from tracekit.graph import whatif as wi
    from tracekit.graph.model import COMPUTE
    from tracekit.phases import default_rules
    from tracekit.trace import load

    trace = load(path, progress=False).traces[0]
    g = explain.view_graph(trace, default_rules(), explain.ExplainConfig(untraced=False))[0]
    win = cr.step_windows(g)
    keep = wi.counted_steps(win)
    compute = np.char.startswith(g.category.astype(str), COMPUTE)  # NCCL's: set by its peers
    k = g.kernels & compute & np.isin(g.step, win["step"].to_numpy()[keep])
    ids = np.flatnonzero(k)
    t = pd.DataFrame({"name": g.name[ids].astype(str), "lane": g.lane[ids],
                      "dur": g.dur[ids].astype(np.int64),
                      "late": g.unexplained[ids].astype(np.int64),
                      "overlap": wi.overlap_others(g.lane[ids], g.start[ids], g.end[ids])})
    return t, int(keep.sum())


def _main_lane(t) -> int:
    return int(t.groupby("lane")["dur"].sum().idxmax()) if len(t) else -1


def _stretch(before, nb: int, after, na: int) -> float:
    """ns per step the ``after`` kernels took longer than the same kernels in ``before``
    (names that run as many times a step in both)."""
    a = after.groupby("name")["dur"].agg(["sum", "size"])
    b = before.groupby("name")["dur"].agg(["sum", "size"])
    j = a.join(b, how="inner", suffixes=("_a", "_b"))
    j = j[j["size_a"] * nb == j["size_b"] * na]
    return float((j["sum_a"] / na - j["sum_b"] / nb).sum())


def measure(before: str, after: str) -> dict:
    """The overlap and what each stream paid for it, per step (module docstring)."""
    tb, nb = _kernels(before)
    ta, na = _kernels(after)
    main_a, main_b = _main_lane(ta), _main_lane(tb)
    on_main = ta["lane"] == main_a
    overlap = float(ta["overlap"].sum()) / 2 / max(na, 1)
    stretch_main = _stretch(tb, nb, ta[on_main], na)
    stretch_side = _stretch(tb, nb, ta[~on_main], na)
    late = (float(ta.loc[on_main, "late"].sum()) / max(na, 1) -
            float(tb.loc[tb["lane"] == main_b, "late"].sum()) / max(nb, 1))
    main = stretch_main + late

    def share(x):
        return x / overlap if overlap >= MIN_OVERLAP_NS else None

    return {"before": before, "after": after, "steps_before": nb, "steps_after": na,
            "overlap_ns": overlap, "main_stretch_ns": stretch_main, "main_late_ns": late,
            "main_ns": main, "side_stretch_ns": stretch_side,
            "main_share": share(main), "side_share": share(stretch_side)}


def pairs_of(manifest: str) -> list[tuple[str, str, str]]:
    """(name, before, after) of the manifest's FusedSparseDist pairs whose two traces exist."""
    with open(manifest) as fh:
        doc = json.load(fh)
    base = os.path.dirname(os.path.abspath(manifest))
    out = []
    for p in doc.get("pairs", []):
        if p.get("fix") != "fused_sparse_dist":
            continue
        b = os.path.join(base, (p.get("before") or {}).get("trace") or "")
        a = os.path.join(base, (p.get("after") or {}).get("trace") or "")
        if os.path.isfile(b) and os.path.isfile(a):
            out.append((p["name"], os.path.relpath(b), os.path.relpath(a)))
    return out


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def render(rows: list[dict], command: str, secs: float) -> str:
    out = [f"# What kernels of two streams cost each other ({datetime.now(timezone.utc).isoformat(timespec='seconds')})",
           "", f"Command: `{command}` ({secs:.1f} s on {platform.node()}).", "",
           "Per counted step of the FusedSparseDist (\"after\") trace, traced, against its "
           "SparseDist (\"before\") trace: the overlap of kernels of two streams, what the main "
           "stream paid (its kernels' extra duration and extra late starts) and what the side "
           "stream paid (its kernels' extra duration), in ms and as a share of the overlap. "
           "The contention-aware what-if charges each kernel the whole overlap it gains "
           "(share 1).", "",
           "| pair | overlap ms | main: stretch + late starts ms | main share | side: stretch ms | side share |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {_ms(r['overlap_ns'])} | {_ms(r['main_stretch_ns'])} + "
                   f"{_ms(r['main_late_ns'])} = {_ms(r['main_ns'])} | {_x(r['main_share'])} | "
                   f"{_ms(r['side_stretch_ns'])} | {_x(r['side_share'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.contention", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", nargs="?", default=DEFAULT_MANIFEST,
                    help="a proof manifest (bench.explain_proof's)")
    ap.add_argument("--out", default=None, help="write contention-<time>.md/.json there")
    args = ap.parse_args(argv)
    try:
        pairs = pairs_of(args.manifest)
    except (OSError, ValueError) as exc:
        print(f"bench.contention: cannot read the manifest {args.manifest!r}: {exc}",
              file=sys.stderr)
        return 2
    if not pairs:
        print(f"bench.contention: no FusedSparseDist pair with both traces in {args.manifest!r}",
              file=sys.stderr)
        return 2
    from tracekit.errors import TracekitError

    t0 = time.perf_counter()
    try:
        rows = [{"name": n, **measure(b, a)} for n, b, a in pairs]
    except TracekitError as exc:
        print(f"bench.contention: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    command = f"python -m bench.contention {args.manifest}"
    text = render(rows, command, secs)
    print(text)
    if args.out:
        base = write_result(args.out, "contention", text, {"rows": rows}, command=command, seconds=secs)
        print(f"wrote {base}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
