"""HTA's own figures on the trace tracekit already parsed (HTA: traceinsight 0.6.1, the
maintained release of Holistic Trace Analysis, the same ``hta`` package; HolisticTraceAnalysis
0.5.0 gives the same figures through the same bridge).

What HTA computes well, computed by HTA's own analysis functions:

- temporal breakdown (``BreakdownAnalysis.get_temporal_breakdown``): idle / compute /
  non-compute time and % of the span from the first to the last GPU activity;
- idle time by category (``get_idle_time_breakdown``): per stream, host_wait / kernel_wait
  (gap < 30 us, HTA's default) / other;
- kernel breakdown (``get_gpu_kernel_breakdown``): time by kernel type (COMPUTATION,
  COMMUNICATION, MEMORY, and the overlapping combinations) and the top kernels of each type;
- comm/comp overlap (``CommunicationAnalysis.get_comm_comp_overlap``).

The bridge: HTA's ``TraceAnalysis(trace_dir=...)`` re-reads the JSON with ``json.load`` and
builds its DataFrame with row-wise pandas ``apply`` (seconds to minutes). Instead ``to_hta``
builds HTA's in-memory ``hta.common.trace.Trace`` from tracekit's columns, exactly in the
layout HTA's parser (``hta.common.trace_parser``) would produce, then lets HTA's own
``Trace.load_traces`` do the rest (aligning ranks to t=0 and dropping the last ProfilerStep's
GPU activities). What the bridge reproduces, column by column (see ``_rank_frame``):

- rows: every complete event except Kineto's ``PyTorch Profiler (N)`` span (HTA drops category
  ``Trace``), in tracekit's order (by ts, ties in file order); ``index`` is the row's position
  in ``Trace.events`` plus one (HTA's is the position in the file; only links between rows
  matter, and HTA reads ``index_correlation == 0`` as "no link", so no row gets 0);
- ``name``/``cat``: ids into one ``TraceSymbolTable``; the category is rebuilt from ``Kind``
  and the schema (``kernel``/``Kernel``...); tracekit's ``OTHER`` events become ``other``;
- ``ts``/``dur``/``end`` in HTA's units, microseconds: for integer-microsecond traces ``ts`` is
  the integer and ``dur`` the float duration; for nanosecond-resolution traces HTA first parses
  each ``ts`` as a float64 (0.25 us steps at epoch times), then rounds inward (``ts`` up,
  ``ts + dur`` down; ``HTA_DISABLE_NS_ROUNDING=1`` turns this off, and is honoured here too):
  the same float64 is rebuilt from tracekit's exact nanoseconds and rounded the same way;
- ``stream`` (``args.stream``: GPU activities, ``cuda_sync`` and a cpu_op that names one, as
  Triton's launcher does, which HTA then counts as a kernel; -1 elsewhere, including
  ``gpu_user_annotation``, which carries no stream argument in Kineto's output),
  ``correlation``, ``bytes``, ``external_id`` (legacy traces: HTA reads only ``External id``,
  which there only CPU operators carry), ``pid``, ``tid`` (tracekit's integers: a string tid such
  as ``"stream 7"`` is the number in it, other strings -1), ``index_correlation`` (HTA's own
  ``transform_correlation_to_index``), ``iteration`` (HTA's ``add_iteration`` rule, vectorised:
  a CPU event takes the ProfilerStep whose ``[ts, ts + dur)`` holds its ``ts``, a GPU event the
  iteration of the CPU event its ``index_correlation`` points to);
- not rebuilt (tracekit does not read them, no analysis here uses them): ``memory_bw_gbps``,
  ``wait_on_stream``, ``wait_on_cuda_event_record_corr_id``, ``input_dims``, ``input_type``,
  ``input_strides``.

The tests hold the bridged results equal to what ``TraceAnalysis(trace_dir=...)`` computes on
the same file (tests/tracekit/test_hta_bridge.py).

Where HTA's figures and tracekit's own differ by definition (the same tests measure each; on
HTA's window, ``hta_window``, and without these differences they agree within 1%):

- nanosecond traces: HTA rounds every event inward to whole microseconds (a 1.3 us memcpy counts
  0 or 1 us), so its idle time is higher and its busy times lower (``notes`` says so);
- HTA's kernel-type table truncates each segment to whole microseconds;
- HTA counts any event with a stream and a correlation id as a GPU kernel, so ``cuda_sync``
  events on a stream are busy (non-compute) GPU time; for tracekit they are idle time;
- HTA classifies kernels by name only (COMMUNICATION ``^nccl.*Kernel``, MEMORY
  ``^Memcpy|^Memset|^dma``, COMPUTATION what names neither nor ``Memcpy``/``Memset``/``Sync``),
  tracekit by kind and ``Rules.communication``.

Failure policy: this section never stops a report. If HTA is not installed, the trace has no GPU
activity, or one of HTA's functions raises on this trace, ``compute`` returns an ``HtaResult``
whose ``available``/``reason`` (whole section) or ``notes`` (one analysis) say why, and the
figures it could not compute are None. HTA's own log warnings (e.g. "There is only one
iteration in the trace") are collected into ``notes``; nothing is printed and nothing is plotted
(every HTA call gets ``visualize=False``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace, TraceSet

CONSECUTIVE_KERNEL_DELAY_US = 30
"""HTA's default threshold (``TraceAnalysis.get_idle_time_breakdown``): an idle gap shorter
than this between two kernels of a stream is "kernel_wait"."""

ROUNDING_NOTE = (
    "HTA rounds this trace's nanosecond times inward to whole microseconds (start up, end "
    "down), so next to tracekit's exact figures its idle time is higher and its busy times "
    "lower; HTA_DISABLE_NS_ROUNDING=1 turns that off")
"""The note a nanosecond-resolution trace gets (the tests measure the difference)."""

NOT_INSTALLED = "HTA is not installed (pip install traceinsight)"
"""The section's reason when the ``hta`` package cannot be imported."""

