"""What a timeline draws of a trace: every drawable event on its lane.

GPU activities on a lane per (device, stream), with their phase (tracekit's phase rules);
CPU annotations (and the operators that are phase annotations or ``ProfilerStep``: legacy
traces wrote ``record_function`` ranges as operators) on a lane per (thread, nesting depth),
the depths below ``CPU_DEPTHS``, above them: the main thread (the one whose annotations include
``ProfilerStep#``, else the most annotated) first. A pure function of the parsed trace and its
phase assignment; how the lanes are named and drawn is the viewer's (``dashboards.timeline``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.trace.model import GPU_ACTIVITY_KINDS, Kind, Trace
from tracekit.frames import column

CPU_DEPTHS = 4
"""Nesting depths of CPU annotations drawn (ProfilerStep, then the stage labels, ...)."""
LANE_COLUMNS = ["gpu", "device", "stream", "tid", "depth", "lane_order", "start", "end", "phase",
                "name"]


@dataclass(frozen=True)
class Lanes:
    """Every drawable event of a trace, by lane."""

    events: pd.DataFrame
    """``LANE_COLUMNS``, sorted by ``lane_order`` then ``start``: ``gpu`` (bool), ``device,
    stream`` (GPU lanes; -1 on CPU rows), ``tid, depth`` (CPU lanes: the thread and the nesting
    depth; -1 on GPU rows), ``lane_order`` (top lane first: CPU threads, the main one first, by
    depth, then GPU streams by device and stream), ``start, end`` (ns from ``origin``),
    ``phase`` (an annotation no phase names: ``annotation``), ``name``."""
    origin: int
    """Time 0: the trace's first event's ``ts`` (ns; 0 for an empty trace)."""
    main_tid: int | None
    """The main thread (drawn on top), None without CPU annotations."""
    thread_names: dict[int, str] = field(default_factory=dict)
    """The names Kineto gave the threads (``Trace.thread_names``)."""
    stream_busy: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per (device, stream, phase), in the order the activities first show them: ``busy_ns``
    (the activities' time) and ``copy_ns`` (of it, memcpy and memset time): what tells a
    stream's role."""


def origin(trace: Trace) -> int:
    """Time 0 of a trace's timeline: its first event's ``ts`` (ns; 0 for an empty trace)."""
    return int(trace.events["ts"].min()) if len(trace.events) else 0


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


def _stream_busy(acts: pd.DataFrame) -> pd.DataFrame:
    cols = ["device", "stream", "phase", "busy_ns", "copy_ns"]
    if acts.empty:
        return pd.DataFrame(columns=cols)
    busy = (acts["end"] - acts["ts"]).to_numpy(np.float64)
    kind = column(acts, "kind") if "kind" in acts else np.full(len(acts), int(Kind.KERNEL))
    frame = pd.DataFrame({"device": column(acts, "device", np.int64),
                          "stream": column(acts, "stream", np.int64),
                          "phase": acts["phase"].astype(str).to_numpy(), "busy_ns": busy,
                          "copy_ns": np.where(kind != int(Kind.KERNEL), busy, 0.0)})
    return frame.groupby(["device", "stream", "phase"], sort=False)[["busy_ns", "copy_ns"]] \
        .sum().reset_index()[cols]


def compute(trace: Trace, activities: pd.DataFrame | None = None,
            annotation_phases: pd.DataFrame | None = None) -> Lanes:
    """The lanes of ``trace``. ``activities``: tracekit's phase assignment
    (``tracekit.phases.assign_activities``: ``device, stream, name, ts, end, phase``, and
    ``kind``); without it GPU activities come from the trace with phase ``other``.
    ``annotation_phases`` (``tid, ts, end, phase``: ``AnnotationIndex.table``) gives the CPU
    annotations it names their phase; the others are ``annotation``."""
    ev = trace.events
    t_origin = origin(trace)
    if activities is None:
        gpu = ev[ev["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS])]
        activities = pd.DataFrame({
            "device": column(gpu, "device", np.int64), "stream": column(gpu, "stream", np.int64),
            "name": gpu["name"].astype(str).to_numpy(), "ts": column(gpu, "ts", np.int64),
            "end": (gpu["ts"] + gpu["dur"]).to_numpy(np.int64), "phase": "other",
            "kind": column(gpu, "kind"),
        })
    dev = column(activities, "device", np.int64)
    stream = column(activities, "stream", np.int64)
    gpu_rows = pd.DataFrame({
        "gpu": True, "device": dev, "stream": stream, "tid": -1, "depth": -1,
        "lane_order": 1_000_000 + dev * 100_000 + stream,
        "start": column(activities, "ts", np.int64) - t_origin,
        "end": column(activities, "end", np.int64) - t_origin,
        "phase": activities["phase"].astype(object).to_numpy(),
        "name": activities["name"].astype(str).to_numpy(),
    }, columns=LANE_COLUMNS)
    # CPU ranges: user annotations, plus operators that are phase annotations or ProfilerStep
    # (legacy traces wrote record_function ranges as operators)
    is_ann = column(ev, "kind") == int(Kind.ANNOTATION)
    ops = column(ev, "kind") == int(Kind.CPU_OP)
    if ops.any():
        op_rows = ev[ops]
        keep_op = op_rows["name"].astype(str).str.startswith("ProfilerStep#").to_numpy().copy()
        if annotation_phases is not None and len(annotation_phases):
            key = pd.MultiIndex.from_arrays([column(op_rows, "tid"), column(op_rows, "ts"),
                                             (op_rows["ts"] + op_rows["dur"]).to_numpy()])
            known = pd.MultiIndex.from_frame(annotation_phases[["tid", "ts", "end"]])
            keep_op |= key.isin(known)
        is_ann[np.flatnonzero(ops)[keep_op]] = True
    ann = ev[is_ann]
    ann = pd.DataFrame({"pid": column(ann, "pid"), "tid": column(ann, "tid"),
                        "ts": column(ann, "ts"), "dur": column(ann, "dur"),
                        "name": ann["name"].astype(str).to_numpy()})
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
        grp = grp.sort_values(["ts", "dur"], ascending=[True, False])
        s = column(grp, "ts") - t_origin
        e = s + column(grp, "dur")
        depth = _cpu_depth(s, e)
        keep = depth < CPU_DEPTHS
        parts.append(pd.DataFrame({
            "gpu": False, "device": -1, "stream": -1, "tid": int(tid), "depth": depth[keep],
            "lane_order": order * CPU_DEPTHS + depth[keep], "start": s[keep], "end": e[keep],
            "phase": column(grp, "phase")[keep], "name": column(grp, "name")[keep],
        }, columns=LANE_COLUMNS))
    out = pd.concat([*parts, gpu_rows], ignore_index=True)
    return Lanes(events=out.sort_values(["lane_order", "start"], kind="stable", ignore_index=True),
                 origin=t_origin, main_tid=main_tid,
                 thread_names=dict(getattr(trace, "thread_names", None) or {}),
                 stream_busy=_stream_busy(activities))


__all__ = ["CPU_DEPTHS", "LANE_COLUMNS", "Lanes", "compute", "origin"]
