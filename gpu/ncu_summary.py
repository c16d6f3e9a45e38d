"""Per-kernel summary of Nsight Compute raw CSV exports (``ncu -i X.ncu-rep --page raw --csv``):
time, DRAM throughput and bytes, L2 and L1 hit rates, achieved occupancy, registers per thread
and the three largest warp-stall reasons (warp cycles per issued instruction), as Markdown.

    python3 gpu/ncu_summary.py OUT/zipf_fwd.raw.csv OUT/d64_train.raw.csv

Columns are found by metric name; a metric the report lacks shows as "–".
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

# to microseconds; ncu 2025.3 writes "ms" / "us" / "ns" (older versions "msecond" ...)
TIME_SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
BYTE_SCALE = {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0, "Tbyte": 1e3}
# DRAM throughput, % of peak: ncu 2025.3's name first
DRAM_PCT = ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed")
STALL = re.compile(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio$")


def num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def short(name: str) -> str:
    name = re.sub(r"^void |tbe::detail::|at::native::|cub::\w+::detail::\w+::|\(.*\)$", "", name)
    return name if len(name) <= 70 else name[:67] + "..."


def summarize(path: Path) -> list[str]:
    if not path.is_file():
        return [f"## {path.name}", "", "missing (the profile did not finish)", ""]
    rows = list(csv.reader(path.open(errors="replace")))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        return [f"## {path.name}", "", "no kernel rows (" + (" ".join(rows[0]) if rows else "empty file")[:200] + ")", ""]
    header, units, data = rows[head], rows[head + 1], rows[head + 2 :]
    col = {h: i for i, h in enumerate(header)}

    def get(r, metric, scale=None):
        i = col.get(metric)
        if i is None or i >= len(r):
            return None
        v = num(r[i])
        if v is not None and scale is not None:
            v *= scale.get(units[i], 1.0)
        return v

    def fmt(v, spec="{:.1f}"):
        return "–" if v is None else spec.format(v)

    stalls = [(m.group(1), i) for h, i in col.items() if (m := STALL.match(h))]
    out = [f"## {path.stem}", "",
           "| kernel | us | DRAM % peak | DRAM GB r+w | L2 hit % | L1 hit % | achieved occupancy % | regs | top stalls (cycles/instr) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in data:
        if len(r) < len(header) // 2:
            continue
        rd, wr = get(r, "dram__bytes_read.sum", BYTE_SCALE), get(r, "dram__bytes_write.sum", BYTE_SCALE)
        top = sorted(((num(r[i]) or 0.0, s) for s, i in stalls if i < len(r)), reverse=True)[:3]
        out.append("| " + " | ".join([
            short(r[col["Kernel Name"]]),
            fmt(get(r, "gpu__time_duration.sum", TIME_SCALE)),
            fmt(next((v for m in DRAM_PCT if (v := get(r, m)) is not None), None)),
            fmt(rd + wr if rd is not None and wr is not None else None, "{:.2f}"),
            fmt(get(r, "lts__t_sector_hit_rate.pct")),
            fmt(get(r, "l1tex__t_sector_hit_rate.pct")),
            fmt(get(r, "sm__warps_active.avg.pct_of_peak_sustained_active")),
            fmt(get(r, "launch__registers_per_thread"), "{:.0f}"),
            ", ".join(f"{s} {v:.1f}" for v, s in top) or "–",
        ]) + " |")
    return out + [""]


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ncu_summary.py RAW.csv...", file=sys.stderr)
        return 2
    lines = ["# Nsight Compute summary (ncu --clock-control none)", ""]
    for p in argv:
        lines += summarize(Path(p))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
