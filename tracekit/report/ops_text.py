"""``tracekit analyze --tables``' text: a rank's kernels and operators tables (``schema.RankTables``),
largest first, the rows past ``limit`` or under ``SMALL_SHARE`` of the total folded into one
``others`` row; times in ms; names never cut (they come last on their line)."""

from __future__ import annotations

from typing import Any

from tracekit.report.tables import ms, pct, table

SMALL_SHARE = 0.01
"""A row below this share of its table's total is folded into ``others`` (as ``analyze``'s other
long tables)."""

TABLE_NAMES = ("kernels", "operators")
"""What ``--tables`` may name."""


def _fold(rows: list[dict], shares: list[float], limit: int) -> tuple[list[dict], list[dict]]:
    """The rows shown (the first ``limit`` of those at or above ``SMALL_SHARE``) and the rest."""
    shown = [r for r, s in zip(rows[:limit], shares[:limit]) if s >= SMALL_SHARE]
    keep = {id(r) for r in shown}
    return shown, [r for r in rows if id(r) not in keep]


def _count(v: Any) -> str:
    return "" if v is None else f"{v:,.0f}"


def text_kernels(k: dict, limit: int) -> str:
    """The kernels table: per GPU activity name and launch configuration, calls, total / mean /
    max ms, share of GPU time, the launching op, grid, block, registers per thread, shared memory
    per block (bytes) and Kineto's estimated achieved occupancy, blank where not recorded."""
    rows = k["rows"]
    if not rows:
        return "  no GPU activity\n"
    gpu = k["gpu_ns"] or 0
    shown, rest = _fold(rows, [r["share"] or 0.0 for r in rows], limit)
    names = len({r["name"] for r in rows})
    out = (f"  {names:,} names in {len(rows):,} rows (one per launch configuration), {ms(gpu)} ms of GPU time; "
           f"launched by: the op around the launching call of most of its calls\n")
    cells = [[f"{r['calls']:,}", ms(r["total_ns"]), ms(r["mean_ns"]), ms(r["max_ns"]), pct(r["share"]),
              r["launched_by"] or "-", r["grid"], r["block"], _count(r["registers"]), _count(r["shared_memory"]),
              "" if r["occupancy"] is None else f"{r['occupancy']:g}", r["name"]] for r in shown]
    if rest:
        total = sum(r["total_ns"] for r in rest)
        cells.append([f"{sum(r['calls'] for r in rest):,}", ms(total), "", ms(max(r["max_ns"] for r in rest)),
                      pct(total / gpu if gpu else None), "", "", "", "", "", "",
                      f"others ({len(rest):,} rows, each under {pct(SMALL_SHARE)} of the GPU time or past the "
                      f"first {limit})"])
    out += table(["calls", "total ms", "mean ms", "max ms", "share", "launched by", "grid", "block", "registers",
                  "shared mem B", "occupancy %", "kernel"], cells, left_last=True) + "\n"
    return out


def text_operators(o: dict, limit: int) -> str:
    """The operators table: per host op (and recorded input shapes), calls, CPU total and self,
    GPU self (what it launched itself) and total (with its children's), largest GPU total first
    then largest CPU total; ops under ``SMALL_SHARE`` of both the GPU time and the CPU self time
    folded."""
    rows = o["rows"]
    if not rows:
        return "  no host ops\n"
    gpu = o["gpu_ns"] or 0
    cpu = sum(r["cpu_self_ns"] for r in rows)
    shares = [max(r["gpu_total_ns"] / gpu if gpu else 0.0, r["cpu_self_ns"] / cpu if cpu else 0.0) for r in rows]
    shown, rest = _fold(rows, shares, limit)
    shapes = any(r["input_dims"] for r in rows)
    whole = (f"{ms(gpu)} ms of GPU time, {ms(o['unlaunched_gpu_ns'])} ms of it launched by no op"
             if o.get("unlaunched_gpu_ns") is not None else f"{ms(gpu)} ms of GPU time launched by these ops")
    out = (f"  {len(rows):,} ops (CPU ops and annotations; an annotation's step or batch number left out: {{i}}, "
           f"{{step}}); GPU self: what an op launched itself, GPU total: with its children's; {whole}\n")
    cells = [[f"{r['calls']:,}", ms(r["cpu_total_ns"]), ms(r["cpu_self_ns"]), ms(r["gpu_self_ns"]),
              ms(r["gpu_total_ns"]), r["kind"], *([r["input_dims"]] if shapes else []), r["name"]] for r in shown]
    if rest:
        cells.append([f"{sum(r['calls'] for r in rest):,}", "", ms(sum(r["cpu_self_ns"] for r in rest)),
                      ms(sum(r["gpu_self_ns"] for r in rest)), "", "", *([""] if shapes else []),
                      f"others ({len(rest):,} ops, each under {pct(SMALL_SHARE)} of the GPU and CPU self time or "
                      f"past the first {limit}; their self times summed)"])
    out += table(["calls", "CPU total ms", "CPU self ms", "GPU self ms", "GPU total ms", "kind",
                  *(["input shapes"] if shapes else []), "op"], cells, left_last=True) + "\n"
    return out


def table_sections(t: dict, limit: int) -> list[tuple[str, str]]:
    """(title, body) of each table ``t`` (``schema.RankTables``) holds."""
    where = "over all steps" if t.get("step") is None else f"in step {t['step']}"
    out = []
    if t.get("kernels") is not None:
        out.append((f"Kernels (every GPU activity by name and launch configuration, {where})",
                    text_kernels(t["kernels"], limit)))
    if t.get("operators") is not None:
        out.append((f"Operators (every host op, {where})", text_operators(t["operators"], limit)))
    return out


def render_tables(t: dict, *, limit: int = 20) -> str:
    """A rank's tables on their own (under a job's summary, where its full report is not printed)."""
    out = [f"== {t['source']}  (rank {t['rank']}): tables"]
    for title, body in table_sections(t, limit):
        out += ["", title, body.rstrip("\n")]
    return "\n".join(out) + "\n"
