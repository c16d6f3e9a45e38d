"""``tracekit analyze``'s text for one rank (trace): its report object as sections of tables.

Rendered from the JSON object (``tracekit.report.serialise.to_dict``), so a cached report
prints without the trace, numpy or pandas.
"""

from __future__ import annotations

from typing import Any

from tracekit.report.explain_text import first_screen, text_explain, text_findings
from tracekit.report.ops_text import table_sections
from tracekit.report.tables import clip, fmt_bytes, limited, ms, num, pct, ranges, table


def _text_steps(s: dict, limit: int) -> str:
    if not s["steps"]:
        return ("  no steps: the trace has no ProfilerStep#N annotation and too few optimizer "
                "boundaries to infer any\n")
    src = s["source"] + (f" ({s['boundary']})" if s.get("boundary") else "")
    rows, more = limited(s["steps"], limit)
    out = f"  steps from {src}: {len(s['steps'])}\n"
    out += table(["step", "step ms", "CPU ms", "GPU ms", "GPU activities"],
                 [[r["step"], ms(r.get("step_ns")), ms(r["cpu_ns"]),
                   ms(r["gpu_ns"] if r["activities"] else None), r["activities"]]
                  for r in rows]) + "\n" + more
    out += (f"  step time P50 / P90 (all steps but the first): {ms(s.get('p50_ns'))} / "
            f"{ms(s.get('p90_ns'))} ms;  CPU span: {ms(s['cpu_p50_ns'])} / "
            f"{ms(s['cpu_p90_ns'])} ms;  GPU span: {ms(s['gpu_p50_ns'])} / "
            f"{ms(s['gpu_p90_ns'])} ms\n")
    return out


def _text_overlap(o: dict) -> str:
    if not o["streams"]:
        return "  no GPU activity\n"
    out = table(["device:stream", "activities", "busy ms"],
                [[f"{r['device']}:{r['stream']}", r["activities"], ms(r["busy_ns"])]
                 for r in o["streams"]]) + "\n"
    if o["pairs"]:
        out += "  pairwise overlap |busy(A) ∩ busy(B)|, ms:\n"
        m = {(f"{p['device']}:{p['stream_a']}", f"{p['device']}:{p['stream_b']}"): p["overlap_ns"]
             for p in o["pairs"]}
        # the streams the pairs are of (a device's busiest: analyses.overlap.MAX_PAIR_STREAMS)
        paired = {k for ab in m for k in ab}
        keys = [k for k in (f"{r['device']}:{r['stream']}" for r in o["streams"]) if k in paired]
        rows = []
        for a in keys:
            rows.append([a] + [ms(m.get((a, b), m.get((b, a))), 2) if a != b and
                               ((a, b) in m or (b, a) in m) else "" for b in keys])
        out += table([""] + keys, rows) + "\n"
    out += table(["class", "busy ms"], [["compute", ms(o["compute_ns"])],
                                        ["communication", ms(o["communication_ns"])],
                                        ["memcpy/memset", ms(o["memcpy_ns"])],
                                        ["any (GPU busy)", ms(o["gpu_busy_ns"])]]) + "\n"
    if o["communication_ns"]:
        out += (f"  communication overlapped with compute: {pct(o['comm_overlap_ratio'])} "
                f"({ms(o['comm_compute_overlap_ns'])} ms, over the whole trace; HTA's figure "
                f"below covers its own window); exposed communication "
                f"{ms(o['exposed_comm_ns'])} ms\n")
    else:
        out += "  no communication kernels\n"
    out += f"  exposed memcpy (not under compute or communication): {ms(o['exposed_memcpy_ns'])} ms\n"
    return out


def _text_gaps(g: dict, limit: int) -> str:
    if not g["gaps"]:
        return f"  no optimizer -> lookup pair: {g['note']}\n"
    rows, more = limited(g["gaps"], limit)
    out = f"  {g['note']}; gap < 0: the next lookup overlaps the optimizer\n"
    out += table(["step", "opt batch", "lookup batch", "gap ms", "overlap ms", "GPU idle ms"],
                 [[r["step"], r["optimizer_batch"], r["lookup_batch"], ms(r["gap_ns"]),
                   ms(r["overlap_ns"]), ms(r["idle_ns"])] for r in rows]) + "\n" + more
    if any(r["step"] == -1 or r["optimizer_batch"] == -1 for r in g["gaps"]):
        out += ("  -1: step = the optimizer was launched outside every ProfilerStep; batch = the "
                "labels carry no batch index (paired by time order)\n")
    out += (f"  mean gap {ms(g['mean_gap_ns'])} ms (median {ms(g['median_gap_ns'])}), "
            f"mean overlap {ms(g['mean_overlap_ns'])} ms, mean GPU idle "
            f"{ms(g['mean_idle_ns'])} ms\n")
    return out


