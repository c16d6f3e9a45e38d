"""The one place that knows the shape of tracekit's results as Python objects: it turns a
rank's ``tracekit.api.LoadedTrace`` and its ``Analysis`` (and, for gaps and compare, report
objects) into the small, display-ready tables the views draw. Pure functions, no plotting. (What the first page needs from a report object,
without numpy or pandas, is ``dashboards.reports``.)

Times in columns called ``*_ms`` are milliseconds; bytes are in the unit a view chose
(``bytes_unit``: GiB from 1 GiB up, else MiB), named in the column or returned beside it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd

from dashboards import names, timeline
from dashboards.reports import bound_text, category_name, pct
from tracekit.api import DEFAULT_STREAM_CUPTI, LoadedTrace

NS_PER_MS = 1e6
MIB = 2**20


def steps(trace: LoadedTrace, analysis: Any) -> pd.DataFrame:
    """``step, start_ns, end_ns`` per step: its span (absolute, CPU ∪ GPU), which the timeline draws."""
    s = analysis.steps.steps
    if s.empty:
        return pd.DataFrame(columns=["step", "start_ns", "end_ns"])
    gpu_start = s["gpu_start"].to_numpy(np.int64)
    gpu_end = s["gpu_end"].to_numpy(np.int64)
    has_gpu = gpu_start >= 0
    start = np.where(has_gpu, np.minimum(s["cpu_start"].to_numpy(np.int64), gpu_start), s["cpu_start"].to_numpy(np.int64))
    end = np.where(has_gpu, np.maximum(s["cpu_end"].to_numpy(np.int64), gpu_end), s["cpu_end"].to_numpy(np.int64))
    return pd.DataFrame({
        "step": s["step"].to_numpy(),
        "start_ns": start,
        "end_ns": end,
    })


MARK_LANES = timeline.MARK_LANES
MARK_LANE = {"step": MARK_LANES[0], "critical": MARK_LANES[1], "gap": MARK_LANES[2], "stall": MARK_LANES[3]}
"""The lane of each kind of mark: a lane holds only its own marks."""


def timeline_marks(trace: LoadedTrace, analysis: Any, origin: int, window_ms: tuple[float, float] | None = None) -> pd.DataFrame:
    """What the timeline marks, in ms from ``origin``: ``lane`` (one of ``MARK_LANES``),
    ``start_ms, dur_ms, label, kind, category``: every step's span (``step``), the critical
    path's segments (``critical``, from tracekit explain: ``category`` says what the time was;
    only those inside ``window_ms`` when given, a trace has thousands), every positive
    optimizer → next lookup gap (``gap``: from the optimizer's end to the lookup's start) and
    every sync stall (``stall``: the blocking call's CPU time)."""
    cols = ["lane", "start_ms", "dur_ms", "label", "kind", "category"]
    parts = []
    st = steps(trace, analysis)
    if len(st):
        parts.append(pd.DataFrame({"lane": MARK_LANE["step"], "start_ms": (st["start_ns"] - origin) / NS_PER_MS,
                                   "dur_ms": (st["end_ns"] - st["start_ns"]) / NS_PER_MS,
                                   "label": [f"step {s}" for s in st["step"]], "kind": "step"}))
    path = getattr(getattr(analysis, "explain", None), "path", None)
    if path is not None and len(path):
        start = (path["start"].to_numpy(np.int64) - origin) / NS_PER_MS
        end = (path["end"].to_numpy(np.int64) - origin) / NS_PER_MS
        keep = (end > window_ms[0]) & (start < window_ms[1]) if window_ms is not None else np.ones(len(path), bool)
        p = path[keep]
        cats = p["category"].astype(str).tolist()
        parts.append(pd.DataFrame({
            "lane": MARK_LANE["critical"], "start_ms": start[keep], "dur_ms": end[keep] - start[keep],
            "label": [f"step {st} · {category_name(c)}: {str(n)[:90]}<br>{w} · {d / NS_PER_MS:,.3f} ms"
                      for st, c, n, w, d in zip(p["step"], cats, p["name"], p["what"], p["dur"])],
            "kind": "critical", "category": cats}))
    g = analysis.gaps.gaps
    if len(g):
        g = g[g["gap_ns"] > 0]
        parts.append(pd.DataFrame({"lane": MARK_LANE["gap"], "start_ms": (g["optimizer_end"] - origin) / NS_PER_MS,
                                   "dur_ms": g["gap_ns"] / NS_PER_MS,
                                   "label": [f"gap {v / NS_PER_MS:,.3f} ms (GPU idle {i / NS_PER_MS:,.3f} ms) before lookup of batch {b}"
                                             for v, i, b in zip(g["gap_ns"], g["idle_ns"], g["lookup_batch"])],
                                   "kind": "gap"}))
    y = analysis.syncs.stalls
    if len(y):
        parts.append(pd.DataFrame({"lane": MARK_LANE["stall"], "start_ms": (y["ts"] - origin) / NS_PER_MS,
                                   "dur_ms": y["dur_ns"] / NS_PER_MS,
                                   "label": [f"{n}: {d / NS_PER_MS:,.3f} ms<br>{c[-90:]}" for n, d, c in zip(y["name"], y["dur_ns"], y["call_site"])],
                                   "kind": "stall"}))
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True).reindex(columns=cols)


LANES_KEPT = 16
"""Traces whose lanes ``lane_events`` keeps (least recently used dropped first)."""
_LANES: "OrderedDict[int, tuple[Any, pd.DataFrame, int, dict]]" = OrderedDict()
_LANES_LOCK = threading.Lock()


