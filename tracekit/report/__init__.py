"""Rendering: an ``Analysis`` as a JSON-ready object with stable keys, and that object as text.

``to_dict(analysis)`` turns one rank's ``Analysis`` into plain JSON values; ``render_text``
renders such dicts as tables. Text is rendered *from the dict*, so a cached report prints
without pandas or the trace (this module imports only the standard library).

JSON schema (``FORMAT = 1``; keys are only ever added, never renamed or removed within a
format). Times are integer nanoseconds (keys ending ``_ns``; percentiles and means may be
fractional), memory is bytes, ratios are 0..1; a figure that cannot be measured is ``null``.
A table is a list of row objects whose keys are the column names given here.

``tracekit analyze --format json`` writes::

    {"tracekit_version": str, "format": 1, "analyses": [<rank>, ...], "jobs": [<job>, ...]}

(``jobs``: one per directory analysed, see "The job object" below; ``tracekit.api.job_document``
returns the same document for one directory.)

and each ``<rank>`` object is::

    {
      "source": str, "rank": int, "schema": "pytorch2"|"legacy2021",
      "platform": "cuda"|"rocm"|"cpu", "warnings": [str], "rules": str,
      "headline": {
        "steps": int, "step_source": str,
        "step_cpu_p50_ns", "step_cpu_p90_ns", "step_gpu_p50_ns", "step_gpu_p90_ns": num|null,
        "peak_allocated_bytes", "peak_reserved_bytes": int|null,
        "unused_at_peak_reserved_bytes": int|null, "unused_fraction": num|null,
        "mean_gap_ns", "mean_gap_idle_ns": num|null,
        "comm_overlap_ratio": num|null, "exposed_comm_ns", "exposed_memcpy_ns": int,
        "stall_count": int, "stall_total_ns": int, "stall_idle_after_ns": int,
        "bound": "host"|"gpu"|"communication"|"sync"|null, "bound_share": num|null,
        "poll_count": int, "poll_total_ns": int      # cudaEventQuery/cudaStreamQuery: not stalls
      },
      "explain": {               # tracekit.analyses.explain; null when it did not run
        "bound": str|null, "bound_share": num|null,   # over all steps' critical paths
        "steps": [{step, start_ns, end_ns, duration_ns, bound, bound_share,
                   breakdown: {category: ns}, top: [{lane, name, category, ns, count}]}],
        "breakdown": [{category, ns, share}],
        "findings": [{id, title, fix, evidence, kind ("time"|"memory"), saving_ns,
                      saving_fraction, saving_contention_ns, saving_contention_fraction,
                      observed_step_ns, predicted_step_ns, predicted_contention_step_ns,
                      ...memory findings: peak_reserved_bytes, predicted_peak_reserved_bytes,
                      saving_bytes, bytes_per_batch_copy, batches_in_flight,
                      main_stream_reserved_bytes, reserved_off_main_bytes}],
        "what_ifs": [{id, title, applies, evidence, observed_step_ns, predicted_step_ns,
                      predicted_contention_step_ns, saving_ns, saving_fraction,
                      saving_contention_ns}],
        "lanes": [{lane, ns, share}],
        "graph": {"nodes": int, "edges": {kind: int}, "launch_latency_ns": int},
        "warnings": [str]
      },
      "steps": {"source": str, "boundary": str|null,
                "cpu_p50_ns", "cpu_p90_ns", "gpu_p50_ns", "gpu_p90_ns": num|null,
                "steps": [{step, cpu_start, cpu_end, cpu_ns, gpu_start, gpu_end, gpu_ns,
                           activities}]},
      "overlap": {"compute_ns", "communication_ns", "memcpy_ns", "gpu_busy_ns",
                  "comm_compute_overlap_ns", "exposed_comm_ns", "exposed_memcpy_ns": int,
                  "comm_overlap_ratio": num|null,
                  "streams": [{device, stream, activities, busy_ns, first_ts, last_end}],
                  "pairs": [{device, stream_a, stream_b, overlap_ns}],
                  "classes": [{device, compute_ns, communication_ns, memcpy_ns, gpu_busy_ns,
                               comm_compute_overlap_ns, exposed_comm_ns, exposed_memcpy_ns,
                               comm_overlap_ratio}]},
      "gaps": {"optimizer_occurrences", "lookup_occurrences": int,
               "mean_gap_ns", "median_gap_ns", "mean_idle_ns", "mean_overlap_ns": num|null,
               "note": str,
               "gaps": [{device, step, optimizer_batch, lookup_batch, optimizer_start,
                         optimizer_end, lookup_start, lookup_end, gap_ns, overlap_ns, idle_ns,
                         matched_by}]},
      "syncs": {"count", "total_ns", "idle_after_ns": int,
                "stalls": [{ts, end, dur_ns, name, tid, device, op_chain, call_site, phase,
                            step, idle_after_ns, source}],
                "by_call_site": [{call_site, count, total_ns, max_ns, idle_after_ns}],
                "by_phase": [{phase, count, total_ns, max_ns, idle_after_ns}],
                "by_step": [{step, count, total_ns, idle_after_ns}],
                # polls (cudaEventQuery/cudaStreamQuery; never stalls), their totals only:
                "poll_count", "poll_total_ns", "allocator_poll_count",
                "allocator_poll_total_ns": int, "allocator_known": bool,
                "polls_by_call_site": [{call_site, count, total_ns, max_ns, allocator_count}],
                "polls_by_step": [{step, count, total_ns, allocator_count, allocator_ns}]},
      "allocator": {"peak_allocated", "peak_reserved", "unused_at_peak_reserved": int|null,
                    "unused_fraction": num|null, "reconstructed": bool, "note": str,
                    "devices": [{device, events, allocations, frees, peak_allocated,
                                 peak_allocated_ts, peak_reserved, peak_reserved_ts,
                                 allocated_at_peak_reserved, unused_at_peak_reserved,
                                 unused_fraction, reconstructed}],
                    "per_step": [{step, device, allocations, allocated_bytes}],
                    "series": [{device, ts, allocated, reserved}],
                    "series_points": int},
      "hta": object|null,        # the HTA section's fields (its to_dict() when it has one)
      "snapshot": object|null,   # tracekit.analyses.snapshot.SnapshotResult's fields
      "collectives": {"source": "args"|"kernel names"|"args and kernel names"|"none",
                      "count": int, "kernel_ns": int,
                      "by_type": [{collective, count, kernel_ns, in_bytes, out_bytes}],
                      "groups": [{group, desc, size: int|null, ranks: [int]|null}],
                      "kernels": [{group, collective, seq, index, step, stream, ts, end,
                                   in_bytes, out_bytes}]},
      "identity": {"distributed_info": object|null, "base_time_ns": int|null,
                   "start_ns": int|null, "end_ns": int|null}
    }

A step's window in ``explain`` runs from the previous step's completion (the first step: its
own start) to its completion (the last end among its CPU calls and the GPU work it launched);
``breakdown`` categories are ``host``, ``compute:<phase>``, ``communication``, ``memcpy``,
``sync`` and ``idle`` and sum to ``duration_ns``; ``bound`` is the class (``host``; ``gpu`` =
compute + memcpy; ``communication``; ``sync``) with the largest share. Findings come first in
the text output; ``tracekit.analyses.explain`` says what each one means.

``collectives`` is ``tracekit.analyses.collectives`` (every communication kernel of the rank:
its process group, collective, sequence number, step, sizes; -1 where unknown); ``identity`` is
``tracekit.analyses.trace_identity`` (the ``distributedInfo`` as written, Kineto's
``baseTimeNanoseconds``, the first start and last end on the rank's clock). ``tracekit.ranks``
builds the job object below from them.

``series`` holds at most ``SERIES_POINTS`` points per device: when there are more events, the
series is cut into that many equal runs of events and each run keeps its largest allocated
and reserved (so peaks survive); ``series_points`` is the number of events before that.
Columns documented as ``-1`` for "none" in the analyses keep ``-1`` here; NaN becomes null.

The job object (``tracekit.ranks``; a directory of per-rank traces analysed as one job; every
time is in ns on the reference rank's clock once the offsets are applied; definitions in
``tracekit.ranks.job``)::

    {
      "source": str,                     # the directory
      "world_size": int|null,            # distributedInfo.world_size of the job's ranks
      "ranks_read": int, "complete": bool,   # complete: every rank read, nothing left out
      "problems": [{kind: "unreadable"|"other_job"|"duplicate_rank"|"missing",
                    source: str|null, rank: int|null, message: str}],
      "ranks": [{rank, source, steps, step_source, step_cpu_p50_ns, step_cpu_p90_ns,
                 step_gpu_p50_ns, step_gpu_p90_ns,
                 bound: str|null, bound_share: num|null,   # the rank's explain headline
                 collectives, collective_ns,               # its collective kernels, their time
                 wait_ns,                                  # its wait at collectives
                 last_count, caused_wait_ns,               # times it arrived last; wait it caused
                 clock_offset_ns: int|null,                # its clock minus the reference's
                 sent_bytes, received_bytes: int|null,     # over the all-to-alls
                 warnings: [str]}],
      "spread": {"figure": "step_gpu"|"step_cpu",
                 "p50", "p90": {min_ns, median_ns, max_ns, spread_ns, slowest_rank,
                                fastest_rank, max_over_median}|null}|null,
      "clock": {"aligned": bool, "reference_rank": int|null,
                "offsets": [{rank, offset_ns: int|null, spread_ns: num|null, samples,
                             aligned: bool}],
                "notes": [str]},
      "matching": {"instances": int,
                   "groups": [{group, desc, ranks: [int], matched_by: "seq"|"step and order"|
                               "order", instances, partial, inconsistent, outside_steps}]},
      "by_type": [{collective, instances, transfer_ns, waited_ns, skew_p50_ns, skew_p90_ns,
                   skew_max_ns, bytes}],
      "stragglers": {"rank": int|null, "last_count", "instances", "caused_wait_ns",
                     "waited_ns": int, "share": num|null, "bound": str|null,
                     "bound_share": num|null, "min_skew_ns": int,
                     "steps": [{step, straggler, caused_wait_ns, waited_ns, skew_max_ns,
                                bound: str|null}]},
      "all_to_all": {"instances": int, "imbalance": num|null, "heaviest_rank": int|null,
                     "instance_imbalance_p50", "instance_imbalance_max": num|null,
                     "per_rank": [{rank, sent_bytes, received_bytes, received_over_mean}]},
      "steps": [{rank, step, cpu_ns, gpu_ns: int|null, wait_ns, last_count,
                 bound: str|null}],                # ranks x steps: the heatmap's cells
      "arrivals_everywhere": bool,      # every instance carries "arrivals" (else: worst only)
      "instances": [{instance, group, collective, key, step, ranks, first_arrival,
                     last_arrival, skew_ns, straggler, waited_ns, transfer_ns,
                     end_spread_ns, imbalance: num|null,
                     "arrivals": [{rank, start, end, wait_ns, in_bytes, out_bytes}]}],
      "worst": [<instance>, ...]        # the JobConfig.worst_kept largest skews, with arrivals
    }

In ``stragglers``: ``rank`` is the rank that caused the most wait (null when no instance has a
skew of at least ``min_skew_ns``), ``instances`` the instances with such a skew, ``waited_ns``
all the wait of all ranks, ``share`` the straggler's part of it, ``bound`` its explain bound;
``steps`` names each step's straggler and that rank's bound in that step. In ``steps``, a
rank's ``wait_ns`` and ``last_count`` count the instances its own kernels launched in that
step. ``bound`` fields read the rank objects' ``explain`` section (``tracekit explain``) and
are null where it is absent.

``tracekit compare --format json`` writes::

    {"tracekit_version": str, "format": 1, "baseline": str,
     "traces": [{"label": str, "source": str, "rank": int, "headline": {...}}],
     "differences": [{"label": str, "<headline key>": num|null, ...}]}

where each difference is the trace's headline figure minus the first trace's (``null`` where
either is ``null``), for every numeric headline key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tracekit._files import display

FORMAT = 1
SERIES_POINTS = 1000

HEADLINE_KEYS = (
    "steps", "step_source", "step_cpu_p50_ns", "step_cpu_p90_ns", "step_gpu_p50_ns",
    "step_gpu_p90_ns", "peak_allocated_bytes", "peak_reserved_bytes",
    "unused_at_peak_reserved_bytes", "unused_fraction", "mean_gap_ns", "mean_gap_idle_ns",
    "comm_overlap_ratio", "exposed_comm_ns", "exposed_memcpy_ns", "stall_count",
    "stall_total_ns", "stall_idle_after_ns", "bound", "bound_share", "poll_count",
    "poll_total_ns",
)
TEXT_KEYS = ("step_source", "bound")
"""Headline keys whose values are words, not figures."""
SECTION_KEYS = ("explain", "steps", "overlap", "gaps", "syncs", "allocator", "hta", "snapshot",
                "collectives", "identity")
RANK_KEYS = ("source", "rank", "schema", "platform", "warnings", "rules", "headline",
             *SECTION_KEYS)


# ---- Analysis -> JSON values -------------------------------------------------------------------

def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (str, bool)):
        return v
    if hasattr(v, "item") and not hasattr(v, "columns"):  # numpy scalar
        v = v.item()
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, int):
        return v
    return str(v)


def _records(df: Any) -> list[dict]:
    """Rows as dicts of plain Python values, NaN as None: what ``df.to_dict(orient="records")``
    gives once the missing values are None, built column by column (``tolist`` makes the
    Python values of a numeric column at once; pandas' own ``to_dict`` indexes the frame per
    column and boxes value by value: a third of a cold analyze's report, 2026-11-24). A frame
    with repeated column names or a column of another kind (datetimes, say) takes pandas' way."""
    names = [str(c) for c in df.columns]
    unique = len(set(names)) == len(names)
    columns = [_column_values(df.iloc[:, j]) for j in range(len(names))] if unique else []
    if not unique or any(c is None for c in columns):
        df = df.rename(columns=str)
        nan = df.isna().to_numpy()
        if nan.any():
            df = df.astype(object).where(~nan, None)
        return df.to_dict(orient="records")
    return [dict(zip(names, row)) for row in zip(*columns)] if names else [{} for _ in range(len(df))]


def _column_values(col: Any) -> list | None:
    """A column's values as plain Python ones, missing ones None; None for a column of a kind
    ``_records`` leaves to pandas."""
    import numpy as np  # not at the top: the warm path (a report-cache hit) imports this module

    a = col.to_numpy()
    kind = a.dtype.kind
    if kind in "iub":
        return a.tolist()
    if kind == "f":
        return [None if v != v else v for v in a.tolist()]  # NaN -> None
    if kind != "O":
        return None
    missing = col.isna().to_numpy()
    out = a.tolist()  # an object array's tolist keeps numpy scalars as they are: box them
    for i, v in enumerate(out):
        if missing[i]:
            out[i] = None
        elif isinstance(v, np.generic):
            if not isinstance(v, (np.integer, np.floating, np.bool_)):
                return None  # datetime64 and the like: pandas boxes them its own way
            out[i] = v.item()
    return out


def jsonable(obj: Any) -> Any:
    """Plain JSON values of a result: dataclasses by field, DataFrames as lists of rows."""
    if obj is None:
        return None
    t = type(obj)  # the plain types first (most of a big report: its per-step items)
    if t is str or t is int or t is bool:
        return obj
    if t is float:
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if t is dict:
        return {str(k): jsonable(v) for k, v in obj.items()}
    if t is list or t is tuple:
        return [jsonable(v) for v in obj]
    if hasattr(obj, "columns") and hasattr(obj, "itertuples"):
        return _records(obj)
    if isinstance(obj, type):
        return _scalar(obj)
    if hasattr(obj, "to_dict"):  # a result with its own JSON form (HTA's, say)
        return jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return _scalar(obj)


def _downsample(series: Any) -> list[dict]:
    """At most SERIES_POINTS rows per device, keeping each run's maxima (see module docstring)."""
    out: list[dict] = []
    for dev, d in series.groupby("device", sort=True):
        n = len(d)
        if n <= SERIES_POINTS:
            out += _records(d)
            continue
        import numpy as np

        run = (np.arange(n) * SERIES_POINTS) // n
        g = d.assign(_run=run).groupby("_run")
        agg = g.agg(ts=("ts", "first"), allocated=("allocated", "max"),
                    reserved=("reserved", "max")).reset_index(drop=True)
        agg.insert(0, "device", int(dev))
        out += _records(agg)
    return out


def headline(a: Any) -> dict:
    """The figures ``compare`` puts side by side, from an ``Analysis``."""
    s, o, g, y, m = a.steps, a.overlap, a.gaps, a.syncs, a.allocator
    return {
        "steps": len(s.steps),
        "step_source": s.source,
        "step_cpu_p50_ns": s.cpu_p50_ns,
        "step_cpu_p90_ns": s.cpu_p90_ns,
        "step_gpu_p50_ns": s.gpu_p50_ns,
        "step_gpu_p90_ns": s.gpu_p90_ns,
        "peak_allocated_bytes": m.peak_allocated,
        "peak_reserved_bytes": m.peak_reserved,
        "unused_at_peak_reserved_bytes": m.unused_at_peak_reserved,
        "unused_fraction": m.unused_fraction,
        "mean_gap_ns": g.mean_gap_ns,
        "mean_gap_idle_ns": g.mean_idle_ns,
        "comm_overlap_ratio": o.comm_overlap_ratio,
        "exposed_comm_ns": o.exposed_comm_ns,
        "exposed_memcpy_ns": o.exposed_memcpy_ns,
        "stall_count": y.count,
        "stall_total_ns": y.total_ns,
        "stall_idle_after_ns": y.idle_after_ns,
        "bound": getattr(a.explain, "bound", None),
        "bound_share": getattr(a.explain, "bound_share", None),
        "poll_count": getattr(y, "poll_count", 0),
        "poll_total_ns": getattr(y, "poll_total_ns", 0),
    }


def snapshot_dict(s: Any) -> dict | None:
    """A ``SnapshotResult`` as JSON, without its per-address table (only the stream matching
    reads it)."""
    if s is None:
        return None
    d = jsonable(dataclasses.replace(s, addresses=None))
    d.pop("addresses", None)
    return d


def to_dict(a: Any) -> dict:
    """One rank's ``Analysis`` as the JSON object documented in the module docstring."""
    # the full series is never turned into rows: only its downsampled points are written
    alloc = jsonable(dataclasses.replace(a.allocator, series=None))
    alloc["series_points"] = len(a.allocator.series)
    alloc["series"] = _downsample(a.allocator.series)
    d = {
        "source": display(a.source),
        "rank": int(a.rank),
        "schema": a.schema,
        "platform": a.platform,
        "warnings": list(a.warnings),
        "rules": a.rules,
        "headline": jsonable(headline(a)),
        "explain": jsonable(a.explain),
        "steps": jsonable(a.steps),
        "overlap": jsonable(a.overlap),
        "gaps": jsonable(a.gaps),
        "syncs": jsonable(a.syncs),
        "allocator": alloc,
        "hta": jsonable(a.hta),
        "snapshot": snapshot_dict(a.snapshot),
        "collectives": jsonable(a.collectives),
        "identity": jsonable(a.identity),
    }
    return d


def document(ranks: list[dict], version: str, jobs: list[dict] | None = None) -> dict:
    """The top-level object of ``tracekit analyze --format json`` (``jobs``: the job objects of
    the directories analysed, ``tracekit.ranks``)."""
    return {"tracekit_version": version, "format": FORMAT, "analyses": ranks,
            "jobs": list(jobs or [])}


# ---- text ----------------------------------------------------------------------------------------

def _ms(ns: Any, digits: int = 3) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:,.{digits}f}"