def _text_polls(y: dict) -> str:
    n = y.get("poll_count") or 0
    if not n:
        return ""
    out = (f"  polls (cudaEventQuery/cudaStreamQuery: return at once, not stalls): {n}, "
           f"{ms(y.get('poll_total_ns'))} ms of CPU time")
    if y.get("allocator_known"):
        out += (f"; the caching allocator's (querying the events of blocks record_stream tied "
                f"to other streams before reusing them): {y.get('allocator_poll_count', 0)}, "
                f"{ms(y.get('allocator_poll_total_ns'))} ms")
    return out + "\n"


SMALL_SHARE = 0.01
"""A row of a long table below this share of its total is folded into one ``others`` row."""


def fold(rows: list[dict], key: str, limit: int, *, small: float = SMALL_SHARE) -> tuple[list[dict], list[dict]]:
    """The rows shown and the rows folded: at most ``limit``, and none under ``small`` of the
    total of ``key`` (the rows come largest first)."""
    total = sum(r.get(key) or 0 for r in rows)
    shown = [r for r in rows[:limit] if total <= 0 or (r.get(key) or 0) >= small * total]
    return shown, rows[len(shown):]


def _text_syncs(y: dict, limit: int) -> str:
    if not y["count"]:
        return "  no blocking calls\n" + _text_polls(y)
    out = (f"  {y['count']} blocking calls, {ms(y['total_ns'])} ms of CPU time; GPU idle "
           f"after them {ms(y['idle_after_ns'])} ms\n") + _text_polls(y)
    rows, rest = fold(y["by_call_site"], "total_ns", limit)
    cells = [[r["count"], ms(r["total_ns"]), ms(r["max_ns"]), ms(r["idle_after_ns"]), r["call_site"]]
             for r in rows]
    if rest:
        cells.append([sum(r["count"] for r in rest), ms(sum(r["total_ns"] for r in rest)),
                      ms(max(r["max_ns"] for r in rest)), ms(sum(r["idle_after_ns"] or 0 for r in rest)),
                      f"others ({len(rest)} call sites, each under {pct(SMALL_SHARE)} of the stall time)"])
    out += "  by call site (op chain > call), largest first:\n"
    out += table(["count", "total ms", "max ms", "GPU idle after ms", "call site"], cells, left_last=True) + "\n"
    out += "  by phase:\n"
    out += table(["phase", "count", "total ms", "max ms", "GPU idle after ms"],
                 [[r["phase"], r["count"], ms(r["total_ns"]), ms(r["max_ns"]),
                   ms(r["idle_after_ns"])] for r in y["by_phase"]]) + "\n"
    rows, more = limited(y["by_step"], limit)
    out += "  per step (-1: outside any ProfilerStep):\n"
    out += table(["step", "count", "total ms", "GPU idle after ms"],
                 [[r["step"], r["count"], ms(r["total_ns"]), ms(r["idle_after_ns"])]
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
                   pct(r["unused_fraction"])] for r in m["devices"]]) + "\n"
    if m["per_step"]:
        rows, more = limited(m["per_step"], limit)
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
            rows, more = limited(v, 15)
            out += f"{indent}{k}:\n" + table(cols, [[clip(str(num(r.get(c))), 60) for c in cols]
                                                   for r in rows], indent + "  ") + "\n"
            out += more
        elif isinstance(v, dict):
            out += f"{indent}{k}:\n" + _text_generic(v, indent + "  ")
        elif isinstance(v, list) and not v:
            out += f"{indent}{k}: none\n"
        else:
            out += f"{indent}{k}: {num(v)}\n"
    return out


def _hta_ms(us_value: Any) -> str:
    """HTA's microseconds as ms (3 decimals, tracekit's unit)."""
    return "-" if us_value is None else f"{us_value / 1e3:,.3f}"


