"""Write a large synthetic Kineto trace for the loader benchmark, from a real public one.

The events of a real trace (default: ../shared/traces/public/hta_ns_resolution_rank0.json.gz,
PyTorch 2.x, ns-resolution) are replicated ``--copies`` times, each copy shifted in time past
the previous one, correlation and External ids offset so they stay unique. To look like a
trace recorded with ``record_shapes`` and ``profile_memory`` it can add, per copy, shape args
to every cpu_op and a ``[memory]`` alloc/free pair per kernel. Step and batch numbers in names
(``ProfilerStep#N``, TorchRec's ``## forward N ##``) go on from copy to copy, as if training had
continued: each copy's numbers are shifted by the number of steps in the source, so every step
of every copy is a step of its own. Written in Kineto's own layout (one event per block of
lines, ns timestamps with three decimals), gzipped.

    python -m bench.common.synthetic_trace --out bench/data/synthetic_rank0.json.gz [--copies 24]

Until the real DLRM trace exists (bench/common/large_trace.py, on a GPU) this stands in for it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

DEFAULT_SRC = Path(__file__).resolve().parents[3] / "shared" / "traces" / "public" / "hta_ns_resolution_rank0.json.gz"


def _ns(v) -> int:
    return int((Decimal(v) * 1000).to_integral_value())


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _plain(v):
    """Decimals (kept for exact ts/dur) back to floats for everything else."""
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


_NUMBERED = re.compile(r"^(ProfilerStep#)(\d+)$|^(## .*? )(\d+)( ##)$")


def _step_span(events: list[dict]) -> int:
    """How far each copy's step and batch numbers are shifted: the source's ProfilerStep count
    (max - min + 1), else the span of its ``## ... N ##`` batch indices."""
    steps, batches = [], []
    for e in events:
        m = _NUMBERED.match(str(e.get("name", "")))
        if m:
            (steps if m.group(2) else batches).append(int(m.group(2) or m.group(4)))
    got = steps or batches
    return max(got) - min(got) + 1 if got else 0


def _renumbered(name: str, shift: int) -> str:
    m = _NUMBERED.match(name) if shift else None
    if m is None:
        return name
    if m.group(2):
        return f"{m.group(1)}{int(m.group(2)) + shift}"
    return f"{m.group(3)}{int(m.group(4)) + shift}{m.group(5)}"


def _event_text(e: dict, ts_ns: int, dur_ns: int | None) -> str:
    head = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid") if k in e}
    line1 = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
    rest = [f'"ts": {_us(ts_ns)}'] + ([f'"dur": {_us(dur_ns)}'] if dur_ns is not None else [])
    for k, v in e.items():
        if k not in head and k not in ("ts", "dur", "args"):
            rest.append(f"{json.dumps(k)}: {json.dumps(v)}")
    out = "  {\n    " + line1 + ",\n    " + ", ".join(rest)
    if "args" in e:
        body = ",".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e["args"].items())
        out += ",\n    \"args\": {\n      " + body + "\n    }"
    return out + "\n  }"


@dataclass(frozen=True)
class Written:
    """What :func:`write_synthetic_trace` wrote."""

    path: Path
    """The gzipped trace."""
    json_bytes: int
    """Size of its JSON text."""
    events: int
    """Events written (metadata events included)."""


