"""Collectives of one rank: every communication kernel with its process group, collective,
sequence number, step and message sizes. ``tracekit.ranks`` matches these across ranks.

A *collective kernel* is a GPU kernel that either carries torch's collective metadata
(``Trace.args``: ``Collective name``, ``Process Group Name``...; torch >= 2.1 writes it on the
NCCL/RCCL kernels and on the ``record_param_comms`` CPU op that launched them) or, in traces
without that metadata, whose name matches ``Rules.communication`` (NCCL/RCCL). Per kernel:

- ``group``: the process group's name (``Process Group Name``, else its ID). Without metadata
  it is ``stream <n>``: one communicator runs its kernels on one stream, in issue order, and the
  same program creates its streams in the same order on every rank.
- ``collective``: the metadata's ``Collective name`` (``allreduce``, ``all_to_allv``...), else
  the collective the CPU op that launched the kernel names (the innermost ``nccl:<name>``
  annotation or ``c10d::<name>_`` op around the launch, lower case without the leading and
  trailing ``_``: ``nccl:all_to_all`` -> ``all_to_all``, ``c10d::_allgather_base_`` ->
  ``allgather_base``: NCCL runs every collective of a sampled TorchRec job as a ``SendRecv``
  kernel, while the ops say all-to-all, all-reduce, all-gather), else the word after
  ``Kernel_`` in the kernel name, lower case (``ncclKernel_SendRecv_RING...`` -> ``sendrecv``).
- ``seq``: the collective's sequence number in its group (``Seq``, on the kernel or on the
  ``record_param_comms`` op with the same External id), -1 when the trace has none.
- ``index``: its position among this rank's kernels of the same group, by start time (0, 1...).
- ``step``: the step (``tracekit.analyses.steps``) whose CPU span holds the CPU call that
  launched the kernel (linked by correlation id), -1 when none does.
- ``in_bytes`` / ``out_bytes``: ``In msg nelems`` / ``Out msg nelems`` times the size of
  ``dtype`` (``DTYPE_BYTES``); -1 when either is unknown. For an all-to-all, what this rank sends
  and receives.

``groups`` lists each group once: its description and member ranks (``Process Group Ranks``,
else ``distributedInfo.pg_config``; ``null`` when neither gives the whole list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import intervals, phases
from tracekit.emptyresult import kept
from tracekit.phases import Rules
from tracekit.trace.model import Kind, Trace
from tracekit.frames import BuiltWhenRead, column

DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "UInt16": 2, "UInt32": 4, "UInt64": 8,
}
"""Bytes per element of torch's dtype names as ``record_param_comms`` writes them."""

KERNEL_COLUMNS = ["group", "collective", "seq", "index", "step", "stream", "ts", "end",
                  "in_bytes", "out_bytes"]

SOURCE_ARGS = "args"
SOURCE_NAMES = "kernel names"
SOURCE_MIXED = "args and kernel names"
SOURCE_NONE = "none"

_KERNEL_WORD = re.compile(r"Kernel_([A-Za-z]+)")
COLLECTIVE_OP = re.compile(r"^nccl:(?P<a>\w+)$|^c10d::(?P<b>\w+)$")
"""A CPU op or annotation that launches a collective and names it: torch's ``nccl:<name>``
record_function and its ``c10d::<name>_`` dispatcher op."""


@dataclass(frozen=True)
class CollectivesResult(BuiltWhenRead):
    """This rank's collective kernels (times in ns on the rank's own clock)."""

    kernels: pd.DataFrame
    """One row per collective kernel, by start time: ``KERNEL_COLUMNS`` (see the module
    docstring)."""
    groups: list[dict]
    """One per group: ``group, desc, size, ranks`` (``ranks``: list of ints or None)."""
    source: str
    """Where the fields came from: ``"args"``, ``"kernel names"``, both, or ``"none"``."""
    count: int
    kernel_ns: int
    """Sum of the kernels' durations."""
    by_type: pd.DataFrame
    """``collective, count, kernel_ns, in_bytes, out_bytes`` (bytes: sums over the kernels
    whose size is known)."""
    warnings: tuple[str, ...] = ()
    """Sizes left out (a message of ``MAX_MESSAGE_BYTES`` or more)."""


