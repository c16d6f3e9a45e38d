"""Explain: what bounds each step, and what each fix would save.

From the trace's dependency graph (``tracekit.graph``): every step's critical path, its time
split into categories (``host``: dispatch, launches and the host time between calls;
``compute:<phase>``: GPU kernels by phase; ``communication``: NCCL/RCCL kernels; ``memcpy``:
copies and memsets; ``sync``: blocking calls after the GPU work they waited for, and
cross-stream waits; ``idle``: a stream that sat idle with nothing recorded to wait for), and the
step's *bound*: the class with the largest share of it (``host``; ``gpu`` = compute + memcpy;
``communication``; ``sync``).

Findings: each of the four fixes (``tracekit.graph.fixes``) where it applies, with its evidence
and its predicted saving from a what-if replay (contention-free and contention-aware,
``tracekit.graph.whatif``); then generic ones: the phase with the largest share of the
critical path twice as fast, the host twice as fast (when the host holds 10% of it or more), the
host syncs removed (when sync holds 5% or more and no fix covers them). Besides the four fixes,
``allocator_polls``: the caching allocator's polls (``tracekit.analyses.syncs``: the
``cudaEventQuery`` calls it makes on side streams' events before it reuses a block) taken out
of the host (``tracekit.graph.fixes.detect_allocator_polls``); a known fix in the order. The
saving is over the mean step (``tracekit.graph.whatif``: all steps but the first when there are
two or more). User what-ifs (``--what-if``) are replayed the same way and listed with the fixes
under ``what_ifs``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import _objarrays as objarrays
from tracekit.analyses import allocator, syncs
from tracekit import steps as steps_mod
from tracekit.analyses.forked import Forked
from tracekit.graph import build_graph
from tracekit.graph import critical as cr
from tracekit.graph import fixes as fx
from tracekit.graph import overhead as oh
from tracekit.graph import readable as rd
from tracekit.graph import whatif as wi
from tracekit.graph.build import GraphConfig
from tracekit.graph.blocks import SHAPE_WARNING
from tracekit.graph.model import (
    BOUNDS, COMMUNICATION, COMPUTE, SYNC, UNEXPLAINED, Graph, HostCost, NodeKind, bound_class,
)
from tracekit.phases import Rules, derived
from tracekit.trace.model import Trace
from tracekit.frames import BuiltWhenRead, Later, column, of_rows

HOST_FINDING_SHARE = 0.10
"""A host-twice-as-fast finding when host time is at least this share of the critical path."""
SYNC_FINDING_SHARE = 0.05
"""A syncs-removed finding when sync time is at least this share of the critical path."""
NO_HELP_FRACTION = 0.01
"""A time finding predicted to save under this share of the step "would not help here"
(``helps`` False): it goes after every other finding."""
TOP_ITEMS = 15
"""Rows of the critical path's largest items kept per step."""
FORK_WHAT_IFS_MIN_NODES = 200_000
"""``compute(parallel=True)`` replays the generic what-ifs but the first in a child on graphs
of at least this many nodes (the 508 MB-JSON stand-in's has 514 k, each replay ~0.1 s; on a
small trace the fork costs about what the replays, ~0.015 s each, would save)."""


@dataclass(frozen=True)
class ExplainConfig:
    """How explain builds its graph and which fixes it looks for."""

    graph: GraphConfig = field(default_factory=GraphConfig)
    """Inference thresholds of the dependency graph."""
    fixes: fx.FixConfig = field(default_factory=fx.FixConfig)
    """Names the four fixes look for."""
    what_ifs: tuple[str, ...] = ()
    """User what-ifs (``tracekit.graph.whatif.parse_spec``), replayed besides the fixes."""
    generic_findings: bool = True
    """Add the generic findings (top phase, host, syncs) to the fixes'."""
    untraced: bool = True
    """Explain the estimated untraced step (the profiler's host overhead taken out:
    ``tracekit.graph.overhead``); False: the traced step as the trace shows it."""
    step_ms: float | None = None
    """An untraced step time the user knows (ms): it sets the estimate's scale."""
    step_ms_source: str = ""
    """Where ``step_ms`` comes from (``--step-ms``, a ``metrics.json`` beside the trace...)."""
    overhead: oh.OverheadModel = field(default_factory=lambda: oh.DEFAULT_MODEL)
    """The profiler's cost per recorded thing."""
    replay_median_error: float = 0.03
    """Warn when the model's replay of the trace misses its counted steps by more than this
    fraction (median of the absolute errors)..."""
    replay_worst_error: float = 0.10
    """... or misses one step by more than this fraction."""

    def __post_init__(self) -> None:
        if not isinstance(self.graph, GraphConfig) or not isinstance(self.fixes, fx.FixConfig):
            raise ValueError("ExplainConfig: graph and fixes must be GraphConfig and FixConfig")
        for s in self.what_ifs:
            wi.parse_spec(s)