def _roles(busy: pd.DataFrame) -> dict[tuple[int, int], str]:
    """``dashboards.names.stream_roles`` of every (device, stream) from tracekit's phase
    assignment (``tracekit.lanes.Lanes.stream_busy``)."""
    if busy.empty:
        return {}
    by_phase: dict[tuple[int, int], dict[str, float]] = {}
    copies: dict[tuple[int, int], float] = {}
    for d, st, ph, b, c in busy[["device", "stream", "phase", "busy_ns", "copy_ns"]].itertuples(index=False):
        by_phase.setdefault((int(d), int(st)), {})[ph] = float(b)
        copies[(int(d), int(st))] = copies.get((int(d), int(st)), 0.0) + float(c)
    return names.stream_roles(by_phase, copies)


def _lanes_entry(trace: LoadedTrace) -> tuple[pd.DataFrame, int, dict[tuple[int, int], str]]:
    """(lane events, origin, stream names) of a rank's trace, memoised per ``LoadedTrace``."""
    import weakref

    key = id(trace)
    with _LANES_LOCK:
        hit = _LANES.get(key)
        if hit is not None and hit[0]() is trace:
            _LANES.move_to_end(key)
            return hit[1], hit[2], hit[3]
    lanes = trace.lanes()
    trace.release()  # the activities the lanes were read from: the lanes are kept here
    roles = _roles(lanes.stream_busy)
    n_dev = len({d for d, _ in roles})
    stream_names = {k: names.stream_label(k[0], k[1], r, n_dev) for k, r in roles.items()}
    events, origin = timeline.lane_events(lanes, stream_names=stream_names)
    with _LANES_LOCK:
        _LANES[key] = (weakref.ref(trace), events, origin, stream_names)
        while len(_LANES) > LANES_KEPT:
            _LANES.popitem(last=False)
    return events, origin, stream_names


def lane_events(trace: LoadedTrace) -> tuple[pd.DataFrame, int]:
    """``dashboards.timeline.lane_events`` of a rank's trace, GPU lanes named by role and CPU
    lanes by thread."""
    events, origin, _ = _lanes_entry(trace)
    return events, origin


def stream_names(trace: LoadedTrace) -> dict[tuple[int, int], str]:
    """(device, stream) -> the name the timeline gives that stream (``main · stream 7``)."""
    return _lanes_entry(trace)[2]


def overlap(trace: LoadedTrace, analysis: Any, stream_names: dict[tuple[int, int], str]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame] | None:
    """(stream × stream overlap ms, NaN on the diagonal; busy ms per stream; class bars; the
    figures as text), streams named by ``stream_names``; None without GPU activity."""
    ov = analysis.overlap
    st = ov.streams
    if st.empty:
        return None
    labels = [stream_names.get((int(d), int(s)), f"GPU {d} · stream {s}") for d, s in zip(st["device"], st["stream"])]
    pos = {(int(d), int(s)): i for i, (d, s) in enumerate(zip(st["device"], st["stream"]))}
    m = np.zeros((len(labels), len(labels)))
    devices = st["device"].to_numpy()
    m[devices[:, None] != devices[None, :]] = np.nan  # streams of different GPUs never share a device
    np.fill_diagonal(m, np.nan)
    for rec in ov.pairs.itertuples(index=False):
        a, b = pos[(int(rec.device), int(rec.stream_a))], pos[(int(rec.device), int(rec.stream_b))]
        m[a, b] = m[b, a] = rec.overlap_ns / NS_PER_MS
    matrix = pd.DataFrame(m, index=labels, columns=labels)
    busy = pd.DataFrame({"stream": labels, "busy_ms": st["busy_ns"].to_numpy(np.float64) / NS_PER_MS})
    classes = pd.DataFrame({
        "class": ["compute", "communication", "memcpy"],
        "busy_ms": [ov.compute_ns / NS_PER_MS, ov.communication_ns / NS_PER_MS, ov.memcpy_ns / NS_PER_MS],
        "exposed_ms": [np.nan, ov.exposed_comm_ns / NS_PER_MS, ov.exposed_memcpy_ns / NS_PER_MS],
    })
    ms = lambda ns: f"{ns / NS_PER_MS:,.3f} ms"  # noqa: E731
    ratios = pd.DataFrame({
        "figure": ["GPU busy (any stream)", "compute", "communication", "memcpy",
                   "communication overlapped by compute", "overlap ratio of communication",
                   "exposed communication (not under compute)", "exposed memcpy (not under compute or communication)"],
        "value": [ms(ov.gpu_busy_ns), ms(ov.compute_ns), ms(ov.communication_ns), ms(ov.memcpy_ns),
                  ms(ov.comm_compute_overlap_ns), pct(ov.comm_overlap_ratio) if ov.communication_ns else "no communication",
                  ms(ov.exposed_comm_ns), ms(ov.exposed_memcpy_ns)],
    })
    return matrix, busy, classes, ratios


