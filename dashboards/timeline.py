"""What the timeline view draws: lanes of bars for one window of one trace.

A pure function of the parsed trace (and the phase of each GPU activity, which tracekit's phase
rules give): GPU activities as lanes per (device, stream), CPU annotations as lanes per
(thread, nesting depth) above them. Inside the chosen window every event is a bar of its own,
unless there are more than ``max_detail`` of them; everything else, and a too-busy window, is
aggregated into time bins per lane (busy time and the dominant phase of each bin), so what goes
to the browser is bounded whatever the trace's size: at most ``max_detail`` bars plus about
``bins`` per lane outside the window, or, when the window itself is binned (at ``4 * bins``
over its extent), about ``5 * bins`` per lane in all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dashboards import names
from tracekit.trace.model import GPU_ACTIVITY_KINDS, Kind, Trace

CPU_DEPTHS = 4
"""Nesting depths of CPU annotations drawn (ProfilerStep, then the stage labels, ...)."""


@dataclass(frozen=True)
class Lanes:
    """Bars for one window: times in ms from the trace's first event."""

    lanes: list[str]
    """Lane names, top to bottom: CPU annotation lanes, then GPU streams."""
    detail: pd.DataFrame
    """One row per event drawn in full: lane, start_ms, dur_ms, phase, name."""
    bins: pd.DataFrame
    """One row per (lane, time bin) aggregated: lane, start_ms, dur_ms, phase (dominant), busy (0..1)."""
    window_ms: tuple[float, float]
    """The window drawn in full detail."""
    span_ms: tuple[float, float]
    """The whole trace's extent."""
    events_in_window: int
    """Events that intersect the window (drawn as detail, or as bins when too many)."""
    aggregated_in_window: bool
    """True when the window held more than ``max_detail`` events and was binned too."""


def _cpu_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval among intervals sorted by start (one thread)."""
    depth = np.zeros(len(starts), dtype=np.int64)
    stack: list[int] = []  # end times of the open intervals
    for i in range(len(starts)):
        while stack and stack[-1] <= starts[i]:
            stack.pop()
        depth[i] = len(stack)
        stack.append(ends[i])
    return depth


def trace_origin(trace: Trace) -> int:
    """Time 0 of the dashboard's charts: the trace's first event's ``ts`` (ns; 0 for an empty trace)."""
    return int(trace.events["ts"].min()) if len(trace.events) else 0