TOP_KERNELS = 10
"""Kernels listed per kernel type (HTA's ``num_kernels`` default); the rest are "others"."""

_PROFILER_SPAN = re.compile(r"^PyTorch Profiler \(\d+\)$")
_STEP_NUMBER = re.compile(r"ProfilerStep\s*#\s*(\d+)")

_CAT_PT2 = {
    Kind.CPU_OP: "cpu_op",
    Kind.ANNOTATION: "user_annotation",
    Kind.GPU_ANNOTATION: "gpu_user_annotation",
    Kind.KERNEL: "kernel",
    Kind.MEMCPY: "gpu_memcpy",
    Kind.MEMSET: "gpu_memset",
    Kind.RUNTIME: "cuda_runtime",
    Kind.DRIVER: "cuda_driver",
    Kind.PYTHON: "python_function",
    Kind.SYNC: "cuda_sync",
    Kind.OTHER: "other",
}
_CAT_LEGACY = {
    **_CAT_PT2,
    Kind.CPU_OP: "Operator",
    Kind.ANNOTATION: "Operator",  # the 2021 schema wrote record_function ranges as Operator
    Kind.KERNEL: "Kernel",
    Kind.MEMCPY: "Memcpy",
    Kind.MEMSET: "Memset",
    Kind.RUNTIME: "Runtime",
}
_STREAM_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)
"""Kinds whose Kineto args carry ``stream`` (so HTA's ``stream`` column is >= 0)."""
_LEGACY_EXTERNAL_ID_KINDS = (Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON, Kind.OTHER)
"""In legacy traces only these carry the capitalised ``External id`` HTA reads."""