def gaps(report: dict) -> pd.DataFrame | None:
    """Per optimizer → next lookup pair of one rank's report object: ``step`` (label), ``kind``
    (``gap``: the lookup starts after the optimizer ends; ``overlap``: it starts while the
    optimizer runs; ``ahead``: it started before the optimizer did, as in a pipeline that looks
    up one step ahead, SemiSync), ``gap_ms`` (signed, as tracekit reports it: the table, the
    overview and compare write it), and ``gap_ms`` cut into the parts the charts stack, which add
    up to it: ``idle_ms`` (GPU idle inside a positive gap), ``busy_ms`` (the rest of a positive
    gap: the GPU ran other work), ``early_ms`` (a negative gap of an ``overlap`` pair: the
    lookup started that long before the optimizer's end), ``ahead_gap_ms`` (a negative gap of an
    ``ahead`` pair); then ``overlap_ms`` (GPU time the lookup's and the optimizer's activities ran
    at once), ``ahead_ms`` (how long before the optimizer's start the lookup started), the
    batches and how they were matched; None when there is no pair."""
    g = pd.DataFrame(report["gaps"]["gaps"])
    if g.empty:
        return None
    multi = g["device"].nunique() > 1
    label = [
        (f"{s}" if s is not None and s >= 0 else f"#{i}") + (f" (GPU {d})" if multi else "")
        for i, (s, d) in enumerate(zip(g["step"], g["device"]))
    ]
    gap = g["gap_ns"].to_numpy(np.float64) / NS_PER_MS
    idle = g["idle_ns"].to_numpy(np.float64) / NS_PER_MS
    ahead = g["lookup_start"].to_numpy(np.int64) < g["optimizer_start"].to_numpy(np.int64)
    kind = np.where(ahead, "ahead", np.where(gap >= 0, "gap", "overlap"))
    positive = gap >= 0
    idle_part = np.where(positive, np.clip(idle, 0.0, np.maximum(gap, 0.0)), 0.0)
    return pd.DataFrame({
        "step": label,
        "kind": kind,
        "gap_ms": gap,
        "idle_ms": idle_part,
        "busy_ms": np.where(positive, gap - idle_part, 0.0),
        "early_ms": np.where(~positive & ~ahead, gap, 0.0),
        "ahead_gap_ms": np.where(~positive & ahead, gap, 0.0),
        "overlap_ms": g["overlap_ns"].to_numpy(np.float64) / NS_PER_MS,
        "ahead_ms": np.where(ahead, (g["optimizer_start"] - g["lookup_start"]).to_numpy(np.float64) / NS_PER_MS, 0.0),
        "optimizer batch": g["optimizer_batch"].to_numpy(),
        "lookup batch": g["lookup_batch"].to_numpy(),
        "matched by": g["matched_by"].to_numpy(),
    })


GAP_PARTS = ("idle_ms", "busy_ms", "early_ms", "ahead_gap_ms")
"""The columns of ``gaps`` that add up to the signed gap (what the charts stack)."""


def gap_summary(g: pd.DataFrame) -> str:
    """A few sentences on a trace's pairs: the mean signed gap (the overview's and compare's
    figure), and what it means for each kind of pair."""
    parts = [f"Mean gap over {len(g)} step(s): {g['gap_ms'].mean():,.3f} ms (the lookup's start minus the optimizer's end; "
             "negative: the lookup started before the optimizer ended)"]
    kinds = set(g["kind"])
    if "gap" in kinds:
        k = g[g["kind"] == "gap"]
        parts.append(f"{len(k)} step(s) where the next lookup waited for the optimizer: mean gap "
                     f"{k['gap_ms'].mean():,.3f} ms, of which the GPU sat idle {k['idle_ms'].mean():,.3f} ms")
    if "overlap" in kinds:
        k = g[g["kind"] == "overlap"]
        parts.append(f"{len(k)} step(s) where the lookup started {-k['gap_ms'].mean():,.3f} ms before the optimizer ended "
                     f"(their GPU work overlapped {k['overlap_ms'].mean():,.3f} ms)")
    if "ahead" in kinds:
        k = g[g["kind"] == "ahead"]
        parts.append(f"{len(k)} step(s) where the next batch's lookup ran {k['ahead_ms'].mean():,.3f} ms before the optimizer "
                     "started (a pipeline that looks up one step ahead, as SemiSync does): the optimizer does not delay it")
    return "; ".join(parts) + "."


STALL_COLUMNS = ["call site", "phase", "count", "total ms", "max ms", "GPU idle after ms", "% of step time"]


def stalls(trace: LoadedTrace, analysis: Any) -> tuple[pd.DataFrame, pd.DataFrame, float, float | None]:
    """(by call site and phase: ``STALL_COLUMNS``; per step stall ms; total ms; the total as a
    share of the steps' CPU time, None without steps). ``% of step time`` is each row's stall
    time inside steps over the sum of the steps' CPU spans; a stall outside any phase
    annotation has phase ``(outside phases)``."""
    sy = analysis.syncs
    st = sy.stalls
    step_ns = float(analysis.steps.steps["cpu_ns"].sum()) if len(analysis.steps.steps) else 0.0
    if st.empty:
        by = pd.DataFrame(columns=STALL_COLUMNS)
    else:
        st = st.assign(phase=st["phase"].astype(str).replace({"other": "(outside phases)"}),
                       in_step=np.where(st["step"].to_numpy() >= 0, st["dur_ns"].to_numpy(np.float64), 0.0))
        grp = st.groupby(["call_site", "phase"], sort=False, dropna=False)
        by = pd.DataFrame({
            "count": grp.size(),
            "total ms": grp["dur_ns"].sum() / NS_PER_MS,
            "max ms": grp["dur_ns"].max() / NS_PER_MS,
            "GPU idle after ms": grp["idle_after_ns"].sum(min_count=1) / NS_PER_MS,
            "% of step time": [pct(v / step_ns) for v in grp["in_step"].sum()] if step_ns else "–",
        }).reset_index().rename(columns={"call_site": "call site"})
        by = by.sort_values("total ms", ascending=False, kind="stable", ignore_index=True)
        by["count"] = by["count"].astype(int)
        by = by[STALL_COLUMNS]
    ps = sy.by_step
    per_step = pd.DataFrame({
        "step": [str(s) if s >= 0 else "outside steps" for s in ps["step"]] if not ps.empty else [],
        "stall_ms": ps["total_ns"].to_numpy(np.float64) / NS_PER_MS if not ps.empty else [],
    })
    in_steps = float(st.loc[st["step"] >= 0, "dur_ns"].sum()) if not st.empty else 0.0
    return by, per_step, sy.total_ns / NS_PER_MS, (in_steps / step_ns if step_ns else None)