MAX_MESSAGE_BYTES = 1 << 50
"""A collective's message of this many bytes or more (1 PiB: more than a job of GPUs holds) is
no real size: read as unknown (-1), with a warning; sums over 8,192 kernels of sizes below it
stay inside int64."""


def parse_int_list(text: str) -> list[int] | None:
    """``"[0, 1, 2]"`` -> ``[0, 1, 2]``; None for anything else (``"[0, 1, ...]"``, ``""``)."""
    s = text.strip()
    if not (s.startswith("[") and s.endswith("]")) or "..." in s:
        return None
    body = s[1:-1].strip()
    if not body:
        return []
    try:
        return [int(x) for x in body.split(",")]
    except ValueError:
        return None


def _name_collective(names: pd.Index) -> np.ndarray:
    out = []
    for n in names.astype(str):
        m = _KERNEL_WORD.search(n)
        out.append(m.group(1).lower() if m else "unknown")
    return np.asarray(out, dtype=object)


def _pg_config(trace: Trace) -> dict[str, dict]:
    info = trace.metadata.get("distributedInfo")
    cfg = info.get("pg_config") if isinstance(info, dict) else None
    out = {}
    if isinstance(cfg, list):
        for g in cfg:
            if isinstance(g, dict) and "pg_name" in g:
                ranks = g.get("ranks")
                out[str(g["pg_name"])] = {
                    "desc": str(g.get("pg_desc") or ""),
                    "size": g.get("pg_size") if isinstance(g.get("pg_size"), int) else None,
                    "ranks": [int(r) for r in ranks] if isinstance(ranks, list)
                    and all(isinstance(r, int) for r in ranks) else None,
                }
    return out


def _launches(trace: Trace, rules: Rules, correlation: np.ndarray) -> tuple[np.ndarray, ...]:
    """The start and thread of the CPU call that launched each kernel (by correlation id), -1
    if none."""
    acts, _ = phases.activities(trace, rules)
    corr = column(acts, "correlation", np.int64)
    launch = column(acts, "launch_ts", np.int64)
    tid = column(acts, "launch_tid", np.int64)
    order = np.argsort(corr, kind="stable")
    corr, launch, tid = corr[order], launch[order], tid[order]
    none = np.full(correlation.size, -1, np.int64)
    if not corr.size:
        return none, none
    k = np.minimum(np.searchsorted(corr, correlation), corr.size - 1)
    hit = (correlation >= 0) & (corr[k] == correlation)
    return np.where(hit, launch[k], -1), np.where(hit, tid[k], -1)


def _canonical(name: str) -> str:
    m = COLLECTIVE_OP.match(name)
    return (m.group("a") or m.group("b") or "").strip("_").lower() if m else ""