@dataclass(frozen=True)
class ExplainResult(BuiltWhenRead):
    """Critical path, bound and findings of one rank (see the module docstring). Its tables
    ``steps``, ``breakdown``, ``what_ifs`` and ``lanes`` are built when first read
    (``tracekit.frames.BuiltWhenRead``)."""

    bound: str | None
    """The class with the largest share of the critical path over all steps (``BOUNDS``)."""
    bound_share: float | None
    steps: pd.DataFrame
    """Per step: ``step, start_ns, end_ns, duration_ns, bound, bound_share, breakdown``
    (a dict category -> ns), ``top`` (list of the path's largest items), ``replayed_ns`` (the
    step in the model's replay of the unchanged trace), ``replay_error`` (replayed / traced -
    1), ``unexplained_ns`` (time on its critical path the model does not explain)."""
    breakdown: pd.DataFrame
    """Over all steps: ``category, ns, share`` (largest first)."""
    findings: list
    """Dicts: ``id, title, fix, evidence, kind, saving_ns, saving_fraction,
    saving_contention_ns, saving_contention_fraction, observed_step_ns, predicted_step_ns``
    and, for memory findings, ``peak_reserved_bytes, predicted_peak_reserved_bytes,
    saving_bytes``; for ``allocator_polls``, ``polls_per_step, allocator_polls_per_step,
    allocator_poll_ns_per_step`` (in this view), ``allocator_poll_traced_ns_per_step,
    allocator_poll_sites``; ``helps`` (False for a time finding predicted to save under
    ``NO_HELP_FRACTION`` of the step). In the one order every output shows them
    (``finding_order``): the known fixes that help, largest saving first; the memory findings;
    the generic what-ifs that help (a phase or the host 2x faster, the syncs removed), largest
    saving first; last those that would not help."""
    what_ifs: pd.DataFrame
    """Every fix and user what-if: ``id, title, applies, evidence, observed_step_ns,
    predicted_step_ns, predicted_contention_step_ns, saving_ns, saving_fraction,
    saving_contention_ns``."""
    lanes: pd.DataFrame
    """Time on the critical path per lane over all steps: ``lane, ns, share``."""
    graph: dict
    """The graph's size and modelled delays: ``nodes``, ``edges`` by kind,
    ``launch_latency_ns``, ``gap_ns``, ``handoff_ns``."""
    replay: dict = field(default_factory=dict)
    """The model's replay of the unchanged trace against it, over the counted steps:
    ``steps``, ``median_abs_error``, ``worst_error`` (fractions of the traced step)."""
    warnings: tuple[str, ...] = ()
    view: str = "traced"
    """``untraced`` (the estimate: bound, findings and steps of the untraced step) or
    ``traced``."""
    overhead: dict | None = None
    """``tracekit.graph.overhead.Estimate.to_dict()`` plus ``source`` (where a given step came
    from); None when not estimated (no host calls)."""
    path: pd.DataFrame | None = None
    """Every step's critical path segments (``tracekit.graph.critical.SEGMENT_COLUMNS``); not
    written to JSON (``tracekit.report.explain_dict`` writes the rest)."""


def _label(g, lane: int) -> str:
    return g.lane_label(lane)


def _tops(g, path: pd.DataFrame) -> dict[int, list[dict]]:
    """Per step, the path's largest items: its time grouped by (lane, name, category)."""
    if path.empty:
        return {}
    # groups in the order they first appear, as a groupby(sort=False) gives them
    key = np.zeros(len(path), np.int64)
    for col in ("step", "lane", "name", "category"):
        if col == "name":  # a node's name: hashed once per node (long kernel names are slow)
            node, _ = fnp.factorize(column(path, "node", np.int64))
            once = np.unique(node, return_index=True)[1]
            per_node, uniq = fnp.factorize(column(path, "name", object)[once])
            codes = per_node[node]
        else:
            codes, uniq = fnp.factorize(column(path, col))
        key = key * len(uniq) + codes
    group, _ = fnp.factorize(key)
    o = np.argsort(group, kind="stable")
    cut = np.flatnonzero(fnp.r_(True, group[o][1:] != group[o][:-1]))
    first = o[cut]  # each group's first row
    ns = np.add.reduceat(column(path, "dur", np.int64)[o], cut)
    count = np.diff(fnp.r_(cut, len(path)))
    step = column(path, "step", np.int64)[first]
    # per step (ascending), the largest first (a tie: in order of appearance), TOP_ITEMS of them
    rank = np.lexsort((-ns, step))
    step, ns, count, first = step[rank], ns[rank], count[rank], first[rank]
    new = fnp.r_(True, step[1:] != step[:-1])
    pos = np.arange(step.size) - np.maximum.accumulate(np.where(new, np.arange(step.size), 0))
    keep = pos < TOP_ITEMS
    lane = column(path, "lane", np.int64)[first[keep]]
    names = column(path, "name", object)[first[keep]]
    cats = column(path, "category", object)[first[keep]]
    labels = {int(ln): _label(g, int(ln)) for ln in pd.unique(lane)}
    out: dict[int, list[dict]] = {}
    for st, ln, nm, cat, x, c in zip(step[keep].tolist(), lane.tolist(), names, cats,
                                     ns[keep].tolist(), count[keep].tolist()):
        out.setdefault(st, []).append(
            {"lane": labels[ln], "name": str(nm), "category": cat, "ns": x, "count": c})
    return out