def bytes_unit(peak: float) -> tuple[str, float]:
    """The unit the memory view writes every byte figure of a trace in: GiB from 1 GiB up, else MiB."""
    return ("GiB", float(2**30)) if peak >= 2**30 else ("MiB", float(MIB))


def memory(trace: LoadedTrace, analysis: Any) -> dict | None:
    """For the device with the highest allocated peak: ``unit`` (GiB or MiB, chosen by the peak
    and used for every figure of the view), ``series`` (``t_ms, allocated, reserved`` in that
    unit; reserved NaN when unknown), ``peaks`` (table ``what, value, at ms``) and ``marks``
    (``(name, t_ms, value)`` to mark). None without CUDA memory events."""
    al = analysis.allocator
    if al.series.empty:
        return None
    dev_row = al.devices.sort_values("peak_allocated", ascending=False).iloc[0]
    dev = int(dev_row["device"])
    s = al.series[al.series["device"] == dev]
    origin = trace.origin  # the timeline's time 0 too
    peak_a, peak_r = int(dev_row["peak_allocated"]), int(dev_row["peak_reserved"])
    unit, scale = bytes_unit(max(peak_a, peak_r))
    res = s["reserved"].to_numpy(np.float64)
    series = pd.DataFrame({
        "t_ms": (s["ts"].to_numpy(np.int64) - origin) / NS_PER_MS,
        "allocated": s["allocated"].to_numpy(np.float64) / scale,
        "reserved": np.where(res >= 0, res / scale, np.nan),
    })
    at = lambda ts: (int(ts) - origin) / NS_PER_MS  # noqa: E731
    b = lambda n: f"{n / scale:,.2f} {unit}"  # noqa: E731
    rows = [(f"peak allocated (GPU {dev})", b(peak_a), at(dev_row["peak_allocated_ts"]))]
    marks = [("peak allocated", at(dev_row["peak_allocated_ts"]), peak_a / scale)]
    if peak_r >= 0:
        rows.append((f"peak reserved (GPU {dev})", b(peak_r), at(dev_row["peak_reserved_ts"])))
        rows.append(("reserved − allocated at the reserved peak", b(int(dev_row["unused_at_peak_reserved"]))
                     + f" ({pct(float(dev_row['unused_fraction']))} of reserved)", np.nan))
        marks.append(("peak reserved", at(dev_row["peak_reserved_ts"]), peak_r / scale))
    else:
        rows.append(("reserved", "not in this trace" + (" (allocated rebuilt from Bytes: a lower bound)"
                                                         if bool(dev_row["reconstructed"]) else ""), np.nan))
    rows.append(("memory events (GPU %d)" % dev, f"{int(dev_row['events']):,}", np.nan))
    return {"unit": unit, "series": series, "peaks": pd.DataFrame(rows, columns=["what", "value", "at ms"]), "marks": marks}


def snapshot(trace: LoadedTrace, analysis: Any, stream_names: dict[tuple[int, int], str]) -> tuple[str, pd.DataFrame] | None:
    """(unit, per stream of the snapshot beside the trace: ``stream`` (the allocator's handle),
    ``on the timeline`` (the timeline's name of the CUPTI stream that handle was matched to,
    ``tracekit.analyses.snapshot_streams``: the default stream, handle 0, is CUPTI's stream 7;
    another handle by the allocations both files record, or why it cannot be told), ``votes``
    (allocations for that stream / allocations that voted), reserved / allocated / pending free
    / free in that unit: reserved = allocated + pending free (freed by the program, waiting for
    the streams it was used on: ``active_pending_free``) + free); None without a snapshot.
    Handles are written in decimal, as ``tracekit analyze`` and docs/metrics.md write them."""
    snap = getattr(analysis, "snapshot", None)
    if snap is None or snap.streams.empty:
        return None
    st = snap.streams
    unit, scale = bytes_unit(float(st["reserved"].max()))
    n_dev = st["device"].nunique()
    match = getattr(analysis, "snapshot_streams", None)
    rows = {} if match is None else {(int(r.device), int(r.handle)): r for r in match.streams.itertuples(index=False)}

    def handle(d, s, main):
        text = "default stream (handle 0)" if int(s) == 0 else f"side stream (handle {int(s)})"
        text += " · main" if main else ""
        return text if n_dev <= 1 else f"GPU {d} · {text}"

    def on_timeline(d, s):
        r = rows.get((int(d), int(s)))
        cupti = DEFAULT_STREAM_CUPTI if int(s) == 0 else (r.cupti_stream if r is not None else -1)
        if cupti < 0:
            return "cannot be told" + (f" ({r.how})" if r is not None else "")
        return stream_names.get((int(d), int(cupti)), f"stream {cupti} (no activity in the trace)")

    def votes(d, s):
        r = rows.get((int(d), int(s)))
        if r is None or not r.matched:
            return "no allocation matched"
        return f"{r.votes} of {r.matched} ({pct(float(r.share))})"

    return unit, pd.DataFrame({
        "stream": [handle(d, s, m) for d, s, m in zip(st["device"], st["stream"], st["is_main"])],
        "on the timeline": [on_timeline(d, s) for d, s in zip(st["device"], st["stream"])],
        "votes": [votes(d, s) for d, s in zip(st["device"], st["stream"])],
        f"reserved {unit}": st["reserved"].to_numpy(np.float64) / scale,
        f"allocated {unit}": st["allocated"].to_numpy(np.float64) / scale,
        f"pending free {unit}": st["pending_free"].to_numpy(np.float64) / scale,
        f"free {unit}": st["free"].to_numpy(np.float64) / scale,
    })


