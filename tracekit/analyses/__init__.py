"""The analyses: one module per question, each ``compute(trace, rules) -> <Section>Result``.

``analyze_trace`` runs every section on one rank's parsed trace and returns an ``Analysis``.
Sections never print, plot or modify the trace; ``tracekit.report`` renders them.

Sections: ``explain`` (critical path, bound and findings with predicted savings), ``steps``
(step time), ``overlap`` (stream overlap), ``gaps`` (optimizer -> lookup gap), ``syncs`` (sync
stalls), ``allocator`` (``[memory]`` events), ``embedding_bw`` (the embedding kernels' bytes
and bandwidth against the GPU's peak). Optional sections:
``hta`` (``tracekit.analyses.hta.compute(trace, rules)``, HTA's own figures on the
already-parsed trace; it says so when HTA (traceinsight) is not installed) and
``snapshot`` (``tracekit.analyses.snapshot``: a memory-snapshot pickle, which is not part of
the trace, so the caller attaches it; ``snapshot_streams`` then matches its stream handles to the
trace's CUPTI streams). ``collectives`` (the rank's communication kernels), ``identity``
(which job and clock the trace comes from) and ``profile`` (the step by phase and by op) are
what ``tracekit.ranks`` combines across the ranks of a job, with ``skeleton`` (explain's graph
reduced to the collectives: what the job's graph joins).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from tracekit import steps
from tracekit.analyses import (allocator, collectives, embedding_bw, gaps, overlap, plausible,
                               profile, syncs)
from tracekit.analyses.forked import Forked
from tracekit.phases import Rules, default_rules
from tracekit.trace.model import Trace
from tracekit.frames import column

# The step windows live below the analyses and the graph (``tracekit.steps``), which both read
# them; ``tracekit.analyses.steps`` names the same module, as it always has.
sys.modules.setdefault(f"{__name__}.steps", steps)


@dataclass(frozen=True)
class Analysis:
    """Every section's result for one rank's trace."""

    source: str
    """The trace file."""
    rank: int
    schema: str
    """The trace's schema (``pytorch2``/``legacy2021``)."""
    platform: str
    """``cuda``, ``rocm`` or ``cpu`` (no GPU activity)."""
    warnings: tuple[str, ...]
    """The loader's warnings about this trace, then the sections' (``warnings`` of a section's
    result: values it left out of its figures)."""
    rules: str
    """Where the phase rules came from (``<default rules>`` or a path)."""
    steps: steps.StepsResult
    overlap: overlap.OverlapResult
    gaps: gaps.GapsResult
    syncs: syncs.SyncsResult
    allocator: allocator.AllocatorResult
    hta: object | None = None
    """``tracekit.analyses.hta``'s result, when it ran (None: not asked for, or no GPU activity)."""
    snapshot: object | None = None
    """``tracekit.analyses.snapshot.SnapshotResult`` of a snapshot beside the trace, if any."""
    snapshot_streams: object | None = None
    """``tracekit.analyses.snapshot_streams.StreamMatch``: the snapshot's stream handles matched
    to the trace's CUPTI streams (None without a snapshot). Not part of the JSON report."""
    explain: object | None = None
    """``tracekit.analyses.explain.ExplainResult``: critical path, bound, findings (None: not
    asked for)."""
    collectives: collectives.CollectivesResult | None = None
    """The rank's collective kernels (``tracekit.analyses.collectives``)."""
    identity: dict | None = None
    """``trace_identity(trace)``: the job and clock the trace comes from."""
    embedding_bw: embedding_bw.EmbeddingBwResult | None = None
    """``tracekit.analyses.embedding_bw``: the embedding kernels' bandwidth against the GPU's
    peak (None: not computed)."""
    profile: object | None = None
    """``tracekit.analyses.profile.ProfileResult``: the step by phase and by op."""
    skeleton: object | None = None
    """``tracekit.analyses.skeleton.SkeletonResult``: explain's graph reduced to the rank's
    collectives, what the job's graph joins (None: no explain, or no collective kernels)."""


def trace_identity(trace: Trace) -> dict:
    """What tells the ranks of one job from another's, and places the trace on a clock:
    ``distributed_info`` (the trace's ``distributedInfo`` as written, or None),
    ``base_time_ns`` (Kineto's ``baseTimeNanoseconds``: the wall-clock time of the trace's
    timestamp 0, or None), ``start_ns`` / ``end_ns`` (first start and last end of its events, on
    its own clock; None for a trace of only ``[memory]`` events)."""
    info = trace.metadata.get("distributedInfo")
    base = trace.metadata.get("baseTimeNanoseconds")
    ev = trace.events
    if len(ev):
        ts = column(ev, "ts")
        start, end = int(ts.min()), int((ts + column(ev, "dur")).max())
    else:
        start = end = None
    return {"distributed_info": info if isinstance(info, dict) else None,
            "base_time_ns": base if isinstance(base, int) and not isinstance(base, bool) else None,
            "start_ns": start, "end_ns": end}


