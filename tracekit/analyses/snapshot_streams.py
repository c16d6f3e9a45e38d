"""Which CUPTI stream of the trace is which allocator stream of the snapshot beside it.

The memory snapshot (``tracekit.analyses.snapshot``) names a stream by its ``cudaStream_t``
handle, the trace by CUPTI's stream id; neither file writes the other's. The default stream is
the one fixed point: handle ``0`` is CUPTI's stream ``DEFAULT_STREAM_CUPTI``. Any other handle
is matched through the allocations both files record:

- the snapshot's history (``device_traces``) and its segments' blocks say which handle each
  address was allocated on (``address_handles``: the majority over its entries, since a freed
  segment's address may come back on another stream);
- the trace's ``[memory]`` events (``Bytes`` > 0, ``Addr``, ``Device Id``, ``tid``, ``ts``)
  sit inside the CPU op that allocated. From the innermost ``cpu_op`` enclosing the event on its
  host thread outwards, the first op whose span holds runtime calls on that thread that launched
  GPU work (kernels, memcpys, memsets) on the event's device, all on one CUPTI stream, gives
  that allocation's vote: (handle of its address) -> that stream. An allocation whose op
  launched work on several streams, or none, does not vote.

A handle is named when it has at least ``min_votes`` votes and its leading stream holds at least
``min_share`` of them; otherwise the votes are reported and the stream is left unknown. The
default stream keeps its fixed rule whatever the votes say (they are reported beside it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace.model import GPU_ACTIVITY_KINDS, Kind, Trace
from tracekit.frames import column

DEFAULT_STREAM_CUPTI = 7
"""CUPTI's id of the default (legacy) stream, which the allocator calls handle 0."""

ADDRESS_COLUMNS = ["device", "addr", "stream", "entries"]
"""Columns of ``address_handles``: per (device, address) the majority handle and how many
history entries or blocks named that address."""

_BLOCK_ACTIONS = ("alloc", "free_requested", "free_completed")

MATCH_COLUMNS = ["device", "handle", "cupti_stream", "votes", "matched", "share", "how"]
"""Columns of ``StreamMatch.streams``: ``cupti_stream`` is -1 where it cannot be told;
``votes`` the allocations that voted for it (for the leading stream where none is named),
``matched`` all the handle's voting allocations, ``share`` = votes / matched (NaN without
votes), ``how`` one of ``default stream``, ``matched``, ``too few votes``, ``no clear
majority``."""


@dataclass(frozen=True)
class StreamMatch:
    """Snapshot handles matched to the trace's CUPTI streams."""

    streams: pd.DataFrame
    """One row per (device, handle) of the snapshot, columns ``MATCH_COLUMNS``."""
    votes: dict
    """``(device, handle) -> {cupti stream: allocations}``: every vote cast."""
    allocations: int
    """The trace's allocations whose address the snapshot knows."""
    voting: int
    """Of those, the ones whose op launched GPU work on exactly one stream (they voted)."""
    min_votes: int
    min_share: float


def address_handles(data: dict) -> pd.DataFrame:
    """Per (device, address) of a snapshot dict (``read_snapshot``'s), the handle most of its
    history entries (``alloc``/``free_*``) and current blocks name; columns ``ADDRESS_COLUMNS``."""
    per: dict[tuple[int, int], Counter] = {}
    for device, entries in enumerate(data.get("device_traces") or []):
        for e in entries:
            if isinstance(e, dict) and e.get("action") in _BLOCK_ACTIONS and _int(e.get("addr")) \
                    and _int(e.get("stream")) is not None:
                per.setdefault((device, int(e["addr"])), Counter())[int(e["stream"])] += 1
    for seg in data.get("segments") or []:
        for b in seg.get("blocks") or []:
            if _int(b.get("address")) and b.get("state") != "inactive":
                per.setdefault((int(seg.get("device", 0)), int(b["address"])), Counter())[int(seg["stream"])] += 1
    rows = [(d, a, c.most_common(1)[0][0], sum(c.values())) for (d, a), c in sorted(per.items())]
    return pd.DataFrame(rows, columns=ADDRESS_COLUMNS).astype(
        {"device": "int64", "addr": "int64", "stream": "int64", "entries": "int64"})


def _int(x: object) -> int | None:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) else None