def _breakdowns(path: pd.DataFrame) -> dict[int, dict[str, int]]:
    """Per step, time per category (largest first; a tie: in order of appearance)."""
    if path.empty:
        return {}
    step = column(path, "step", np.int64)
    cats = column(path, "category", object)
    cat_code, cat_names = fnp.factorize(cats)
    dur = column(path, "dur", np.int64)
    if (cat_code < 0).any():  # a missing category: left out, as a pandas group-by drops it
        keep = cat_code >= 0
        step, cats, cat_code, dur = step[keep], cats[keep], cat_code[keep], dur[keep]
    # the (step, category) groups in order of first appearance, their sums, then sorted by step
    # and largest first, stably: what a pandas group-by and sort gave (numpy: those cost ~1.5 ms
    # a call whatever the path's size, most of it on a trace of a few events)
    step_code, step_vals = fnp.factorize(step)
    group, _ = fnp.factorize(step_code * len(cat_names) + cat_code)
    first = np.unique(group, return_index=True)[1]
    ns = np.zeros(first.size, np.int64)
    np.add.at(ns, group, dur)
    g_step = step[first]
    order = np.lexsort((-ns, g_step))
    out = {}
    for st, cat, x in zip(g_step[order].tolist(), cats[first[order]], ns[order].tolist()):
        out.setdefault(st, {})[str(cat)] = x
    return out


