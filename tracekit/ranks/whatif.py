"""What-ifs across ranks, replayed on the job's graph (``tracekit.ranks.jobgraph``).

- ``straggler at the median rank's speed``: the straggler without the host work the other
  ranks lack, what the traces say it does beyond them (``tracekit.ranks.straggler``'s op-by-op
  difference): each host op it runs more often per step than the median rank (an op the
  others lack, or more instances of one: ``straggler.extra_op_shares``, every op counted in
  both ranks' skeletons), that share of the op's self time, and its
  host time the trace shows the thread doing nothing the model explains (a ``time.sleep``, a
  wait outside the trace: ``tracekit.analyses.skeleton.host_asleep``) beyond the other ranks'
  median, that share of it. Taken out of the straggler's own graph (``without_host_work``),
  which is reduced again; the job's graph is replayed with it. The rest of its work stays: an op
  both run as often is the same work, however long it takes the straggler (a host the
  profiler slows more on one rank than on another is a condition of the traced run). The other
  ranks are replayed with their host work at the straggler's speed where theirs ran slower
  (``straggler.host_speeds``: the same ops' self times, weighted median; their work as it is):
  the ranks run one program, and the hosts of a traced job run it at speeds that differ by the
  run's conditions (the waiting ranks 1.1-1.25x slower than the straggler in most planted-delay
  jobs), which, with the straggler's extra work gone, would otherwise be predicted as the job's
  new bound (``ranks_4gpu_tall_delay``: 0.000 predicted, 2.215 ms measured; now 1.726). A rank
  whose host ran faster keeps its speed. The saving is the straggler's change alone: the job
  replayed at its host speed with and without the work taken out (the others' speed by itself
  saves nothing: a job bound by another rank's host gains nothing from the straggler's
  change). It only removes work, so it never predicts a slower step. The straggler is the graph's
  (``graph_straggler``: the rank the others wait for most over the counted steps, which the
  replay changes). The median rank: among the other ranks, the one whose own work per step
  (``jobgraph.summarise``) is the median. Reads the straggler's trace again (its graph is
  changed), where the skeletons' ``op_counts`` or ``asleep_ns`` say there is something to take
  out; the median rank's trace is not read.
- ``all-to-all balanced``: every rank doing the mean rank's work: in each phase whose GPU time
  differs across ranks (the largest rank's at least ``PHASE_IMBALANCE_MIN`` times the mean:
  what the shards' sizes decide, not the noise of equal work; communication left out), every
  rank's GPU time (``tracekit.analyses.profile``) scaled to the mean over the ranks (a rank
  above the mean gets its kernels of that phase faster, one below slower), and
  each all-to-all instance's transfers scaled by the mean over the members of the bytes they
  received over the largest (the busiest member decides how long the data takes to move). A rank
  whose every factor lies within ``BALANCE_TOLERANCE`` of 1 keeps its skeleton. Where a rank's
  input dist does not permute its features by owner (the hot layout: each rank's tables a run of
  the features), every rank also gets the permutation the balanced layout needs
  (``permutation_change``: the pooled embeddings gathered into feature order and scattered back,
  priced on the rank's own copy of them): the cost that made the host-bound hot jobs of
  ``gpu/ranks_jobs.py`` measure slower balanced (``bench/NOTES-ranks.md``).
- ``rank:R:SPEC``: one rank changed by a what-if of explain's (``tracekit.graph.whatif``:
  ``phase:NAME=N``, ``kernel:REGEX=N``, ``host=N``, ``sync:REGEX``) or a known fix
  (``fix:ID``, ``tracekit.graph.fixes``), the other ranks as they are (``on_ranks``): the CLI's
  ``tracekit explain DIR --what-if rank:R:SPEC``, and what each rank's own findings save the
  job (``tracekit.ranks.job.job_findings``). Its collective kernels keep their durations
  (their time is the job's: the wait and the transfer).

The last two change ranks' own graphs: each such rank's trace is loaded again (the parse cache
makes it quick), its explain graph changed (``tracekit.graph.whatif``: durations scaled) and
reduced again (``tracekit.graph.skeleton``), once with the durations as changed
(contention-free) and once with the contention-aware durations of the rank's own replay
(kernels that now overlap others' share the GPU). ``RankSkeletonTask`` does that where the
per-rank work runs (``tracekit.ranks.executors``); the job's graph is then replayed with the
changed skeletons (a collective kernel the change lengthens in the rank's replay moves its data
that much longer: ``jobgraph.with_skeleton``), and the saving is the unchanged graph's job step
less the changed one's. A fix that moves GPU work beside other work (FusedSparseDist) is
predicted by the contention-aware replay, any other change by the contention-free one, as
explain does on one rank (``tracekit.graph.whatif``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace

import numpy as np

from tracekit import _fastnp as fnp

from tracekit.analyses.explain import NO_HELP_FRACTION
from tracekit.errors import TracekitError
from tracekit.ranks import border, executors
from tracekit.ranks.inputs import Failed

BALANCE_TOLERANCE = 0.05
"""A rank whose phases are all within this share of the mean is left as it is when balancing."""
PHASE_IMBALANCE_MIN = 1.25
"""A phase is balanced when its largest rank's GPU time is at least this times the mean."""
LEFT_OUT_PHASES = ("communication",)
"""Phases never scaled (their time is mostly the wait for other ranks)."""

TIME_FIXES = ("fused_sparse_dist", "async_delta_copy", "precomputed_writeback")
"""The known fixes with a time saving that ``job_fixes`` replays on the job's graph: those of
``tracekit.analyses.explain.detect_fixes`` that ``whatif.changed_skeletons`` can apply to a rank
(``allocator_polls`` is explain's own what-if, not one of them: on every rank it would apply
nowhere and read as "would not help")."""

HOST_BOUND_SHARE = 0.7
"""A job whose bound is a rank's host on at least this share of its critical path is host-bound
for the balanced what-if's warning (``balanced_warning``): the 14 hot jobs above it in the result
files all measured the balanced job slower; the four below (GPU, unexplained, a host at 0.63) did
not (``bench/NOTES-ranks.md``)."""
CAPPED_SHARE = 0.5
"""A straggler what-if whose saving is less than this share of the host work it takes out warns
(``capped_warning``): of the 16 delay rows with something taken out in the result files (the
tree's jobs, sessions 2-8's and a fresh run of session 8's 2-rank ``jobs_slim``), the two below
it were both misses by an under-prediction (session 8's 2-rank ``jobs_slim`` 0.14, 4-rank
``jobs_flat`` 0.21 of it), and every other row was at 0.61 or more (``bench/NOTES-ranks.md``)."""
BEHIND_SHARE = 0.15
"""A straggler what-if after whose change the straggler still bounds the job, every other rank
waiting for it at least this share of the job's step, warns (``behind_warning``): the ranks run
one program, so a straggler whose own chain stays that far above the others' carries the traced
run's state (its host behind its GPU the whole step), not only the work taken out. Of the 10
delay jobs with something taken out (the tree's 6, released set 11's ``jobs_keen`` 2 and 4
ranks, the lead's ``jobs_trim`` re-run), the 4 at 0.18-0.36 (2-rank ``lite``, ``mid``,
``wide``; 4-rank ``lite``) measured 0.624-0.958 of the prediction, the 6 at 0.13 or less
0.816-1.176 (``bench/NOTES-ranks.md``)."""
STRAGGLER = "straggler_at_median"
BALANCED = "all_to_all_balanced"
PHASE = "phase"


@dataclass(frozen=True)
class RankSkeletonTask:
    """Reduce one rank's explain graph again with its GPU activities of some phases scaled
    (``factors``: path -> {phase -> times faster}). Returns ``{"free": skeleton, "contention":
    skeleton}`` (``schema.Skeleton`` dicts) or ``Failed``."""

    factors: dict = field(default_factory=dict)
    permute: bool = False
    """Also add the permutation a balanced layout's input dist needs (``permutation_change``)
    where the rank's trace shows none (the balanced what-if)."""
    fix: str | None = None
    """A fix of ``tracekit.graph.fixes`` by id (``fused_sparse_dist``...) applied to every rank
    instead of the factors: its what-if on each rank's graph."""
    rules_path: str | None = None
    cache_dir: str | None = None
    use_cache: bool = True

    def __call__(self, path: str) -> dict | Failed:
        return _on_one_rank(path, lambda t: changed_skeletons(t.trace, t.rules, self.factors.get(path, {}),
                                                              fix=self.fix, permute=self.permute),
                            rules_path=self.rules_path, cache_dir=self.cache_dir, use_cache=self.use_cache)


