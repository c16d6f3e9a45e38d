"""Would a collective term make the jobs' FusedSparseDist predictions right? (issue 24: the
dense pairs over-predict on jobs; compute kernels under a waiting NCCL kernel run 22-32 %
longer than on one GPU, ``bench.gpu_under_collectives``)

The contention-aware replay charges a kernel the whole overlap it gains beside kernels of other
streams of its device, NCCL's included (``tracekit.graph.whatif.CONTENTION_SHARE`` = 1). The
term (``whatif.COMMUNICATION_SHARE``): a compute kernel charged only ``--share`` of what it gains
beside communication kernels alone, a communication kernel nothing for what it gains beside
compute (its length is its wait for the other ranks and its link). For each FusedSparseDist
pair of the manifests whose "before" folder holds every rank of its job: the fix applied to
every rank and the job's graph replayed (``bench/common/joined.py``, ``joined_fix``, as the
proof predicts it), with the model and with the term at each share, against the measured
saving and the proof's tolerance (``bench.explain_proof.judge_time``). The 1-GPU pairs hold no
communication kernel: the term cannot move them.

    python -m bench.collective_term MANIFEST... [--share S ...] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.common import model_table, write_result

SHARES = (0.22, 0.32)
"""The compute kernels' measured slowdown under a waiting NCCL kernel, its range over the
4-GPU ``dense_b8k`` ranks that wait (``bench/results/gpu-under-collectives-20261127-2315.md``)."""


def job_pairs(manifest: str) -> list[dict]:
    """The manifest's FusedSparseDist pairs whose "before" trace's folder holds every rank of
    its job: ``{"manifest", "name", "folder", "measured_ms", "lo", "hi", "tolerance_ms"}``."""
    from bench.common.joined import complete_job
    from bench.explain_proof import judge_time, measured

    with open(manifest) as fh:
        doc = json.load(fh)
    base = os.path.dirname(os.path.abspath(manifest))
    out = []
    for p in doc.get("pairs", []):
        trace = os.path.join(base, (p.get("before") or {}).get("trace") or "")
        if p.get("fix") != "fused_sparse_dist" or not os.path.isfile(trace):
            continue
        folder = complete_job(trace)
        if folder is None:
            continue
        step, meas, lo, hi = measured(p, base)
        out.append({"manifest": manifest, "name": p["name"], "folder": os.path.relpath(folder),
                    "step_ms": step, "measured_ms": meas, "lo": lo, "hi": hi,
                    "tolerance_ms": judge_time(None, meas, step)[1]})
    return out


def predict(folder: str, share: float | None) -> float | None:
    """The fix's saving on the job's graph (ms) with the term at ``share`` (None: the model)."""
    from bench.common.joined import joined_fix
    from tracekit.graph import whatif as wi

    kept = wi.COMMUNICATION_SHARE
    wi.COMMUNICATION_SHARE = share
    try:
        got = joined_fix(folder, "fused_sparse_dist")
    finally:
        wi.COMMUNICATION_SHARE = kept
    return None if got is None else got["saving_ms"]


def measure(pairs: list[dict], shares) -> list[dict]:
    from bench.explain_proof import judge_time

    rows = []
    for p in pairs:
        preds = {"model": predict(p["folder"], None)}
        preds.update({f"{s:g}": predict(p["folder"], s) for s in shares})
        within = {k: judge_time(v, p["measured_ms"], p["step_ms"])[0] for k, v in preds.items()}
        rows.append(dict(p, predicted_ms=preds, within=within))
    return rows


def render(rows: list[dict], shares, command: str, secs: float) -> str:
    keys = ["model"] + [f"{s:g}" for s in shares]
    out = model_table(
        "A collective term in the contention-aware replay, judged on jobs", command, secs,
        "FusedSparseDist's saving (ms per step) predicted raw on the job's graph (the fix on "
        "every rank), with the model (every kernel charged the whole overlap it gains) and with "
        "the term (a compute kernel charged the share shown of what it gains beside "
        "communication kernels alone, a communication kernel nothing), against the measured "
        "saving; within: +-25 % of it or +-2 % of the step.", "manifest", rows, keys,
        [k if k == "model" else "term " + k for k in keys],
        lambda r: f"{os.path.basename(r['manifest'])} | {r['name']}")
    for m in dict.fromkeys(r["manifest"] for r in rows):
        mine = [r for r in rows if r["manifest"] == m]
        out.append(f"- {os.path.basename(m)}: within, " + ", ".join(
            f"{'model' if k == 'model' else 'term ' + k} {sum(bool(r['within'][k]) for r in mine)} of {len(mine)}"
            for k in keys))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.collective_term", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifests", nargs="+", help="proof manifests (bench.explain_proof's)")
    ap.add_argument("--share", type=float, action="append", default=None,
                    help=f"the term's share (repeatable; default {', '.join(map(str, SHARES))})")
    ap.add_argument("--out", default=None, help="write collective-term-<time>.md/.json there")
    args = ap.parse_args(argv)
    shares = tuple(args.share) if args.share else SHARES
    if any(not (0 <= s <= 1) for s in shares):
        print("bench.collective_term: --share must lie in [0, 1]", file=sys.stderr)
        return 2
    pairs = []
    from tracekit.errors import TracekitError

    try:
        for m in args.manifests:
            pairs += job_pairs(m)
    except (OSError, ValueError, KeyError, TracekitError) as exc:
        print(f"bench.collective_term: cannot read a manifest: {exc}", file=sys.stderr)
        return 2
    if not pairs:
        print("bench.collective_term: no FusedSparseDist pair with every rank of its job in the "
              "tree", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        rows = measure(pairs, shares)
    except TracekitError as exc:
        print(f"bench.collective_term: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    command = "python -m bench.collective_term " + " ".join(
        args.manifests + [f"--share={s:g}" for s in (args.share or [])] +
        (["--out", args.out] if args.out else []))
    text = render(rows, shares, command, secs)
    print(text)
    if args.out:
        base = write_result(args.out, "collective-term", text, {"shares": list(shares), "rows": rows},
                            command=command, seconds=secs)
        print(f"wrote {base}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