def snapshot_note(analysis: Any) -> str:
    """How the snapshot's streams were matched to the timeline's (under the snapshot table)."""
    text = ("The snapshot names streams by their cudaStream_t handle, the trace by CUPTI's stream id. The default "
            "stream (handle 0) is CUPTI's stream 7. Another handle is matched by the allocations both files record: "
            "the snapshot's history gives each address its handle; the trace's [memory] event at that address sits "
            "in the CPU op that allocated, and the GPU work that op launched names a CUPTI stream. Each such "
            "allocation is a vote; a handle is named with ")
    match = getattr(analysis, "snapshot_streams", None)
    if match is None:
        return text + "enough votes and a clear majority (none were counted here)."
    return text + (f"at least {match.min_votes} votes and {pct(match.min_share)} of them for one stream, else it "
                   f"cannot be told. {match.voting:,} of the trace's {match.allocations:,} allocations at an address "
                   "the snapshot knows voted.")


# ---- a job of many ranks (tracekit.ranks' job object) ---------------------------------------------

def job_summary(job: dict) -> str:
    """The job in a few sentences: ranks read, the straggler and the wait it caused, the spread
    of step time, the clocks, the all-to-all balance."""
    ms = lambda ns: f"{ns / NS_PER_MS:,.3f} ms"  # noqa: E731
    ws = job.get("world_size")
    parts = [f"{job['ranks_read']} rank(s) read" + (f" of world size {ws}" if ws else "")
             + ("" if job.get("complete") else " — incomplete: see below") + "."]
    st = job.get("stragglers") or {}
    if st.get("rank") is not None:
        parts.append(f"Straggler: rank {st['rank']}, last to arrive at {st['last_count']} of {st['instances']} collectives; "
                     f"the others waited {ms(st['caused_wait_ns'])} for it ({pct(st.get('share'))} of all the wait, "
                     f"{ms(st['waited_ns'])})" + (f"; its steps are {st['bound']}-bound ({pct(st.get('bound_share'))})"
                                                   if st.get("bound") else "") + ".")
    else:
        parts.append("No straggler: no collective's arrivals differed by more than "
                     f"{ms(st.get('min_skew_ns', 0))}.")
    sp = (job.get("spread") or {}).get("p90")
    if sp:
        parts.append(f"Step time P90 ({(job['spread'] or {}).get('figure', 'step').replace('step_', '').upper()}): "
                     f"{ms(sp['min_ns'])} (rank {sp['fastest_rank']}) to {ms(sp['max_ns'])} (rank {sp['slowest_rank']}), "
                     f"the slowest {100 * (sp['max_over_median'] - 1):.1f}% over the median.")
    clock = job.get("clock") or {}
    offs = [o for o in clock.get("offsets") or [] if o.get("offset_ns") is not None]
    if offs:
        worst = max(offs, key=lambda o: abs(o["offset_ns"]))
        parts.append(("Clocks aligned on collective ends" if clock.get("aligned") else "Clocks NOT aligned")
                     + f" (largest offset {ms(worst['offset_ns'])}, rank {worst['rank']}).")
    a2a = job.get("all_to_all") or {}
    if a2a.get("instances") and a2a.get("imbalance") is not None:
        parts.append(f"All-to-all: {a2a['instances']} instances; the heaviest rank ({a2a['heaviest_rank']}) received "
                     f"{a2a['imbalance']:.3f}× the mean.")
    elif a2a.get("instances"):
        parts.append(f"All-to-all: {a2a['instances']} instances, their sizes not in the traces.")
    return " ".join(parts)


def job_graph_ranks(job: dict) -> pd.DataFrame | None:
    """One row per rank of the job's graph (the ranks' graphs joined at their collectives): its
    step, own work, transfers and wait per step, whom it waits for, what its own work is mostly;
    None without a graph."""
    g = job.get("graph") or {}
    if not g.get("ranks"):
        return None
    ms = lambda ns: ns / NS_PER_MS  # noqa: E731
    return pd.DataFrame([{
        "rank": r["rank"], "step ms": ms(r["step_ns"]), "own work ms": ms(r["own_ns"]),
        "transfer ms": ms(r["transfer_ns"]), "wait ms": ms(r["wait_ns"]),
        "waits for": ", ".join(f"rank {w['rank']} {ms(w['ns']):,.3f} ms" for w in r["waits_for"][:2]) or "–",
        "own work is mostly": ", ".join(f"{k} {ms(v):,.3f} ms" for k, v in sorted(
            (r.get("own_classes") or {}).items(), key=lambda kv: -kv[1])[:2] if v) or "–",
    } for r in sorted(g["ranks"], key=lambda r: r["rank"])])


def job_path_step(job: dict) -> int | None:
    """The counted step whose path across ranks is the longest on the job's graph (where a
    rank's own critical path is worth reading first); None without a graph."""
    steps = (job.get("graph") or {}).get("steps") or []
    if not steps:
        return None
    return int(max(steps, key=lambda s: (s["ns"], -s["step"]))["step"])