@dataclass(frozen=True)
class RankChangesTask:
    """Reduce one rank's explain graph again once per change of ``changes[path]`` (each a
    what-if spec of ``tracekit.graph.whatif.parse_spec`` or ``fix:ID``), the trace loaded and
    its graph built once. Returns ``{change: {"free", "contention", "applies", "shares_gpu"}}``
    (``changed_skeletons``) or ``Failed``."""

    changes: dict = field(default_factory=dict)
    """path -> the changes (tuple of str) to reduce that rank with, one at a time."""
    rules_path: str | None = None
    cache_dir: str | None = None
    use_cache: bool = True

    def __call__(self, path: str) -> dict | Failed:
        return _on_one_rank(path, lambda t: {c: changed_skeletons(t.trace, t.rules, {}, **change_keywords(c))
                                             for c in self.changes.get(path, ())},
                            rules_path=self.rules_path, cache_dir=self.cache_dir, use_cache=self.use_cache)


def _on_one_rank(path: str, reduce, *, rules_path: str | None, cache_dir: str | None, use_cache: bool):
    """``reduce(the loaded rank)`` for the one rank of ``path``, or ``Failed`` where the file does not
    hold exactly one rank or cannot be read (the rank tasks' shared loading). A URL is read from
    its local copy (``tracekit.ranks.sources.local_copy``, as the rank's own work reads it)."""
    from tracekit.loaded import loading
    from tracekit.ranks import sources

    local = None
    try:
        if sources.is_url(path):
            from tracekit._files import cache_dir as cache_root

            local = sources.local_copy(path, cache_root(cache_dir) if use_cache else None)
        with loading(local or path, rules=rules_path, cache_dir=cache_dir, use_cache=use_cache,
                     progress=False) as traces:
            if len(traces) != 1:
                return Failed(path, f"holds {len(traces)} ranks, not one")
            return reduce(traces[0])
    except TracekitError as exc:
        return Failed(path, str(exc))
    finally:
        if local is not None and not use_cache:
            os.unlink(local)  # a temporary copy


def change_keywords(change: str) -> dict:
    """``changed_skeletons``' keywords for a change: ``fix:ID`` a known fix, else a spec."""
    return {"fix": change[4:]} if change.startswith("fix:") else {"spec": change}


def changed_skeletons(trace, rules, factors: dict[str, float], *, fix: str | None = None,
                      spec: str | None = None, permute: bool = False) -> dict:
    """The rank's skeleton with the GPU activities of each phase in ``factors`` that many times
    faster (or with the fix ``fix`` applied: ``tracekit.graph.fixes``; or the what-if ``spec``,
    ``tracekit.graph.whatif.parse_spec``, its collective kernels left as they are),
    contention-free and contention-aware (module docstring). A fix or spec that does not apply to
    the rank leaves it as it is (``applies`` False in the result)."""
    from tracekit.analyses import collectives
    from tracekit.analyses.explain import view_graph
    from tracekit.analyses.skeleton import SkeletonResult, cut_nodes
    from tracekit.graph import skeleton as sk
    from tracekit.graph import whatif as wi
    from tracekit.graph.model import NodeKind

    g0, g, est = view_graph(trace, rules)
    events = collectives.kernel_events(trace, rules)
    nodes, which = cut_nodes(g, events)
    o = np.argsort(nodes, kind="stable")
    nodes, which = nodes[o], which[o]
    dur = g.dur.copy()
    gpu = g.kind == NodeKind.GPU
    cuts = np.zeros(g.n, bool)
    cuts[nodes] = True
    faster = True
    for ph, f in factors.items():
        sel = gpu & ~cuts & (g.phase == ph)
        dur[sel] = np.round(g.dur[sel] / float(f)).astype(np.int64)
        faster &= f >= 1
    change = wi.Change(dur=dur, speedup=bool(faster))
    applies = True
    permuted = None
    if permute:
        permuted = permutation_change(g, dur, cuts)
        if permuted is not None:
            change = wi.Change(dur=permuted["dur"], lag=permuted["lag"], speedup=False)
    if fix is not None:
        from tracekit.analyses.explain import ExplainConfig, detect_fixes

        got = [f for f in detect_fixes(trace, g, rules, ExplainConfig().fixes) if f.id == fix]
        applies = bool(got and got[0].applies and got[0].change is not None)
        change = got[0].change if applies else wi.Change()
    if spec is not None:
        from tracekit.analyses.explain import what_if_change

        change, n = what_if_change(trace, g, wi.parse_spec(spec))
        if change.dur is not None:  # a collective's duration is the job's (wait, transfer)
            keep = change.dur.copy()
            keep[cuts] = g.dur[cuts]
            change = replace(change, dur=keep)
        applies = n > 0
    view = "untraced" if est is not None else "traced"
    free = sk.reduce(g, nodes, change)
    contended = wi.schedule(g, change, contention=True).plan.dur
    aware = sk.reduce(g, nodes, change, dur=contended)
    out = {"free": SkeletonResult(view, which, free).to_dict(),
           "contention": SkeletonResult(view, which, aware).to_dict(), "applies": applies,
           "shares_gpu": bool(change.shares_gpu)}
    if permuted is not None:
        out["permutation_ns"] = permuted["added"]
    if fix is not None:  # as traced: what the host blocked on a full launch queue (queue_stall_warning)
        from tracekit.graph.critical import step_windows
        from tracekit.graph.fixes import launch_queue_stall_ns

        out["queue_stall_ns"] = launch_queue_stall_ns(g0, step_windows(g0))
    return out


PERMUTE_PATTERN = r"(?i)index_?select|permute|gather"
"""A GPU activity of the input dist whose name matches: the trace's input dist already permutes
its features by owner (TorchRec's ``permute_2D_sparse_data``, the runtime's ``index_select``, or
the ``gather`` newer torch runs it as: the 2026-11-28 ``jobs_trim`` balanced traces): balancing
adds no permutation."""
COPY_PATTERN = r"(?i)cat|copy"
"""The pooled embeddings' copy the permutation is priced on: each step's longest GPU activity
of this name in the forward (the output dist's ``torch.cat`` of the ranks' chunks, [B, F, D])
and in the backward (its gradient's)."""
PERMUTE_COPY_RATIO = 2.35
"""The balanced layout's gather of the pooled embeddings (forward ``index_select`` along the
features, backward its ``index_add``) over the output dist's copy of the same tensor, read on
the GPU in the 2-rank ``mid``, ``lite`` and ``heavy`` delay traces (the balanced layout, in the
tree): 154-163 / 65-73 us (mid), 117-121 / 48-56 (lite), 301-309 / 114-146 (heavy) forward,
the backward 2.4-2.5x its copy (``bench/NOTES-ranks.md``)."""


def permutes(skeleton: dict | None) -> bool | None:
    """Whether a rank's input dist already permutes its features by owner (a GPU activity of
    it matching ``PERMUTE_PATTERN``: ``permutation_change`` adds nothing there), read from its
    skeleton's ``input_dist_gpu`` without its trace; None where the skeleton has no such list
    (one cached before it): the trace must be read to know."""
    names = (skeleton or {}).get("input_dist_gpu")
    if names is None:
        return None
    return permutes_names(names)


def permutes_names(names) -> bool:
    """Whether any of ``names`` (the input dist's GPU activities: ``tracekit.analyses.skeleton.
    input_dist_gpu``) matches ``PERMUTE_PATTERN``: the one check ``permutes`` (from a skeleton)
    and ``permutation_change`` (from the graph) make."""
    from tracekit import patterns

    rx = patterns.compile(PERMUTE_PATTERN)
    return any(rx.search(str(n)) for n in names)


def permutation_change(g, dur: np.ndarray, cuts: np.ndarray) -> dict | None:
    """The work a balanced layout adds to a rank whose trace's input dist does not permute its
    features by owner (no GPU activity of ``input_dist`` matching ``PERMUTE_PATTERN``): with the
    hot tables one per rank the ranks' tables are no longer runs of the features in order, so the
    input dist regroups the ids by owner and the pooled embeddings come back in owner order and
    are gathered into feature order (forward) and scattered back (backward). Priced on the
    rank's own work: in each step's forward and backward, the longest copy (``COPY_PATTERN``)
    lengthened by ``PERMUTE_COPY_RATIO`` times itself on the GPU, and its launch's host time
    (the call and the host time before it) once more. ``dur``: the durations to start from.
    Returns ``{"dur", "lag", "added": GPU ns per step}`` or None where the trace already
    permutes or shows no copy to price on."""
    from tracekit import patterns
    from tracekit.analyses.skeleton import input_dist_gpu
    from tracekit.graph.model import EdgeKind, NodeKind

    if permutes_names(input_dist_gpu(g, cuts)):
        return None
    gpu = (g.kind == NodeKind.GPU) & ~cuts
    copy_rx = patterns.compile(COPY_PATTERN)
    codes, uniq = fnp.factorize(g.name)  # the copy pattern asked once per distinct name
    copies = np.array([bool(copy_rx.search(str(u))) for u in uniq], bool)[codes] & gpu
    dur = dur.copy()
    lag = g.lag.copy()
    prog = np.flatnonzero(g.edge_kind == int(EdgeKind.PROGRAM))
    into = {int(d): int(e) for e, d in zip(prog.tolist(), g.dst[prog].tolist())}
    lookups = np.flatnonzero(gpu & (g.phase == "lookup"))
    added, steps = 0, set()
    for ph in ("forward", "backward"):
        sel = np.flatnonzero(copies & (g.phase == ph))
        for s in np.unique(g.step[sel]).tolist():
            here = sel[g.step[sel] == s]
            if ph == "forward":  # the first copy after the step's lookups, on their stream
                lk = lookups[g.step[lookups] == s]
                if not lk.size:
                    continue
                last = lk[np.argmax(g.start[lk])]
                here = here[(g.lane[here] == g.lane[last]) & (g.start[here] > g.start[last])]
                if not here.size:
                    continue
                k = int(here[np.argmin(g.start[here])])
            else:
                k = int(here[np.argmax(g.dur[here])])
            extra = int(round(PERMUTE_COPY_RATIO * float(g.dur[k])))
            dur[k] += extra
            added += extra
            steps.add(s)
            c = int(g.launcher[k]) if g.launcher.size else -1
            if c >= 0:
                e = into.get(c)
                lag_before = int(g.lag[e]) if e is not None else 0
                if e is not None:
                    lag[e] += int(g.dur[c]) + lag_before
    if not steps:
        return None
    return {"dur": dur, "lag": lag, "added": int(added / len(steps))}