@dataclass(frozen=True)
class HtaResult:
    """HTA's figures for one trace (or the ranks of a ``TraceSet``). Times are HTA's: us.

    Each table is exactly what the named HTA function returns (its columns, its units), or None
    when HTA could not compute it (``notes`` says why).
    """

    available: bool
    """False when nothing could be computed (``reason`` says why)."""
    reason: str | None = None
    """Why the section is unavailable (HTA missing, no GPU activity, HTA failed)."""
    hta_version: str | None = None
    ranks: tuple[int, ...] = ()
    hta_release: str | None = None
    """The HTA release that computed the figures (``traceinsight 0.6.1``), None without HTA."""
    include_last_profiler_step: bool = False
    """HTA's window: False (its default) leaves out the GPU activities launched in the last
    ProfilerStep (and every CPU event from that step's start on)."""
    temporal: pd.DataFrame | None = None
    """``get_temporal_breakdown``: per rank ``idle_time(us)``, ``compute_time(us)``,
    ``non_compute_time(us)``, ``kernel_time(us)`` (first GPU start to last GPU end) and the
    three ``*_pctg``."""
    idle_time: pd.DataFrame | None = None
    """``get_idle_time_breakdown``: per rank and stream, ``idle_category`` (host_wait,
    kernel_wait, other), ``idle_time`` (us) and ``idle_time_ratio`` (of that stream's idle);
    sorted by rank and stream (HTA lists streams in file order)."""
    idle_by_category: pd.DataFrame | None = None
    """``idle_time`` summed over streams: per rank and category, ``idle_time`` (us) and
    ``idle_time_ratio`` (of the rank's idle time summed over streams)."""
    kernel_types: pd.DataFrame | None = None
    """``get_gpu_kernel_breakdown`` (memory kernels included), first table: ``kernel_type``,
    ``sum`` (us), ``percentage``."""
    top_kernels: pd.DataFrame | None = None
    """``get_gpu_kernel_breakdown``, second table: per kernel type and rank the top kernels by
    total time (``sum (us)``, ``max (us)``, ``min (us)``, ``stddev``, ``mean (us)``)."""
    comm_comp_overlap: pd.DataFrame | None = None
    """``get_comm_comp_overlap``: per rank ``comp_comm_overlap_pctg`` (NaN without NCCL kernels)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """HTA's own warnings and the analyses that failed on this trace."""

    def section(self, rank: int | None = None) -> dict:
        """Headline figures of one rank (the first if None) as plain numbers, for reports."""
        rank = self.ranks[0] if rank is None and self.ranks else rank
        out: dict = {}
        if self.temporal is not None:
            row = self.temporal[self.temporal["rank"] == rank]
            if len(row):
                r = row.iloc[0]
                for k in ("idle_time(us)", "compute_time(us)", "non_compute_time(us)",
                          "kernel_time(us)", "idle_time_pctg", "compute_time_pctg",
                          "non_compute_time_pctg"):
                    out[k] = float(r[k])
        if self.comm_comp_overlap is not None:
            row = self.comm_comp_overlap[self.comm_comp_overlap["rank"] == rank]
            if len(row):
                v = float(row.iloc[0]["comp_comm_overlap_pctg"])
                out["comp_comm_overlap_pctg"] = None if math.isnan(v) else v
        return out


def hta_installed() -> str | None:
    """HTA's version if it can be imported (``0.6.1``), else None; ``hta_release()`` names the
    distribution too."""
    try:
        from hta.version import __version_tuple__
    except ImportError:
        return None
    return ".".join(str(x) for x in __version_tuple__)


def hta_release() -> str | None:
    """The installed HTA as a person names it: ``traceinsight 0.6.1`` (or
    ``HolisticTraceAnalysis 0.5.0``), None when HTA cannot be imported."""
    version = hta_installed()
    if version is None:
        return None
    from importlib import metadata

    for dist in ("traceinsight", "HolisticTraceAnalysis"):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return f"{dist} {version}"
    return f"hta {version}"


def skipped(trace: Trace, reason: str) -> HtaResult:
    """The section for a trace it was not run on, saying why."""
    return HtaResult(available=False, reason=reason, hta_version=hta_installed(),
                     ranks=(trace.rank,), include_last_profiler_step=False,
                     hta_release=hta_release())