def lane_events(
    trace: Trace, activities: pd.DataFrame | None = None, annotation_phases: pd.DataFrame | None = None,
    *, stream_names: dict[tuple[int, int], str] | None = None, thread_names: dict[int, str] | None = None,
) -> tuple[pd.DataFrame, int]:
    """Every drawable event and the trace's origin (its first event's ``ts``, ns).

    ``activities`` is tracekit's phase assignment (``tracekit.phases.assign_activities``:
    ``device, stream, name, ts, end, phase``); without it GPU activities come from the trace
    with phase ``other``. ``annotation_phases`` (``tid, ts, end, phase``: tracekit's
    ``AnnotationIndex.table``) colours the CPU annotations it names; the others are
    ``annotation``. ``stream_names`` names the GPU lanes by (device, stream) (else ``GPU d ·
    stream s``); ``thread_names`` gives the trace's thread names by tid, written as
    ``dashboards.names.thread_label`` writes them, "main" being the thread whose annotations
    include ``ProfilerStep#`` (else the most annotated one), drawn on top.
    A thread's nesting depths below the first are lanes ``<thread> · level <depth>``. Returns columns
    lane, lane_order, start, end (ns from the origin), phase, name.
    """
    ev = trace.events
    t_origin = trace_origin(trace)
    if activities is None:
        gpu = ev[ev["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS])]
        activities = pd.DataFrame({
            "device": gpu["device"].to_numpy(np.int64), "stream": gpu["stream"].to_numpy(np.int64),
            "name": gpu["name"].astype(str).to_numpy(), "ts": gpu["ts"].to_numpy(np.int64),
            "end": (gpu["ts"] + gpu["dur"]).to_numpy(np.int64), "phase": "other",
        })
    dev = activities["device"].to_numpy(np.int64)
    stream = activities["stream"].to_numpy(np.int64)
    gpu_rows = pd.DataFrame(
        {
            "lane": [(stream_names or {}).get((int(d), int(s))) or f"GPU {d} · stream {s}" for d, s in zip(dev, stream)],
            "lane_order": 1_000_000 + dev * 100_000 + stream,
            "start": activities["ts"].to_numpy(np.int64) - t_origin,
            "end": activities["end"].to_numpy(np.int64) - t_origin,
            "phase": activities["phase"].astype(object).to_numpy(),
            "name": activities["name"].astype(str).to_numpy(),
        }
    )
    # CPU ranges: user annotations, plus operators that are phase annotations or ProfilerStep
    # (legacy traces wrote record_function ranges as operators)
    is_ann = ev["kind"].to_numpy() == int(Kind.ANNOTATION)
    ops = ev["kind"].to_numpy() == int(Kind.CPU_OP)
    if ops.any():
        op_rows = ev[ops]
        keep_op = op_rows["name"].astype(str).str.startswith("ProfilerStep#").to_numpy().copy()
        if annotation_phases is not None and len(annotation_phases):
            key = pd.MultiIndex.from_arrays([op_rows["tid"].to_numpy(), op_rows["ts"].to_numpy(),
                                             (op_rows["ts"] + op_rows["dur"]).to_numpy()])
            known = pd.MultiIndex.from_frame(annotation_phases[["tid", "ts", "end"]])
            keep_op |= key.isin(known)
        is_ann[np.flatnonzero(ops)[keep_op]] = True
    ann = ev[is_ann]
    ann = pd.DataFrame({"pid": ann["pid"].to_numpy(), "tid": ann["tid"].to_numpy(), "ts": ann["ts"].to_numpy(),
                        "dur": ann["dur"].to_numpy(), "name": ann["name"].astype(str).to_numpy()})
    if annotation_phases is not None and len(annotation_phases):
        ap = annotation_phases[["tid", "ts", "end", "phase"]].drop_duplicates(["tid", "ts", "end"])
        ann["end"] = ann["ts"] + ann["dur"]
        ann = ann.merge(ap, on=["tid", "ts", "end"], how="left")
        ann["phase"] = ann["phase"].astype(object).where(ann["phase"].notna(), "annotation")
    else:
        ann["phase"] = "annotation"
    parts = []
    groups = list(ann.groupby(["pid", "tid"], sort=True))
    main_tid = None
    if groups:
        stepped = [int(tid) for (_, tid), g in groups if g["name"].str.startswith("ProfilerStep#").any()]
        main_tid = stepped[0] if stepped else int(max(groups, key=lambda kv: len(kv[1]))[0][1])
        groups.sort(key=lambda kv: int(kv[0][1]) != main_tid)  # the main thread on top
    for order, ((pid, tid), grp) in enumerate(groups):
        thread = names.thread_label(int(tid), (thread_names or {}).get(int(tid)), int(tid) == main_tid)
        grp = grp.sort_values(["ts", "dur"], ascending=[True, False])
        s = grp["ts"].to_numpy() - t_origin
        e = s + grp["dur"].to_numpy()
        depth = _cpu_depth(s, e)
        keep = depth < CPU_DEPTHS
        parts.append(
            pd.DataFrame(
                {
                    "lane": [thread if d == 0 else f"{thread} · level {d}" for d in depth[keep]],
                    "lane_order": order * CPU_DEPTHS + depth[keep],
                    "start": s[keep],
                    "end": e[keep],
                    "phase": grp["phase"].to_numpy()[keep],
                    "name": grp["name"].to_numpy()[keep],
                }
            )
        )
    out = pd.concat([*parts, gpu_rows], ignore_index=True)
    return out.sort_values(["lane_order", "start"], kind="stable", ignore_index=True), t_origin


def _binned(rows: pd.DataFrame, lanes: list[str], lo: int, hi: int, n_bins: int) -> pd.DataFrame:
    """Busy ns per (lane, phase, bin) over [lo, hi) in ``n_bins`` equal bins, one row per busy (lane, bin)."""
    cols = ["lane", "start_ms", "dur_ms", "phase", "busy"]
    if rows.empty or hi <= lo:
        return pd.DataFrame(columns=cols)
    width = (hi - lo) / n_bins
    s = np.clip(rows["start"].to_numpy(), lo, hi).astype(np.float64)
    e = np.clip(rows["end"].to_numpy(), lo, hi).astype(np.float64)
    keep = e > s
    lane_codes = pd.Categorical(rows["lane"], categories=lanes).codes
    phase_cat = pd.Categorical(rows["phase"])
    n_ph = len(phase_cat.categories)
    key = (lane_codes.astype(np.int64) * n_ph + phase_cat.codes)[keep]
    s, e = s[keep], e[keep]
    b0 = np.minimum(((s - lo) / width).astype(np.int64), n_bins - 1)
    b1 = np.minimum(((e - lo) / width).astype(np.int64), n_bins - 1)
    busy = np.zeros((len(lanes) * n_ph, n_bins + 1))
    edge = lo + np.arange(n_bins + 1) * width
    same = b0 == b1
    np.add.at(busy, (key[same], b0[same]), e[same] - s[same])
    k, sb, eb, ss, ee = key[~same], b0[~same], b1[~same], s[~same], e[~same]
    np.add.at(busy, (k, sb), edge[sb + 1] - ss)  # first partial bin
    np.add.at(busy, (k, eb), ee - edge[eb])  # last partial bin
    full = np.zeros_like(busy)  # bins fully covered in between, as a difference array
    np.add.at(full, (k, sb + 1), 1.0)
    np.add.at(full, (k, eb), -1.0)
    busy += np.cumsum(full, axis=1) * width
    busy = busy[:, :n_bins].reshape(len(lanes), n_ph, n_bins)
    total = busy.sum(axis=1)  # (lane, bin)
    dominant = busy.argmax(axis=1)
    li, bi = np.nonzero(total > 0)
    return pd.DataFrame(
        {
            "lane": np.asarray(lanes, dtype=object)[li],
            "start_ms": (lo + bi * width) / 1e6,
            "dur_ms": np.full(len(li), width / 1e6),
            "phase": np.asarray(phase_cat.categories, dtype=object)[dominant[li, bi]],
            "busy": np.minimum(total[li, bi] / width, 1.0),
        },
        columns=cols,
    )


def build_lanes(
    events: pd.DataFrame,
    window_ns: tuple[int, int] | None,
    *,
    max_detail: int = 3000,
    bins: int = 300,
) -> Lanes:
    """Bars for ``window_ns`` (ns from the trace origin; None = the whole trace) from ``lane_events``."""
    lanes = list(dict.fromkeys(events["lane"]))
    span = (int(events["start"].min()), int(events["end"].max())) if len(events) else (0, 0)
    lo, hi = window_ns if window_ns is not None else span
    lo, hi = max(int(lo), span[0]), min(int(hi), span[1])
    if hi <= lo:
        lo, hi = span
    inside = (events["end"].to_numpy() > lo) & (events["start"].to_numpy() < hi)
    win = events[inside]
    too_many = len(win) > max_detail
    if too_many:
        detail = pd.DataFrame(columns=["lane", "start_ms", "dur_ms", "phase", "name"])
        in_bins = _binned(win, lanes, lo, hi, bins * 4)
    else:
        detail = pd.DataFrame(
            {
                "lane": win["lane"].to_numpy(),
                "start_ms": win["start"].to_numpy() / 1e6,
                "dur_ms": (win["end"] - win["start"]).to_numpy() / 1e6,
                "phase": win["phase"].to_numpy(),
                "name": win["name"].to_numpy(),
            }
        )
        in_bins = None
    # Outside the window: the rest of the trace, binned, left and right of it.
    out_parts = []
    total = max(span[1] - span[0], 1)
    for a, b in ((span[0], lo), (hi, span[1])):
        if b > a:
            n = max(1, int(round(bins * (b - a) / total)))
            out_parts.append(_binned(events[(events["end"].to_numpy() > a) & (events["start"].to_numpy() < b)], lanes, a, b, n))
    if in_bins is not None:
        out_parts.append(in_bins)
    binned = pd.concat(out_parts, ignore_index=True) if out_parts else _binned(events.iloc[:0], lanes, 0, 0, 1)
    return Lanes(
        lanes=lanes,
        detail=detail,
        bins=binned,
        window_ms=(lo / 1e6, hi / 1e6),
        span_ms=(span[0] / 1e6, span[1] / 1e6),
        events_in_window=int(inside.sum()),
        aggregated_in_window=too_many,
    )