HTA_AUTO_MAX_EVENTS = 500_000
"""Above this many events, ``with_hta=None`` (the CLI's default) skips HTA's section: it costs
~3 CPU-s per million events, more than all of tracekit's own sections together."""


def analyze_trace(
    trace: Trace,
    rules: Rules | None = None,
    *,
    with_hta: bool | None = True,
    snapshot: object | None = None,
    with_explain: bool = True,
    parallel: bool = False,
    with_skeleton: bool = True,
) -> Analysis:
    """Run every section on ``trace`` (rules default to ``default_rules()``).

    ``with_hta``: also run the HTA-backed section (None: only when the trace has at most
    ``HTA_AUTO_MAX_EVENTS`` events; above that the section says it was skipped).
    ``snapshot``: a result of ``tracekit.analyses.snapshot`` to carry along (explain uses it
    for the in-place batch copy's predicted peak reserved).
    ``with_explain``: also run ``explain`` (critical path, bound, findings).
    ``with_skeleton``: with explain, also its graph reduced to the collectives (``skeleton``:
    what a job's graph joins; ``tracekit.ranks.JobConfig.job_graph``).
    ``parallel``: compute the other sections in a forked child while this process computes
    explain (``tracekit.analyses.forked``; the same result, on two cores), and on a big graph
    part of explain's what-ifs in another (``explain.compute(parallel=True)``).
    """
    rules = default_rules() if rules is None else rules
    steps_result = steps.compute(trace, rules)
    # Forked after steps (and the phases they memoise): the child inherits them. The child
    # computes the other sections (small results, quick to send back) while this process
    # computes explain, the largest (its result holds the critical path: tens of MB to pickle,
    # and on a big trace the fork's copy-on-write costs the child ~0.4 CPU-s more than here).
    others = Forked(lambda: _other_sections(trace, rules, with_hta, snapshot, steps_result),
                    fork=parallel and with_explain)
    explained = _explain(trace, rules, snapshot, parallel) if with_explain else None
    sections = others.result()
    # the loader's warnings, then the sections' own (values they had to leave out), then the
    # limits explain's graph hit (tracekit.graph.model.Graph.limits)
    warned = tuple(trace.warnings) + tuple(
        w for s in (steps_result, *sections.values()) for w in getattr(s, "warnings", ())) + (
        plausible.check(trace, steps_result, sections["overlap"])) + (
        _graph_limits(trace, rules) if with_explain else ())
    reduced = _skeleton(trace, rules) if with_explain and with_skeleton else None
    return Analysis(
        source=trace.source,
        rank=trace.rank,
        schema=trace.schema,
        platform=trace.platform,
        warnings=warned,
        rules=rules.source,
        steps=steps_result,
        snapshot=snapshot,
        explain=explained,
        skeleton=reduced,
        **sections,
    )


def _other_sections(trace: Trace, rules: Rules, with_hta: bool | None, snapshot: object | None,
                    steps_result) -> dict:
    """Every section but steps and explain, as ``Analysis`` fields."""
    hta = None
    if with_hta is not False and trace.has_gpu:
        from tracekit.analyses import hta as hta_mod

        if with_hta is None and len(trace.events) > HTA_AUTO_MAX_EVENTS:
            hta = hta_mod.skipped(trace, (
                f"skipped: {len(trace.events):,} events > {HTA_AUTO_MAX_EVENTS:,}; HTA's own "
                "analyses take seconds per million events (pass --hta to include them)"))
        else:
            hta = hta_mod.compute(trace, rules)
    return {
        "overlap": overlap.compute(trace, rules),
        "gaps": gaps.compute(trace, rules),
        "syncs": syncs.compute(trace, rules),
        "allocator": allocator.compute(trace, rules),
        "hta": hta,
        "snapshot_streams": _match_streams(trace, snapshot),
        "collectives": collectives.compute(trace, rules, steps=steps_result),
        "identity": trace_identity(trace),
        "embedding_bw": embedding_bw.compute(trace, rules),
        "profile": profile.compute(trace, rules, steps=steps_result),
    }


def _match_streams(trace: Trace, snapshot: object | None):
    addresses = getattr(snapshot, "addresses", None)
    if addresses is None:
        return None
    from tracekit.analyses import snapshot_streams

    st = snapshot.streams
    return snapshot_streams.compute(trace, addresses, list(zip(st["device"].tolist(), st["stream"].tolist())))


def _graph_limits(trace: Trace, rules: Rules) -> tuple[str, ...]:
    """The limits of tracekit's own that explain's graph hit (the graph explain built: the same
    trace, rules and default config)."""
    from tracekit.graph import build_graph

    return build_graph(trace, rules).limits


def _skeleton(trace: Trace, rules: Rules):
    from tracekit.analyses import skeleton

    return skeleton.compute(trace, rules)


def _explain(trace: Trace, rules: Rules, snapshot: object | None, parallel: bool = False):
    # imported here: tracekit.graph (which explain uses) reads the analyses' modules itself
    from tracekit.analyses import explain

    return explain.compute(trace, rules, snapshot=snapshot, parallel=parallel)


__all__ = ["Analysis", "analyze_trace", "trace_identity"]
