"""Results as JSON values: an ``Analysis`` (one rank) as the object ``tracekit.report.schema``
describes, and the documents the commands write.

``to_dict(analysis)`` is one rank's object; ``explain_dict`` the explain section (also what
``tracekit explain`` writes per rank); ``document`` / ``compare_document`` the top-level objects.
numpy is imported only where a frame is turned into rows, never at import: the warm path (a
report-cache hit) imports this package without it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tracekit._files import display
from tracekit.report.keys import (BRIEF_EXPLAIN_STEP_KEYS, BRIEF_OVERHEAD_KEYS, FORMAT,
                                  HEADLINE_KEYS, SERIES_POINTS, TEXT_KEYS)


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
    if not len(df):
        return []  # no row (most tables of a small trace): nothing to read column by column
    names = [str(c) for c in df.columns]
    unique = len(set(names)) == len(names)
    # each column's array without the Series pandas builds for it (``tracekit.frames.column``;
    # ``items`` cost ~15 us a column, ``iloc[:, j]`` ~50: a rank's ~30 tables of a few rows)
    if unique:
        from tracekit.frames import column  # a frame is being read: pandas is loaded

        columns = [_column_values(column(df, c)) for c in df.columns]
    else:
        columns = []
    if not unique or any(c is None for c in columns):
        df = df.rename(columns=str)
        nan = df.isna().to_numpy()
        if nan.any():
            df = df.astype(object).where(~nan, None)
        return df.to_dict(orient="records")
    return [dict(zip(names, row)) for row in zip(*columns)] if names else [{} for _ in range(len(df))]


def _column_values(a: Any) -> list | None:
    """A column's values (its ``to_numpy()``) as plain Python ones, missing ones None; None for
    a column of a kind ``_records`` leaves to pandas."""
    import numpy as np  # not at the top: the warm path (a report-cache hit) imports this module

    kind = a.dtype.kind
    if kind in "iub":
        return a.tolist()
    if kind == "f":
        return [None if v != v else v for v in a.tolist()]  # NaN -> None
    if kind != "O":
        return None
    import pandas as pd  # a frame is being read: pandas is loaded

    missing = pd.isna(a)
    out = a.tolist()  # an object array's tolist keeps numpy scalars as they are: box them
    for i, v in enumerate(out):
        if missing[i]:
            out[i] = None
        elif isinstance(v, np.generic):
            # a numpy string is boxed as the str it is (pandas' way kept it a numpy string,
            # the same JSON; that way cost ~2 ms a table)
            if not isinstance(v, (np.integer, np.floating, np.bool_, np.str_)):
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
    if not len(series):
        return out
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
        "step_p50_ns": s.p50_ns,
        "step_p90_ns": s.p90_ns,
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
        **_embedding_shares(getattr(a, "embedding_bw", None)),
    }


def _embedding_shares(e: Any) -> dict:
    """``embedding_forward_share`` / ``embedding_backward_share`` of an ``EmbeddingBwResult``."""
    out = {"embedding_forward_share": None, "embedding_backward_share": None}
    if e is None or e.peak_gbps is None or e.by_direction.empty:
        return out
    for d, share in zip(e.by_direction["direction"].tolist(), e.by_direction["share"].tolist()):
        out[f"embedding_{d}_share"] = share
    return out


def snapshot_dict(s: Any) -> dict | None:
    """A ``SnapshotResult`` as JSON, without its per-address table (only the stream matching
    reads it)."""
    if s is None:
        return None
    d = jsonable(dataclasses.replace(s, addresses=None))
    d.pop("addresses", None)
    return d


def explain_dict(e: Any, *, brief: bool = False) -> dict | None:
    """An ``ExplainResult`` (``tracekit.analyses.explain``) as ``schema.Explain``; None for None.
    Its per-segment ``path`` is not written (``path_rows`` gives one step's, merged). ``brief``:
    only ``BRIEF_EXPLAIN_KEYS`` and, per step, ``BRIEF_EXPLAIN_STEP_KEYS`` (what a job reads of
    a rank: ``tracekit.ranks.work.summary``), the same values."""
    if e is None:
        return None
    if brief:
        # from the rows the tables are built of, while they are not built (the same values:
        # ``tests/tracekit/test_fast_tables.py``)
        rows = _unbuilt_rows(e, "steps")
        if rows is not None:
            at = [rows[1].index(k) for k in BRIEF_EXPLAIN_STEP_KEYS]
            cols = [[r[i] for r in rows[0]] for i in at] if rows[0] else []
        else:
            t = e.steps
            cols = [t[c].tolist() for c in BRIEF_EXPLAIN_STEP_KEYS] if len(t) else []
        bd = _unbuilt_rows(e, "breakdown")  # (category, ns, share) rows
        return {
            "bound": e.bound, "bound_share": e.bound_share,
            "steps": [{"step": int(step), "bound": bound if isinstance(bound, str) else None,
                       "bound_share": None if share is None or share != share else float(share),
                       "duration_ns": int(dur)} for step, bound, share, dur in zip(*cols)],
            "breakdown": jsonable(e.breakdown) if bd is None else [
                {"category": str(c), "ns": int(ns), "share": None if s is None else float(s)}
                for c, ns, s in bd[0]],
            "findings": jsonable(e.findings),
            "overhead": None if e.overhead is None else jsonable(
                {k: e.overhead[k] for k in BRIEF_OVERHEAD_KEYS if k in e.overhead})}
    steps = []
    t = e.steps  # its columns as lists (``itertuples`` costs ~0.5 ms a call, rows or not)
    cols = [t[c].tolist() for c in ("step", "start_ns", "end_ns", "duration_ns", "bound",
                                    "bound_share", "breakdown", "top", "replayed_ns",
                                    "replay_error", "unexplained_ns")] if len(t) else []
    for step, start, end, dur, bound, share, bd, top, replayed, err, unexplained in zip(*cols):
        steps.append({"step": int(step), "start_ns": int(start), "end_ns": int(end),
                      "duration_ns": int(dur),
                      "bound": bound if isinstance(bound, str) else None,  # NaN: none
                      "bound_share": None if share is None or share != share else float(share),
                      "breakdown": {k: int(v) for k, v in bd.items()},
                      "top": jsonable(top), "replayed_ns": int(replayed),
                      "replay_error": None if err != err else float(err),
                      "unexplained_ns": int(unexplained)})
    if e.overhead is not None:
        by = {int(r["step"]): r for r in jsonable(e.overhead["steps"])}
        for st in steps:
            r = by.get(st["step"], {})
            st["traced_ns"], st["untraced_ns"] = r.get("traced_ns"), r.get("untraced_ns")
    return {
        "view": e.view, "overhead": jsonable({k: v for k, v in (e.overhead or {}).items()
                                              if k != "steps"}) if e.overhead else None,
        "bound": e.bound, "bound_share": e.bound_share, "steps": steps,
        "breakdown": jsonable(e.breakdown), "findings": jsonable(e.findings),
        "what_ifs": jsonable(e.what_ifs), "lanes": jsonable(e.lanes),
        "graph": jsonable(e.graph), "replay": jsonable(e.replay), "warnings": list(e.warnings),
    }


def _unbuilt_rows(e: Any, name: str) -> tuple[list, list] | None:
    """(rows, column names) that ``e``'s table ``name`` is built of, while it is not built
    yet (a ``tracekit.frames.BuiltWhenRead`` result's ``Later`` of rows), else None."""
    unbuilt = getattr(e, "unbuilt", None)
    later = unbuilt(name) if unbuilt is not None else None
    return None if later is None or later.rows is None else (later.rows, list(later.args[1]))


def path_rows(path: Any) -> list[dict]:
    """A step's critical path (rows of ``tracekit.graph.critical.SEGMENT_COLUMNS``) as
    ``schema.PathRun`` rows: consecutive segments of one lane and category merged."""
    rows: list[dict] = []
    for r in path.itertuples(index=False):
        lane = (f"GPU {r.device} stream {r.stream}" if r.lane_type == "gpu"
                else f"CPU {r.pid}/{r.tid}")
        if rows and rows[-1]["lane"] == lane and rows[-1]["category"] == r.category:
            rows[-1]["end_ns"] = int(r.end)
            rows[-1]["ns"] += int(r.dur)
            rows[-1]["segments"] += 1
            continue
        rows.append({"start_ns": int(r.start), "end_ns": int(r.end), "ns": int(r.dur),
                     "lane": lane, "category": r.category, "first": str(r.name), "what": r.what,
                     "segments": 1})
    return rows


def to_dict(a: Any, *, keys: tuple[str, ...] | None = None) -> dict:
    """One rank's ``Analysis`` as ``schema.Rank``; ``keys``: only those keys, and ``explain``
    brief (``explain_dict(brief=True)``): what a job reads of a rank, without turning the
    sections it does not read into JSON values (a third of a tiny rank's report)."""
    parts = {
        "source": lambda: display(a.source),
        "rank": lambda: int(a.rank),
        "schema": lambda: a.schema,
        "platform": lambda: a.platform,
        "warnings": lambda: list(a.warnings),
        "rules": lambda: a.rules,
        "headline": lambda: jsonable(headline(a)),
        "explain": lambda: explain_dict(a.explain, brief=keys is not None),
        "steps": lambda: jsonable(a.steps),
        "overlap": lambda: jsonable(a.overlap),
        "gaps": lambda: jsonable(a.gaps),
        "syncs": lambda: jsonable(a.syncs),
        "allocator": lambda: _allocator_dict(a.allocator),
        "hta": lambda: jsonable(a.hta),
        "snapshot": lambda: snapshot_dict(a.snapshot),
        "collectives": lambda: jsonable(a.collectives),
        "identity": lambda: jsonable(a.identity),
        "embedding_bw": lambda: jsonable(getattr(a, "embedding_bw", None)),
        "profile": lambda: jsonable(a.profile),
        "skeleton": lambda: jsonable(a.skeleton),
    }
    return {k: f() for k, f in parts.items() if keys is None or k in keys}


def _allocator_dict(m: Any) -> dict:
    # the full series is never turned into rows: only its downsampled points are written
    alloc = jsonable(dataclasses.replace(m, series=None))
    alloc["series_points"] = len(m.series)
    alloc["series"] = _downsample(m.series)
    return alloc


KERNEL_ROW_KEYS = ("name", "kind", "calls", "total_ns", "mean_ns", "min_ns", "max_ns", "share", "launched_by",
                   "launchers", "unlaunched", "phase", "streams", "grid", "block", "registers", "shared_memory",
                   "occupancy", "configs")
"""``schema.KernelRow``'s keys, in order."""
OPERATOR_ROW_KEYS = ("name", "kind", "input_dims", "calls", "cpu_total_ns", "cpu_self_ns", "gpu_self_ns",
                     "gpu_total_ns", "activities")
"""``schema.OperatorRow``'s keys, in order."""


def tables_dict(source: str, rank: int, *, kernels: Any = None, operators: Any = None, step: int | None = None) -> dict:
    """A rank's ``schema.RankTables``: every row of ``kernels`` (a
    ``tracekit.analyses.kernels.KernelsResult``) and of ``operators`` (``...operators.
    OperatorsResult``) over all steps, or of one ``step`` (their ``by_step`` rows of it), in their
    order (largest first); None for one not given. Of one step, a kernel's share is of that step's
    GPU time and ``gpu_ns`` is: the kernels' summed (the activities launched in the step), the ops'
    the GPU time the step's ops launched (their GPU self times summed); ``unlaunched_gpu_ns`` is
    known over the whole trace only (None)."""
    k = o = None
    if kernels is not None:
        if step is None:
            k = {"gpu_ns": int(kernels.gpu_ns), "rows": _records(kernels.kernels[list(KERNEL_ROW_KEYS)])}
        else:
            rows = kernels.by_step[kernels.by_step["step"] == step]
            k = {"gpu_ns": int(rows["total_ns"].sum()), "rows": _records(rows[list(KERNEL_ROW_KEYS)])}
    if operators is not None:
        if step is None:
            o = {"gpu_ns": int(operators.gpu_ns), "unlaunched_gpu_ns": int(operators.unlaunched_gpu_ns),
                 "rows": _records(operators.ops[list(OPERATOR_ROW_KEYS)])}
        else:
            rows = operators.by_step[operators.by_step["step"] == step]
            o = {"gpu_ns": int(rows["gpu_self_ns"].sum()), "unlaunched_gpu_ns": None,
                 "rows": _records(rows[list(OPERATOR_ROW_KEYS)])}
    return {"source": display(source), "rank": int(rank), "step": step, "kernels": k, "operators": o}


def document(ranks: list[dict], version: str, jobs: list[dict] | None = None,
             tables: list[dict] | None = None) -> dict:
    """The top-level object of ``tracekit analyze --format json`` (``jobs``: the job objects of
    the directories analysed, ``tracekit.ranks``; ``tables``: ``tables_dict`` per rank, with
    ``--tables`` only)."""
    doc = {"tracekit_version": version, "format": FORMAT, "analyses": ranks, "jobs": list(jobs or [])}
    if tables is not None:
        doc["tables"] = tables
    return doc


def explain_document(ranks: list[dict], version: str) -> dict:
    """``tracekit explain --format json`` (``schema.ExplainDocument``) from per-rank
    ``{"source", "rank", "explain": schema.Explain | None, "path": [PathRun] | None}``."""
    doc = document([{"source": r["source"], "rank": r["rank"], **(r.get("explain") or {}),
                     **({"path": r["path"]} if r.get("path") is not None else {}),
                     **({"job": r["job"]} if r.get("job") is not None else {})}
                    for r in ranks], version)
    doc["explain"] = doc.pop("analyses")
    return doc


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


def diff_document(result: Any, version: str) -> dict:
    """``tracekit diff``'s document (``schema.DiffDocument``) of a ``tracekit.analyses.diff``
    result."""
    d = jsonable(result)
    d["a"] = {**d["a"], "source": display(d["a"]["source"])}
    d["b"] = {**d["b"], "source": display(d["b"]["source"])}
    keys = ("a", "b", "summary", "step", "phases", "streams", "overlaps", "critical_path", "ops", "kernels")
    return {"tracekit_version": version, "format": FORMAT, "diff": {k: d[k] for k in keys}}