def launching_collective(trace: Trace, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per launch (thread, start): the collective the innermost ``COLLECTIVE_OP`` around it
    names (``_canonical``), ``""`` where none encloses it."""
    out = np.full(tid.size, "", dtype=object)
    ops, codes, cats = phases.host_ops(trace)
    if not tid.size or ops.empty:
        return out
    canon = phases.per_used_name(codes, cats, lambda n: np.array([_canonical(x) for x in n],
                                                                 dtype=object), "")
    keep = np.flatnonzero(canon != "")
    if not keep.size:
        return out
    otid = column(ops, "tid", np.int64)[keep]
    ots = column(ops, "ts", np.int64)[keep]
    oend = ots + column(ops, "dur", np.int64)[keep]
    names = canon[keep]
    for t in np.unique(tid[ts >= 0]):
        sel = np.flatnonzero((tid == t) & (ts >= 0))
        mine = np.flatnonzero(otid == t)
        if not mine.size:
            continue
        order = mine[np.lexsort((-oend[mine], ots[mine]))]
        s, e = ots[order], oend[order]
        par = intervals.innermost_containers(s, e)
        k = intervals.innermost_enclosing(s, e, par, ts[sel], ts[sel])
        hit = k >= 0
        out[sel[hit]] = names[order[k[hit]]]
    return out


def _rows(trace: Trace, rules: Rules) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.Index]:
    """(bool per ``Trace.args`` row: a kernel's collective metadata; the event rows of the
    kernels without metadata that the communication rule names; the events' name codes and
    their categories), memoised per trace object and rules (this section and the skeleton's
    ``kernel_events`` both ask): do not modify them."""
    return phases.derived(trace, rules, "collective_rows", lambda: _find_rows(trace, rules))


def _find_rows(trace: Trace, rules: Rules) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                    pd.Index]:
    ev = trace.events
    is_kernel = trace.column("kind") == int(Kind.KERNEL)
    args = trace.args
    arg_event = column(args, "event", np.int64)
    with_args = is_kernel[arg_event]
    if with_args.any():  # (most traces' args belong to no kernel: no Series to build)
        with_args &= args["collective"].astype(str).to_numpy(object) != ""
    codes, cats = phases.name_codes(ev)
    comm = phases.name_matches(codes, cats, rules.communication) & is_kernel
    comm[arg_event[with_args]] = False
    return with_args, np.flatnonzero(comm), codes, cats


def kernel_events(trace: Trace, rules: Rules) -> np.ndarray:
    """The ``Trace.events`` rows of the collective kernels, in the order of ``compute``'s
    ``kernels`` (row i is kernel i)."""
    with_args, rows_n, _, _ = _rows(trace, rules)
    rows = np.concatenate([column(trace.args, "event", np.int64)[with_args], rows_n])
    ts = trace.column("ts", np.int64)[rows]
    return rows[np.lexsort((rows, ts))]


def compute(trace: Trace, rules: Rules, *, steps=None) -> CollectivesResult:
    """The collective kernels of ``trace`` (see the module docstring). ``steps``: the rank's
    ``tracekit.analyses.steps`` result when already computed (else it is computed here)."""
    with_args, rows_n, codes, cats = _rows(trace, rules)
    if not with_args.any() and not rows_n.size:
        # no collective kernel: empty tables, the same for every such trace
        # (tracekit.emptyresult)
        return kept("collectives", lambda: _result(trace, rules, steps, with_args, rows_n,
                                                   codes, cats))
    return _result(trace, rules, steps, with_args, rows_n, codes, cats)


def _result(trace: Trace, rules: Rules, steps, with_args: np.ndarray, rows_n: np.ndarray,
            codes: np.ndarray, cats: pd.Index) -> CollectivesResult:
    """``compute`` with ``_rows`` found."""
    kind = trace.column("kind")
    args = trace.args
    arg_event = column(args, "event", np.int64)
    coll = args["collective"].astype(str).to_numpy(object)
    a = args[with_args]
    rows_a = arg_event[with_args]

    # seq from the record_param_comms op of the same External id, where the kernel has none
    seq_a = column(a, "seq", np.int64).copy()
    if (seq_a < 0).any():
        ops = args[(kind[arg_event] == int(Kind.CPU_OP)) & (column(args, "seq") >= 0)]
        if len(ops):
            ext = pd.Series(column(ops, "seq", np.int64),
                            index=trace.column("external_id", np.int64)[column(ops, "event")])
            ext = ext[~ext.index.duplicated()]
            k_ext = trace.column("external_id", np.int64)[rows_a]
            found = ext.reindex(k_ext).to_numpy()
            take = (seq_a < 0) & (k_ext >= 0) & ~np.isnan(found)
            seq_a[take] = found[take].astype(np.int64)

    elem = a["dtype"].astype(str).map(DTYPE_BYTES).to_numpy(dtype=float)  # NaN when unknown

    huge = 0

    def nbytes(n: np.ndarray) -> np.ndarray:
        nonlocal huge
        b = n.astype(float) * elem
        too_big = (n >= 0) & (b >= MAX_MESSAGE_BYTES)
        huge += int(too_big.sum())
        ok = (n >= 0) & ~np.isnan(b) & ~too_big
        return np.where(ok, np.where(ok, b, 0), -1).astype(np.int64)

    stream = trace.column("stream", np.int64)
    group_a = a["group"].astype(str).to_numpy(object)
    group_a = np.where(group_a == "", "unnamed", group_a)
    names_n = phases.per_used_name(codes[rows_n], cats, _name_collective, "unknown")
    if rows_n.size:  # the collective the launching op names, where one encloses the launch
        l_ts, l_tid = _launches(trace, rules, trace.column("correlation", np.int64)[rows_n])
        by_op = launching_collective(trace, l_tid, l_ts)
        names_n = np.where(by_op != "", by_op, names_n.astype(object))
    table = pd.DataFrame({
        "event": np.concatenate([rows_a, rows_n]),
        "group": np.concatenate([group_a, np.array([f"stream {s}" for s in stream[rows_n]],
                                                   dtype=object)]),
        "collective": np.concatenate([coll[with_args], names_n.astype(object)]),
        "seq": np.concatenate([seq_a, np.full(rows_n.size, -1, np.int64)]),
        "in_bytes": np.concatenate([nbytes(column(a, "in_nelems", np.int64)),
                                    np.full(rows_n.size, -1, np.int64)]),
        "out_bytes": np.concatenate([nbytes(column(a, "out_nelems", np.int64)),
                                     np.full(rows_n.size, -1, np.int64)]),
    })
    e = column(table, "event", np.int64)
    ts = trace.column("ts", np.int64)[e]
    table["stream"] = stream[e]
    table["ts"] = ts
    table["end"] = ts + trace.column("dur", np.int64)[e]
    table = table.sort_values(["ts", "event"], kind="stable").reset_index(drop=True)
    table["index"] = table.groupby("group", sort=False).cumcount().astype(np.int64)

    if steps is None:
        from tracekit import steps as steps_mod

        steps = steps_mod.compute(trace, rules)
    spans = steps.steps.rename(columns={"cpu_start": "ts", "cpu_end": "end"})[["step", "ts", "end"]]
    launch, _ = _launches(trace, rules,
                          trace.column("correlation", np.int64)[column(table, "event")])
    step = phases.step_of(spans.sort_values("ts"), launch)
    table["step"] = np.where(launch >= 0, step, -1)
    kernels = table[KERNEL_COLUMNS]

    groups = _groups(trace, a, kernels)
    source = (SOURCE_MIXED if rows_a.size and rows_n.size else SOURCE_ARGS if rows_a.size
              else SOURCE_NAMES if rows_n.size else SOURCE_NONE)
    dur = (kernels["end"] - kernels["ts"]).to_numpy(np.int64)
    by = (kernels.assign(kernel_ns=dur,
                         in_b=kernels["in_bytes"].clip(lower=0),
                         out_b=kernels["out_bytes"].clip(lower=0))
          .groupby("collective", sort=True)
          .agg(count=("ts", "size"), kernel_ns=("kernel_ns", "sum"),
               in_bytes=("in_b", "sum"), out_bytes=("out_b", "sum"))
          .reset_index())
    warnings = () if not huge else (
        f"{huge:,} collective message sizes of 2^50 bytes (1 PiB) or more (In/Out msg nelems "
        "times the element size): read as unknown",)
    return CollectivesResult(kernels=kernels, groups=groups, source=source,
                             count=len(kernels), kernel_ns=int(dur.sum()),
                             by_type=by.astype({c: np.int64 for c in by.columns[1:]}),
                             warnings=warnings)


def _groups(trace: Trace, a: pd.DataFrame, kernels: pd.DataFrame) -> list[dict]:
    cfg = _pg_config(trace)
    meta: dict[str, dict] = {}
    for g, desc, ranks, size in zip(a["group"].astype(str), a["group_desc"].astype(str),
                                    a["group_ranks"].astype(str), column(a, "group_size")):
        g = g or "unnamed"
        if g in meta:
            continue
        parsed = parse_int_list(ranks)
        c = cfg.get(g, {})
        meta[g] = {"desc": desc or c.get("desc", ""),
                   "size": int(size) if size > 0 else c.get("size"),
                   "ranks": parsed if parsed else c.get("ranks")}
    out = []
    for g in pd.unique(kernels["group"]):
        m = meta.get(g, {"desc": "", "size": None, "ranks": None})
        out.append({"group": g, **m})
    return out