def _text_hta(h: dict, limit: int) -> str:
    """The HTA section (``tracekit.analyses.hta.HtaResult``): HTA's own tables, in ms."""
    if h.get("available") is False:
        return f"  not available: {h.get('reason') or 'unknown reason'}\n"
    window = ("every ProfilerStep" if h.get("include_last_profiler_step")
              else "the last ProfilerStep's GPU work left out, as HTA does by default")
    out = f"  HTA {h.get('hta_version') or '?'}; times in ms; window: {window}\n"
    overlap = {r["rank"]: r.get("comp_comm_overlap_pctg") for r in h.get("comm_comp_overlap") or []}
    if h.get("temporal"):
        out += "  temporal breakdown (of the span from the first to the last GPU activity):\n"
        out += table(["rank", "GPU span ms", "idle ms", "compute ms", "non-compute ms", "comm overlapped"],
                     [[r["rank"], _hta_ms(r["kernel_time(us)"]),
                       f"{_hta_ms(r['idle_time(us)'])} ({num(r['idle_time_pctg'])}%)",
                       f"{_hta_ms(r['compute_time(us)'])} ({num(r['compute_time_pctg'])}%)",
                       f"{_hta_ms(r['non_compute_time(us)'])} ({num(r['non_compute_time_pctg'])}%)",
                       "no NCCL kernels" if overlap.get(r["rank"]) is None
                       else f"{overlap[r['rank']]:.2f}%"]
                      for r in h["temporal"]], "    ") + "\n"
    if h.get("idle_by_category"):
        by_rank: dict = {}
        for r in h["idle_by_category"]:
            by_rank.setdefault(r["rank"], {})[r["idle_category"]] = r
        cats = ("host_wait", "kernel_wait", "other")
        out += "  idle time by category, ms (summed over streams; per stream: --format json):\n"
        out += table(["rank", *cats],
                     [[rank, *(f"{_hta_ms(c[k]['idle_time'])} ({pct(c[k]['idle_time_ratio'])})"
                               if k in c else "-" for k in cats)]
                      for rank, c in by_rank.items()], "    ") + "\n"
    if h.get("kernel_types"):
        ranks = h.get("ranks") or []
        whose = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        out += f"  kernel time by type ({whose}):\n"
        out += table(["kernel type", "ms", "%"],
                     [[r["kernel_type"], _hta_ms(r["sum"]), num(r["percentage"])]
                      for r in h["kernel_types"]], "    ") + "\n"
    if h.get("top_kernels"):
        tops = sorted(h["top_kernels"], key=lambda r: -(r.get("sum (us)") or 0))
        neg = [r for r in tops if (r.get("sum (us)") or 0) < 0]
        tops = [r for r in tops if (r.get("sum (us)") or 0) >= 0]
        rows, rest = fold(tops, "sum (us)", limit)
        cells = [[r["kernel_type"], r["rank"], _hta_ms(r["sum (us)"]), _hta_ms(r["mean (us)"]),
                  _hta_ms(r["max (us)"]), str(r["name"])] for r in rows]
        if rest:
            cells.append(["", "", _hta_ms(sum(r["sum (us)"] or 0 for r in rest)), "", "",
                          f"folded: {len(rest)} more kernels, each under {pct(SMALL_SHARE)} of the total"])
        out += ("  top kernels by total (HTA's: its mean and max are over a kernel's calls, but once a type "
                "has more than 10 kernels over the kernels' totals; 'others' is HTA's own row):\n")
        out += table(["type", "rank", "total ms", "mean ms", "max ms", "kernel"], cells, "    ",
                     left_last=True) + "\n"
        if neg:
            out += (f"  left out: {len(neg)} kernel(s) HTA times below 0 (it rounds a start up and an end "
                    "down to whole us on ns traces; tracekit's own times are exact)\n")
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
         f"{fmt_bytes(off)} ({pct(off / reserved) if reserved and off is not None else '-'})"],
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
        rows, more = limited(s["pools"], limit)
        out += "  free memory per (stream, pool):\n"
        out += table(["device", "stream", "pool", "type", "reserved", "free", "largest free",
                      "free blocks", "fragmentation"],
                     [[r["device"], r["stream"], r["pool_id"], r["segment_type"],
                       fmt_bytes(r["reserved"]), fmt_bytes(r["free"]), fmt_bytes(r["largest_free"]),
                       r["free_blocks"], pct(r["free_fragmentation"])]
                      for r in rows], "    ") + "\n" + more
    if s.get("history"):
        out += f"  recorded history ({s.get('trace_entries')} entries), reserved per stream:\n"
        out += table(["device", "stream", "segment events", "at start", "now", "peak"],
                     [[r["device"], f"{r['stream']}{' (main)' if r['is_main'] else ''}",
                       r["segment_events"], fmt_bytes(r["reserved_at_start"]),
                       fmt_bytes(r["reserved_now"]), fmt_bytes(r["peak_reserved"])]
                      for r in s["history"]], "    ") + "\n"
    return out