def compute(
    trace: Trace | TraceSet,
    rules: Rules | None = None,
    *,
    include_last_profiler_step: bool = False,
) -> HtaResult:
    """HTA's temporal breakdown, idle time by category, kernel breakdown and comm/comp overlap.

    ``trace``: one rank, or a ``TraceSet`` (its ranks go into one HTA trace, aligned to a common
    t=0 as HTA does for a directory). ``rules`` is accepted for the common analysis signature
    but changes nothing: HTA classifies kernels by its own name patterns (COMMUNICATION:
    ``^nccl.*Kernel``; MEMORY: ``^Memcpy|^Memset|^dma``). ``include_last_profiler_step``: HTA's
    option of the same name. Never raises for HTA's failures (see the module docstring).
    """
    del rules  # see the docstring: HTA's classification is HTA's own
    traces = trace.traces if isinstance(trace, TraceSet) else (trace,)
    version = hta_installed()
    ranks = tuple(t.rank for t in traces)
    common = dict(hta_version=version, ranks=ranks, hta_release=hta_release() if version else None,
                  include_last_profiler_step=include_last_profiler_step)
    if version is None:
        return HtaResult(available=False, reason=NOT_INSTALLED, **common)
    if not any(t.has_gpu for t in traces):
        return HtaResult(available=False, reason="the trace has no GPU activity", **common)

    notes: list[str] = []
    if any(rounds_to_us(t) for t in traces):
        notes.append(ROUNDING_NOTE)
    with _quiet_hta(notes):
        try:
            t = to_hta(traces, include_last_profiler_step=include_last_profiler_step)
        except _BridgeRefused as exc:
            return HtaResult(available=False, reason=str(exc), notes=tuple(notes), **common)
        from hta.analyzers.breakdown_analysis import BreakdownAnalysis
        from hta.analyzers.communication_analysis import CommunicationAnalysis

        temporal = _attempt(notes, "temporal breakdown",
                            lambda: BreakdownAnalysis.get_temporal_breakdown(t, visualize=False))
        idle = _attempt(notes, "idle time breakdown", lambda: _idle_time(t))
        kernels = _attempt(notes, "kernel breakdown", lambda: BreakdownAnalysis.get_gpu_kernel_breakdown(
            t, visualize=False, duration_ratio=0.8, num_kernels=TOP_KERNELS,
            include_memory_kernels=True, image_renderer=""))
        overlap = _attempt(notes, "comm/comp overlap",
                           lambda: CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False))
    computed = [x for x in (temporal, idle, kernels, overlap) if x is not None]
    return HtaResult(
        available=bool(computed),
        reason=None if computed else "every HTA analysis failed on this trace (see notes)",
        temporal=temporal,
        idle_time=idle,
        idle_by_category=_idle_by_category(idle) if idle is not None else None,
        kernel_types=kernels[0] if kernels is not None else None,
        top_kernels=kernels[1] if kernels is not None else None,
        comm_comp_overlap=overlap,
        notes=tuple(dict.fromkeys(notes)),
        **common,
    )


def _idle_time(t) -> pd.DataFrame:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis

    parts = [
        BreakdownAnalysis.get_idle_time_breakdown(
            t, CONSECUTIVE_KERNEL_DELAY_US, rank, None, visualize=False, visualize_pctg=False,
            show_idle_interval_stats=False)[0]
        for rank in t.get_ranks()
    ]
    # HTA lists streams in the order they first appear in its frame (file order): sort them
    return (pd.concat(parts, ignore_index=True)
            .sort_values(["rank", "stream"], kind="stable", ignore_index=True))


def _idle_by_category(idle: pd.DataFrame) -> pd.DataFrame:
    by = idle.groupby(["rank", "idle_category"], as_index=False)["idle_time"].sum()
    total = by.groupby("rank")["idle_time"].transform("sum")
    by["idle_time_ratio"] = np.where(total > 0, by["idle_time"] / total.where(total > 0, 1), 0.0)
    return by


