"""``tracekit explain PATH``: what bounds each step, and what each fix would save."""

from __future__ import annotations

import json

import click

from tracekit import __version__
from tracekit.commands.analyze import check_out, echo_warnings, emit, select_rank


def _path_rows(path, limit: int) -> list[dict]:
    """A step's critical path with consecutive segments of one lane and category merged."""
    rows: list[dict] = []
    for r in path.itertuples(index=False):
        lane = (f"GPU {r.device} stream {r.stream}" if r.lane_type == "gpu"
                else f"CPU {r.pid}/{r.tid}")
        if rows and rows[-1]["lane"] == lane and rows[-1]["category"] == r.category:
            rows[-1]["end_ns"] = int(r.end)
            rows[-1]["ns"] += int(r.dur)
            rows[-1]["segments"] += 1
            continue
        rows.append({"start_ns": int(r.start), "end_ns": int(r.end), "ns": int(r.dur),
                     "lane": lane, "category": r.category, "first": str(r.name), "what": r.what,
                     "segments": 1})
    return rows


def _render_path(rows: list[dict], step: int, limit: int) -> str:
    from tracekit.report import _clip, _ms, table

    if not rows:
        return f"  step {step}: no critical path\n"
    t0 = rows[0]["start_ns"]
    shown = sorted(sorted(rows, key=lambda r: -r["ns"])[:limit], key=lambda r: r["start_ns"])
    out = (f"  step {step}: {len(rows)} runs on the critical path; the {len(shown)} longest, in "
           "time order (ms from the step's start):\n")
    out += table(["at ms", "ms", "lane", "category", "segments", "first event"],
                 [[_ms(r["start_ns"] - t0), _ms(r["ns"]), r["lane"], r["category"],
                   r["segments"], _clip(r["first"], 60)] for r in shown], "    ") + "\n"
    return out


@click.command("explain")
@click.argument("path", type=click.Path())
@click.option("--step", type=int, default=None,
              help="Also print this step's critical path (the longest runs, in time order).")
@click.option("--what-if", "what_ifs", multiple=True, metavar="SPEC",
              help="Replay a change: kernel:REGEX=N, phase:NAME=N, host=N (N times faster) or "
                   "sync:REGEX (remove matching host syncs; sync:all). Repeatable.")
@click.option("--annotate", "annotate", type=click.Path(), default=None,
              help="Write a copy of the trace (.json or .json.gz) with the critical path, sync "
                   "stalls and optimizer -> lookup gaps added as tracks and flows.")
@click.option("--traced", is_flag=True,
              help="Explain the traced step as the trace shows it (default: the estimated "
                   "untraced step, the profiler's host overhead taken out).")
@click.option("--step-ms", "step_ms", type=float, default=None,
              help="The untraced step time (ms), if known: it sets the scale of the untraced "
                   "estimate (default: a metrics.json or TorchRec timing file beside the trace, "
                   "else the overhead model alone).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Write to this file instead of stdout.")
@click.option("--rules", "rules_path", type=click.Path(), default=None,
              help="A TOML file of phase rules overriding the defaults.")
@click.option("--rank", type=int, default=None, help="Only this rank of a multi-rank directory.")
@click.option("--limit", type=int, default=20, show_default=True,
              help="Rows per long table (and runs shown with --step).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the caches.")
@click.option("--cache-dir", type=click.Path(), default=None, help="Cache directory.")
def command(path, step, what_ifs, annotate, traced, step_ms, fmt, out, rules_path, rank, limit,
            no_cache, cache_dir):
    """What bounds each step of PATH's training loop, and what each fix would save.

    For every step: its critical path (the chain of dependencies that decided when it ended),
    the time on it by category (host, GPU compute by phase, communication, memcpy, sync, idle)
    and the bound; the findings, each with its evidence and a predicted saving from a what-if
    replay of the trace's dependency graph. Without --step/--what-if/--annotate the answer
    comes from the report cache that `tracekit analyze` shares.
    """
    from tracekit.errors import InputError
    from tracekit.report import document, text_explain, text_findings

    if what_ifs:  # (numpy and pandas only when the slow path runs)
        from tracekit.graph.whatif import parse_spec

        for s in what_ifs:
            parse_spec(s)
    check_out(out, (path,))
    if annotate is not None:
        import os

        if os.path.realpath(annotate) == os.path.realpath(path):
            raise InputError("--annotate names the input trace; it would be overwritten",
                             path=annotate)
        if os.path.isdir(annotate):
            raise InputError("--annotate is a directory", path=annotate)
        if out is not None and os.path.realpath(annotate) == os.path.realpath(out):
            raise InputError("--annotate and --out name the same file", path=annotate)
    if limit < 1:
        raise InputError("--limit must be at least 1")
    if step_ms is not None and not (step_ms > 0 and step_ms < 1e9):
        raise InputError("--step-ms must be a positive number of milliseconds")
    from tracekit.api import has_untraced_beside

    slow = bool(step is not None or what_ifs or annotate or traced or step_ms
                or has_untraced_beside(path))
    ranks: list[dict]
    paths: dict[int, list[dict]] = {}
    if not slow:
        from tracekit.api import report_for_path

        got = report_for_path(path, rules_path=rules_path, cache_dir=cache_dir,
                              use_cache=not no_cache, with_hta=None, prefetch=True)
        ranks = select_rank(got, rank, path)
    else:
        from tracekit.api import explain_path
        from tracekit.report import jsonable

        got = explain_path(path, rules_path=rules_path, what_ifs=what_ifs, cache_dir=cache_dir,
                           use_cache=not no_cache, traced=traced, step_ms=step_ms)
        if rank is not None:
            got = [(t, e) for t, e in got if t.rank == rank]
            if not got:
                select_rank([], rank, path)
        ranks = []
        for t, e in got:
            r = {"source": t.source, "rank": int(t.rank), "warnings": list(t.warnings),
                 "explain": jsonable(e)}
            ranks.append(r)
            if step is not None:
                seg = e.path[e.path["step"] == step] if e.path is not None else None
                if seg is None or seg.empty:
                    have = ", ".join(str(s["step"]) for s in r["explain"]["steps"])
                    raise InputError(f"no step {step} here (steps: {have or 'none'})", path=path)
                paths[int(t.rank)] = _path_rows(seg, limit)
            if annotate is not None:
                from tracekit.analyses import gaps, syncs
                from tracekit.annotate import write_annotated
                from tracekit.phases import load_rules

                if len(got) != 1:
                    raise InputError("--annotate goes with one trace (choose one with --rank)",
                                     path=path)
                rules = load_rules(rules_path)
                n = write_annotated(t.source, annotate, e, syncs.compute(t, rules),
                                    gaps.compute(t, rules))
                click.echo(f"tracekit: wrote {annotate} ({n} events added)", err=True)
    for r in ranks:
        echo_warnings(r)
    if fmt == "json":
        doc = document([{"source": r["source"], "rank": r["rank"], **(r.get("explain") or {}),
                         **({"path": paths[r["rank"]]} if r["rank"] in paths else {})}
                        for r in ranks], __version__)
        doc["explain"] = doc.pop("analyses")
        emit(json.dumps(doc, allow_nan=False) + "\n", out)
        return
    text = ""
    for r in ranks:
        text += f"== {r['source']}  (rank {r['rank']})\n\nFindings\n"
        text += text_findings(r.get("explain"), limit=limit)
        if r.get("explain"):
            text += "\nCritical path per step\n" + text_explain(r["explain"], limit)
        if r["rank"] in paths:
            text += "\n" + _render_path(paths[r["rank"]], step, limit)
    emit(text, out)