def _text_collectives(c: dict) -> str:
    out = (f"  {c['count']} kernels, {ms(c['kernel_ns'])} ms (collective and group from "
           f"{c['source']}):\n")
    out += table(["collective", "kernels", "ms", "sent", "received"],
                 [[r["collective"], r["count"], ms(r["kernel_ns"]),
                   fmt_bytes(r["in_bytes"]) if r["in_bytes"] else "-",
                   fmt_bytes(r["out_bytes"]) if r["out_bytes"] else "-"]
                  for r in c["by_type"]]) + "\n"
    out += "  groups: " + "; ".join(
        f"{g['group']}" + (f" ({g['desc']})" if g.get("desc") else "")
        + (f" ranks {ranges(g['ranks'])}" if g.get("ranks") else "") for g in c["groups"]) + "\n"
    return out


def _gbps(row: dict) -> str:
    v = row.get("gbps")
    if v is None:
        return "-"
    return ("<= " if row.get("upper_bound") else "") + f"{v:,.0f}"


def _text_embedding_bw(e: dict, limit: int) -> str:
    """The embedding bandwidth section (``tracekit.analyses.embedding_bw``)."""
    peak = (f"peak {e['peak_gbps']:,.0f} GB/s ({e['peak_source']})" if e.get("peak_gbps")
            else e.get("peak_source") or "GPU unknown")
    out = f"  {e.get('device') or 'GPU not named'}: {peak}\n"
    if e.get("by_direction"):
        out += table(["direction", "calls", "GPU ms", "GB", "GB/s", "of peak"], [
            [d["direction"], d["calls"], ms(d["gpu_ns"]), f"{d['bytes'] / 1e9:,.3f}", _gbps(d),
             pct(d.get("share"))] for d in e["by_direction"]]) + "\n"
        rows, more = limited(e["by_kernel"], limit)
        out += "  per kernel (<= : bytes counted with one row per lookup, an upper bound)\n"
        out += table(["op", "calls", "GPU ms", "GB/s", "of peak", "kernel"], [
            [k["op"], k["calls"], ms(k["gpu_ns"]), _gbps(k),
             pct(k.get("share")), k["kernel"]] for k in rows], left_last=True) + "\n" + more
        steps = [x for x in e["by_step"] if x["step"] >= 0]
        if len(steps) > len(e["by_direction"]):
            rows, more = limited(steps, limit)
            out += "  per step\n" + table(["step", "direction", "GPU ms", "GB/s", "of peak"], [
                [x["step"], x["direction"], ms(x["gpu_ns"]), _gbps(x), pct(x.get("share"))]
                for x in rows]) + "\n" + more
    else:
        out += "  no embedding call with its inputs recorded and GPU time\n"
    if e.get("missing"):
        out += "  without an estimate\n" + table(["op", "calls", "kernels", "GPU ms", "why"], [
            [m["op"], m["calls"], m["activities"], ms(m["gpu_ns"]), m["reason"]]
            for m in e["missing"][:limit]], left_last=True) + "\n"
    for n in e.get("notes") or []:
        out += f"  note: {n}\n"
    return out


def text_embedding_findings(e: dict | None) -> str:
    """The embedding bandwidth's findings, as lines under explain's."""
    return "".join(f"  - {f['title']}\n      {f['evidence']}\n" for f in (e or {}).get("findings") or [])


FIRST_SCREEN_WARNINGS = 3
"""Loader and analysis warnings written on the first screen (all of them on stderr and in JSON)."""


def _headline(h: dict) -> str:
    return table(["figure", "value"], [
        ["steps", f"{h['steps']} ({h['step_source']})"],
        ["step time P50 / P90, ms", f"{ms(h.get('step_p50_ns'))} / {ms(h.get('step_p90_ns'))}"],
        ["CPU span P50 / P90, ms", f"{ms(h['step_cpu_p50_ns'])} / {ms(h['step_cpu_p90_ns'])}"],
        ["GPU span P50 / P90, ms", f"{ms(h['step_gpu_p50_ns'])} / {ms(h['step_gpu_p90_ns'])}"],
        *([["bound (share of the critical path)",
            f"{h.get('bound') or '-'} ({pct(h.get('bound_share'))})" if h.get("bound_share") is not None
            or not h.get("bound") else f"{h['bound']} (not from the path: see the warnings)"]]
          if "bound" in h else []),
        ["optimizer -> next lookup gap, mean ms", ms(h["mean_gap_ns"])],
        ["exposed communication / memcpy, ms", f"{ms(h['exposed_comm_ns'])} / "
                                               f"{ms(h['exposed_memcpy_ns'])}"],
        ["communication overlapped by compute", pct(h["comm_overlap_ratio"])],
        ["sync stalls: count, CPU ms, GPU idle after ms",
         f"{h['stall_count']}, {ms(h['stall_total_ns'])}, {ms(h['stall_idle_after_ns'])}"],
        *([["polls (not stalls): count, CPU ms",
            f"{h['poll_count']}, {ms(h['poll_total_ns'])}"]] if h.get("poll_count") else []),
        ["peak allocated / reserved", f"{fmt_bytes(h['peak_allocated_bytes'])} / "
                                      f"{fmt_bytes(h['peak_reserved_bytes'])}"],
        ["reserved - allocated at reserved peak", f"{fmt_bytes(h['unused_at_peak_reserved_bytes'])}"
                                                  f" ({pct(h['unused_fraction'])})"],
        *([["embedding bandwidth, share of peak: forward / backward (at most)",
            f"{pct(h.get('embedding_forward_share'))} / {pct(h.get('embedding_backward_share'))}"]]
          if h.get("embedding_forward_share") is not None
          or h.get("embedding_backward_share") is not None else []),
    ])


