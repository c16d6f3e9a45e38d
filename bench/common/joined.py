"""A rank's estimated untraced step in its job: every rank's profiler overhead taken out, the
ranks joined at their collectives (``tracekit.ranks.jobgraph``).

One rank's trace alone keeps, in its collectives, the time it waited for the other ranks, whose
hosts the profiler slowed too; its estimate (``tracekit.graph.overhead``) takes out its own
overhead only. The job's graph joins every rank's untraced graph, reduced to its collectives
(``tracekit.graph.skeleton``), and replays them: a rank's mean counted step there is its
estimate with every rank's overhead out (``tracekit explain DIR`` prints it under "In its job").
"""

from __future__ import annotations

import os


def complete_job(trace_path: str) -> str | None:
    """The folder of ``trace_path`` when it holds every rank of a job of several ranks (its
    ``distributedInfo.world_size`` rank files), else None."""
    from tracekit._files import trace_files_in
    from tracekit.trace import load

    folder = os.path.dirname(os.path.abspath(trace_path))
    ws = load(trace_path, progress=False).traces[0].world_size
    if not ws or ws < 2:
        return None
    return folder if len(trace_files_in(folder)) == ws else None


def joined_ms(folder: str, model=None) -> dict[int, float]:
    """Per rank of the job in ``folder``: its step on the job's graph (ms, the mean over the
    counted steps), each rank's graph the estimated untraced one of ``model``
    (``tracekit.graph.overhead.OverheadModel``; None: explain's default). Empty when the job's
    graph cannot be built (fewer than two ranks with collectives and steps)."""
    from tracekit.analyses import skeleton
    from tracekit.analyses.explain import ExplainConfig
    from tracekit.phases import default_rules
    from tracekit.ranks import JobConfig, analyze_job, job
    from tracekit.ranks.inputs import RankSet
    from tracekit.trace import load

    rep = analyze_job(folder, workers=1, use_cache=False, with_hta=False,
                      config=JobConfig(balance_what_if=False))
    built = rep.job
    if model is not None:
        rules = default_rules()
        config = ExplainConfig(overhead=model)
        ranks = []
        for r in rep.ranks:
            ts = load(r["source"], progress=False)
            tr = ts.rank(int(r["rank"])) if int(r["rank"]) in ts.ranks else ts.traces[0]
            sk = skeleton.compute(tr, rules, config=config)
            ranks.append(dict(r, skeleton=sk.to_dict() if sk is not None else None))
        built = job.build(RankSet(source=folder, ranks=ranks, problems=rep.problems))
    g = built.get("graph") or {}
    return {int(x["rank"]): float(x["step_ns"]) / 1e6 for x in g.get("ranks") or []}


def joined_fix(folder: str, fix: str) -> dict | None:
    """A fix (``tracekit.graph.fixes``, by id) applied to every rank of the job in ``folder``
    and the job's graph replayed (``tracekit.ranks.whatif.with_fix``), each rank's graph the
    estimated untraced one (no untraced input): ``{"saving_ms", "saving_contention_ms",
    "saving_free_ms", "step_ms", "note", "warning", "at_band"}`` (the saving as explain predicts it: contention-aware
    for a fix that moves GPU work beside other work; ``at_band``: (job step, saving) ms at the
    ends of the band of the job's estimated untraced step, ``tracekit.ranks.border``), None when
    the job's graph cannot be built.

    One rank's graph keeps, as its collectives' durations, the time it waited at them for the
    other ranks; a what-if on that rank alone moves those waits with the collectives, as if the
    other ranks would arrive that much earlier too. Where another rank decides the step (the
    rank's collectives mostly wait for it) that is wrong whenever the fix does not make that
    rank faster: the job's graph holds every rank's own work and replays them together."""
    import tempfile

    from tracekit.ranks import JobConfig, analyze_job, whatif

    with tempfile.TemporaryDirectory(prefix="tracekit-joined-fix-") as cache:
        rep = analyze_job(folder, workers=1, cache_dir=cache, with_hta=False, whole=False,
                          config=JobConfig(balance_what_if=False))
        if not (rep.job or {}).get("graph") or rep.graph is None:
            return None
        w = whatif.with_fix(rep.ranks, rep.graph, fix,
                            task=whatif.RankSkeletonTask(cache_dir=cache), workers=1)
    if w is None:
        return None
    free = (w["step_ns"] - w["predicted_free_ns"]) if "predicted_free_ns" in w else w["saving_ns"]
    return {"saving_ms": w["saving_ns"] / 1e6, "saving_contention_ms": w["saving_contention_ns"] / 1e6,
            "saving_free_ms": free / 1e6, "step_ms": w["step_ns"] / 1e6, "note": w.get("note"),
            "warning": w.get("warning"),
            "at_band": [(a["step_ns"] / 1e6, a["saving_ns"] / 1e6) for a in w.get("at_band") or []]}