def fmt_bytes(b: Any) -> str:
    """Bytes as a person reads them (``1.50 GiB``); ``-`` for unknown."""
    if b is None or (isinstance(b, (int, float)) and b < 0):
        return "-"
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= f:
            return f"{b / f:,.2f} {unit}"
    return f"{int(b)} B"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table(headers: list[str], rows: list[list[Any]], indent: str = "  ") -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for j, r in enumerate(cells):
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append(indent + "  ".join(parts).rstrip())
        if j == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _clip(s: str, n: int = 90) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _limited(rows: list, n: int) -> tuple[list, str]:
    return (rows[:n], f"  ... {len(rows) - n} more (see --format json)\n") if len(rows) > n \
        else (rows, "")


def _text_steps(s: dict, limit: int) -> str:
    if not s["steps"]:
        return ("  no steps: the trace has no ProfilerStep#N annotation and too few optimizer "
                "boundaries to infer any\n")
    src = s["source"] + (f" ({s['boundary']})" if s.get("boundary") else "")
    rows, more = _limited(s["steps"], limit)
    out = f"  steps from {src}: {len(s['steps'])}\n"
    out += table(["step", "CPU ms", "GPU ms", "GPU activities"],
                 [[r["step"], _ms(r["cpu_ns"]), _ms(r["gpu_ns"] if r["activities"] else None),
                   r["activities"]] for r in rows]) + "\n" + more
    out += (f"  P50 / P90 CPU: {_ms(s['cpu_p50_ns'])} / {_ms(s['cpu_p90_ns'])} ms;  "
            f"GPU: {_ms(s['gpu_p50_ns'])} / {_ms(s['gpu_p90_ns'])} ms\n")
    return out


