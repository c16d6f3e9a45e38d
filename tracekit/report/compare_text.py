"""``tracekit compare``'s text: headline figures side by side, with differences from the first."""

from __future__ import annotations

from tracekit.report.tables import fmt_figure, table


COMPARE_ROWS = (
    ("step time P50, ms", "step_p50_ns", "ms"),
    ("step time P90, ms", "step_p90_ns", "ms"),
    ("CPU span P90, ms", "step_cpu_p90_ns", "ms"),
    ("GPU span P90, ms", "step_gpu_p90_ns", "ms"),
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
