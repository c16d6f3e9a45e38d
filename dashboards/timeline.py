"""What the timeline view draws: lanes of bars for one window of one trace.

From what tracekit publishes for a timeline (``tracekit.api.LoadedTrace.lanes``: GPU
activities with their phase on lanes per (device, stream), CPU annotations on lanes per
(thread, nesting depth) above them), named here. Inside the chosen window every event is a bar of its own,
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
from tracekit.api import Lanes as TraceLanes

MARK_LANES = ("steps", "critical path", "optimizer → lookup gap", "sync stalls")
"""The timeline's lanes of marks, drawn above the threads, top to bottom, each always drawn (an
empty lane says there is none of its marks in the window)."""


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


def lane_events(lanes: TraceLanes, *, stream_names: dict[tuple[int, int], str] | None = None,
                thread_names: dict[int, str] | None = None) -> tuple[pd.DataFrame, int]:
    """Every drawable event of a trace (``tracekit.api.LoadedTrace.lanes``) on its named lane,
    and the trace's origin (its first event's ``ts``, ns).

    ``stream_names`` names the GPU lanes by (device, stream) (else ``GPU d · stream s``); the
    CPU lanes are named by their thread as ``dashboards.names.thread_label`` writes it, with
    the trace's thread names (``thread_names``: else the trace's own), "main" being the thread
    drawn on top. A thread's nesting depths below the first are lanes ``<thread> · level
    <depth>``. Returns columns lane, lane_order, start, end (ns from the origin), phase, name.
    """
    ev = lanes.events
    tnames = lanes.thread_names if thread_names is None else thread_names
    gpu = ev["gpu"].to_numpy(bool)
    threads = {int(t): names.thread_label(int(t), (tnames or {}).get(int(t)), int(t) == lanes.main_tid)
               for t in pd.unique(ev["tid"].to_numpy()[~gpu])}
    lane = [((stream_names or {}).get((int(d), int(s))) or f"GPU {d} · stream {s}") if g else
            (threads[int(t)] if dp == 0 else f"{threads[int(t)]} · level {dp}")
            for g, d, s, t, dp in zip(gpu, ev["device"].to_numpy(), ev["stream"].to_numpy(),
                                      ev["tid"].to_numpy(), ev["depth"].to_numpy())]
    out = pd.DataFrame({"lane": lane, "lane_order": ev["lane_order"].to_numpy(np.int64),
                        "start": ev["start"].to_numpy(np.int64), "end": ev["end"].to_numpy(np.int64),
                        "phase": ev["phase"].to_numpy(object), "name": ev["name"].to_numpy(object)})
    return out, lanes.origin


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
