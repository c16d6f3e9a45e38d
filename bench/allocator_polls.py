"""What do the caching allocator's polls cost a step, and what would taking them out save?
(issue 24, item 6)

Before it hands out a block that ``record_stream`` tied to side streams, PyTorch's caching
allocator queries the events it recorded on them (``cudaEventQuery``): host time a pipeline's
side streams cost at every allocation (``tracekit.analyses.syncs`` tells those polls apart).
explain's ``allocator_polls`` finding takes the polls' host time out of the graph and replays
(``tracekit.graph.fixes.detect_allocator_polls``). For each trace (each rank of a directory),
in the traced view and in the estimated untraced one (the overhead model alone: no untraced
input, not the ``metrics.json`` beside a runtime trace), over the counted steps (all but the
first): the allocator's polls per step (and all polls), their host time per step, the step,
its bound, the predicted saving and whether explain says it helps (>= 1 % of the step), and
the call site that costs most.

The poll time is measured (the trace's own call durations; in the untraced view less the
overhead model's cost per runtime call); the saving is the replay's prediction, not checked
against a GPU run that removes the polls.

    python -m bench.allocator_polls ['sample_traces/pipelines_1gpu/**/*.json.gz' ...] [--out bench/results]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import sys
import time
from datetime import datetime, timezone

from bench.common import write_result

DEFAULT_TRACES = ("sample_traces/pipelines_1gpu/**/*.json.gz",
                  "sample_traces/pipelines_2gpu/**/*.json.gz",
                  "sample_traces/torchrec_1gpu/**/*.json.gz",
                  "sample_traces/issue5/*.json.gz")


def _view(t, rules, untraced: bool) -> dict:
    """The allocator-polls what-if of one trace in one view."""
    from tracekit.analyses import explain

    config = explain.ExplainConfig(untraced=untraced, generic_findings=False)
    r = explain.compute(t, rules, config=config)
    w = r.what_ifs[r.what_ifs["id"] == "allocator_polls"]
    f = next((x for x in r.findings if x["id"] == "allocator_polls"), None)
    st = r.steps.iloc[1:] if len(r.steps) >= 2 else r.steps
    out = {"step_ms": float(st["duration_ns"].mean() / 1e6) if len(st) else None,
           "bound": r.bound, "bound_share": r.bound_share,
           "applies": bool(len(w) and w["applies"].iloc[0]),
           "evidence": str(w["evidence"].iloc[0]) if len(w) else ""}
    if f is not None:
        out.update({
            "all_polls_per_step": f["polls_per_step"],
            "polls_per_step": f["allocator_polls_per_step"],
            "poll_ms_per_step": f["allocator_poll_ns_per_step"] / 1e6,
            "poll_traced_ms_per_step": f["allocator_poll_traced_ns_per_step"] / 1e6,
            "saving_ms": f["saving_ns"] / 1e6, "saving_fraction": f["saving_fraction"],
            "saving_contention_ms": f["saving_contention_ns"] / 1e6,
            "helps": bool(f["helps"]), "sites": f["allocator_poll_sites"]})
    return out


def measure(path: str) -> list[dict]:
    """One row per rank of ``path``."""
    from tracekit.analyses import syncs
    from tracekit.phases import default_rules
    from tracekit.trace import load

    rules = default_rules()
    rows = []
    for t in load(path, progress=False).traces:
        s = syncs.compute(t, rules)
        rows.append({"trace": path, "rank": int(t.rank), "allocator_known": s.allocator_known,
                     "polls_in_trace": s.poll_count,
                     "allocator_polls_in_trace": s.allocator_poll_count,
                     "traced": _view(t, rules, untraced=False),
                     "untraced": _view(t, rules, untraced=True)})
    return rows


def _f(v, spec=".3f", none="-") -> str:
    return none if v is None else format(v, spec)


def _saving(v: dict) -> str:
    if v.get("saving_ms") is None:
        return "-"
    return (f"{v['saving_ms']:.3f} ({100 * v['saving_fraction']:.2f}%)"
            f"{'' if v['helps'] else ', would not help'}")


def render(rows: list[dict], command: str, seconds: float) -> str:
    out = [f"# The caching allocator's polls: what they cost a step, what taking them out would "
           f"save ({datetime.now(timezone.utc).isoformat(timespec='seconds')})", "",
           f"Command: `{command}` ({seconds:.1f} s on {platform.node()} ({os.cpu_count()} cores)).",
           "", "Per step: the mean over the counted steps (all but the first). Traced: the trace "
           "as it is; untraced: the estimated untraced step (the overhead model alone, no "
           "untraced input). The poll time is measured; the saving is the replay's prediction "
           "(no GPU run has removed the polls).", "",
           "| trace | rank | allocator polls / step (all polls / step) | host ms / step: traced / untraced | "
           "traced: step ms, bound, saving ms | untraced: step ms, bound, saving ms | "
           "the costliest call site (untraced ms / step) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        tr, un = r["traced"], r["untraced"]
        if not r["allocator_known"]:
            polls = f"unknown: no [memory] events ({r['polls_in_trace']} polls in the trace)"
        elif un.get("polls_per_step") is None:
            polls = (f"0 ({r['allocator_polls_in_trace']} of the trace's {r['polls_in_trace']} "
                     "polls, none in the counted steps)" if r["allocator_polls_in_trace"] else
                     f"0 (none of the trace's {r['polls_in_trace']} polls)")
        else:
            polls = f"{un['polls_per_step']:.1f} ({un['all_polls_per_step']:.1f})"
        host = (f"{_f(tr.get('poll_ms_per_step'))} / {_f(un.get('poll_ms_per_step'))}"
                if un.get("poll_ms_per_step") is not None else "-")
        site = un.get("sites") or []
        top = f"{site[0]['call_site']} ({site[0]['ns_per_step'] / 1e6:.3f})" if site else "-"
        out.append(f"| {r['trace']} | {r['rank']} | {polls} | {host} | "
                   f"{_f(tr['step_ms'])}, {tr['bound'] or '-'}, {_saving(tr)} | "
                   f"{_f(un['step_ms'])}, {un['bound'] or '-'}, {_saving(un)} | {top} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.allocator_polls", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="*", default=list(DEFAULT_TRACES),
                    help="trace files or directories (globs; default: the committed traces)")
    ap.add_argument("--out", default=None, help="write allocator-polls-<time>.md/.json there")
    args = ap.parse_args(argv)
    paths = []
    for p in args.patterns:
        got = sorted(glob.glob(p, recursive=True))
        if not got and not os.path.exists(p):
            print(f"bench.allocator_polls: no trace matches {p!r}", file=sys.stderr)
            return 2
        paths += got or [p]
    t0 = time.perf_counter()
    rows = [r for p in paths for r in measure(p)]
    secs = time.perf_counter() - t0
    command = "python -m bench.allocator_polls " + " ".join(args.patterns)
    text = render(rows, command, secs)
    print(text)
    if args.out:
        base = write_result(args.out, "allocator-polls", text, {"rows": rows}, command=command, seconds=secs)
        print(f"wrote {base}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