def render_rank(r: dict, *, limit: int = 20, tables: dict | None = None) -> str:
    """One rank's report as text (``limit``: rows shown per long table). The first screen
    answers what bounds the step, what to do first and the headline figures; the sections
    follow, numbered as printed (``tables``: the rank's ``schema.RankTables``, its kernels and
    operators sections last). Times in ms everywhere."""
    h = r["headline"]
    out = [f"== {r['source']}  (rank {r['rank']}, {r['schema']} schema, {r['platform']})"]
    warns = r["warnings"]
    for w in warns[:FIRST_SCREEN_WARNINGS]:
        out.append(f"  warning: {w}")
    if len(warns) > FIRST_SCREEN_WARNINGS:
        out.append(f"  ... {len(warns) - FIRST_SCREEN_WARNINGS} more warnings (stderr, --format json)")
    if "explain" in r:
        out.append("")
        out += first_screen(r.get("explain"))
        emb = text_embedding_findings(r.get("embedding_bw"))
        if emb:
            out.append(emb.rstrip("\n"))
    out.append("")
    out.append("Headline")
    out.append(_headline(h))
    gpu = r["platform"] != "cpu"
    no_gpu = "  no GPU activity\n"
    sections = []
    if "explain" in r:
        sections.append(("Findings (tracekit explain: each with its fix and evidence)",
                         text_findings(r.get("explain"))))
    sections += [
        ("Steps", _text_steps(r["steps"], limit)),
        ("Stream overlap", _text_overlap(r["overlap"]) if gpu else no_gpu),
        ("Optimizer -> next lookup gap", _text_gaps(r["gaps"], limit) if gpu else no_gpu),
        ("Sync stalls", _text_syncs(r["syncs"], limit) if gpu else no_gpu),
        ("Allocator ([memory] events)", _text_allocator(r["allocator"], limit)),
    ]
    if r.get("explain"):
        sections.append(("Critical path per step (tracekit explain)", text_explain(r["explain"], limit)))
    if (r.get("collectives") or {}).get("count"):
        sections.append(("Collectives (communication kernels)", _text_collectives(r["collectives"])))
    e = r.get("embedding_bw")
    if e and (e.get("calls") or e.get("missing")):
        sections.append(("Embedding bandwidth (bytes from the recorded shapes over the kernels' time, "
                         "against the GPU's peak)", _text_embedding_bw(e, limit)))
    if r.get("snapshot") is not None:
        snap = r["snapshot"]
        body = _text_snapshot(snap, limit) if isinstance(snap, dict) else _text_generic(snap)
        sections.append(("Memory snapshot (CUDA caching allocator)", body))
    if r.get("hta") is not None:
        hta = r["hta"]
        body = _text_hta(hta, limit) if isinstance(hta, dict) else _text_generic(hta)
        sections.append(("HTA (Holistic Trace Analysis on the same parsed trace)", body))
    if tables is not None:
        sections += table_sections(tables, limit)
    out.append("")
    out.append("Below: " + "; ".join(f"{i}. {title.split(' (')[0]}" for i, (title, _) in enumerate(sections, 1)))
    for i, (title, body) in enumerate(sections, 1):
        out.append("")
        out.append(f"{i}. {title}")
        out.append(body.rstrip("\n"))
    return "\n".join(out) + "\n"


def render_text(doc: dict, *, limit: int = 20) -> str:
    """``tracekit analyze``'s text output for a document from ``document``."""
    return "\n".join(render_rank(r, limit=limit) for r in doc["analyses"])