def job_cells(job: dict) -> pd.DataFrame | None:
    """Ranks × steps of a job: ``rank, step`` (text), ``step_ms`` (GPU span, else CPU),
    ``wait_ms`` (the rank's wait at collectives in that step), ``straggler`` (True where the
    rank was that step's straggler), ``bound``; None without steps."""
    rows = job.get("steps") or []
    if not rows:
        return None
    strag = {(s["step"], s["straggler"]) for s in (job.get("stragglers") or {}).get("steps") or [] if s.get("straggler") is not None}
    return pd.DataFrame({
        "rank": [str(r["rank"]) for r in rows],
        "step": [str(r["step"]) for r in rows],
        "step_ms": [(r["gpu_ns"] if r.get("gpu_ns") is not None else r["cpu_ns"]) / NS_PER_MS for r in rows],
        "wait_ms": [(r.get("wait_ns") or 0) / NS_PER_MS for r in rows],
        "straggler": [(r["step"], r["rank"]) in strag for r in rows],
        "bound": [r.get("bound") or "–" for r in rows],
    })


def job_ranks(job: dict) -> pd.DataFrame:
    """One row per rank of a job: its step time, bound, collectives, wait, how often it was
    last, the wait it caused, its clock offset and all-to-all bytes, its warnings."""
    from tracekit.report import fmt_bytes

    ms = lambda ns: np.nan if ns is None else ns / NS_PER_MS  # noqa: E731
    return pd.DataFrame([{
        "rank": r["rank"], "step P90 GPU ms": ms(r.get("step_gpu_p90_ns")), "bound": bound_text(r.get("bound"), r.get("bound_share")),
        "collectives": r.get("collectives"), "wait ms": ms(r.get("wait_ns")), "last to arrive": r.get("last_count"),
        "wait caused ms": ms(r.get("caused_wait_ns")), "clock offset ms": ms(r.get("clock_offset_ns")),
        "all-to-all sent": fmt_bytes(r.get("sent_bytes")), "received": fmt_bytes(r.get("received_bytes")),
        "warnings": "; ".join(r.get("warnings") or []) or "none",
    } for r in job.get("ranks") or []])


# ---- HTA's figures -------------------------------------------------------------------------------

def hta_idle(h: dict, rank: int, stream_names: dict[tuple[int, int], str]) -> tuple[str, pd.DataFrame] | None:
    """From HTA's section (JSON values): a sentence of its temporal breakdown, and idle time per
    stream by category (``stream`` named as the timeline names it, ``host_wait_ms,
    kernel_wait_ms, other_ms``); None when HTA computed neither."""
    temporal = [r for r in h.get("temporal") or [] if r.get("rank") == rank]
    idle = [r for r in h.get("idle_time") or [] if r.get("rank") == rank]
    if not temporal and not idle:
        return None
    text = ""
    if temporal:
        t = temporal[0]
        text = (f"HTA's temporal breakdown of the GPU span ({t['kernel_time(us)'] / 1e3:,.3f} ms from the first to the last "
                f"GPU activity, the last step left out as HTA does): idle {t['idle_time_pctg']:.1f}%, compute "
                f"{t['compute_time_pctg']:.1f}%, non-compute {t['non_compute_time_pctg']:.1f}%.")
    devices = {d for d, _ in stream_names}
    dev = min(devices) if devices else 0
    rows: dict[str, dict[str, float]] = {}
    for r in idle:
        name = stream_names.get((dev, int(r["stream"])), f"stream {r['stream']}")
        rows.setdefault(name, {})[f"{r['idle_category']}_ms"] = float(r["idle_time"]) / 1e3
    per_stream = pd.DataFrame([{"stream": k, **{c: v.get(c, 0.0) for c in ("host_wait_ms", "kernel_wait_ms", "other_ms")}}
                               for k, v in rows.items()], columns=["stream", "host_wait_ms", "kernel_wait_ms", "other_ms"])
    return text, per_stream


def hta_kernels(h: dict, rank: int) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """HTA's kernel tables: time by kernel type (``kernel type, ms, %``) and the top kernels of
    ``rank`` (``kernel, type, count-free figures in ms``), or None where HTA has none."""
    kt = h.get("kernel_types")
    types = None
    if kt:
        types = pd.DataFrame({"kernel type": [r["kernel_type"] for r in kt], "ms": [r["sum"] / 1e3 for r in kt],
                              "% of kernel time": [f"{r['percentage']:.1f}%" for r in kt]})
    top = [r for r in h.get("top_kernels") or [] if r.get("rank") == rank]
    tops = None
    if top:
        tops = pd.DataFrame({"kernel": [str(r["name"])[:110] for r in top], "type": [r["kernel_type"] for r in top],
                             "total ms": [r["sum (us)"] / 1e3 for r in top], "mean ms": [r["mean (us)"] / 1e3 for r in top],
                             "max ms": [r["max (us)"] / 1e3 for r in top]})
        tops = tops.sort_values("total ms", ascending=False, ignore_index=True)
    return types, tops


# ---- compare -------------------------------------------------------------------------------------

COMPARE_FIGURES = (  # (title, headline key, unit, higher is better)
    ("step time P90", "step_p90_ns", "ms", False),
    ("GPU span P90", "step_gpu_p90_ns", "ms", False),
    ("CPU span P90", "step_cpu_p90_ns", "ms", False),
    ("lookup's wait for the optimizer, mean", "lookup_wait_ns", "ms", False),
    ("GPU idle in that wait, mean", "mean_gap_idle_ns", "ms", False),
    ("exposed communication", "exposed_comm_ns", "ms", False),
    ("exposed memcpy", "exposed_memcpy_ns", "ms", False),
    ("sync stalls, CPU", "stall_total_ns", "ms", False),
    ("polls (not stalls), CPU", "poll_total_ns", "ms", False),
    ("peak reserved", "peak_reserved_bytes", "GiB", False),
    ("peak allocated", "peak_allocated_bytes", "GiB", False),
    ("comm overlapped by compute", "comm_overlap_ratio", "%", True),
)
"""The figures compare puts side by side, in the unit it draws them in. ``lookup_wait_ns`` is the
mean over steps of the optimizer -> next lookup gap where positive, else 0: a pipeline whose
lookup runs ahead of the optimizer (SemiSync) does not wait (its signed gap, -45 ms, is no
"better" than another's +0.6 ms)."""