def write_synthetic_trace(src: str | Path, out: str | Path, *, copies: int = 24, shapes: bool = True,
                          memory: bool = True) -> Written:
    """Write ``copies`` copies of the real trace ``src`` (as the module's docstring says) to ``out``
    (gzipped, written to a temporary name and renamed); ``shapes``: ``record_shapes``-style args
    on every cpu_op, ``memory``: a ``[memory]`` alloc/free pair per kernel."""
    with gzip.open(src, "rb") as f:
        doc = json.load(f, parse_float=Decimal)
    all_events = doc.pop("traceEvents")
    events = [e for e in all_events if e.get("ph") != "M"]
    meta = [e for e in all_events if e.get("ph") == "M"]
    for e in all_events:
        e["_ts"] = _ns(e["ts"])
        e["_dur"] = _ns(e["dur"]) if "dur" in e else None
    t_min = min(e["_ts"] for e in events)
    span = max(e["_ts"] + (e["_dur"] or 0) for e in events) - t_min + 1_000_000
    max_corr = max((e.get("args", {}).get("correlation", 0) for e in events), default=0) + 1
    max_ext = max((e.get("args", {}).get("External id", 0) for e in events), default=0) + 1
    max_flow = max((e.get("id", 0) for e in events if e.get("ph") in ("s", "f")), default=0) + 1
    span_steps = _step_span(events)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    n_events = 0
    raw = 0
    top = {k: v for k, v in doc.items() if k not in ("INFO",)}
    trailer_keys = ("traceName", "displayTimeUnit")
    with gzip.open(tmp, "wt", compresslevel=6) as w:
        head = {k: v for k, v in top.items() if k not in trailer_keys}
        text = json.dumps(_plain(head), indent=2)[:-2] + ',\n  "traceEvents": [\n'
        w.write(text)
        raw += len(text)
        first = True
        alloc = 0
        for c in range(copies):
            shift = c * span
            for e in events:
                e2 = {k: _plain(v) for k, v in e.items() if not k.startswith("_") and k not in ("ts", "dur")}
                if isinstance(e2.get("name"), str):
                    e2["name"] = _renumbered(e2["name"], c * span_steps)
                args = dict(e2.get("args", {}))
                if "correlation" in args:
                    args["correlation"] += c * max_corr
                if "External id" in args:
                    args["External id"] += c * max_ext
                if e2.get("ph") in ("s", "f") and "id" in e2:
                    e2["id"] += c * max_flow
                if shapes and e2.get("cat") == "cpu_op":
                    args["Input Dims"] = [[2048, 64], [64], []]
                    args["Input type"] = ["float", "float", "Scalar"]
                    args["Input Strides"] = [[64, 1], [1], []]
                    args["Concrete Inputs"] = ["", "", "1"]
                if args:
                    e2["args"] = args
                chunk = _event_text(e2, e["_ts"] + shift, e["_dur"])
                if memory and e2.get("cat") == "kernel":
                    nbytes = 4096 * (1 + (e["_ts"] // 1000) % 64)
                    for sign, dt in ((1, -500), (-1, (e["_dur"] or 0) + 500)):
                        alloc += sign * nbytes
                        mem = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                               "pid": 1102, "tid": 1102,
                               "args": {"Total Reserved": 1 << 33, "Total Allocated": alloc,
                                        "Bytes": sign * nbytes, "Addr": 0x7F0000000000 + nbytes,
                                        "Device Id": 0, "Device Type": 1}}
                        chunk += ",\n" + _event_text(mem, e["_ts"] + shift + dt, None)
                        n_events += 1
                text = ("" if first else ",\n") + chunk
                first = False
                w.write(text)
                raw += len(text)
                n_events += 1
        for m in meta:
            text = ",\n" + _event_text(_plain({k: v for k, v in m.items() if k not in ("ts", "_ts", "_dur")}), m["_ts"], None)
            w.write(text)
            raw += len(text)
            n_events += 1
        trailer = [f"  {json.dumps(k)}: {json.dumps(doc[k])}" for k in trailer_keys if k in doc]
        text = "\n  ]" + "".join(",\n" + t for t in trailer) + "\n}\n"
        w.write(text)
        raw += len(text)
    os.replace(tmp, out)
    return Written(out, raw, n_events)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=str(DEFAULT_SRC))
    p.add_argument("--out", required=True)
    p.add_argument("--copies", type=int, default=24)
    p.add_argument("--no-shapes", action="store_true", help="no record_shapes-style args")
    p.add_argument("--no-memory", action="store_true", help="no [memory] events")
    a = p.parse_args(argv)
    t0 = time.time()
    w = write_synthetic_trace(a.src, a.out, copies=a.copies, shapes=not a.no_shapes, memory=not a.no_memory)
    print(f"wrote {w.path}: {w.json_bytes / 1e6:.1f} MB JSON, {w.path.stat().st_size / 1e6:.1f} MB gzipped, "
          f"{w.events} events ({a.copies} copies of {Path(a.src).name}) in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