def _text_overlap(o: dict) -> str:
    if not o["streams"]:
        return "  no GPU activity\n"
    out = table(["device:stream", "activities", "busy ms"],
                [[f"{r['device']}:{r['stream']}", r["activities"], _ms(r["busy_ns"])]
                 for r in o["streams"]]) + "\n"
    if o["pairs"]:
        out += "  pairwise overlap |busy(A) ∩ busy(B)|, ms:\n"
        keys = [f"{r['device']}:{r['stream']}" for r in o["streams"]]
        m = {(f"{p['device']}:{p['stream_a']}", f"{p['device']}:{p['stream_b']}"): p["overlap_ns"]
             for p in o["pairs"]}
        rows = []
        for a in keys:
            rows.append([a] + [_ms(m.get((a, b), m.get((b, a))), 2) if a != b and
                               ((a, b) in m or (b, a) in m) else "" for b in keys])
        out += table([""] + keys, rows) + "\n"
    out += table(["class", "busy ms"], [["compute", _ms(o["compute_ns"])],
                                        ["communication", _ms(o["communication_ns"])],
                                        ["memcpy/memset", _ms(o["memcpy_ns"])],
                                        ["any (GPU busy)", _ms(o["gpu_busy_ns"])]]) + "\n"
    if o["communication_ns"]:
        out += (f"  communication overlapped with compute: {_pct(o['comm_overlap_ratio'])} "
                f"({_ms(o['comm_compute_overlap_ns'])} ms, over the whole trace; HTA's figure "
                f"below covers its own window); exposed communication "
                f"{_ms(o['exposed_comm_ns'])} ms\n")
    else:
        out += "  no communication kernels\n"
    out += f"  exposed memcpy (not under compute or communication): {_ms(o['exposed_memcpy_ns'])} ms\n"
    return out