def compute(trace: Trace, addresses: pd.DataFrame, handles: list[tuple[int, int]], *,
            min_votes: int = 3, min_share: float = 0.8) -> StreamMatch:
    """Match each snapshot ``(device, handle)`` in ``handles`` to a CUPTI stream of ``trace``
    (see the module docstring); ``addresses`` is ``address_handles`` of the snapshot."""
    votes: dict[tuple[int, int], Counter] = {h: Counter() for h in handles}
    mem = trace.memory
    mem = mem[(mem["bytes"] > 0) & (mem["device_type"] == 1) & (mem["addr"] >= 0)]
    known = mem.merge(addresses.rename(columns={"device": "device_id", "stream": "handle"}),
                      on=["device_id", "addr"], how="inner")
    voting = 0
    if len(known):
        launches = _launch_streams(trace)
        ops = trace.events[trace.events["kind"] == int(Kind.CPU_OP)]
        by_tid = {tid: (column(g, "ts"), (g["ts"] + g["dur"]).to_numpy())
                  for tid, g in ops.groupby("tid", sort=False)}
        for ts, tid, dev, handle in zip(column(known, "ts"), column(known, "tid"),
                                        column(known, "device_id"), column(known, "handle")):
            stream = _vote(int(ts), by_tid.get(int(tid)), launches.get((int(tid), int(dev))))
            if stream is not None:
                votes.setdefault((int(dev), int(handle)), Counter())[stream] += 1
                voting += 1
    rows = []
    for (device, handle) in sorted(votes):
        c = votes[(device, handle)]
        matched = sum(c.values())
        lead, n = c.most_common(1)[0] if c else (-1, 0)
        share = n / matched if matched else float("nan")
        if handle == 0:
            rows.append((device, handle, DEFAULT_STREAM_CUPTI, c.get(DEFAULT_STREAM_CUPTI, 0), matched,
                         c.get(DEFAULT_STREAM_CUPTI, 0) / matched if matched else float("nan"),
                         "default stream"))
        elif matched < min_votes:
            rows.append((device, handle, -1, n, matched, share, "too few votes"))
        elif share < min_share:
            rows.append((device, handle, -1, n, matched, share, "no clear majority"))
        else:
            rows.append((device, handle, lead, n, matched, share, "matched"))
    frame = pd.DataFrame(rows, columns=MATCH_COLUMNS).astype(
        {"device": "int64", "handle": "int64", "cupti_stream": "int64", "votes": "int64",
         "matched": "int64", "share": "float64"})
    return StreamMatch(streams=frame, votes={k: dict(v) for k, v in votes.items()},
                       allocations=len(known), voting=voting, min_votes=min_votes, min_share=min_share)


def _launch_streams(trace: Trace) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """(host tid, device) -> (ts of runtime/driver calls that launched GPU work on that device,
    sorted; the CUPTI stream of that work)."""
    ev = trace.events
    gpu = ev[ev["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS]) & (ev["correlation"] >= 0)]
    calls = ev[ev["kind"].isin([int(Kind.RUNTIME), int(Kind.DRIVER)]) & (ev["correlation"] >= 0)]
    linked = calls[["ts", "tid", "correlation"]].merge(
        gpu[["correlation", "stream", "device"]].drop_duplicates("correlation"), on="correlation")
    out = {}
    for (tid, dev), g in linked.groupby(["tid", "device"], sort=False):
        g = g.sort_values("ts", kind="stable")
        out[(int(tid), int(dev))] = (column(g, "ts"), column(g, "stream"))
    return out


def _vote(ts: int, ops: tuple[np.ndarray, np.ndarray] | None,
          launches: tuple[np.ndarray, np.ndarray] | None) -> int | None:
    """The one CUPTI stream the innermost launching op around ``ts`` launched onto, else None."""
    if ops is None or launches is None:
        return None
    start, end = ops
    around = np.flatnonzero((start <= ts) & (end >= ts))
    if not len(around):
        return None
    call_ts, call_stream = launches
    for i in around[np.argsort(end[around] - start[around], kind="stable")]:  # innermost first
        lo, hi = np.searchsorted(call_ts, start[i], "left"), np.searchsorted(call_ts, end[i], "right")
        streams = np.unique(call_stream[lo:hi])
        if len(streams) == 1:
            return int(streams[0])
        if len(streams) > 1:
            return None
    return None