def balance_factors(ranks: list[dict]) -> dict[int, dict[str, float]]:
    """Per rank: phase -> times faster that brings its GPU time in the phase to the mean over
    the ranks, for the phases imbalanced by ``PHASE_IMBALANCE_MIN`` or more (only factors off 1
    by more than ``BALANCE_TOLERANCE``)."""
    table: dict[str, dict[int, float]] = {}
    for r in ranks:
        for p in (r.get("profile") or {}).get("phases") or []:
            if p["phase"] in LEFT_OUT_PHASES:
                continue
            table.setdefault(p["phase"], {})[int(r["rank"])] = float(p.get("gpu_ns") or 0.0)
    ids = [int(r["rank"]) for r in ranks]
    out: dict[int, dict[str, float]] = {}
    for ph, per in table.items():
        vals = np.array([per.get(k, 0.0) for k in ids])
        mean = float(vals.mean()) if vals.size else 0.0
        if mean <= 0 or vals.max() < PHASE_IMBALANCE_MIN * mean:
            continue
        for k, v in zip(ids, vals.tolist()):
            if v <= 0:
                continue  # nothing of the phase to scale on this rank
            f = v / mean
            if abs(math.log(f)) > math.log1p(BALANCE_TOLERANCE):
                out.setdefault(k, {})[ph] = f
    return out


def transfer_factors(arrivals, a2a_instances) -> dict[int, float]:
    """Per all-to-all instance: the mean over its members of the bytes received over the
    largest (1.0 for a balanced instance)."""
    a = arrivals[arrivals["instance"].isin(a2a_instances) & (arrivals["out_bytes"] >= 0)]
    if not len(a):
        return {}
    g = a.groupby("instance")["out_bytes"]
    mx, mean = g.max(), g.mean()
    ok = mx > 0
    return {int(i): float(mean[i] / mx[i]) for i in mx.index[ok]}


def graph_straggler(summary: dict, fallback: int | None) -> int | None:
    """The rank the others wait for most on the job's graph over its counted steps (the sum
    of the ranks' ``waits_for`` in ``jobgraph.summarise``): the straggler of the steps the
    graph replays, which the what-if changes. The job's straggler (``fallback``: the most caused
    wait over every matched instance, the pinned step and the unstepped collectives included)
    can be another rank: a rank whose delay only the pinned step shows, or one the GPU-heavy
    steps absorb. ``fallback`` where no rank waits on the graph."""
    caused: dict[int, float] = {}
    for r in summary.get("ranks") or []:
        for w in r.get("waits_for") or []:
            if int(w["rank"]) != int(r["rank"]):
                caused[int(w["rank"])] = caused.get(int(w["rank"]), 0.0) + float(w["ns"])
    if not caused or max(caused.values()) <= 0:
        return fallback
    top = max(caused.values())
    return min(k for k, v in caused.items() if v == top)