def _text_gaps(g: dict, limit: int) -> str:
    if not g["gaps"]:
        return f"  no optimizer -> lookup pair: {g['note']}\n"
    rows, more = _limited(g["gaps"], limit)
    out = f"  {g['note']}; gap < 0: the next lookup overlaps the optimizer\n"
    out += table(["step", "opt batch", "lookup batch", "gap ms", "overlap ms", "GPU idle ms"],
                 [[r["step"], r["optimizer_batch"], r["lookup_batch"], _ms(r["gap_ns"]),
                   _ms(r["overlap_ns"]), _ms(r["idle_ns"])] for r in rows]) + "\n" + more
    if any(r["step"] == -1 or r["optimizer_batch"] == -1 for r in g["gaps"]):
        out += ("  -1: step = the optimizer was launched outside every ProfilerStep; batch = the "
                "labels carry no batch index (paired by time order)\n")
    out += (f"  mean gap {_ms(g['mean_gap_ns'])} ms (median {_ms(g['median_gap_ns'])}), "
            f"mean overlap {_ms(g['mean_overlap_ns'])} ms, mean GPU idle "
            f"{_ms(g['mean_idle_ns'])} ms\n")
    return out


def _text_polls(y: dict) -> str:
    n = y.get("poll_count") or 0
    if not n:
        return ""
    out = (f"  polls (cudaEventQuery/cudaStreamQuery: return at once, not stalls): {n}, "
           f"{_ms(y.get('poll_total_ns'))} ms of CPU time")
    if y.get("allocator_known"):
        out += (f"; the caching allocator's (querying the events of blocks record_stream tied "
                f"to other streams before reusing them): {y.get('allocator_poll_count', 0)}, "
                f"{_ms(y.get('allocator_poll_total_ns'))} ms")
    return out + "\n"


def _text_syncs(y: dict, limit: int) -> str:
    if not y["count"]:
        return "  no blocking calls\n" + _text_polls(y)
    out = (f"  {y['count']} blocking calls, {_ms(y['total_ns'])} ms of CPU time; GPU idle "
           f"after them {_ms(y['idle_after_ns'])} ms\n") + _text_polls(y)
    rows, more = _limited(y["by_call_site"], limit)
    out += "  by call site (op chain > call):\n"
    out += table(["call site", "count", "total ms", "max ms", "GPU idle after ms"],
                 [[_clip(r["call_site"]), r["count"], _ms(r["total_ns"]), _ms(r["max_ns"]),
                   _ms(r["idle_after_ns"])] for r in rows]) + "\n" + more
    out += "  by phase:\n"
    out += table(["phase", "count", "total ms", "max ms", "GPU idle after ms"],
                 [[r["phase"], r["count"], _ms(r["total_ns"]), _ms(r["max_ns"]),
                   _ms(r["idle_after_ns"])] for r in y["by_phase"]]) + "\n"
    rows, more = _limited(y["by_step"], limit)
    out += "  per step (-1: outside any ProfilerStep):\n"
    out += table(["step", "count", "total ms", "GPU idle after ms"],
                 [[r["step"], r["count"], _ms(r["total_ns"]), _ms(r["idle_after_ns"])]
                  for r in rows]) + "\n" + more
    return out


def _text_allocator(m: dict, limit: int) -> str:
    if not m["devices"]:
        return f"  {m['note']}\n"
    out = f"  note: {m['note']}\n" if m["note"] else ""
    out += table(["device", "events", "peak allocated", "peak reserved",
                  "reserved - allocated at reserved peak", "fraction"],
                 [[r["device"], r["events"], fmt_bytes(r["peak_allocated"]),
                   fmt_bytes(r["peak_reserved"]), fmt_bytes(r["unused_at_peak_reserved"]),
                   _pct(r["unused_fraction"])] for r in m["devices"]]) + "\n"
    if m["per_step"]:
        rows, more = _limited(m["per_step"], limit)
        out += "  allocations per step:\n"
        out += table(["step", "device", "allocations", "bytes allocated"],
                     [[r["step"], r["device"], r["allocations"], fmt_bytes(r["allocated_bytes"])]
                      for r in rows]) + "\n" + more
    return out


def _text_generic(d: Any, indent: str = "  ") -> str:
    """Any other section (HTA, snapshot): scalars as lines, tables as tables."""
    if not isinstance(d, dict):
        return f"{indent}{d}\n"
    out = ""
    for k, v in d.items():
        if isinstance(v, list) and v and all(isinstance(r, dict) for r in v):
            cols = list(v[0].keys())
            rows, more = _limited(v, 15)
            out += f"{indent}{k}:\n" + table(cols, [[_clip(str(_num(r.get(c))), 60) for c in cols]
                                                   for r in rows], indent + "  ") + "\n"
            out += more
        elif isinstance(v, dict):
            out += f"{indent}{k}:\n" + _text_generic(v, indent + "  ")
        elif isinstance(v, list) and not v:
            out += f"{indent}{k}: none\n"
        else:
            out += f"{indent}{k}: {_num(v)}\n"
    return out