def _figure(report: dict, key: str):
    if key != "lookup_wait_ns":
        return report["headline"].get(key)
    rows = report.get("gaps", {}).get("gaps") or []
    gaps = [r["gap_ns"] for r in rows if r.get("gap_ns") is not None]
    return float(np.mean(np.maximum(gaps, 0))) if gaps else None

_SCALE = {"ms": NS_PER_MS, "GiB": float(2**30), "%": 0.01}
NOISE = 0.01
"""A difference under 1% of the baseline is drawn as neither better nor worse..."""
NOISE_ABS = {"ms": 0.05, "GiB": 0.01, "%": 1.0}
"""... and so is one smaller than this, in the figure's unit (0.003 ms more stall is not "worse")."""


def compare(picked: list[tuple[str, dict]], baseline: int) -> pd.DataFrame:
    """One row per (figure, trace) of ``(name, report object)`` pairs: ``figure, unit, trace,
    value`` (in ``unit``; NaN when not measured), ``diff_pct`` (vs the trace at ``baseline``;
    NaN for the baseline itself or when either is unknown or the baseline is 0) and ``verdict``
    (``baseline``, ``better``, ``worse``, ``same`` within ``NOISE`` or ``NOISE_ABS``, or ``–``).
    A figure no trace measured, or that is 0 in all, is left out."""
    rows = []
    for title, key, unit, higher_better in COMPARE_FIGURES:
        vals = [_figure(r, key) for _, r in picked]
        if all(v is None or v == 0 for v in vals):
            continue  # not measured, or nothing of it in any trace: no chart
        base = vals[baseline]
        for i, ((name, _), v) in enumerate(zip(picked, vals)):
            value = np.nan if v is None else float(v) / _SCALE[unit]
            diff, verdict = np.nan, "–"
            if i == baseline:
                verdict = "baseline"
            elif v is not None and base not in (None, 0):
                diff = (float(v) - float(base)) / abs(float(base)) * 100
                if abs(diff) < NOISE * 100 or abs(float(v) - float(base)) / _SCALE[unit] < NOISE_ABS[unit]:
                    verdict = "same"
                else:
                    verdict = "better" if (diff > 0) == higher_better else "worse"
            rows.append({"figure": title, "unit": unit, "trace": name, "value": value, "diff_pct": diff, "verdict": verdict})
    return pd.DataFrame(rows, columns=["figure", "unit", "trace", "value", "diff_pct", "verdict"])


def embedding(report: dict) -> dict | None:
    """The embedding bandwidth section of one rank's report object as tables: ``kernels``
    (per op and kernel: ``direction, op, kernel, calls, GPU ms, GB moved, GB/s, % of peak``,
    ``at most`` where the bytes are an upper bound), ``steps`` (``step, direction, GB/s``),
    ``phases``, ``missing`` (calls and kernels without an estimate, and why), with ``device``,
    ``peak_gbps``, ``peak_source``, ``findings`` (titles and evidence) and ``notes``; None when
    the report has no such section (written before it existed)."""
    e = report.get("embedding_bw")
    if not isinstance(e, dict):
        return None

    def totals(rows: list[dict], keys: list[str]) -> pd.DataFrame:
        df = pd.DataFrame(rows)
        if df.empty:
            return df
        out = df[keys].copy()
        out["calls"] = df["calls"]
        out["GPU ms"] = df["gpu_ns"] / NS_PER_MS
        out["GB moved"] = df["bytes"] / 1e9
        out["GB/s"] = df["gbps"]
        out["% of peak"] = [None if v is None or not np.isfinite(v) else 100 * v for v in
                            df["share"].astype(float)]
        out["bytes"] = np.where(df["upper_bound"].astype(bool), "at most (one row per lookup)", "model")
        return out

    missing = pd.DataFrame(e.get("missing") or [])
    if not missing.empty:
        missing = missing.assign(**{"GPU ms": missing["gpu_ns"] / NS_PER_MS}).drop(columns=["gpu_ns"])
    return {
        "device": e.get("device"), "peak_gbps": e.get("peak_gbps"), "peak_source": e.get("peak_source"),
        "kernels": totals(e.get("by_kernel") or [], ["direction", "op", "kernel"]),
        "steps": totals(e.get("by_step") or [], ["step", "direction"]),
        "phases": totals(e.get("by_phase") or [], ["phase", "direction"]),
        "directions": totals(e.get("by_direction") or [], ["direction"]),
        "missing": missing,
        "findings": [{"title": f["title"], "evidence": f["evidence"]} for f in e.get("findings") or []],
        "notes": list(e.get("notes") or []),
    }


# ---- operators and kernels (tracekit.analyses.operators, .kernels) --------------------------------

OP_TABLE = {"name": "op", "kind": "kind", "input_dims": "input shapes", "calls": "calls", "cpu_total_ns": "CPU total ms",
            "cpu_self_ns": "CPU self ms", "gpu_self_ns": "GPU self ms", "gpu_total_ns": "GPU total ms",
            "activities": "GPU activities"}
"""``tracekit.analyses.operators``' columns as the operators view heads them (``*_ns`` in ms)."""
KERNEL_TABLE = {"name": "kernel", "kind": "kind", "calls": "calls", "total_ns": "total ms", "mean_ns": "mean ms",
                "min_ns": "min ms", "max_ns": "max ms", "share": "% of GPU time", "launched_by": "launched by",
                "launchers": "ops launching it", "phase": "phase", "streams": "streams",
                "grid": "grid", "block": "block", "registers": "registers", "shared_memory": "shared memory",
                "occupancy": "est. occupancy %", "configs": "launch configs"}