def _attempt(notes: list[str], what: str, fn):
    try:
        return fn()
    except Exception as exc:  # HTA's own failure on this trace: reported, never fatal
        notes.append(f"HTA's {what} failed on this trace: {type(exc).__name__}: {exc}")
        return None


class _BridgeRefused(Exception):
    """The trace has a shape on which HTA's own parser would fail (message says which)."""


class _NoteHandler(logging.Handler):
    def __init__(self, notes: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.notes = notes

    def emit(self, record: logging.LogRecord) -> None:
        self.notes.append(f"HTA: {record.getMessage()}")


@contextlib.contextmanager
def _quiet_hta(notes: list[str]) -> Iterator[None]:
    """Collect HTA's log warnings into ``notes`` and keep its Python warnings off stderr."""
    log = logging.getLogger("hta")
    handler = _NoteHandler(notes)
    saved = (log.propagate, log.level)
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.removeHandler(handler)
        log.propagate, log.level = saved


# ---- the bridge ------------------------------------------------------------------------------


def to_hta(traces: tuple[Trace, ...] | list[Trace], *, include_last_profiler_step: bool = False):
    """HTA's ``hta.common.trace.Trace`` for these ranks, loaded as ``TraceAnalysis`` loads it.

    The JSON parse of ``Trace.load_traces`` is replaced by tracekit's columns (``_rank_frame``);
    HTA's own code then aligns the ranks and filters the window. Raises ``_BridgeRefused`` where
    HTA's parser itself would fail.
    """
    from hta.common.trace import Trace as HtaTrace
    from hta.common.trace import transform_correlation_to_index
    from hta.common.trace_symbol_table import TraceSymbolTable

    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        raise _BridgeRefused(f"duplicate ranks {ranks}: HTA keys traces by rank")
    symbols = TraceSymbolTable()
    built = [_rank_frame(tr) for tr in traces]
    for _, used, _ in built:
        symbols.add_symbols(used)
    sym = symbols.get_sym_id_map()
    frames: dict[int, pd.DataFrame] = {}
    for tr, (df, _, categories) in zip(traces, built):
        # name and cat: codes into tracekit's category lists -> ids into HTA's symbol table
        name_ids = np.array([sym.get(str(c), -1) for c in categories], dtype=np.int64)
        cat_ids = np.array([sym.get(c, -1) for c in _cat_names(tr)], dtype=np.int64)
        df["cat"] = cat_ids[df["cat"].to_numpy()]
        df["name"] = name_ids[df["name"].to_numpy()] if len(name_ids) else df["name"]
        df = transform_correlation_to_index(df, symbols)
        _add_iteration(df, symbols)
        df["end"] = df["ts"] + df["dur"]
        frames[tr.rank] = df

    t = HtaTrace(trace_files={}, trace_dir=os.path.dirname(traces[0].source) or ".")

    def parse_traces(**_kw) -> None:  # stands in for HTA's JSON parse inside load_traces
        t.traces = frames
        t.meta_data = {tr.rank: dict(tr.metadata) for tr in traces}
        t.trace_files = {tr.rank: tr.source for tr in traces}
        t.symbol_table = symbols
        t.is_parsed = True

    t.parse_traces = parse_traces
    t.load_traces(include_last_profiler_step=include_last_profiler_step,
                  use_multiprocessing=False, use_memory_profiling=False)
    return t


def hta_window(trace: Trace, *, include_last_profiler_step: bool = False) -> np.ndarray:
    """Mask over ``trace.events``: the events HTA's analyses see after its ``load_traces``
    (every CPU event before the last ProfilerStep's start and the GPU activities they launched,
    unless ``include_last_profiler_step``; everything if the trace has fewer than two steps).
    Lets tracekit's own analyses run on exactly HTA's window."""
    with _quiet_hta([]):
        t = to_hta([trace], include_last_profiler_step=include_last_profiler_step)
    mask = np.zeros(len(trace.events), dtype=bool)
    mask[t.traces[trace.rank]["index"].to_numpy(np.int64) - 1] = True
    return mask


def _fractional_us(trace: Trace) -> bool:
    """Whether HTA reads this trace's ``ts`` as float64 (some event has a fraction of a us)."""
    return bool((trace.events["ts"].to_numpy(np.int64) % 1000 != 0).any()
                or (trace.memory["ts"].to_numpy(np.int64) % 1000 != 0).any())


def rounds_to_us(trace: Trace) -> bool:
    """Whether HTA rounds this trace's times inward to whole microseconds (nanosecond traces,
    unless ``HTA_DISABLE_NS_ROUNDING=1``)."""
    from hta.configs import env_options

    return _fractional_us(trace) and not env_options.disable_ns_rounding()


def _hta_times(trace: Trace, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ts, dur) in HTA's microseconds for the kept events (see the module docstring)."""
    from hta.configs import env_options

    ts_ns = trace.events["ts"].to_numpy(np.int64)[keep]
    dur_ns = trace.events["dur"].to_numpy(np.int64)[keep]
    dur_us = dur_ns / 1000.0
    if not _fractional_us(trace):
        return ts_ns // 1000, dur_us
    q, r = np.divmod(ts_ns, 1000)
    ts_f = q.astype(np.float64) + r / 1000.0  # the float64 json.load gives for "q.rrr"
    if env_options.disable_ns_rounding():
        return ts_f, dur_us
    ts = np.ceil(ts_f)
    end = np.floor(ts_f + dur_us)
    return ts.astype(np.int64), end - ts


def _cat_names(trace: Trace) -> list[str]:
    """HTA's category string of each ``Kind`` (by value) for this trace's schema."""
    cat_of = _CAT_LEGACY if trace.schema == "legacy2021" else _CAT_PT2
    return [cat_of[Kind(k)] for k in range(len(Kind))]


def _rank_frame(trace: Trace) -> tuple[pd.DataFrame, list[str], pd.Index]:
    """One rank's events in HTA's parser layout, with ``cat`` as the ``Kind`` and ``name`` as a
    code into the returned categories (``to_hta`` turns both into symbol ids).

    Returns the frame (indexed by ``index``, like HTA's before ``load_traces``), the symbols it
    uses and tracekit's name categories.
    """
    ev = trace.events
    kind = ev["kind"].to_numpy(np.int8)
    codes = ev["name"].cat.codes.to_numpy()
    categories = ev["name"].cat.categories
    span = np.array([bool(_PROFILER_SPAN.match(str(s))) for s in categories], dtype=bool)
    keep = ~((kind == int(Kind.OTHER)) & span[codes]) if len(codes) else np.zeros(0, bool)
    kind = kind[keep]
    codes = codes[keep]
    legacy = trace.schema == "legacy2021"
    cat_names = _cat_names(trace)

    stream = ev["stream"].to_numpy(np.int64)[keep]
    # HTA keeps args.stream wherever it is written: GPU-side events, and a cpu_op that names
    # one (the loader reads it for cpu_ops only: Triton's launchers)
    stream = np.where(fnp.isin(kind, [int(k) for k in (*_STREAM_KINDS, Kind.CPU_OP)]), stream, -1)
    ext = ev["external_id"].to_numpy(np.int64)[keep]
    if legacy:
        ext = np.where(fnp.isin(kind, [int(k) for k in _LEGACY_EXTERNAL_ID_KINDS]), ext, -1)
    ts, dur = _hta_times(trace, keep)
    n = int(keep.sum())
    index = np.flatnonzero(keep).astype(np.int64) + 1  # row in trace.events + 1 (HTA: > 0)
    names_used = categories[np.bincount(codes, minlength=len(categories)) > 0] if n else categories[:0]
    frame = pd.DataFrame(
        {
            "index": index,
            "cat": kind.astype(np.int64),  # a Kind: to a symbol id in to_hta
            "name": codes.astype(np.int64),  # a code into `categories`: likewise
            "pid": ev["pid"].to_numpy(np.int64)[keep],
            "tid": ev["tid"].to_numpy(np.int64)[keep],
            "ts": ts,
            "dur": np.asarray(dur, dtype=np.float64),
            "stream": stream.astype(np.int32),
            "correlation": ev["correlation"].to_numpy(np.int64)[keep],
            "bytes": ev["bytes"].to_numpy(np.int64)[keep],
            "external_id": ext,
        },
        index=pd.Index(index),
        copy=False,  # fresh arrays (fancy-indexed copies): no block stacking, trace untouched
    )
    used = list(dict.fromkeys([*(cat_names[k] for k in np.unique(kind)), *map(str, names_used)]))
    return frame, used, categories


def _version_at_least(major: int, minor: int) -> bool:
    """Whether the installed HTA is at least ``major.minor`` (the bridge follows the parser of
    the release installed: traceinsight 0.6 numbers the steps of Triton's cpu_ops, 0.5 did not)."""
    v = hta_installed()
    if v is None:
        return False
    parts = [int(x) for x in re.findall(r"\d+", v)[:2]]
    return tuple(parts) >= (major, minor)


def _add_iteration(df: pd.DataFrame, symbols) -> None:
    """HTA's ``add_iteration``, vectorised (same result; HTA's runs a Python loop per row)."""
    table = symbols.get_sym_table()
    step_ids = {i: s for i, s in enumerate(table) if s.startswith("ProfilerStep")}
    name = df["name"].to_numpy()
    is_step = fnp.isin(name, list(step_ids)) if step_ids else np.zeros(len(df), bool)
    step_iter = {}
    for i, s in step_ids.items():
        m = _STEP_NUMBER.match(s)
        if m is None:
            if (name == i).any():
                raise _BridgeRefused(
                    f"HTA cannot number the step {s!r} (it expects 'ProfilerStep#<n>')")
            continue
        n = int(m.group(1))
        if n > np.iinfo(np.int64).max:
            if (name == i).any():
                raise _BridgeRefused(f"HTA cannot number the step {s[:40]!r}... (beyond int64)")
            continue
        step_iter[i] = n
    ts = df["ts"].to_numpy()
    stream = df["stream"].to_numpy()
    cpu = stream < 0
    if _version_at_least(0, 6) and "cpu_op" in table:
        # traceinsight: a cpu_op on stream 0 (Triton's launcher) takes its step by its ts too
        cpu |= (stream == 0) & (df["cat"].to_numpy() == table.index("cpu_op"))
    iteration = np.full(len(df), np.nan)
    it_cpu = np.full(int(cpu.sum()), -1, dtype=np.int64)
    s_rows = np.flatnonzero(is_step)
    if len(s_rows):
        s_ts = ts[s_rows]
        s_end = s_ts + df["dur"].to_numpy()[s_rows]
        s_it = np.array([step_iter[i] for i in name[s_rows]], dtype=np.int64)
        t_cpu = ts[cpu]
        if bool(np.all(s_end[:-1] <= s_ts[1:])):  # steps in order, disjoint: a binary search
            k = np.searchsorted(s_ts, t_cpu, side="right") - 1
            inside = (k >= 0) & (t_cpu < s_end[np.maximum(k, 0)])
            it_cpu[inside] = s_it[k[inside]]
        else:  # the last step (in row order) whose [ts, ts + dur) holds the event's ts wins
            for k in range(len(s_rows)):
                it_cpu[(t_cpu >= s_ts[k]) & (t_cpu < s_end[k])] = s_it[k]
    iteration[cpu] = it_cpu
    gpu = stream > 0
    ic = df["index_correlation"].to_numpy()
    index = df["index"].to_numpy()  # increasing (see _rank_frame)
    pos = np.minimum(np.searchsorted(index, ic), len(index) - 1)
    found = index[pos] == ic
    looked = np.where(found, iteration[pos], np.nan)
    iteration[gpu] = np.where(ic[gpu] > 0, looked[gpu], -1)
    df["iteration"] = pd.to_numeric(pd.Series(iteration, index=df.index), downcast="integer")