def median_rank(summary: dict, straggler: int) -> int | None:
    """Among the ranks other than ``straggler`` in the job graph's ``ranks``, the one whose own
    work per step is the median (the lower of two middles)."""
    rows = sorted((x for x in summary.get("ranks") or [] if x["rank"] != straggler),
                  key=lambda x: (x["own_ns"], x["rank"]))
    return rows[(len(rows) - 1) // 2]["rank"] if rows else None


def source_path(rank: dict) -> str | None:
    """The local trace file of a rank object (None for a URL or a file no longer there)."""
    src = rank.get("source")
    if not src or "://" in str(src) or not os.path.isfile(src):
        return None
    return str(src)


def readable_path(rank: dict) -> str | None:
    """Where a rank object's trace can be read again: its URL (the task fetches it, as the rank's
    own work did) or its local file (``source_path``)."""
    from tracekit.ranks.sources import is_url

    src = rank.get("source")
    return str(src) if src and is_url(str(src)) else source_path(rank)


def _row(ident: str, title: str, ctx, changed: list[int], free, aware, note: str = "", *,
         shares_gpu: bool = False, removes_only: bool = False,
         at_most_ns: float | None = None,
         rank_periods: tuple[float, float, float] | None = None) -> dict:
    """A what-if's row: its prediction is the contention-free replay's, or the contention-aware
    one's for a change that moves GPU work beside other work (``shares_gpu``: as explain
    predicts such a fix on one rank, ``tracekit.graph.whatif.Change.shares_gpu``).
    ``free``/``aware``: a replay's ``Schedule`` or its job step (ns).

    ``removes_only``: the change only takes work out (every replayed node ends no later), so
    its step is no longer than the unchanged one (issue 24's rule, for jobs too). The job step
    over two counted steps or more is a period between two replayed completions, and the first
    counted step absorbs the ranks' skew at the pinned step: taking work out of it can move
    its completion earlier than the last one's, and the period grows (``ranks_2gpu_heavy_delay``:
    the last counted completion 0.631 ms earlier, the first 0.794: -0.163 ms). That is the
    window's edge, not the change: the row predicts no saving, says so in its ``note`` and
    keeps the period's own change as ``period_saving_ns``.

    ``at_most_ns``: the work the change takes out a step (the straggler what-if's), the most
    it can save a step: where the period falls by more, the excess is the same edge the other
    way (the first counted step's completion held by what the traced state left queued on
    another rank, the changed rank's next step started ahead of it: ``ranks_2gpu_wide_delay``,
    2.688 ms a step taken out, the first counted completion 2.144 ms earlier, the last 5.245:
    a period 3.101 shorter). The row predicts that work as its saving, says so and keeps the
    period's own change as ``period_saving_ns``.

    ``rank_periods``: (unchanged, free, aware) the slowest rank's own period over the counted
    steps (``jobgraph.rank_period``), the other edge of the same replays: the job's period runs
    between the last rank's completions, which may be two ranks', and a change that moves
    one rank's completions and not the other's moves the period though no rank's step
    changed (the 4-rank ``jobs_trim`` hot job balanced: rank 0, last at both counted steps
    as traced, ends them 0.752 and 0.795 ms earlier, rank 1's step-12 completion, as before,
    becomes the last: the period 0.682 ms longer, the slowest rank's own as before); each rank's own period has the same edge for a rank
    whose first counted completion moves alone (4-rank ``mid``: rank 3's 0.540 longer). A
    change of the job's step moves both: the row predicts the saving of the two nearer no
    change (none where they differ in sign), says so, and keeps the period's own as
    ``period_saving_ns``."""
    base = float(ctx.schedule.step_ns)
    p_free = float(getattr(free, "step_ns", free))
    p_aware = float(getattr(aware, "step_ns", aware)) if aware is not None else p_free
    backwards = None
    if rank_periods is not None:
        rp0, rp_free, rp_aware = (float(x) for x in rank_periods)

        def nearer(p: float, rp: float) -> float:
            a, b = base - p, rp0 - rp
            if a * b <= 0:
                return base
            return base - (a if abs(a) <= abs(b) else b)

        q_free, q_aware = nearer(p_free, rp_free), nearer(p_aware, rp_aware)
        head0, head1, rp_head = ((p_aware, q_aware, rp_aware) if shares_gpu else
                                 (p_free, q_free, rp_free))
        if abs(head1 - head0) >= 1_000:
            backwards = base - head0
            note = "; ".join(x for x in (note, (
                f"the replayed period falls by {backwards / 1e6:.3f} ms a step and the slowest "
                f"rank's own period by {(rp0 - rp_head) / 1e6:.3f} (two edges of the counted "
                "steps, each moved where one rank's first counted completion moves alone): "
                "predicted as the one nearer no change")) if x)
        p_free, p_aware = q_free, q_aware
    if removes_only and max(p_free, p_aware) > base:
        backwards = base - max(p_free, p_aware)
        p_free, p_aware = min(p_free, base), min(p_aware, base)
        note = "; ".join(x for x in (note, (
            f"the replayed period grew by {-backwards / 1e6:.3f} ms although only work was "
            "taken out (the first counted step absorbs the ranks' skew at the pinned step): "
            "predicted as saving nothing")) if x)
    if at_most_ns is not None and removes_only and base - min(p_free, p_aware) > at_most_ns:
        backwards = base - min(p_free, p_aware)
        p_free, p_aware = (max(p_free, base - at_most_ns), max(p_aware, base - at_most_ns))
        note = "; ".join(x for x in (note, (
            f"the replayed period fell by {backwards / 1e6:.3f} ms, more than the "
            f"{at_most_ns / 1e6:.3f} ms a step taken out (the first counted step absorbs "
            "the change: its completion held by another rank's traced state, the next step "
            "started ahead of it): predicted as saving what was taken out")) if x)
    head = p_aware if shares_gpu else p_free
    row = {"id": ident, "title": title, "ranks_changed": sorted(changed),
           "step_ns": base, "predicted_ns": head, "predicted_contention_ns": p_aware,
           "saving_ns": base - head, "saving_contention_ns": base - p_aware,
           "saving_fraction": (base - head) / base if base > 0 else None,
           "helps": base > 0 and (base - head) / base >= NO_HELP_FRACTION, "note": note}
    if shares_gpu:
        row["predicted_free_ns"] = p_free
    if backwards is not None:
        row["period_saving_ns"] = backwards
    return row


@dataclass(frozen=True)
class StragglerTask:
    """Reduce the straggler's explain graph again without the host work the median rank lacks
    (``without_host_work``): ``ops`` (op -> the share of its self time taken out:
    ``straggler.extra_op_shares``, from the ranks' skeletons) and ``asleep_share`` of its
    unexplained host time. Returns ``{"free": skeleton, "ops", "ops_ns", "asleep_ns"}`` (the
    ``schema.Skeleton`` dict; the ops taken out; the host time taken out per step, of the ops
    and of the unexplained host time) or ``Failed``. Reads the straggler's trace alone."""

    ops: dict = field(default_factory=dict)
    asleep_share: float = 0.0
    """The share of the rank's unexplained host time taken out
    (``tracekit.analyses.skeleton.host_asleep``)."""
    rules_path: str | None = None
    cache_dir: str | None = None
    use_cache: bool = True

    def __call__(self, path: str) -> dict | Failed:
        def reduce(t):
            return {**without_host_work_skeleton(t.trace, t.rules, self.ops, self.asleep_share),
                    "ops": dict(self.ops)}

        return _on_one_rank(path, reduce, rules_path=self.rules_path, cache_dir=self.cache_dir,
                            use_cache=self.use_cache)


def without_host_work_skeleton(trace, rules, ops: dict[str, float], asleep_share: float) -> dict:
    """The rank's skeleton with ``without_host_work`` applied, and what it took out per step."""
    from tracekit.analyses import collectives
    from tracekit.analyses.explain import view_graph
    from tracekit.analyses.skeleton import SkeletonResult, cut_nodes
    from tracekit.graph import skeleton as sk

    g0, g, est = view_graph(trace, rules)
    events = collectives.kernel_events(trace, rules)
    nodes, which = cut_nodes(g, events)
    o = np.argsort(nodes, kind="stable")
    nodes, which = nodes[o], which[o]
    change, ops_ns, asleep_ns = without_host_work(trace, g0, g, ops, asleep_share)
    free = sk.reduce(g, nodes, change)
    per = max(len(g.steps), 1)
    return {"free": SkeletonResult("untraced" if est is not None else "traced", which,
                                   free).to_dict(),
            "ops_ns": ops_ns / per, "asleep_ns": asleep_ns / per}


def without_host_work(trace, g0, g, ops: dict[str, float], asleep_share: float):
    """(the change to ``g`` that takes out host work, the op time and the unexplained host time
    it takes out, ns in all). ``g0``: the graph as traced, ``g`` the one explain reads (the same
    nodes; ``tracekit.analyses.explain.view_graph``).

    - ``ops``: each op's self time (its span on its thread less the ops nested in it), that
      share of it: the host time on ``g0``'s thread inside it (the gaps between its calls, its
      calls' own time) is found on ``g``'s same edges and calls, where it is taken out in the
      same proportion (``g``'s times are the untraced estimate's);
    - ``asleep_share`` of every unexplained host time (``host_asleep``: a sleep, a wait outside
      the trace), on the edge that decided the node's start.

    Each edge loses at most its observed lag (``observed_lags``), the larger of the two where
    both take from it; only lags and durations go down."""
    from tracekit import intervals, phases
    from tracekit.analyses.profile import op_names
    from tracekit.analyses.skeleton import host_asleep
    from tracekit.graph import whatif as wi
    from tracekit.graph.build import observed_lags
    from tracekit.graph.model import EdgeKind, NodeKind

    obs = observed_lags(g)
    x = np.zeros(g.src.size, np.int64)
    dur = g.dur.copy()
    if ops:
        table, codes, cats = phases.host_ops(trace)
        share_of = np.array([float(ops.get(n, 0.0)) for n in op_names(cats)], np.float64) \
            if len(cats) else np.zeros(0)
        ok = codes >= 0
        sh = np.where(ok, share_of[np.maximum(codes, 0)] if share_of.size else 0.0, 0.0)
        ts = table["ts"].to_numpy(np.int64)
        te = ts + table["dur"].to_numpy(np.int64)
        tid = table["tid"].to_numpy(np.int64)
        lanes = g0.lanes
        cpu_lane = {int(t): int(ln) for ln, t, ty in zip(lanes["lane"], lanes["tid"],
                                                         lanes["type"]) if ty == "cpu"}
        gkey = g.src * g.n + g.dst
        go = np.argsort(gkey, kind="stable")
        prog = fnp.isin(g0.edge_kind, [int(EdgeKind.PROGRAM), int(EdgeKind.HANDOFF)])
        for t in np.unique(tid[sh > 0]).tolist():
            ln = cpu_lane.get(int(t))
            if ln is None:
                continue
            mine = np.flatnonzero(tid == t)
            o = mine[np.argsort(ts[mine], kind="stable")]
            for s_val in np.unique(sh[o][sh[o] > 0]).tolist():
                lo, hi = [], []
                for i in o[sh[o] == s_val].tolist():
                    a, b = int(ts[i]), int(te[i])
                    j0 = int(np.searchsorted(ts[o], a, "left"))
                    j1 = int(np.searchsorted(ts[o], b, "right"))
                    inner = o[j0:j1]
                    inner = inner[(inner != i) & (te[inner] <= b)]
                    ns, ne = intervals.union(ts[inner], te[inner])
                    lo.append(fnp.r_(a, ne))
                    hi.append(fnp.r_(ns, b))
                u = intervals.union(np.concatenate(lo), np.concatenate(hi))
                # the thread's edges and calls on the traced graph, covered by the ops' self time
                e = np.flatnonzero(prog & (g0.lane[g0.src] == ln) & (g0.lane[g0.dst] == ln))
                gs, ge = g0.end[g0.src[e]], g0.start[g0.dst[e]]
                cov = intervals.covered_in_windows(u, gs, ge)
                hit = (cov > 0) & (ge > gs)
                if hit.any():
                    e, frac = e[hit], cov[hit] / (ge[hit] - gs[hit])
                    key = g0.src[e] * g.n + g0.dst[e]
                    k = np.searchsorted(gkey[go], key)
                    k = np.minimum(k, go.size - 1)
                    found = gkey[go][k] == key
                    ge_ = go[k[found]]
                    take = np.round(frac[found] * s_val * obs[ge_]).astype(np.int64)
                    np.maximum.at(x, ge_, take)
                v = np.flatnonzero((g0.kind == NodeKind.CALL) & (g0.lane == ln))
                cv = intervals.covered_in_windows(u, g0.start[v], g0.end[v])
                hv = (cv > 0) & (g0.end[v] > g0.start[v])
                v, f = v[hv], cv[hv] / (g0.end[v][hv] - g0.start[v][hv])
                dur[v] -= np.round(g.dur[v] * f * s_val).astype(np.int64)
    ops_ns = int(np.minimum(x, np.maximum(obs, 0)).sum() + (g.dur - dur).sum())
    asleep_ns = 0
    if asleep_share > 0:
        v = host_asleep(g)
        e = g.binding[v]
        take = np.round(g.unexplained[v] * float(asleep_share)).astype(np.int64)
        before = x[e].copy()
        np.maximum.at(x, e, take)
        asleep_ns = int((x[e] - before).clip(min=0).sum())
    x = np.minimum(x, np.maximum(obs, 0))
    dur = np.maximum(dur, 0)
    return wi.Change(dur=dur, lag=g.lag - x, speedup=True), ops_ns, asleep_ns


def straggler_at_median(ranks: list[dict], ctx, summary: dict, straggler: int, *,
                        task: StragglerTask, workers: int | None = None,
                        scheduler: str | None = None,
                        connect_timeout_s: float | None = None) -> dict | None:
    """The straggler at the median rank's speed (module docstring): its host work that the
    other ranks lack taken out of its graph, reduced again (``StragglerTask``), the job's graph
    replayed with it; the other ranks as they are. None without a median rank, a skeleton of
    the straggler or its trace to read again."""
    got = straggler_replay(ranks, ctx, summary, straggler, task=task, workers=workers,
                           scheduler=scheduler, connect_timeout_s=connect_timeout_s)
    return None if got is None else got[0]


def straggler_replay(ranks: list[dict], ctx, summary: dict, straggler: int, *,
                     task: StragglerTask, workers: int | None = None,
                     scheduler: str | None = None, connect_timeout_s: float | None = None,
                     host_speed: float = 1.0):
    """``straggler_at_median``'s (row, the changed job's ``jobgraph.Schedule`` and
    ``JobGraph``: the unchanged ones where nothing is taken out), or None. ``host_speed``:
    every rank's host work that many times faster before and after the change (as
    ``with_skeletons``': the row's ``step_ns`` is then that job's step), e.g. calibrated on a
    measured untraced step (``jobgraph.host_speed_for_step``): the same what-if at a host speed
    given from outside, a diagnostic, not the raw prediction."""
    from tracekit.ranks import jobgraph
    from tracekit.ranks.straggler import MIN_DIFF_NS, extra_op_shares, host_speeds

    calibrated = float(host_speed) != 1.0
    if calibrated:
        inputs = jobgraph.at_host_speed(ctx.inputs, host_speed)
        jg0 = jobgraph.build(inputs)
        ctx = replace(ctx, inputs=inputs, graph=jg0, schedule=jobgraph.schedule(jg0))
    med = median_rank(summary, straggler)
    by = {i.rank: i for i in ctx.inputs}
    if med is None or straggler not in by:
        return None
    ops = extra_op_shares(ranks, straggler, med)
    if ops is None:
        return None
    mine = by[straggler].skeleton.get("asleep_ns")
    others = [by[r].skeleton.get("asleep_ns") for r in by if r != straggler]
    share = 0.0
    if mine is not None and all(v is not None for v in others) and others:
        med_asleep = float(np.median(np.asarray(others, np.float64)))
        if float(mine) - med_asleep >= MIN_DIFF_NS:
            share = 1.0 - med_asleep / float(mine)
    title = (f"rank {straggler} at the median rank's speed (without the host work rank {med} "
             "lacks)")
    nothing = (f"rank {straggler} runs no host op more often than rank {med} and is no longer "
               "idle on the host than the median rank: nothing to take out")
    if not ops and share <= 0:
        return (_row(STRAGGLER, title, ctx, [straggler], ctx.schedule.step_ns, None, nothing,
                     removes_only=True), ctx.schedule, ctx.graph)
    path = next((readable_path(r) for r in ranks if int(r["rank"]) == straggler), None)
    if path is None:
        return None
    got = executors.run(replace(task, ops=ops, asleep_share=share), [path],
                        workers=workers, scheduler=scheduler,
                        connect_timeout_s=connect_timeout_s)
    if not got or isinstance(got[0], Failed):
        return None
    res = got[0]
    speeds = {k: f for k, f in host_speeds(ranks, straggler).items() if k in by and f > 1.0}
    others = {k: jobgraph.with_host_speed(by[k], f) for k, f in speeds.items()}
    new = jobgraph.with_skeleton(by[straggler], res["free"])
    if calibrated:  # its changed skeleton is the trace's: at the same speed as the rest
        new = jobgraph.with_host_speed(new, host_speed)
    sc, jg = jobgraph.predict(ctx.inputs, {**others, straggler: new})
    predicted = sc.step_ns
    if others:  # the saving is the straggler's change alone, both replays at its host speed
        at_speed, _ = jobgraph.predict(ctx.inputs, others)
        predicted = ctx.schedule.step_ns - (at_speed.step_ns - sc.step_ns)
    what = [f"{n} ({x:.0%} of it)" if x < 1 else n for n, x in
            sorted(ops.items(), key=lambda kv: -kv[1])][:5]
    note = "; ".join(x for x in (
        f"taken out per step: {res['ops_ns'] / 1e6:.3f} ms of host ops rank {med} runs less "
        f"often ({', '.join(what)})" if ops else "",
        f"{res['asleep_ns'] / 1e6:.3f} ms of idle host time beyond the other ranks' median"
        if res["asleep_ns"] >= 1_000 else "",
        "the other ranks' host at its speed (" + ", ".join(
            f"rank {k} {f:.2f}x faster" for k, f in sorted(speeds.items())) + ")"
        if speeds else "", "skeletons only: the same prediction with contention") if x)
    taken = float(res["ops_ns"]) + float(res["asleep_ns"])
    row = _row(STRAGGLER, title, ctx, [straggler], predicted, None, note, removes_only=True,
               at_most_ns=taken)
    if calibrated:
        row["host_speed"] = float(host_speed)
    row["taken_out"] = {"ops": {n: round(s, 4) for n, s in ops.items()},
                        "ops_ns": float(res["ops_ns"]), "asleep_ns": float(res["asleep_ns"]),
                        "asleep_share": round(share, 4),
                        "others_host_speed": {str(k): round(f, 4) for k, f in
                                              sorted(speeds.items())}}
    if taken > 0:
        after = jobgraph.summarise(jg, sc, ctx.names)
        warning = (capped_warning(summary, after, straggler, taken, row["saving_ns"])
                   if row["saving_ns"] < CAPPED_SHARE * taken else
                   behind_warning(after, straggler, row["saving_ns"]))
        if warning:
            row["warning"] = warning
    return row, sc, jg


def behind_warning(after: dict, straggler: int, saving_ns: float) -> str | None:
    """Why a straggler what-if may save too much, from the job graph's summary after the change
    (``jobgraph.summarise``): the straggler still bounds the job (the most own work and
    transfers a step) and every other rank waits for it at least ``BEHIND_SHARE`` of the step.
    The ranks run one program: the straggler's own chain, as traced, carries the traced run's
    state beyond the work taken out (the 4-rank ``jobs_lite`` delay: rank 1 11.201 ms a step of
    own work after, the others 7.076-8.393 and waiting 2.210-3.568 for it; 1.604 predicted,
    1.001 measured), which the untraced job without the delay need not have: there the other
    ranks' hosts bound it sooner. None where it does not hold."""
    rows = after.get("ranks") or []
    step = float(after.get("step_ns") or 0.0)
    if len(rows) < 2 or step <= 0:
        return None
    b = max(rows, key=lambda r: (r["own_ns"] + r["transfer_ns"], -r["rank"]))
    others = [r for r in rows if r["rank"] != straggler]
    if b["rank"] != straggler or not others:
        return None
    least = min(r["wait_ns"] for r in others)
    if least < BEHIND_SHARE * step:
        return None
    own = sorted({round(r["own_ns"] / 1e6, 3) for r in others})
    span = f"{own[0]:.3f}" if len(own) == 1 else f"{own[0]:.3f}-{own[-1]:.3f}"
    return (f"the saving may be too large: with the work taken out, rank {straggler} still "
            f"bounds the job ({b['own_ns'] / 1e6:.3f} ms a step of own work, the other ranks "
            f"{span}) and every other rank waits for it at least "
            f"{least / 1e6:.3f} ms a step ({least / step:.0%} of the step), though the ranks run "
            "one program: its chain is as traced (its host behind its GPU), and without the "
            "delay the other ranks' hosts may bound the job sooner. On the 4 delay jobs of "
            "gpu/ranks_jobs.py where this held, the rounds measured 0.62-0.96 of the "
            f"prediction (here {saving_ns / 1e6:.3f} ms: "
            f"{0.62 * saving_ns / 1e6:.3f}-{0.96 * saving_ns / 1e6:.3f})")


def capped_warning(before: dict, after: dict, straggler: int, taken_ns: float,
                   saving_ns: float) -> str | None:
    """Why a straggler what-if that saves less than ``CAPPED_SHARE`` of what it takes out
    (``taken_ns`` a step, saving ``saving_ns``) may be too small, from the job graph's
    summaries before and after the change (``jobgraph.summarise``): what bounds the job after
    it, the rank with the most own work and transfers a step.

    - Another rank: its own chain, which the traced run hid behind its waits, caps the saving;
      that chain is its estimated untraced work (session 8's 2-rank ``jobs_slim`` delay: rank 0,
      13.71 ms a step of own work after, 7.35 of waiting before; 0.379 predicted for 2.645 ms
      taken out, 2.428 measured; the straggler's own work before 15.58 ms a step, 12.87 of it
      host, where a fresh run of the same job reads 11.09 and 5.46, and predicts 2.712 for 2.293
      measured).
    - The straggler itself: its own work fell by less than was taken out, its other paths as
      long, with the time on them the model does not explain (``unexplained``, kept as traced;
      session 8's 4-rank ``jobs_flat`` delay: rank 3, 9.685 ms a step of it; 0.469 predicted for
      2.189 taken out, 1.845 measured).

    None where the summaries do not say (no rank after)."""
    rows = after.get("ranks") or []
    if not rows:
        return None
    b = max(rows, key=lambda r: (r["own_ns"] + r["transfer_ns"], -r["rank"]))
    was = {r["rank"]: r for r in before.get("ranks") or []}.get(b["rank"])
    head = (f"the saving may be too small: {taken_ns / 1e6:.3f} ms a step is taken out of rank "
            f"{straggler} and the job step falls by {saving_ns / 1e6:.3f} ms")
    cls = b.get("own_classes") or {}
    if b["rank"] != straggler:
        hid = (f", which the traced run hid behind its waits ({was['wait_ns'] / 1e6:.3f} ms a "
               "step)" if was is not None and was["wait_ns"] > 0 else "")
        return (f"{head}: with it gone, rank {b['rank']}'s own work bounds the job "
                f"({b['own_ns'] / 1e6:.3f} ms a step, {cls.get('host', 0) / 1e6:.3f} of it host"
                f"){hid}; the saving rests on that rank's estimated untraced work: where its "
                f"host runs faster untraced than estimated, the job saves up to "
                f"{taken_ns / 1e6:.3f} ms")
    fell = (was["own_ns"] - b["own_ns"]) / 1e6 if was is not None else None
    unexplained = float(cls.get("unexplained", 0))
    what = (f"{unexplained / 1e6:.3f} ms a step of it time the model does not explain (kept as "
            "traced: a thread descheduled or waiting for what the trace does not show, which "
            "the untraced run may not have)" if unexplained >= 0.5 * taken_ns else
            "its other paths as long")
    return (f"{head}: rank {straggler} still bounds the job, its own work "
            + (f"{fell:.3f} ms a step shorter" if fell is not None else "shorter")
            + f" ({b['own_ns'] / 1e6:.3f} ms a step, {what})")


def straggler_row(ranks: list[dict], job: dict, ctx, *, task: StragglerTask,
                  workers: int | None = None, scheduler: str | None = None,
                  connect_timeout_s: float | None = None) -> dict | None:
    """The job's ``straggler_at_median`` row for the graph's straggler (``graph_straggler``),
    saying so where it is not the job's straggler over every instance; where that rank has
    nothing to take out, its note names the rank with the most host work the others lack
    (``extra_work_rank``), if any, without replaying it; None without one."""
    straggler_rank = (job.get("stragglers") or {}).get("rank")
    on_graph = graph_straggler(job["graph"], straggler_rank)
    if on_graph is None:
        return None
    got = straggler_at_median(ranks, ctx, job["graph"], on_graph, task=task, workers=workers,
                              scheduler=scheduler, connect_timeout_s=connect_timeout_s)
    if got is not None and straggler_rank is not None and on_graph != straggler_rank:
        got["note"] = "; ".join(x for x in (
            got.get("note"), f"over the counted steps the ranks wait most for rank "
            f"{on_graph}; the job's straggler over every instance is rank "
            f"{straggler_rank}") if x)
    if got is not None and "taken_out" not in got:
        other = extra_work_rank(ranks, ctx, job["graph"], exclude=on_graph)
        if other is not None:
            ns, ops = removable_host(ranks, ctx, job["graph"], other)
            what = ", ".join(sorted(ops, key=lambda n: -ops[n])[:3]) or "idle host time"
            got["note"] = "; ".join(x for x in (got.get("note"), (
                f"rank {other} does host work the other ranks lack ({what}: {ns / 1e6:.3f} ms "
                f"a step), hidden behind its waits as traced; not replayed: the ranks wait "
                f"for rank {on_graph} as traced")) if x)
    return got


def removable_host(ranks: list[dict], ctx, summary: dict, rank: int) -> tuple[float, dict]:
    """(per step, the host work of rank ``rank`` that ``straggler_at_median`` would take out;
    the ops of it, op -> ns a step), read from the ranks' summaries alone (no trace): the self
    time (its ``profile``) of the ops it runs more often than the median rank, that share of
    each (``extra_op_shares``), or its idle host time beyond the other ranks' median (the
    skeletons' ``asleep_ns``) where that is more (a sleep inside such an op is both; the what-if
    takes the larger out of an edge where both take from it, ``without_host_work``). (0, {})
    where there is none or no median rank."""
    med = median_rank(summary, rank)
    by = {int(r["rank"]): r for r in ranks}
    sk = {ri.rank: ri.skeleton for ri in ctx.inputs}
    if med is None or rank not in sk or rank not in by or med not in by:
        return 0.0, {}
    others = [v.get("asleep_ns") for k, v in sk.items() if k != rank]
    asleep = (float(np.median(np.asarray(others, np.float64))) if others and
              all(v is not None for v in others) else None)
    return _removable(by[rank], by[med], sk[rank].get("asleep_ns"), asleep)


def _removable(mine: dict, median: dict, mine_asleep, others_asleep: float | None
               ) -> tuple[float, dict]:
    """``removable_host`` of the rank object ``mine`` against the median rank's object
    ``median``, its idle host time ``mine_asleep`` and the other ranks' median of it."""
    from tracekit.ranks.straggler import MIN_DIFF_NS, extra_op_shares

    shares = extra_op_shares([mine, median], int(mine["rank"]), int(median["rank"])) or {}
    prof = mine.get("profile") or {}
    self_ns = {str(o["name"]): float(o.get("self_ns") or 0.0) for o in prof.get("host_ops") or []}
    ops = {n: sh * self_ns.get(n, 0.0) for n, sh in shares.items()}
    total = sum(ops.values())
    if mine_asleep is not None and others_asleep is not None:
        extra = float(mine_asleep) - others_asleep
        if extra >= MIN_DIFF_NS:  # a sleep inside such an op is both: counted once
            total = max(total, extra)
    return total, ops


def extra_work_rank(ranks: list[dict], ctx, summary: dict, *, exclude: int | None) -> int | None:
    """The rank other than ``exclude`` with the most host work the other ranks lack
    (``removable_host``; the lowest rank on a tie), None where no rank has any. The straggler
    row names it where the graph's straggler has nothing to take out: a delay planted on a rank
    that is not the traced job's straggler (``ranks_4gpu_flat_delay``: rank 3's 2-ms
    ``## planted_host_delay ##``, another rank's slower traced host bounding the job) is work
    the others lack, which the what-if does not replay (``bench/NOTES-ranks.md``: replayed at
    its host speed, the two counted steps' period does not show it). Each rank's median rank
    and the others' median idle time from one ordering of the ranks (``median_rank``'s, the
    rank itself left out by its position)."""
    rows = sorted(summary.get("ranks") or [], key=lambda x: (x["own_ns"], x["rank"]))
    pos = {x["rank"]: i for i, x in enumerate(rows)}
    mid = (len(rows) - 2) // 2  # the median's index among the other ranks (n - 1 of them)
    by = {int(r["rank"]): r for r in ranks}
    asleep = [ri.skeleton.get("asleep_ns") for ri in ctx.inputs]
    srt = (np.sort(np.asarray(asleep, np.float64))
           if len(asleep) >= 2 and all(v is not None for v in asleep) else None)
    best, top = None, 0.0
    for ri in sorted(ctx.inputs, key=lambda x: x.rank):
        if ri.rank == exclude or ri.rank not in pos or ri.rank not in by or len(rows) < 2:
            continue
        i = pos[ri.rank]
        med = rows[mid + 1 if i <= mid else mid]["rank"]
        if med not in by:
            continue
        others = None
        if srt is not None:  # the median of the sorted values less this rank's
            j = int(np.searchsorted(srt, float(ri.skeleton["asleep_ns"])))
            others = float(np.median(np.delete(srt, j)))
        v, _ = _removable(by[ri.rank], by[med], ri.skeleton.get("asleep_ns"), others)
        if v > top:
            best, top = ri.rank, v
    return best


def with_skeletons(ctx, ident: str, title: str, skeletons: dict[int, dict],
                   transfer: dict[int, float] | None = None, *,
                   removes_only: bool = False, host_speed: float = 1.0,
                   rank_periods: bool = False) -> dict:
    """The job's graph with ranks' skeletons replaced (``skeletons``: rank -> ``{"free",
    "contention"}`` from ``RankSkeletonTask``; each collective's transfer moved with its
    kernel's duration, ``jobgraph.with_skeleton``) and all-to-all transfers scaled
    (``transfer``: instance -> factor), replayed twice (contention-free, contention-aware).
    The row's prediction is the contention-aware one where a rank's change moves GPU work
    beside other work (``shares_gpu``), as explain's on one rank. ``removes_only``: the
    skeletons only take work out (a phase N times faster, N >= 1; ``_row``). ``host_speed``:
    every rank's host work that many times faster before and after the change
    (``jobgraph.at_host_speed``; the row's ``step_ns`` is then that job's step): the change
    at a host speed given from outside, e.g. calibrated on a measured untraced step
    (``jobgraph.host_speed_for_step``). ``rank_periods``: the saving read on both edges of
    the counted steps (``_row``'s ``rank_periods``: the job's period and the slowest rank's
    own, ``jobgraph.rank_period``)."""
    from tracekit.ranks import jobgraph

    base_graph = ctx.graph
    if float(host_speed) != 1.0:
        inputs = jobgraph.at_host_speed(ctx.inputs, host_speed)
        base_graph = jobgraph.build(inputs)
        sc = jobgraph.schedule(base_graph)
        ctx = replace(ctx, inputs=inputs, schedule=sc)

    def changed(which: str) -> dict:
        out = {}
        for ri in ctx.inputs:
            new = ri
            if ri.rank in skeletons:
                new = jobgraph.with_skeleton(ri, skeletons[ri.rank][which])
                if float(host_speed) != 1.0:
                    new = jobgraph.with_host_speed(new, host_speed)
            if transfer:
                new = jobgraph.scaled_transfers(new, transfer)
            if new is not ri:
                out[ri.rank] = new
        return out

    free, jg_free = jobgraph.predict(ctx.inputs, changed("free"))
    aware, jg_aware = jobgraph.predict(ctx.inputs, changed("contention"))
    rp = None
    if rank_periods and base_graph is not None:
        rp = (jobgraph.rank_period(base_graph, ctx.schedule.windows),
              jobgraph.rank_period(jg_free, free.windows),
              jobgraph.rank_period(jg_aware, aware.windows))
        rp = None if any(x is None for x in rp) else rp
    row = _row(ident, title, ctx, list(skeletons), free, aware,
               shares_gpu=any(bool(v.get("shares_gpu")) for v in skeletons.values()),
               removes_only=removes_only, rank_periods=rp)
    if float(host_speed) != 1.0:
        row["host_speed"] = float(host_speed)
    return row


def balanced(ranks: list[dict], job: dict, ctx, config, *, task: RankSkeletonTask,
             workers: int | None = None, scheduler: str | None = None,
             connect_timeout_s: float | None = None) -> dict | None:
    """The all-to-all balanced (module docstring) when the job's all-to-all imbalance
    (``imbalance_gate``) is at least ``config.balance_min_imbalance``; None otherwise, or when
    no rank would change. Ranks whose trace cannot be read again keep their skeletons (the row's
    ``note`` names them)."""
    imb = imbalance_gate(job.get("all_to_all") or {})
    if imb is None or imb < config.balance_min_imbalance:
        return None
    factors = balance_factors(ranks)
    inst = [i["instance"] for i in job["instances"] if "all_to_all" in i["collective"]
            or "alltoall" in i["collective"]]
    arrivals = _arrivals(ctx)
    trans = transfer_factors(arrivals, inst) if arrivals is not None else {}
    joined = {ri.rank for ri in ctx.inputs}
    paths = {int(r["rank"]): source_path(r) for r in ranks if int(r["rank"]) in joined}
    # read again: a rank to scale, and one the layout's permutation (``permutation_change``)
    # may change: its skeleton does not show its input dist permuting (``permutes``)
    sks = {ri.rank: ri.skeleton for ri in ctx.inputs}
    need = {k for k in joined if k in factors or permutes(sks.get(k)) is not True}
    todo = {k: factors.get(k, {}) for k in need if paths.get(k)}
    missing = sorted(k for k in need if not paths.get(k))
    if not todo and not trans:
        return None
    order = sorted(todo)
    task = replace(task, factors={paths[k]: todo[k] for k in order}, permute=True)
    got = executors.run(task, [paths[k] for k in order], workers=workers, scheduler=scheduler,
                        connect_timeout_s=connect_timeout_s) if order else []
    skeletons = {}
    for k, res in zip(order, got):
        if isinstance(res, Failed):
            missing.append(k)
        else:
            skeletons[k] = res
    row = with_skeletons(ctx, BALANCED, "the all-to-all balanced: every rank's GPU time per "
                         "phase at the mean rank's, each all-to-all's transfer at its mean "
                         "member's bytes, the features permuted by owner where the traces do not",
                         skeletons, trans, rank_periods=True)
    row["factors"] = {str(k): {ph: round(f, 4) for ph, f in v.items()} for k, v in
                      sorted(factors.items())}
    perm = {str(k): int(v["permutation_ns"]) for k, v in sorted(skeletons.items())
            if v.get("permutation_ns") is not None}
    if perm:
        row["permutation_ns"] = perm
    warning = balanced_warning(row, (job.get("graph") or {}).get("bound"))
    if warning:
        row["warning"] = warning
    if missing:
        row["note"] = (f"ranks {', '.join(map(str, sorted(missing)))} could not be read again: "
                       "their work is left as traced")
    return row


def balanced_warning(row: dict, bound: dict | None) -> str | None:
    """Why a balanced what-if that would not help may be wrong (None where it helps, or where
    the job is not host-bound): the job's bound is a rank's host on at least
    ``HOST_BOUND_SHARE`` of the critical path (``bound``: ``jobgraph.summarise``'s), which the
    phases balancing scales (GPU time) are not on, so the replay predicts about no change; on
    every such job measured (the 14 host-bound hot jobs of 2 and 4 ranks in the result files of
    the tree, sessions 2-8 and a fresh run of session 8's ``jobs_slim``: -0.115 to 0.098 ms
    predicted) the rounds ran the balanced job slower than the hot one, by 0.015-0.407 ms a
    step (``bench/NOTES-ranks.md``), a cost of balancing on the hosts the hot job's traces do
    not show. Where the replay added the balanced layout's permutation (``permutation_change``:
    the row's ``permutation_ns``), that cost is the prediction and the warning says what it
    leaves out and how far such predictions were from the measured saving (the tree's 5
    host-bound hot jobs: -0.181 to -0.085 ms predicted since session 12's ``rank_periods``,
    -0.304 to -0.015 measured)."""
    if row.get("helps") or not bound or bound.get("class") != "host" or \
            float(bound.get("share") or 0.0) < HOST_BOUND_SHARE:
        return None
    perm = row.get("permutation_ns") or {}
    if perm:
        lo, hi = min(perm.values()) / 1e6, max(perm.values()) / 1e6
        each = f"{lo:.3f}" if round(lo, 3) == round(hi, 3) else f"{lo:.3f}-{hi:.3f}"
        return (f"the job is bound by rank {bound['rank']}'s host ({bound['share']:.0%} of its "
                "critical path), which balancing's GPU phases are not on: the prediction is "
                "the cost of the permutation the balanced layout adds where it reaches that "
                f"bound ({each} ms a step of GPU work on each rank, the pooled embeddings "
                "gathered into feature order and scattered back); the input dist's regrouping "
                "of the ids on the host is not in it. On the 5 host-bound hot jobs of the "
                "tree the measured saving was 0.22 ms below to 0.12 ms above such a "
                "prediction")
    return (f"the job is bound by rank {bound['rank']}'s host ({bound['share']:.0%} of its "
            "critical path), which balancing's GPU phases are not on: the replay predicts "
            "about no change, but jobs bound so have run slower balanced than with hot tables "
            "on one rank (14 of 14 measured, by 0.015-0.407 ms a step), a cost on the hosts "
            "these traces do not show")


def imbalance_gate(all_to_all: dict) -> float | None:
    """The imbalance the balanced what-if is gated on: the largest all-to-all instance's (its
    most bytes received by a rank over the mean), else the job's over every instance. The job's
    total can hide an imbalanced instance behind larger balanced ones: the hot tables' ids
    (43 MiB to rank 0, 6 MiB to rank 1 a step) beside the pooled embeddings' fixed-size
    exchange (128 MiB each way) are 1.07 over the job, 1.76 in the ids' instance."""
    v = all_to_all.get("instance_imbalance_max")
    return float(v) if v is not None else all_to_all.get("imbalance")


def _arrivals(ctx):
    """The matched arrivals' instance, rank and bytes, from the job graph's inputs."""
    import pandas as pd

    from tracekit.ranks.compact import lookup

    inst, rank, got = [], [], []
    for ri in ctx.inputs:
        keys = np.fromiter(ri.instance, np.int64, len(ri.instance))
        inst.append(lookup(ri.instance, keys, -1).astype(np.int64))
        rank.append(np.full(keys.size, ri.rank, np.int64))
        got.append(lookup(ri.received, keys, -1).astype(np.int64))
    if not inst or not sum(x.size for x in inst):
        return None
    return pd.DataFrame({"instance": np.concatenate(inst), "rank": np.concatenate(rank),
                         "out_bytes": np.concatenate(got)})


def phase_faster(ranks: list[dict], ctx, rank: int, phase: str, times: float, *,
                 task: RankSkeletonTask, workers: int | None = None) -> dict | None:
    """Rank ``rank``'s GPU work of phase ``phase`` ``times`` times faster (module docstring),
    replayed on the job's graph; None when the rank's trace cannot be read again. ``times`` >= 1
    only takes work out: the row never predicts a slower step (``_row``)."""
    path = next((source_path(r) for r in ranks if int(r["rank"]) == rank), None)
    if path is None or rank not in {ri.rank for ri in ctx.inputs}:
        return None
    got = executors.run(replace(task, factors={path: {phase: float(times)}}), [path],
                        workers=workers)
    if not got or isinstance(got[0], Failed):
        return None
    return with_skeletons(ctx, PHASE, f"phase '{phase}' of rank {rank} {times:g}x faster",
                          {rank: got[0]}, removes_only=times >= 1)


_RANK_SPEC = re.compile(r"^rank:(?P<rank>[^:]*):(?P<spec>.*)$")


@dataclass(frozen=True)
class RankSpec:
    """A parsed ``--what-if rank:R:SPEC`` (``parse_rank_spec``)."""

    text: str
    """As the user wrote it."""
    rank: int
    change: str
    """The change on that rank: a spec of ``tracekit.graph.whatif.parse_spec`` or ``fix:ID``."""
    title: str
    """What the row says (``phase 'backward' 2x faster on rank 1``)."""


def is_rank_spec(text: str) -> bool:
    """Whether a ``--what-if`` names a rank (``rank:...``): a what-if across ranks."""
    return text.strip().startswith("rank:")


def parse_rank_spec(text: str) -> RankSpec:
    """``rank:R:SPEC``: rank ``R`` changed by ``SPEC`` (``phase:NAME=N``, ``kernel:REGEX=N``,
    ``host=N``, ``sync:REGEX``: ``tracekit.graph.whatif.parse_spec``; or ``fix:ID``, a known fix
    with a time saving: ``TIME_FIXES``). ``WhatIfError`` (one line) for any
    other text."""
    from tracekit.graph.whatif import WhatIfError, parse_spec

    m = _RANK_SPEC.match(text.strip())
    usage = ("expected rank:R:SPEC (R: a rank of the job; SPEC: phase:NAME=N, kernel:REGEX=N, "
             f"host=N, sync:REGEX or fix:ID with ID one of {', '.join(TIME_FIXES)})")
    if not m:
        raise WhatIfError(f"--what-if {text!r}: {usage}")
    try:
        rank = int(m.group("rank"))
    except ValueError:
        raise WhatIfError(f"--what-if {text!r}: the rank must be a whole number, not "
                          f"{m.group('rank')!r}") from None
    if rank < 0:
        raise WhatIfError(f"--what-if {text!r}: the rank must be 0 or more")
    change = m.group("spec").strip()
    if change.startswith("fix:"):
        if change[4:] not in TIME_FIXES:
            raise WhatIfError(f"--what-if {text!r}: no known fix {change[4:]!r} (fixes: "
                              f"{', '.join(TIME_FIXES)})")
        return RankSpec(text, rank, change, f"{change[4:]} on rank {rank}")
    try:
        sp = parse_spec(change)
    except WhatIfError as exc:
        raise WhatIfError(f"--what-if {text!r}: {usage}" if "expected" in str(exc) else
                          str(exc).replace(repr(change), repr(text), 1)) from None
    return RankSpec(text, rank, change, f"{sp.title} on rank {rank}")


def on_ranks(ranks: list[dict], ctx, wanted: dict[int, list[str]], *, task: RankChangesTask,
             workers: int | None = None) -> dict[tuple[int, str], dict]:
    """Each change of ``wanted`` (rank -> changes: specs or ``fix:ID``) applied to that rank
    alone, the others as they are, and the job's graph replayed (``with_skeletons``):
    ``{(rank, change): row}``, each row's ``applies`` saying whether the change touched the
    rank. A rank not in the job's graph, or whose trace cannot be read again, has no rows. A
    spec only takes work out (``removes_only``: it never predicts a slower job); a fix may move
    work (FusedSparseDist: predicted contention-aware where it shares the GPU)."""
    joined = {ri.rank for ri in ctx.inputs}
    paths = {int(r["rank"]): source_path(r) for r in ranks if int(r["rank"]) in joined}
    order = sorted(k for k, v in wanted.items() if v and paths.get(k))
    if not order:
        return {}
    todo = {paths[k]: tuple(dict.fromkeys(wanted[k])) for k in order}
    got = executors.run(replace(task, changes=todo), [paths[k] for k in order], workers=workers)
    out = {}
    for k, res in zip(order, got):
        if isinstance(res, Failed):
            continue
        for change, sk in res.items():
            row = with_skeletons(ctx, f"rank:{k}:{change}", change, {k: sk},
                                 removes_only=not change.startswith("fix:"))
            row["applies"] = bool(sk.get("applies"))
            out[(k, change)] = row
    return out


QUEUE_STALL_MIN_NS = 1_000_000
"""A rank's host blocked on a full launch queue this long a step (as traced, ``launch_queue_stall_ns``)
makes the job's FusedSparseDist prediction warn (``queue_stall_warning``)."""


def queue_stall_warning(fix: str, skeletons: dict[int, dict]) -> str | None:
    """The warning of a FusedSparseDist prediction on a job whose ranks' hosts blocked on a full
    launch queue (``QUEUE_STALL_MIN_NS`` a step or more on a rank, as traced): the optimizer's
    launches queued behind the main stream's backward and embedding backward. The fix takes the
    embedding backward and the lookup off that stream; the FusedSparseDist traces of the same
    runs block less or not at all (the tree's headline pair rank 1 22.5 -> 10.4 ms a step, rank
    0 9.0 -> 10.0; set 11's multitask_b22k 5.4 / 7.2 -> 0 / 0; fit12's multitask_b28k rank 0
    10.2 -> 0.2), and the replay relieves it only in part: on the
    released 2-GPU pairs (bench/NOTES-explain.md, "FusedSparseDist on 2 GPUs: the launch queue")
    the measured saving was above such a prediction on 4 of 4, below it on the 6 without stalls.
    None for another fix, a single rank or no such stall."""
    if fix != "fused_sparse_dist" or len(skeletons) < 2:
        return None
    stalls = {k: float(v.get("queue_stall_ns") or 0.0) for k, v in skeletons.items()}
    worst = max(stalls, key=lambda k: (stalls[k], -k))
    if stalls[worst] < QUEUE_STALL_MIN_NS:
        return None
    each = ", ".join(f"rank {k} {v / 1e6:.1f} ms" for k, v in sorted(stalls.items()) if v >= QUEUE_STALL_MIN_NS)
    return (f"the hosts blocked on a full launch queue a step ({each}, as traced: the optimizer's launches "
            "queued behind the main stream's backward and embedding backward); the fix takes work off that "
            "stream, the FusedSparseDist traces of such runs block less or not at all, and the replay "
            "relieves it only in part: on the released 2-GPU pairs with such stalls the measured saving was "
            "above the prediction on 4 of 4 (by 1.1-4.1 ms; 3 of them beyond the target), on the 6 without "
            "them below it: the saving may be under-predicted")


def with_fix(ranks: list[dict], ctx, fix: str, *, task: RankSkeletonTask,
             workers: int | None = None, host_speeds: tuple[float, ...] = ()) -> dict | None:
    """A fix (``tracekit.graph.fixes``, by id) applied to every rank's graph, the ranks reduced
    again and the job's graph replayed: what the fix saves the job (None when no rank's trace
    can be read again). ``host_speeds``: the same fix replayed again with every rank's host
    that many times faster, before and after (``with_skeletons``' ``host_speed``), each row in
    the returned row's ``at_host_speed`` (the ranks reduced once)."""
    joined = {ri.rank for ri in ctx.inputs}
    paths = {int(r["rank"]): source_path(r) for r in ranks if int(r["rank"]) in joined}
    order = sorted(k for k, p in paths.items() if p)
    if not order:
        return None
    got = executors.run(replace(task, fix=fix), [paths[k] for k in order], workers=workers)
    skeletons = {k: res for k, res in zip(order, got) if not isinstance(res, Failed)}
    if not skeletons:
        return None
    row = with_skeletons(ctx, f"fix:{fix}", f"{fix} on every rank", skeletons)
    row["note"] = ", ".join(f"rank {k}: {'applies' if v.get('applies') else 'does not apply'}"
                            for k, v in sorted(skeletons.items()))
    band = border.job_band(ranks, row["step_ns"])
    if band is not None:  # the saving at the ends of the job step's band (``tracekit.ranks.border``)
        at = border.at_band(ctx, band, lambda f: with_skeletons(
            ctx, f"fix:{fix}", f"{fix} on every rank", skeletons, host_speed=f))
        row["at_band"] = at
        warning = border.border_warning(row, at)
        if warning:
            row["warning"] = warning
    stall = queue_stall_warning(fix, skeletons)
    if stall:
        row["warning"] = f"{row['warning']}; {stall}" if row.get("warning") else stall
    if host_speeds:
        row["at_host_speed"] = [with_skeletons(ctx, f"fix:{fix}", f"{fix} on every rank, every "
                                               f"rank's host {f:g}x faster", skeletons,
                                               host_speed=f) for f in host_speeds]
    return row