"""``tracekit.analyses.kernels``' columns as the kernels view heads them (one row per kernel and
launch configuration; grid and block as ``512x16x1``, blank where the trace does not record
them)."""


def _shown(frame: pd.DataFrame, heads: dict[str, str]) -> pd.DataFrame:
    """``frame``'s columns that ``heads`` names, renamed, ``*_ns`` in ms, ``share`` in %."""
    out = {}
    for col, head in heads.items():
        if col not in frame:
            continue
        v = frame[col]
        if col.endswith("_ns"):
            v = v.to_numpy(np.float64) / NS_PER_MS
        elif col == "share":
            v = v.to_numpy(np.float64) * 100
        elif col in ("grid", "block"):  # "[512, 16, 1]" -> "512x16x1": searchable as typed
            v = [x[1:-1].replace(", ", "x") if x else "" for x in v.astype(str)]
        out[head] = v
    return pd.DataFrame(out)


def operators(trace: LoadedTrace, step: str | None) -> tuple[pd.DataFrame, list[int], dict]:
    """(the operators of ``step`` ("all" or None: every step) as the view shows them, the steps
    there are, what the view says above the table: ``gpu_ms``, ``unlaunched_ms``, ``ops``)."""
    r = trace.operators()
    t = r.ops if step in (None, "all") else r.by_step[r.by_step["step"].astype(str) == str(step)]
    if not (t["input_dims"].astype(str) != "").any() if len(t) else True:
        t = t.drop(columns=["input_dims"])
    return _shown(t, OP_TABLE), list(r.steps), {"gpu_ms": r.gpu_ns / NS_PER_MS, "unlaunched_ms": r.unlaunched_gpu_ns / NS_PER_MS,
                                                 "ops": int(len(r.ops))}


def kernels(trace: LoadedTrace, step: str | None) -> tuple[pd.DataFrame, list[int], dict]:
    """(the GPU activities of ``step`` ("all" or None: every step) by name, as the kernels view
    shows them, the steps there are, ``gpu_ms`` (the whole the shares are of), ``names``)."""
    r = trace.kernels()
    if step in (None, "all"):
        t, gpu = r.kernels, r.gpu_ns
    else:
        t = r.by_step[r.by_step["step"].astype(str) == str(step)]
        gpu = int(t["total_ns"].sum())
    return _shown(t, KERNEL_TABLE), list(r.steps), {"gpu_ms": gpu / NS_PER_MS, "names": int(t["name"].nunique())}


# ---- diff of two traces (tracekit.analyses.diff) ----------------------------------------------------

def diff_tables(d: Any) -> dict[str, pd.DataFrame]:
    """A ``tracekit.analyses.diff.DiffResult`` as the diff view's tables, times in ms per step:
    ``step``, ``phases``, ``streams``, ``overlaps``, ``critical_path``, ``ops``, ``kernels``."""
    ms = lambda s: s.to_numpy(np.float64) / NS_PER_MS  # noqa: E731
    st = d.step
    step = pd.DataFrame({"figure": [{"step_gpu_ns": "step, GPU span", "step_cpu_ns": "step, CPU span"}.get(f, f) for f in st["figure"]],
                         "A ms": ms(st["a"].astype(float)), "B ms": ms(st["b"].astype(float)),
                         "Δ ms": ms(st["delta"].astype(float))})

    def three(frame: pd.DataFrame, key: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame({**{head: frame[col].to_numpy(object) for col, head in key.items()},
                             "A ms": ms(frame["a_ns"]), "B ms": ms(frame["b_ns"]), "Δ ms": ms(frame["delta_ns"])})

    streams = three(d.streams, {"stream": "stream", "phase": "phase"})
    streams["A streams"] = d.streams["a_streams"].to_numpy(object)
    streams["B streams"] = d.streams["b_streams"].to_numpy(object)
    ops = pd.DataFrame({"op": d.ops["name"].to_numpy(object), "input shapes": d.ops["input_dims"].to_numpy(object),
                        "status": d.ops["status"].to_numpy(object), "A calls": d.ops["a_calls"].to_numpy(np.float64),
                        "B calls": d.ops["b_calls"].to_numpy(np.float64), "A CPU ms": ms(d.ops["a_cpu_ns"]),
                        "B CPU ms": ms(d.ops["b_cpu_ns"]), "A GPU ms": ms(d.ops["a_gpu_ns"]), "B GPU ms": ms(d.ops["b_gpu_ns"]),
                        "Δ GPU ms": ms(d.ops["delta_gpu_ns"]), "Δ CPU ms": ms(d.ops["delta_cpu_ns"])})
    if not (ops["input shapes"] != "").any():
        ops = ops.drop(columns=["input shapes"])
    kernels = pd.DataFrame({"kernel": d.kernels["name"].to_numpy(object), "kind": d.kernels["kind"].to_numpy(object),
                            "status": d.kernels["status"].to_numpy(object), "A calls": d.kernels["a_calls"].to_numpy(np.float64),
                            "B calls": d.kernels["b_calls"].to_numpy(np.float64), "A ms": ms(d.kernels["a_ns"]),
                            "B ms": ms(d.kernels["b_ns"]), "Δ ms": ms(d.kernels["delta_ns"])})
    overlaps = three(d.overlaps, {"phase_a": "phase", "phase_b": "with phase"})
    return {"step": step, "phases": three(d.phases, {"phase": "phase"}), "streams": streams, "overlaps": overlaps,
            "critical_path": three(d.critical_path, {"category": "category"}), "ops": ops, "kernels": kernels}