def _us(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _text_hta(h: dict, limit: int) -> str:
    """The HTA section (``tracekit.analyses.hta.HtaResult``): HTA's own tables, in HTA's us."""
    if h.get("available") is False:
        return f"  not available: {h.get('reason') or 'unknown reason'}\n"
    window = ("every ProfilerStep" if h.get("include_last_profiler_step")
              else "the last ProfilerStep's GPU work left out, as HTA does by default")
    out = f"  HTA {h.get('hta_version') or '?'}; times in us; window: {window}\n"
    overlap = {r["rank"]: r.get("comp_comm_overlap_pctg") for r in h.get("comm_comp_overlap") or []}
    if h.get("temporal"):
        out += "  temporal breakdown (of the span from the first to the last GPU activity):\n"
        out += table(["rank", "GPU span", "idle", "compute", "non-compute", "comm overlapped"],
                     [[r["rank"], _us(r["kernel_time(us)"]),
                       f"{_us(r['idle_time(us)'])} ({_num(r['idle_time_pctg'])}%)",
                       f"{_us(r['compute_time(us)'])} ({_num(r['compute_time_pctg'])}%)",
                       f"{_us(r['non_compute_time(us)'])} ({_num(r['non_compute_time_pctg'])}%)",
                       "no NCCL kernels" if overlap.get(r["rank"]) is None
                       else f"{overlap[r['rank']]:.2f}%"]
                      for r in h["temporal"]], "    ") + "\n"
    if h.get("idle_by_category"):
        by_rank: dict = {}
        for r in h["idle_by_category"]:
            by_rank.setdefault(r["rank"], {})[r["idle_category"]] = r
        cats = ("host_wait", "kernel_wait", "other")
        out += "  idle time by category (summed over streams; per stream: --format json):\n"
        out += table(["rank", *cats],
                     [[rank, *(f"{_us(c[k]['idle_time'])} ({_pct(c[k]['idle_time_ratio'])})"
                               if k in c else "-" for k in cats)]
                      for rank, c in by_rank.items()], "    ") + "\n"
    if h.get("kernel_types"):
        ranks = h.get("ranks") or []
        whose = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        out += f"  kernel time by type ({whose}):\n"
        out += table(["kernel type", "us", "%"],
                     [[r["kernel_type"], _us(r["sum"]), _num(r["percentage"])]
                      for r in h["kernel_types"]], "    ") + "\n"
    if h.get("top_kernels"):
        rows, more = _limited(h["top_kernels"], limit)
        out += ("  top kernels by type (HTA's mean/max: over a kernel's instances, but once a type "
                "has more than 10 kernels over the kernels' totals, so equal to the total for a "
                "kernel of its own):\n")
        out += table(["kernel", "type", "rank", "total us", "mean us", "max us"],
                     [[_clip(str(r["name"]), 70), r["kernel_type"], r["rank"],
                       _us(r["sum (us)"]), _us(r["mean (us)"]), _us(r["max (us)"])]
                      for r in rows], "    ") + "\n" + more
        if any((r.get("sum (us)") or 0) < 0 for r in h["top_kernels"]):
            out += ("  negative us: HTA rounds a start up and an end down to whole us on ns "
                    "traces, so a kernel shorter than 1 us counts -1 us (HTA's own parser)\n")
    for n in h.get("notes") or []:
        out += f"  note: {n}\n"
    return out


def _text_snapshot(s: dict, limit: int) -> str:
    """The memory-snapshot section (``tracekit.analyses.snapshot.SnapshotResult``)."""
    reserved = s.get("reserved") or 0
    off = s.get("reserved_off_main")
    out = f"  {s.get('source')} (main stream: {s.get('main_stream')})\n"
    out += table(["figure", "bytes"], [
        ["reserved", fmt_bytes(reserved)],
        ["allocated", fmt_bytes(s.get("allocated"))],
        ["free (cached, reusable by its own stream and pool)", fmt_bytes(s.get("free"))],
        ["waiting in active_pending_free", fmt_bytes(s.get("pending_free"))],
        ["reserved on other streams (the main stream cannot reuse it)",
         f"{fmt_bytes(off)} ({_pct(off / reserved) if reserved and off is not None else '-'})"],
        ["inactive split (free pieces of segments in use)", fmt_bytes(s.get("inactive_split"))],
        *([["peak reserved on other streams, recorded history",
            fmt_bytes(s["peak_reserved_off_main"])]]
          if s.get("peak_reserved_off_main") is not None else []),
    ]) + "\n"
    if s.get("streams"):
        out += "  per stream:\n"
        out += table(["device", "stream", "segments", "reserved", "allocated", "pending free",
                      "free", "inactive split"],
                     [[r["device"], f"{r['stream']}{' (main)' if r['is_main'] else ''}",
                       r["segments"], fmt_bytes(r["reserved"]), fmt_bytes(r["allocated"]),
                       fmt_bytes(r["pending_free"]), fmt_bytes(r["free"]), fmt_bytes(r["inactive_split"])]
                      for r in s["streams"]], "    ") + "\n"
    if s.get("pools"):
        rows, more = _limited(s["pools"], limit)
        out += "  free memory per (stream, pool):\n"
        out += table(["device", "stream", "pool", "type", "reserved", "free", "largest free",
                      "free blocks", "fragmentation"],
                     [[r["device"], r["stream"], r["pool_id"], r["segment_type"],
                       fmt_bytes(r["reserved"]), fmt_bytes(r["free"]), fmt_bytes(r["largest_free"]),
                       r["free_blocks"], _pct(r["free_fragmentation"])]
                      for r in rows], "    ") + "\n" + more
    if s.get("history"):
        out += f"  recorded history ({s.get('trace_entries')} entries), reserved per stream:\n"
        out += table(["device", "stream", "segment events", "at start", "now", "peak"],
                     [[r["device"], f"{r['stream']}{' (main)' if r['is_main'] else ''}",
                       r["segment_events"], fmt_bytes(r["reserved_at_start"]),
                       fmt_bytes(r["reserved_now"]), fmt_bytes(r["peak_reserved"])]
                      for r in s["history"]], "    ") + "\n"
    return out


NO_HELP_FRACTION = 0.01
"""A finding whose predicted saving is below this share of the step "would not help here"."""


def would_not_help(f: dict) -> bool:
    """A time finding predicted to save under ``NO_HELP_FRACTION`` of the step."""
    return f.get("kind") != "memory" and f.get("saving_fraction") is not None and f["saving_fraction"] < NO_HELP_FRACTION


def _saving(f: dict) -> str:
    """A finding's predicted saving as text."""
    if f.get("kind") == "memory":
        pr, pk = f.get("predicted_peak_reserved_bytes"), f.get("peak_reserved_bytes")
        if pr is None:
            return "memory: no prediction (needs a memory snapshot beside the trace)"
        return (f"predicted peak reserved {fmt_bytes(pr)} (traced {fmt_bytes(pk)}, "
                f"saves {fmt_bytes(f.get('saving_bytes'))})")
    ns = f.get("saving_ns")
    if ns is None:
        return "no prediction"
    out = f"saves {_ms(ns)} ms/step ({_pct(f.get('saving_fraction'))})"
    c = f.get("saving_contention_ns")
    if c is not None and abs(c - ns) >= 1000:
        out += f", {_ms(c)} ms with contention ({_pct(f.get('saving_contention_fraction'))})"
    if would_not_help(f):
        out += ": would not help here"
    return out


def _text_view(e: dict) -> str:
    """Which step the findings are about: traced, or estimated untraced (and on what)."""
    o = e.get("overhead")
    if not o:
        return ""
    traced, untraced = o.get("traced_step_ns"), o.get("untraced_step_ns")
    out = (f"  step: traced {_ms(traced)} ms, estimated untraced {_ms(untraced)} ms "
           f"({_pct((untraced / traced - 1) if traced and untraced else None)})")
    if o.get("scale") == "given":
        out += f"; untraced step given: {_ms(o.get('given_step_ns'))} ms ({o.get('source') or '-'})"
    out += "\n"
    out += f"  the estimate: {o.get('rests_on')}\n"
    if e.get("view") == "untraced":
        out += "  bound and findings: the estimated untraced step (--traced: the traced one)\n"
    else:
        out += "  bound and findings: the traced step, as the trace shows it\n"
    return out


def text_findings(e: dict | None, limit: int = 8) -> str:
    """The Findings section: the bound, the critical path's split, the findings."""
    if not e:
        return "  not computed\n"
    out = _text_view(e)
    if e.get("bound"):
        n = len(e.get("steps") or [])
        out += (f"  bound: {e['bound']} ({_pct(e['bound_share'])} of the critical path over "
                f"{n} step{'s' if n != 1 else ''})\n")
    else:
        out += "  bound: - (no critical path)\n"
    bd = e.get("breakdown") or []
    if bd:
        out += "  critical path: " + ", ".join(f"{r['category']} {_pct(r['share'])}"
                                                for r in bd[:6]) + "\n"
    for w in e.get("warnings") or []:
        out += f"  warning: {w}\n"
    fs = e.get("findings") or []
    if not fs:
        out += "  no finding\n"
    for i, f in enumerate(fs[:limit], 1):
        out += f"  {i}. {f['title']}: {_saving(f)}\n"
        if f.get("fix"):
            out += f"     fix: {f['fix']}\n"
        out += f"     evidence: {f['evidence']}\n"
    if len(fs) > limit:
        out += f"  ... {len(fs) - limit} more (see --format json)\n"
    return out


def text_explain(e: dict, limit: int) -> str:
    """The critical path per step and the what-if table."""
    steps = e.get("steps") or []
    if not steps:
        return "  no steps\n"
    rows, more = _limited(steps, limit)
    out = table(["step", "ms", "traced ms", "untraced ms (est.)", "bound", "share",
                 "largest categories on the critical path"],
                [[r["step"], _ms(r["duration_ns"]), _ms(r.get("traced_ns")), _ms(r.get("untraced_ns")),
                  r["bound"] or "-", _pct(r["bound_share"]),
                  _clip(", ".join(f"{k} {_ms(v, 2)}" for k, v in
                                  list(r["breakdown"].items())[:4]), 80)]
                 for r in rows]) + "\n" + more
    lanes = e.get("lanes") or []
    if lanes:
        out += "  time on the critical path by lane: " + ", ".join(
            f"{r['lane']} {_pct(r['share'])}" for r in lanes[:6]) + "\n"
    wis = e.get("what_ifs") or []
    if wis:
        out += "  what-if (mean step, all steps but the first):\n"
        out += table(["what-if", "applies", "step ms", "predicted ms", "with contention ms",
                      "saving"],
                     [[_clip(w["id"], 40), "yes" if w["applies"] else "no",
                       _ms(w["observed_step_ns"]), _ms(w["predicted_step_ns"]),
                       _ms(w["predicted_contention_step_ns"]), _pct(w["saving_fraction"])]
                      for w in wis], "    ") + "\n"
    return out


def _num(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return "-" if v is None else v


def _text_collectives(c: dict) -> str:
    out = (f"  {c['count']} kernels, {_ms(c['kernel_ns'])} ms (collective and group from "
           f"{c['source']}):\n")
    out += table(["collective", "kernels", "ms", "sent", "received"],
                 [[r["collective"], r["count"], _ms(r["kernel_ns"]),
                   fmt_bytes(r["in_bytes"]) if r["in_bytes"] else "-",
                   fmt_bytes(r["out_bytes"]) if r["out_bytes"] else "-"]
                  for r in c["by_type"]]) + "\n"
    out += "  groups: " + "; ".join(
        f"{g['group']}" + (f" ({g['desc']})" if g.get("desc") else "")
        + (f" ranks {ranges(g['ranks'])}" if g.get("ranks") else "") for g in c["groups"]) + "\n"
    return out


def render_rank(r: dict, *, limit: int = 20) -> str:
    """One rank's report as text (``limit``: rows shown per long table)."""
    h = r["headline"]
    out = [f"== {r['source']}  (rank {r['rank']}, {r['schema']} schema, {r['platform']})"]
    for w in r["warnings"]:
        out.append(f"  warning: {w}")
    if "explain" in r:
        out.append("")
        out.append("Findings")
        out.append(text_findings(r.get("explain")).rstrip("\n"))
    out.append("")
    out.append("Headline")
    out.append(table(["figure", "value"], [
        ["steps", f"{h['steps']} ({h['step_source']})"],
        ["step time P50 / P90, CPU ms", f"{_ms(h['step_cpu_p50_ns'])} / {_ms(h['step_cpu_p90_ns'])}"],
        ["step time P50 / P90, GPU ms", f"{_ms(h['step_gpu_p50_ns'])} / {_ms(h['step_gpu_p90_ns'])}"],
        ["peak allocated / reserved", f"{fmt_bytes(h['peak_allocated_bytes'])} / "
                                      f"{fmt_bytes(h['peak_reserved_bytes'])}"],
        ["reserved - allocated at reserved peak", f"{fmt_bytes(h['unused_at_peak_reserved_bytes'])}"
                                                  f" ({_pct(h['unused_fraction'])})"],
        ["optimizer -> lookup gap, mean ms", _ms(h["mean_gap_ns"])],
        ["communication overlapped by compute", _pct(h["comm_overlap_ratio"])],
        ["exposed communication / memcpy, ms", f"{_ms(h['exposed_comm_ns'])} / "
                                               f"{_ms(h['exposed_memcpy_ns'])}"],
        ["sync stalls: count, CPU ms, GPU idle after ms",
         f"{h['stall_count']}, {_ms(h['stall_total_ns'])}, {_ms(h['stall_idle_after_ns'])}"],
        *([["polls (not stalls): count, CPU ms",
            f"{h['poll_count']}, {_ms(h['poll_total_ns'])}"]] if h.get("poll_count") else []),
        *([["bound (share of the critical path)",
            f"{h.get('bound') or '-'} ({_pct(h.get('bound_share'))})"]] if "bound" in h else []),
    ]))
    gpu = r["platform"] != "cpu"
    no_gpu = "  no GPU activity\n"
    sections = [
        ("1. Steps", _text_steps(r["steps"], limit)),
        ("2. Stream overlap", _text_overlap(r["overlap"]) if gpu else no_gpu),
        ("3. Optimizer -> next lookup gap", _text_gaps(r["gaps"], limit) if gpu else no_gpu),
        ("4. Sync stalls", _text_syncs(r["syncs"], limit) if gpu else no_gpu),
        ("5. Allocator ([memory] events)", _text_allocator(r["allocator"], limit)),
    ]
    if r.get("hta") is not None:
        hta = r["hta"]
        body = _text_hta(hta, limit) if isinstance(hta, dict) else _text_generic(hta)
        sections.append(("6. HTA (Holistic Trace Analysis on the same parsed trace)", body))
    if r.get("snapshot") is not None:
        snap = r["snapshot"]
        body = _text_snapshot(snap, limit) if isinstance(snap, dict) else _text_generic(snap)
        sections.append(("7. Memory snapshot (CUDA caching allocator)", body))
    if r.get("explain"):
        sections.append(("8. Critical path per step (tracekit explain)",
                         text_explain(r["explain"], limit)))
    if (r.get("collectives") or {}).get("count"):
        sections.append(("9. Collectives (communication kernels)",
                         _text_collectives(r["collectives"])))
    for title, body in sections:
        out.append("")
        out.append(title)
        out.append(body.rstrip("\n"))
    return "\n".join(out) + "\n"


def render_text(doc: dict, *, limit: int = 20) -> str:
    """``tracekit analyze``'s text output for a document from ``document``."""
    return "\n".join(render_rank(r, limit=limit) for r in doc["analyses"])


# ---- a job of many ranks ------------------------------------------------------------------------

def ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    out, run = [], []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _share(part: Any, whole: Any) -> str:
    return f"{100 * part / whole:.0f}%" if part is not None and whole else "-"


def _bound(b: Any, share: Any) -> str:
    if b is None:
        return "-"
    return f"{b} {_pct(share)}" if share is not None else str(b)


def _notable(rows: list[dict], job: dict, limit: int) -> tuple[list[dict], str]:
    """All rows up to ``limit``; beyond, the ranks worth a look (straggler, slowest, fastest,
    heaviest, most waited-for) and the slowest by P90 step time, in rank order."""
    if len(rows) <= limit:
        return rows, ""
    keep = {job["stragglers"]["rank"], job["all_to_all"]["heaviest_rank"]}
    sp = job.get("spread") or {}
    for q in ("p50", "p90"):
        if sp.get(q):
            keep |= {sp[q]["slowest_rank"], sp[q]["fastest_rank"]}
    keep |= {r["rank"] for r in sorted(rows, key=lambda r: -r["caused_wait_ns"])[:5]}
    key = sp.get("figure", "step_gpu") + "_p90_ns"
    for r in sorted(rows, key=lambda r: -(r.get(key) or 0)):
        if len(keep - {None}) >= limit:
            break
        keep.add(r["rank"])
    shown = [r for r in rows if r["rank"] in keep]
    return shown, (f"  ... {len(rows) - len(shown)} more ranks (the straggler, the slowest, "
                   "fastest and heaviest ranks and the slowest by P90 are shown; every rank: "
                   "--format json)\n")


def render_job(job: dict, *, limit: int = 64) -> str:
    """A job object (``tracekit.ranks``) as text: the summary first, then the cross-rank
    sections. ``limit``: rows shown in the longest tables."""
    n, ws = job["ranks_read"], job["world_size"]
    state = "complete" if job["complete"] else "INCOMPLETE"
    head = (f"== job {job['source']}: {n} rank{'s' if n != 1 else ''} read"
            + (f" of world size {ws}" if ws else "") + f" ({state})")
    out = [head, "  per-rank detail: --rank N (one rank) or --detail (every rank)"]
    if job["problems"]:
        out.append(f"  not read ({len(job['problems'])}):")
        missing = [p["rank"] for p in job["problems"] if p["kind"] == "missing"]
        for p in job["problems"]:
            if p["kind"] != "missing":
                out.append(f"    {p['source']}: {p['message']}")
        if missing:
            out.append(f"    ranks without a trace file: {ranges(missing)}")
    if not job["ranks"]:
        return "\n".join(out) + "\n"
    sp = job["spread"] or {}
    which = "GPU" if sp.get("figure") == "step_gpu" else "CPU"
    fig = sp.get("figure", "step_gpu")
    align = job["clock"]["aligned"]

    out += ["", "Ranks"]
    rows, more = _notable(job["ranks"], job, limit)
    out.append(table(
        ["rank", "trace", "steps", f"{which} P50 ms", f"{which} P90 ms", "bound",
         "collectives", "wait ms", "last", "caused wait ms"]
        + (["clock offset ms"] if align else []),
        [[r["rank"], _clip(r["source"].rsplit("/", 1)[-1], 40), r["steps"],
          _ms(r[f"{fig}_p50_ns"]), _ms(r[f"{fig}_p90_ns"]), _bound(r["bound"], r["bound_share"]),
          r["collectives"], _ms(r["wait_ns"]), r["last_count"], _ms(r["caused_wait_ns"])]
         + ([_ms(r["clock_offset_ns"])] if align else []) for r in rows]))
    if more:
        out.append(more.rstrip("\n"))
    for q in ("p50", "p90"):
        v = sp.get(q)
        if v:
            over = v["max_over_median"]
            out.append(f"  spread of {which} step {q.upper()} over ranks: {_ms(v['min_ns'])} .. "
                       f"{_ms(v['max_ns'])} ms (median {_ms(v['median_ns'])}); slowest rank "
                       f"{v['slowest_rank']}" + (f" (+{100 * (over - 1):.1f}% over the median)"
                                                 if over else "")
                       + f", fastest rank {v['fastest_rank']}")
    if any(r["bound"] is None for r in job["ranks"]):
        out.append("  bound: what each rank's steps are bound by (tracekit explain); - where "
                   "the rank's report has no explain section")

    c = job["clock"]
    out += ["", "Clocks"]
    if c["reference_rank"] is None:
        out.append("  no collective shared by two ranks: clocks not compared")
    else:
        offs = [o for o in c["offsets"] if o["rank"] != c["reference_rank"]]
        big = sorted(offs, key=lambda o: -abs(o["offset_ns"] or 0))[:limit]
        out.append(f"  offsets from collective ends (a rank's clock minus rank "
                   f"{c['reference_rank']}'s); "
                   + ("applied before arrivals are compared" if c["aligned"]
                      else "NOT applied (--no-align)"))
        if big:
            out.append(table(["rank", "offset ms", "± ms", "collectives"],
                             [[o["rank"], _ms(o["offset_ns"]), _ms(o["spread_ns"]), o["samples"]]
                              for o in sorted(big, key=lambda o: o["rank"])]))
        if len(offs) > len(big):
            out.append(f"  ... {len(offs) - len(big)} more ranks (largest offsets shown)")
        for note in c["notes"]:
            out.append(f"  warning: {note}")

    mt = job["matching"]
    out += ["", f"Collectives ({mt['instances']} instances matched across ranks in "
                f"{len(mt['groups'])} process group{'s' if len(mt['groups']) != 1 else ''})"]
    if mt["groups"]:
        out.append(table(["group", "description", "ranks", "matched by", "instances", "partial",
                          "inconsistent"],
                         [[g["group"], g["desc"] or "-", _clip(ranges(g["ranks"]), 30),
                           g["matched_by"], g["instances"], g["partial"], g["inconsistent"]]
                          for g in mt["groups"]]))
        if any(g["inconsistent"] for g in mt["groups"]):
            out.append("  warning: inconsistent instances name different collectives on "
                       "different ranks: the traces may not start at the same collective; "
                       "they are left out")
    if job["by_type"]:
        out.append(table(["collective", "instances", "transfer ms", "waited ms", "skew P50 ms",
                          "skew P90 ms", "skew max ms", "bytes sent"],
                         [[t["collective"], t["instances"], _ms(t["transfer_ns"]),
                           _ms(t["waited_ns"]), _ms(t["skew_p50_ns"]), _ms(t["skew_p90_ns"]),
                           _ms(t["skew_max_ns"]), fmt_bytes(t["bytes"])]
                          for t in job["by_type"]]))
        out.append("  transfer: the shortest kernel of each instance; waited: summed over ranks, "
                   "last arrival - each rank's arrival")

    st = job["stragglers"]
    out += ["", "Stragglers"]
    if st["rank"] is None:
        out.append(f"  none: no instance with an arrival skew of "
                   f"{_ms(st['min_skew_ns'])} ms or more")
    else:
        srow = next(r for r in job["ranks"] if r["rank"] == st["rank"])
        out.append(f"  rank {st['rank']} arrived last at {st['last_count']} of the "
                   f"{st['instances']} instances with a skew of {_ms(st['min_skew_ns'])} ms or "
                   f"more; the others waited {_ms(st['caused_wait_ns'])} ms for it "
                   f"({_share(st['caused_wait_ns'], st['waited_ns'])} of the "
                   f"{_ms(st['waited_ns'])} ms all ranks waited)")
        out.append(f"  its bound (tracekit explain): {_bound(st['bound'], st['bound_share'])}"
                   f"; its {which} step P90 {_ms(srow[f'{fig}_p90_ns'])} ms")
        rows_s, more_s = _limited(st["steps"], limit)
        out.append(table(["step", "straggler", "caused wait ms", "all waited ms", "max skew ms",
                          "straggler's bound"],
                         [[x["step"], x["straggler"], _ms(x["caused_wait_ns"]),
                           _ms(x["waited_ns"]), _ms(x["skew_max_ns"]), x["bound"] or "-"]
                          for x in rows_s]))
        if more_s:
            out.append(more_s.rstrip("\n"))
        counts = sorted((r for r in job["ranks"] if r["last_count"]),
                        key=lambda r: (-r["caused_wait_ns"], r["rank"]))[:10]
        out.append("  last to arrive (count, wait caused): " + ", ".join(
            f"rank {r['rank']} {r['last_count']}x {_ms(r['caused_wait_ns'])} ms" for r in counts))

    a = job["all_to_all"]
    out += ["", f"All-to-all sizes ({a['instances']} instances)"]
    if a["imbalance"] is None:
        out.append("  no all-to-all with known sizes")
    else:
        out.append(f"  imbalance: rank {a['heaviest_rank']} received {a['imbalance']:.3f}x the "
                   f"mean over ranks (per instance: median {a['instance_imbalance_p50']:.3f}, "
                   f"max {a['instance_imbalance_max']:.3f})")
        rows_a = sorted(a["per_rank"], key=lambda r: (-r["received_bytes"], r["rank"]))
        rows_a, more_a = _limited(rows_a, min(limit, 16))
        out.append(table(["rank", "sent", "received", "received / mean"],
                         [[r["rank"], fmt_bytes(r["sent_bytes"]), fmt_bytes(r["received_bytes"]),
                           f"{r['received_over_mean']:.3f}"] for r in rows_a]))
        if more_a:
            out.append(more_a.rstrip("\n"))

    if job["worst"]:
        out += ["", "Worst instances (largest arrival skew)"]
        out.append(table(["group", "collective", "key", "step", "skew ms", "last rank",
                          "waited ms", "transfer ms"],
                         [[w["group"], w["collective"], w["key"], w["step"], _ms(w["skew_ns"]),
                           w["straggler"], _ms(w["waited_ns"]), _ms(w["transfer_ns"])]
                          for w in job["worst"][:10]]))
    return "\n".join(out) + "\n"


# ---- compare -------------------------------------------------------------------------------------

COMPARE_ROWS = (
    ("step time P90, CPU ms", "step_cpu_p90_ns", "ms"),
    ("step time P90, GPU ms", "step_gpu_p90_ns", "ms"),
    ("peak allocated", "peak_allocated_bytes", "bytes"),
    ("peak reserved", "peak_reserved_bytes", "bytes"),
    ("reserved - allocated at peak", "unused_at_peak_reserved_bytes", "bytes"),
    ("optimizer -> lookup gap, mean ms", "mean_gap_ns", "ms"),
    ("comm overlapped by compute", "comm_overlap_ratio", "ratio"),
    ("exposed communication, ms", "exposed_comm_ns", "ms"),
    ("exposed memcpy, ms", "exposed_memcpy_ns", "ms"),
    ("sync stalls, CPU ms", "stall_total_ns", "ms"),
    ("sync stalls, count", "stall_count", "count"),
    ("polls (not stalls), CPU ms", "poll_total_ns", "ms"),
    ("polls (not stalls), count", "poll_count", "count"),
)


def compare_document(entries: list[dict], version: str) -> dict:
    """``entries``: ``{"label", "source", "rank", "headline"}`` each; the first is the baseline."""
    base = entries[0]["headline"]
    diffs = []
    for e in entries:
        d: dict[str, Any] = {"label": e["label"]}
        for k in HEADLINE_KEYS:
            a, b = e["headline"].get(k), base.get(k)
            if isinstance(a, (int, float)) and not isinstance(a, bool) and \
                    isinstance(b, (int, float)) and not isinstance(b, bool):
                d[k] = a - b
            elif k not in TEXT_KEYS:
                d[k] = None
        diffs.append(d)
    return {"tracekit_version": version, "format": FORMAT, "baseline": entries[0]["label"],
            "traces": entries, "differences": diffs}


def unit_of(key: str) -> str:
    """How a headline figure is shown: ``ms`` (``*_ns``), ``bytes``, ``ratio`` or ``count``."""
    if key.endswith("_ns"):
        return "ms"
    if key.endswith("_bytes"):
        return "bytes"
    return "ratio" if key in ("comm_overlap_ratio", "unused_fraction", "bound_share") else "count"


def fmt_figure(v: Any, unit: str, signed: bool = False) -> str:
    """A headline figure in ``unit`` (see ``unit_of``), as ``compare`` writes it."""
    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ""
    if unit == "ms":
        return f"{sign}{v / 1e6:,.3f}"
    if unit == "bytes":
        return sign + fmt_bytes(v) if v >= 0 else "-" + fmt_bytes(-v)
    if unit == "ratio":
        return f"{sign}{100 * v:.1f}%" if not signed else f"{sign}{100 * v:.1f} pp"
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f"{sign}{v:,}"


def render_compare(doc: dict) -> str:
    """The side-by-side table of ``tracekit compare``."""
    entries = doc["traces"]
    labels = [e["label"] for e in entries]
    head = ["figure"] + [labels[0]]
    for lab in labels[1:]:
        head += [lab, "Δ vs " + labels[0]]
    rows = []
    for title, key, unit in COMPARE_ROWS:
        row = [title, fmt_figure(entries[0]["headline"].get(key), unit)]
        for e, d in zip(entries[1:], doc["differences"][1:]):
            row += [fmt_figure(e["headline"].get(key), unit), fmt_figure(d.get(key), unit, signed=True)]
        rows.append(row)
    legend = "\n".join(f"  {e['label']}: {e['source']} (rank {e['rank']})" for e in entries)
    return table(head, rows) + "\n" + legend + "\n"