def _sums_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (ascending) and the sum of ``values`` (int64) for each:
    ``pd.Series(values).groupby(keys).sum()``, without its fixed cost (~1 ms a call)."""
    u, inv = np.unique(keys, return_inverse=True)
    s = np.zeros(u.size, np.int64)
    np.add.at(s, inv.reshape(-1), values)
    return u, s


def _descending(values: np.ndarray) -> np.ndarray:
    """The order ``Series.sort_values(ascending=False)`` puts ``values`` (no NaN) in: pandas'
    ``nargsort``, a quicksort of the reversed values, reversed (so ties come out as pandas
    orders them)."""
    idx = np.arange(values.size)[::-1]
    return idx[values[::-1].argsort(kind="quicksort")][::-1]


def _finding(fid, title, fix, evidence, pred: wi.Prediction, kind="time") -> dict:
    obs = pred.observed_ns
    return {"id": fid, "title": title, "fix": fix, "evidence": evidence, "kind": kind,
            "saving_ns": pred.saving_ns, "saving_fraction": pred.saving_ns / obs if obs else None,
            "saving_contention_ns": pred.saving_contention_ns,
            "saving_contention_fraction": pred.saving_contention_ns / obs if obs else None,
            "observed_step_ns": obs, "replayed_step_ns": pred.baseline_ns,
            "predicted_step_ns": obs - pred.saving_ns,
            "predicted_contention_step_ns": obs - pred.saving_contention_ns}


def view_graph(trace: Trace, rules: Rules, config: ExplainConfig | None = None, *,
               host_cost: Callable[[Trace, Graph], HostCost] | None = None
               ) -> tuple[Graph, Graph, oh.Estimate | None]:
    """(the graph as traced, the graph explain reads, the profiler-overhead estimate): the
    graph explain reads is the estimated untraced one (``tracekit.graph.overhead``) unless
    ``config.untraced`` is False or the trace has no runtime calls (the estimate is then None).
    ``host_cost`` (``compute``'s) replaces the overhead model's host cost. Memoised per trace
    object, rules and the config's graph and overhead choices when ``host_cost`` is None
    (``tracekit.ranks``' skeleton of a rank reads the same graph as its explain)."""
    config = ExplainConfig() if config is None else config

    def make():
        g0 = g = build_graph(trace, rules, config.graph)
        est = None
        if (g.kind == NodeKind.CALL).any():
            counts = oh.count(trace, g)
            cost = oh.host_cost(trace, g, config.overhead, counts) if host_cost is None else \
                host_cost(trace, g)
            est = oh.estimate(trace, g, config.overhead, step_ms=config.step_ms, counts=counts,
                              cost=None if host_cost is None else cost)
            if config.untraced:
                g = oh.untraced_graph(g, cost, host_factor=est.host_factor)
        return g0, g, est

    if host_cost is not None:
        return make()
    key = f"explain-view:{config.graph!r}:{config.untraced}:{config.step_ms}:{config.overhead!r}"
    return derived(trace, rules, key, make)


def compute(trace: Trace, rules: Rules, *, snapshot: object | None = None,
            config: ExplainConfig | None = None, parallel: bool = False,
            host_cost: Callable[[Trace, Graph], HostCost] | None = None) -> ExplainResult:
    """Critical path, bound and findings of ``trace`` (see the module docstring). ``snapshot``:
    a ``tracekit.analyses.snapshot.SnapshotResult`` of the same run, for the in-place copy's
    predicted peak reserved. ``parallel``: replay the generic findings' what-ifs but the first
    in a forked child (``tracekit.analyses.forked``; on a graph of at least
    ``FORK_WHAT_IFS_MIN_NODES``) while this process computes the rest: the same result.
    ``host_cost``: ``f(trace, graph) -> HostCost`` (``tracekit.graph.model``), the host time
    the untraced view takes out, in place of the overhead model's (``tracekit.graph.overhead.
    host_cost`` with ``config.overhead``): one mechanism (``Graph.with_host_cost``) for both.
    The view (``config.untraced``) is the graph without it, replayed: its critical path, bound
    and findings, and the what-ifs replay it."""
    config = ExplainConfig() if config is None else config
    g0, g, est = view_graph(trace, rules, config, host_cost=host_cost)  # g0: as traced
    warnings = list(g0.warnings)
    gw = g  # the graph the what-ifs replay: the view's
    win = cr.step_windows(g)
    path = cr.step_paths(g, windows=win)
    bds = _breakdowns(path)
    total_bd: dict[str, int] = {}
    durs = []
    win_step = column(win, "step", np.int64).tolist()
    win_start = column(win, "start", np.int64).tolist()
    win_end = column(win, "end", np.int64).tolist()
    for st, b, e in zip(win_step, win_start, win_end):
        durs.append(e - b)
        for k, v in bds.get(st, {}).items():
            total_bd[k] = total_bd.get(k, 0) + v
    total = int(np.sum(np.array(durs, np.int64))) if durs else 0

    # ---- the model's replay of the trace as traced, against it ---------------------------------
    win0, path0 = (win, path) if g0 is g else (cr.step_windows(g0), None)
    counted = wi.counted_steps(win0)
    obs0 = column(win0, "end", np.int64) - column(win0, "start", np.int64)
    rep0 = wi.aligned(win0, wi.base_schedule(g0, win0).windows) if len(win0) else obs0
    with np.errstate(divide="ignore", invalid="ignore"):
        err0 = np.where(obs0 > 0, rep0 / np.maximum(obs0, 1) - 1.0, np.nan)
    replay = _replay_summary(err0, counted)
    if replay["steps"] and (replay["median_abs_error"] > config.replay_median_error or
                            abs(replay["worst_error"]) > config.replay_worst_error):
        if path0 is None:
            path0 = cr.step_paths(g0, windows=win0)
        warnings.append(_replay_warning(g0, path0, win0, counted, replay))
    k = fnp.index_of(column(win0, "step", np.int64), column(win, "step", np.int64))
    replayed = np.where(k >= 0, rep0[np.maximum(k, 0)], 0) if k.size else rep0[:0]
    err = np.where(k >= 0, err0[np.maximum(k, 0)], np.nan) if k.size else err0[:0]
    if len(win):
        wi.base_schedule(gw, win)  # computed once, before a fork below shares it

    # ---- what the trace does not let the graph read, and what follows for the verdict ---------
    counted_view = column(win, "step", np.int64)[wi.counted_steps(win)] if len(win) else \
        np.zeros(0, np.int64)
    # the steps whose path says host: where a check says the host cannot be the bound, the
    # verdict changes (and a check that changes nothing is no warning)
    host_path = np.array([cr.bound_of(bds.get(s, {}), e - b)[0] == "host"
                          for s, b, e in zip(win_step, win_start, win_end)], bool) \
        if len(win) else np.zeros(0, bool)
    limits = rd.limits(g0, counted_view, loops=g0.poll_loops,
                       behind_in=column(win, "step", np.int64)[host_path] if len(win) else
                       counted_view)
    warnings += [x.warning for x in limits]
    alone = _alone_in_job(trace, g, est, config, total_bd, len(win))
    if alone:
        warnings.append(alone)
    spread = _untraced_spread(est)
    if spread:
        warnings.append(spread)
    kept = _unexplained_kept(est, path, counted_view) if config.untraced else None
    if kept:
        warnings.append(kept)
    src = steps_mod.compute(trace, rules).source
    if src == steps_mod.SOURCE_OPTIMIZER:
        warnings.append("no ProfilerStep in this trace: its steps run from one optimizer step's "
                        "end to the next (docs/metrics.md)")
    elif not len(g0.steps):
        warnings.append("no step in this trace (no ProfilerStep, no optimizer annotation): one "
                        "window over the whole trace, step -1; its length is the trace's, not a "
                        "step's")
    unknown = any(x.bound_unknown for x in limits)
    not_host_all = any(x.host_not_bound and not x.steps for x in limits)
    not_host_steps = {s for x in limits if x.host_not_bound for s in x.steps}
    not_host_all = not_host_all or bool(counted_view.size and not_host_steps >= set(
        counted_view.tolist()))
    host_what_ifs = not (unknown or not_host_all)

    # ---- fixes and what-ifs --------------------------------------------------------------------
    chains = _chains(trace, g)

    def predict(applies, change) -> wi.Prediction | None:
        return wi.predict(gw, change, windows=win) if applies and change is not None and len(win) \
            else None

    fixes = detect_fixes(trace, gw, rules, config.fixes, snapshot=snapshot, chains=chains)
    if (gw.kind == NodeKind.GPU).any():
        fixes.append(allocator_polls_fix(trace, g0, gw, counted_view))
    covered_syncs = any(f.applies and f.id in ("async_delta_copy", "precomputed_writeback")
                        for f in fixes)
    if wi.CONTENTION_MODEL in wi.BLOCK_MODELS and not wi.has_shapes(gw) and any(
            f.applies and f.change is not None and f.change.shares_gpu for f in fixes):
        # a prediction that rests on the contention between streams, without the block-level model
        warnings.append(SHAPE_WARNING)
    generic = []
    if config.generic_findings and total:
        share = {k: v / total for k, v in total_bd.items()}
        comp = [(k, v) for k, v in share.items() if k.startswith(COMPUTE)]
        if comp:
            k, v = max(comp, key=lambda kv: kv[1])
            ph = k[len(COMPUTE):]
            generic.append((f"phase:{ph}", finding_spec(f"phase:{ph}"),
                            f"GPU compute in phase {ph!r} is {100 * v:.1f}% of the critical path",
                            f"make phase {ph!r} 2x faster (what-if)"))
        if share.get("host", 0) >= HOST_FINDING_SHARE and host_what_ifs:
            generic.append(("host", finding_spec("host"),
                            f"host time (dispatch, launches, Python between them) is "
                            f"{100 * share['host']:.1f}% of the critical path",
                            "make the host 2x faster: fewer launches (foreach/fused optimizers, "
                            "CUDA graphs), less Python per step (what-if)"))
        if share.get(SYNC, 0) >= SYNC_FINDING_SHARE and not covered_syncs:
            generic.append(("syncs", finding_spec("syncs"),
                            f"blocking calls and waits are {100 * share[SYNC]:.1f}% of the "
                            "critical path", "remove the host syncs (what-if: all of them)"))
    changes = [(fid, title, fix, *wi.spec_change(gw, wi.parse_spec(spec), chains))
               for fid, spec, title, fix in generic]
    # the generic what-ifs' replays (on a big trace the largest part of explain after the
    # graph): all but the first in a child while this process computes the rest and the first
    fork = parallel and len(changes) > 1 and g.n >= FORK_WHAT_IFS_MIN_NODES
    later = Forked(lambda: [predict(n > 0, ch) for _, _, _, ch, n in changes[1:]], fork=fork)

    rows = []
    tops = _tops(g, path)
    for st, b0, e0, dur, rp, er in zip(win_step, win_start, win_end, durs, replayed.tolist(),
                                       err.tolist()):
        bd = bds.get(st, {})
        b, share = _verdict(*cr.bound_of(bd, dur), unknown, not_host_all or st in not_host_steps)
        rows.append((st, b0, e0, dur, b, np.nan if share is None else share, bd,
                     tops.get(st, []), int(rp), er, int(bd.get(UNEXPLAINED, 0))))
    # the tables: built when first read (a job's worker reads the steps' and the breakdown's
    # rows, and neither the what-ifs nor the lanes)
    steps = Later(of_rows, rows, STEP_COLUMNS)
    bound, bound_share = _verdict(*cr.bound_of(total_bd, total), unknown, not_host_all)
    bd_t = Later(of_rows, [(k, v, v / total if total else None) for k, v in
                           sorted(total_bd.items(), key=lambda kv: -kv[1])],
                 ["category", "ns", "share"])
    lane_ids, lane_ns = _sums_by(column(path, "lane", np.int64), column(path, "dur", np.int64))
    o = _descending(lane_ns)
    lane_ids, lane_ns = lane_ids[o], lane_ns[o]
    lanes_t = Later(_lanes_table, [_label(g, int(x)) for x in lane_ids.tolist()], lane_ns, total)

    findings: list[dict] = []
    wrows: list[tuple] = []

    def run(fid, title, applies, evidence, pred: wi.Prediction | None) -> wi.Prediction | None:
        obs = pred.observed_ns if pred else None
        wrows.append((fid, title, applies, evidence, obs,
                      pred.baseline_ns if pred else None,
                      obs - pred.saving_ns if pred else None,
                      obs - pred.saving_contention_ns if pred else None,
                      pred.saving_ns if pred else None,
                      pred.saving_ns / obs if pred and obs else None,
                      pred.saving_contention_ns if pred else None))
        return pred

    for f in fixes:
        if f.kind == "memory":
            m = f.memory
            wrows.append((f.id, f.title, f.applies, f.evidence, None, None, None, None, None,
                          None, None))
            if f.applies:
                pr, pk = m.get("predicted_peak_reserved_bytes"), m.get("peak_reserved_bytes")
                findings.append({"id": f.id, "title": f.title, "fix": f.fix,
                                 "evidence": f.evidence, "kind": "memory", "saving_ns": None,
                                 "saving_fraction": None, "saving_contention_ns": None,
                                 "saving_contention_fraction": None, "observed_step_ns": None,
                                 "replayed_step_ns": None, "predicted_step_ns": None,
                                 "predicted_contention_step_ns": None,
                                 **m, "saving_bytes": (pk - pr) if pr is not None and
                                 pk is not None else None})
            continue
        pred = run(f.id, f.title, f.applies, f.evidence, predict(f.applies, f.change))
        if f.applies and pred is not None:
            findings.append({**_finding(f.id, f.title, f.fix, f.evidence, pred), **f.facts})
    preds = [predict(n > 0, ch) for _, _, _, ch, n in changes[:1]] + later.result()
    for (fid, title, fix, ch, n), pred in zip(changes, preds):
        pred = run(fid, title, n > 0, f"{n} nodes changed", pred)
        if pred is not None:
            findings.append(_finding(fid, title, fix, title, pred))
    for text in config.what_ifs:
        spec = wi.parse_spec(text)
        ch, n = wi.spec_change(gw, spec, chains)
        if n == 0:
            warnings.append(f"what-if {text!r} matches nothing in this trace")
        run(text, spec.title, n > 0, f"{n} nodes changed", predict(n > 0, ch))
    nfix = {f.id for f in fixes} | {"inplace_batch_copy"}
    for d in findings:
        d["helps"] = d["kind"] == "memory" or (d["saving_fraction"] is not None
                                               and d["saving_fraction"] >= NO_HELP_FRACTION)
    findings.sort(key=lambda d: finding_order(d, d["id"] in nfix))
    what_ifs = Later(of_rows, wrows, [
        "id", "title", "applies", "evidence", "observed_step_ns", "replayed_step_ns",
        "predicted_step_ns", "predicted_contention_step_ns", "saving_ns", "saving_fraction",
        "saving_contention_ns"])
    return ExplainResult(
        bound=bound, bound_share=bound_share, steps=steps, breakdown=bd_t, findings=findings,
        what_ifs=what_ifs, lanes=lanes_t,
        graph={"nodes": g.n, "edges": g.edge_counts(), "launch_latency_ns": g.launch_latency_ns,
               "gap_ns": g.gap_ns, "handoff_ns": g.handoff_ns},
        replay=replay, warnings=tuple(warnings), path=path,
        view="untraced" if est is not None and config.untraced else "traced",
        overhead=None if est is None else {**est.to_dict(), "source": config.step_ms_source})


def _untraced_spread(est) -> str | None:
    """The warning of an estimate the profiler's cost decides (``Estimate.range_ns``): the
    untraced steps of such runs vary between processes in ways the trace does not record, so
    the estimate comes with the range it was found in (None otherwise)."""
    if est is None or est.range_ns is None:
        return None
    lo, hi = est.range_ns
    b0, b1 = oh.untraced_band(est.slow_host)
    return (f"the estimated untraced step ({est.untraced_step_ns / 1e6:,.3f} ms, "
            f"{1 - est.untraced_step_ns / est.traced_step_ns:.0%} under the traced "
            f"{est.traced_step_ns / 1e6:,.3f} ms) is decided by the profiler's cost the model "
            f"takes out of a host-bound step: on such runs of the released held-out sets the "
            f"untraced step measured lay 8 times in 10 between {lo / 1e6:,.3f} and "
            f"{hi / 1e6:,.3f} ms (the estimate {b0:+.0%} to {b1:+.0%} off): one preset's processes "
            f"ran their untraced steps up to 40 % apart, which nothing in the trace records; "
            f"--step-ms N (the untraced step, measured) sets the scale")


def _unexplained_kept(est, path: pd.DataFrame, counted: np.ndarray) -> str | None:
    """The warning of an estimate that rests on time the model does not explain, kept whole in
    the untraced replay, or that did not follow the host time taken out
    (``tracekit.graph.overhead.unexplained_kept``; ``path``: the estimated step's critical path,
    ``counted``: the counted steps); None otherwise, or with a given step."""
    if est is None or est.scale != "model":
        return None
    on = fnp.isin(column(path, "step", np.int64), counted)
    dur = column(path, "dur", np.int64)[on]
    total = int(dur.sum())
    unexplained = int(dur[column(path, "category", object)[on] == UNEXPLAINED].sum())
    share = unexplained / total if total else 0.0
    taken = float(sum(est.host_ns_per_step.values()))
    why = oh.unexplained_kept(est.traced_step_ns, est.untraced_step_ns, taken, share)
    if why is None:
        return None
    head = (f"the estimated untraced step ({est.untraced_step_ns / 1e6:,.3f} ms against the "
            f"traced {est.traced_step_ns / 1e6:,.3f} ms) did not follow the "
            f"{taken / 1e6:,.3f} ms of host time a step the model took out")
    if why == "unexplained":
        per_step = unexplained / 1e6 / max(counted.size, 1)
        return (head + f": {share:.1%} of its critical path ({per_step:,.3f} ms a step) is "
                "time the model does not explain (a node that started later than any modelled "
                "dependency allows), kept whole in the untraced replay, so the "
                "estimate rests on it, not on the profiler's cost; the untraced step may be much "
                "shorter (--step-ms N, the untraced step measured, sets the scale)")
    return (head + ": it is above the traced step, which taking host time out cannot make; the "
            "model's replay, not the profiler's cost, sets it (--step-ms N, the untraced step "
            "measured, sets the scale)")


STEP_COLUMNS = ["step", "start_ns", "end_ns", "duration_ns", "bound", "bound_share", "breakdown",
                "top", "replayed_ns", "replay_error", "unexplained_ns"]
"""``ExplainResult.steps``' columns, in order."""


def _lanes_table(labels: list[str], ns: np.ndarray, total: int) -> pd.DataFrame:
    """``ExplainResult.lanes``: time on the critical path per lane (labels, ns) and its share
    of ``total``."""
    return pd.DataFrame({"lane": labels, "ns": ns,
                         "share": ns.astype(np.float64) / total if total else np.nan})


def _alone_in_job(trace: Trace, g: Graph, est, config: ExplainConfig, total_bd: dict,
                  nsteps: int) -> str | None:
    """The warning of a rank of a job explained alone in its untraced view (None otherwise): its
    collectives waited for the other ranks, whose hosts the profiler slowed too; the estimate
    takes out this rank's overhead only, so it keeps those waits as traced. The job's graph
    (``tracekit.ranks.jobgraph``, ``explain DIR``) takes out every rank's. A what-if on this rank
    alone keeps its collectives' durations, waits included: it moves a wait with the work it
    changes, as if the other ranks would gain as much (``docs/explain.md``, "A rank of a job")."""
    if est is None or not config.untraced:
        return None
    ws = trace.world_size
    comm = (g.kind == NodeKind.GPU) & (np.asarray(g.category).astype(str) == COMMUNICATION)
    if not comm.any() or (ws is not None and ws < 2):
        return None
    on_path = total_bd.get(COMMUNICATION, 0) / max(nsteps, 1)
    of = f" of {ws} ranks" if ws else ""
    return (f"this rank is one of a job{of}: its collectives ({on_path / 1e6:,.3f} ms a step on "
            "the critical path) waited for the other ranks, whose hosts the profiler slowed too; "
            "the estimated untraced step takes out this rank's overhead only and keeps those "
            "waits: its step on the job's graph (tracekit explain DIR, every rank's overhead out, "
            "the ranks joined at their collectives) is the estimate to read; and its findings "
            "move those waits with the work they change, as if the other ranks would gain as "
            "much: where another rank bounds the job (its share of the job's critical path, "
            "tracekit explain DIR) a fix may save the job nothing")


def _verdict(bound, share, unknown: bool, not_host: bool):
    """The bound a step's path gives, as far as the trace lets it be read
    (``tracekit.graph.readable``): a host or sync bound is unknown (None) where the host -> GPU
    links cannot be read; a host bound is the GPU's (its share unknown: None) where the GPU ran
    behind work the trace does not show or far behind its launches."""
    if bound in ("host", "sync") and unknown:
        return None, None
    if bound == "host" and not_host:
        return "gpu", None
    return bound, share


def _replay_summary(err: np.ndarray, counted: np.ndarray) -> dict:
    """The replay error over the counted steps: ``steps``, ``median_abs_error``,
    ``worst_error`` (signed, the largest in size), fractions of the traced step."""
    e = err[counted & np.isfinite(err)] if err.size else err
    if not e.size:
        return {"steps": 0, "median_abs_error": None, "worst_error": None}
    return {"steps": int(e.size), "median_abs_error": float(np.median(np.abs(e))),
            "worst_error": float(e[np.argmax(np.abs(e))])}


_LACKS = {
    "gpu": "GPU work that started later than its launch, its stream and its waits allow (work "
           "or waits the trace does not show: other processes, sampled-away events, "
           "contention)",
    "wake": "threads that resumed with nothing in the trace that woke them (a sleep, a timer, "
            "another process or rank)",
    "call": "host calls that started later than the host time before them allows",
    "released": "work that nothing in the trace precedes",
}


def _replay_warning(g, path: pd.DataFrame, win: pd.DataFrame, counted: np.ndarray,
                    replay: dict) -> str:
    """What the model lacks on this trace: the unexplained time on the counted steps' critical
    paths, by what it precedes."""
    counted_steps = column(win, "step", np.int64)[counted]
    n = max(np.unique(counted_steps).size, 1)
    parts = []
    if len(path):
        sel = (column(path, "category", object) == UNEXPLAINED) & \
            fnp.isin(column(path, "step", np.int64), counted_steps)
        node = column(path, "node", np.int64)[sel]
        dur = column(path, "dur", np.int64)[sel]
        lane = column(path, "lane", np.int64)[sel]
    else:
        node = dur = lane = np.zeros(0, np.int64)
    if node.size:
        what = np.where(g.binding[node] < 0, "released",
                        np.where(g.kind[node] == NodeKind.GPU, "gpu",
                                 np.where(g.kind[node] == NodeKind.POINT, "wake", "call")))
        kinds, ns = _sums_by(what, dur)
        for j in _descending(ns).tolist():
            k = str(kinds[j])
            lane_ids, lane_ns = _sums_by(lane[what == k], dur[what == k])
            top = ", ".join(g.lane_label(int(x)) for x in lane_ids[_descending(lane_ns)][:2])
            parts.append(f"{_LACKS[k]}: {int(ns[j]) / n / 1e6:.3f} ms per step ({top})")
    lack = "; ".join(parts) if parts else "nothing on the critical path is unexplained: the " \
        "replay's own path differs (work the model moves earlier than it ran)"
    return (f"the model's replay of this trace misses its steps by "
            f"{100 * replay['median_abs_error']:.1f}% (median) and up to "
            f"{100 * replay['worst_error']:+.1f}%: what-if savings are less certain here; the "
            f"model lacks {lack}")


def finding_order(f: dict, known_fix: bool) -> tuple:
    """Where a finding goes in the one order every output shows (``ExplainResult.findings``):
    a known fix that helps, by predicted saving; a memory finding, by bytes; a generic what-if
    that helps, by saving; then what would not help."""
    group = 3 if not f.get("helps", True) else 1 if f.get("kind") == "memory" else 0 if known_fix else 2
    return (group, -(f.get("saving_ns") or 0), -(f.get("saving_bytes") or 0))


def detect_fixes(trace: Trace, g, rules: Rules, config: fx.FixConfig, *,
                 snapshot: object | None = None, chains: np.ndarray | None = None,
                 keep_ns: int | None = None) -> list:
    """The four fixes on this trace's graph (``tracekit.graph.fixes.Fix``; none without GPU
    activity). ``chains``: op chains per node (``_chains``), ``keep_ns``: what a blocking call
    that no longer waits still takes (default: the median runtime call)."""
    if not (g.kind == NodeKind.GPU).any():
        return []
    if chains is None:
        chains = _chains(trace, g)
    if keep_ns is None:
        calls = np.flatnonzero(g.kind == NodeKind.CALL)
        keep_ns = int(np.median(g.dur[calls])) if calls.size else 0
    return [fx.detect_fused(trace, g, rules, config),
            fx.detect_async_delta(trace, g, config, keep_ns),
            fx.detect_writeback(trace, g, config, chains),
            fx.detect_inplace(trace, g, rules, config, snapshot, allocator.peak_reserved(trace))]


def allocator_polls_fix(trace: Trace, g0: Graph, g: Graph, counted: np.ndarray) -> fx.Fix:
    """The caching allocator's polls (``tracekit.analyses.syncs``) as a fix on the view ``g``
    (``tracekit.graph.fixes.detect_allocator_polls``); ``g0``: the graph as traced (the same
    nodes), ``counted``: the view's counted steps."""
    known = syncs.allocations_recorded(trace)
    mask = np.zeros(g.n, bool)
    every = np.zeros(g.n, bool)
    sites = objarrays.full(g.n, "")
    calls = np.flatnonzero(g.kind == NodeKind.CALL)
    if known and calls.size:
        names, inv = np.unique(g.name[calls].astype(str), return_inverse=True)
        ids = calls[np.array([syncs.POLL.search(x) is not None for x in names], bool)[inv]]
        rows = g.row[ids]
        tid = trace.column("tid", np.int64)[rows]
        ts = trace.column("ts", np.int64)[rows]
        end = ts + trace.column("dur", np.int64)[rows]
        a = syncs.allocator_polls(trace, tid, end) if ids.size else np.zeros(0, bool)
        every[ids] = True
        ids, tid, ts, end = ids[a], tid[a], ts[a], end[a]
        mask[ids] = True
        chain = syncs.op_chains(trace, tid, ts, end)
        sites[ids] = [f"{c} > {n}" if c else str(n) for c, n in zip(chain, g.name[ids])]
    return fx.detect_allocator_polls(g, mask, sites, g0.dur, counted, known, every)


def finding_spec(fid: str) -> str | None:
    """The what-if (``tracekit.graph.whatif.parse_spec``) of a generic finding by id: the
    phase ``NAME`` 2x faster (``phase:NAME``), the host 2x faster (``host``), the host syncs
    removed (``syncs``); None for any other finding (a known fix is applied by its id,
    ``tracekit.graph.fixes``). What ``tracekit.ranks`` replays of a rank's finding on the job's
    graph."""
    if fid.startswith("phase:"):
        return f"{fid}=2"
    return {"host": "host=2", "syncs": "sync:all"}.get(fid)


def what_if_change(trace: Trace, g: Graph, spec: wi.Spec) -> tuple[wi.Change, int]:
    """A user what-if on ``g`` (a graph of ``trace``: ``view_graph``'s), as explain replays it:
    the change and how many nodes it touches (``tracekit.graph.whatif.spec_change``; a
    ``sync:`` spec matches the blocking calls' op chains too)."""
    return wi.spec_change(g, spec, _chains(trace, g) if spec.what == "sync" else None)


def _chains(trace: Trace, g) -> np.ndarray:
    """Per node: the op chain of a blocking call ("" for every other node)."""
    out = objarrays.full(g.n, "")
    sel = np.flatnonzero((g.kind == NodeKind.CALL) & (g.category == SYNC))
    if sel.size:
        rows = g.row[sel]
        ts = trace.column("ts", np.int64)[rows]
        out[sel] = syncs.op_chains(trace, trace.column("tid", np.int64)[rows], ts,
                                   ts + trace.column("dur", np.int64)[rows])
    return out


__all__ = ["BOUNDS", "ExplainConfig", "ExplainResult", "compute", "bound_class", "finding_spec",
           "what_if_change"]
