"""Write tiny hand-built Kineto traces for tests.

A test describes a trace in a few calls and gets a real file that the loader reads like any
trace torch.profiler writes::

    b = TraceBuilder()
    b.profiler_step(1, ts=0, dur=100)
    b.annotation("## optimizer 0 ##", 10, 20)
    c = b.runtime("cudaLaunchKernel", 12, 2)          # returns the correlation id
    b.kernel("my_kernel", 30, 5, stream=7, launched_by=c)
    b.memory(15, 1024, total_allocated=4096, total_reserved=8192)
    b.write(tmp_path / "t.json")

Times are microseconds (floats allowed), relative to ``base_us`` which is added on write;
with the default base (1 s) a microsecond time with up to 3 decimals survives the float64
round trip exactly, so a test can assert exact nanosecond figures.

Linking follows Kineto: a CUDA runtime call (``cuda_runtime``) and the GPU activity it launched
carry the same ``correlation`` id in their args, plus a pair of ``ac2g`` flow events (``s`` on
the CPU thread at the call, ``f`` on the stream at the activity). The runtime call and the
activity carry the ``External id`` of the innermost CPU op / annotation enclosing the call on
that thread, as Kineto does.

``schema="legacy2021"`` writes the 2021 schema instead: categories ``Operator``/``Runtime``/
``Kernel``/``Memcpy``/``Memset``, integer microseconds, string tids (``"stream 7"`` on the GPU),
lower-case ``external id``, ``async``/``launch`` flows, and ``[memory]`` events with ``Bytes``
only (totals are dropped).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PT2_CAT = {
    "cpu_op": "cpu_op",
    "annotation": "user_annotation",
    "gpu_annotation": "gpu_user_annotation",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "sync": "cuda_sync",
    "python": "python_function",
    "overhead": "overhead",
}
_LEGACY_CAT = {
    "cpu_op": "Operator",
    "annotation": "Operator",  # legacy traces wrote record_function ranges as Operator too
    "gpu_annotation": "Operator",
    "runtime": "Runtime",
    "driver": "Runtime",
    "kernel": "Kernel",
    "memcpy": "Memcpy",
    "memset": "Memset",
    "sync": "Runtime",
    "python": "Operator",
    "overhead": "overhead",
}
_GPU_KINDS = ("kernel", "memcpy", "memset", "gpu_annotation", "sync")


@dataclass
class _Ev:
    kind: str
    name: str
    ts: float
    dur: float
    tid: int
    stream: int = -1
    device: int = -1
    correlation: int = -1
    bytes: int = -1
    args: dict[str, Any] = field(default_factory=dict)


class TraceBuilder:
    """Collects events and writes them as one Kineto JSON trace (see the module docstring)."""

    def __init__(
        self,
        *,
        pid: int = 4242,
        tid: int = 4242,
        device: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        schema: str = "pytorch2",
        base_us: float = 1_000_000.0,
        platform: str = "cuda",
    ) -> None:
        if schema not in ("pytorch2", "legacy2021"):
            raise ValueError(f"unknown schema {schema!r}")
        self.pid = pid
        self.tid = tid
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.schema = schema
        self.base_us = base_us
        self.platform = platform
        self.events: list[_Ev] = []
        self.memory_events: list[dict[str, Any]] = []
        self.extra_metadata: dict[str, Any] = {}
        self._next_corr = 1000
        self._next_ext = 1

    # ---- host side -------------------------------------------------------------------------
    def annotation(self, name: str, ts: float, dur: float, *, tid: int | None = None,
                   args: dict[str, Any] | None = None) -> None:
        """A ``record_function`` range on a CPU thread (``user_annotation``); ``args`` are
        written as they are (a range with recorded inputs: ``inputs(...)``)."""
        self.events.append(_Ev("annotation", name, ts, dur, self.tid if tid is None else tid,
                               args=dict(args or {})))

    def profiler_step(self, n: int, ts: float, dur: float, *, tid: int | None = None) -> None:
        """torch.profiler's ``ProfilerStep#n`` annotation."""
        self.annotation(f"ProfilerStep#{n}", ts, dur, tid=tid)

    def cpu_op(self, name: str, ts: float, dur: float, *, tid: int | None = None,
               args: dict[str, Any] | None = None) -> None:
        """An aten operator (``cpu_op``); ``args`` are written as they are (e.g. the collective
        metadata of ``record_param_comms``)."""
        self.events.append(_Ev("cpu_op", name, ts, dur, self.tid if tid is None else tid,
                               args=dict(args or {})))

    def python(self, name: str, ts: float, dur: float, *, tid: int | None = None) -> None:
        """A ``python_function`` event (with_stack=True)."""
        self.events.append(_Ev("python", name, ts, dur, self.tid if tid is None else tid))

    def runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        tid: int | None = None,
        correlation: int | None = None,
    ) -> int:
        """A CUDA (or HIP) runtime call on a CPU thread; returns its correlation id."""
        corr = self._corr(correlation)
        self.events.append(
            _Ev("runtime", name, ts, dur, self.tid if tid is None else tid, correlation=corr)
        )
        return corr

    # ---- device side -----------------------------------------------------------------------
    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        stream: int = 7,
        device: int | None = None,
        correlation: int | None = None,
        launched_by: int | None = None,
        launch_at: float | None = None,
        tid: int | None = None,
        args: dict[str, Any] | None = None,
    ) -> int:
        """A kernel on ``stream``.

        Link it to its launch either with ``launched_by`` (a correlation id returned by
        ``runtime``) or with ``launch_at`` (a ``cudaLaunchKernel`` of 1 us is added at that CPU
        time on ``tid``). Without either it has its own correlation id and no launch.
        ``args``: extra args written as they are (an NCCL kernel's collective metadata, a launch
        configuration: ``grid``, ``block``, ``registers per thread``, ``shared memory``, ``est.
        achieved occupancy %``, written as grid [1, 1, 1], block [128, 1, 1], 32 registers and no
        shared memory unless given); a key given as None is left out.
        Returns the correlation id.
        """
        corr = self._activity("kernel", name, ts, dur, "LaunchKernel", stream, device,
                              correlation, launched_by, launch_at, tid)
        self.events[-1].args.update(args or {})
        return corr

    def memcpy(
        self,
        ts: float,
        dur: float,
        *,
        direction: str = "HtoD",
        src: str | None = None,
        dst: str | None = None,
        nbytes: int = 1024,
        stream: int = 7,
        device: int | None = None,
        correlation: int | None = None,
        launched_by: int | None = None,
        launch_at: float | None = None,
        tid: int | None = None,
    ) -> int:
        """A memcpy on ``stream``, named as Kineto does: ``Memcpy HtoD (Pageable -> Device)``.

        ``src``/``dst`` default from ``direction`` (H = Pinned, D = Device).
        """
        kinds = {"H": "Pinned", "D": "Device"}
        src = src or kinds[direction[0]]
        dst = dst or kinds[direction[-1]]
        return self._activity("memcpy", f"Memcpy {direction} ({src} -> {dst})", ts, dur,
                              "MemcpyAsync", stream, device, correlation, launched_by, launch_at,
                              tid, nbytes)

    def memset(
        self,
        ts: float,
        dur: float,
        *,
        nbytes: int = 1024,
        stream: int = 7,
        device: int | None = None,
        correlation: int | None = None,
        launched_by: int | None = None,
        launch_at: float | None = None,
        tid: int | None = None,
    ) -> int:
        """A ``Memset (Device)`` on ``stream``."""
        return self._activity("memset", "Memset (Device)", ts, dur, "MemsetAsync", stream, device,
                              correlation, launched_by, launch_at, tid, nbytes)

    def gpu_annotation(self, name: str, ts: float, dur: float, *, stream: int = 7) -> None:
        """A ``gpu_user_annotation`` range drawn on a stream."""
        self.events.append(
            _Ev("gpu_annotation", name, ts, dur, stream, stream=stream, device=self.device)
        )

    def cuda_sync(
        self,
        ts: float,
        dur: float,
        *,
        kind: str = "stream_synchronize",
        stream: int = 7,
        correlation: int | None = None,
        wait_stream: int | None = None,
        wait_correlation: int | None = None,
    ) -> None:
        """A Kineto ``cuda_sync`` event (``Stream Sync``/``Event Sync``/``Context Sync``/
        ``Stream Wait Event``). For a wait: ``wait_stream`` is the stream the waited-on event was
        recorded on and ``wait_correlation`` the correlation id of its ``cudaEventRecord``
        (Kineto's ``wait_on_stream`` / ``wait_on_cuda_event_record_corr_id``)."""
        extra: dict[str, Any] = {"cuda_sync_kind": kind}
        if wait_stream is not None:
            extra["wait_on_stream"] = wait_stream
        if wait_correlation is not None:
            extra["wait_on_cuda_event_record_corr_id"] = wait_correlation
            extra["wait_on_cuda_event_id"] = 1
        names = {
            "stream_synchronize": "Stream Sync",
            "event_synchronize": "Event Sync",
            "context_synchronize": "Context Sync",
            "stream_wait_event": "Stream Wait Event",
        }
        self.events.append(
            _Ev("sync", names.get(kind, kind), ts, dur, stream, stream=stream,
                device=self.device, correlation=-1 if correlation is None else correlation,
                args=extra)
        )

    def stream_wait(
        self,
        *,
        record_at: float,
        wait_at: float,
        on_stream: int,
        stream: int,
        gpu_at: float,
        tid: int | None = None,
        producer_known: bool = True,
    ) -> tuple[int, int]:
        """``event.record(on_stream)`` then ``stream.wait_event(event)`` as PyTorch issues them:
        a ``cudaEventRecord`` call at ``record_at``, a ``cudaStreamWaitEvent`` call at
        ``wait_at`` (1 us each, on ``tid``), and the ``Stream Wait Event`` cuda_sync event on
        ``stream`` at GPU time ``gpu_at`` that Kineto writes with ``enable_cuda_sync_events``.
        ``producer_known=False``: ``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id``
        are -1, as torch 2.11 with CUDA 13 writes them. Returns the correlation ids of the record
        and the wait calls."""
        rec = self.runtime("cudaEventRecord", record_at, 1.0, tid=tid)
        wait = self.runtime("cudaStreamWaitEvent", wait_at, 1.0, tid=tid)
        self.cuda_sync(gpu_at, 0.5, kind="stream_wait_event", stream=stream, correlation=wait,
                       wait_stream=on_stream if producer_known else -1,
                       wait_correlation=rec if producer_known else -1)
        return rec, wait

    def overhead(self, name: str, ts: float, dur: float) -> None:
        """A Kineto ``overhead`` event (pid -1), e.g. ``Command Buffer Full``: a launch blocked
        on a full launch queue."""
        self.events.append(_Ev("overhead", name, ts, dur, 0))

    # ---- memory ----------------------------------------------------------------------------
    def memory(
        self,
        ts: float,
        nbytes: int,
        total_allocated: int | None = None,
        total_reserved: int | None = None,
        *,
        device: int | None = None,
        device_type: int = 1,
        addr: int | None = None,
        tid: int | None = None,
    ) -> None:
        """A ``[memory]`` instant event (an allocator record: ``nbytes`` > 0 allocates)."""
        args: dict[str, Any] = {
            "Device Type": device_type,
            "Device Id": (self.device if device is None else device) if device_type == 1 else -1,
            "Bytes": int(nbytes),
        }
        if self.schema == "pytorch2":
            if total_allocated is not None:
                args["Total Allocated"] = int(total_allocated)
            if total_reserved is not None:
                args["Total Reserved"] = int(total_reserved)
            args["Addr"] = int(addr if addr is not None else 0x7F0000000000 + 256 * len(self.memory_events))
        ev = {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": self.pid,
            "tid": self.tid if tid is None else tid,
            "ts": ts,
            "args": args,
        }
        if self.schema == "pytorch2":
            ev["cat"] = "cpu_instant_event"
        self.memory_events.append(ev)

    # ---- output ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The trace as the JSON object Kineto writes."""
        legacy = self.schema == "legacy2021"
        cats = _LEGACY_CAT if legacy else _PT2_CAT
        host = [e for e in self.events if e.kind in ("cpu_op", "annotation", "python")]
        ext_of = {id(e): self._ext() for e in host}
        self._ext_of_host = ext_of
        self._launch_by_corr = {}
        for e in self.events:
            if e.kind in ("runtime", "driver"):
                self._launch_by_corr.setdefault(e.correlation, e)
        self._launched = {e.correlation for e in self.events
                          if e.kind in ("kernel", "memcpy", "memset")}
        calls = [e for e in self.events if e.kind in ("runtime", "driver")]
        self._ext_of_call = _innermost_host(host, calls, ext_of)
        out: list[dict[str, Any]] = []
        for e in sorted(self.events, key=lambda e: (e.ts, -e.dur)):
            out.extend(self._emit(e, cats, legacy))
        for m in self.memory_events:
            m = dict(m)
            m["ts"] = self._ts(m["ts"], legacy)
            out.append(m)
        out.sort(key=lambda d: (d["ts"], d.get("ph") != "X"))
        meta = [
            {"name": "process_name", "ph": "M", "ts": self._ts(0, legacy), "pid": self.pid,
             "tid": 0, "args": {"name": "python"}},
            {"name": "process_name", "ph": "M", "ts": self._ts(0, legacy), "pid": self.device,
             "tid": 0, "args": {"name": "python"}},
        ]
        doc: dict[str, Any] = {"schemaVersion": 1}
        if not legacy:
            doc["deviceProperties"] = [
                {"id": self.device, "name": "Test GPU", "totalGlobalMem": 80 * 2**30}
            ]
        if self.rank is not None:
            doc["distributedInfo"] = {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": self.world_size if self.world_size is not None else self.rank + 1,
            }
        doc.update(self.extra_metadata)
        doc["traceEvents"] = meta + out
        if not legacy:
            doc["displayTimeUnit"] = "ms"
        return doc

    def write(self, path: str | Path, *, gz: bool | None = None) -> Path:
        """Write the trace; gzipped when ``gz`` or when the name ends in ``.gz``."""
        path = Path(path)
        gz = path.name.endswith(".gz") if gz is None else gz
        if gz and not path.name.endswith(".gz"):
            path = path.with_name(path.name + ".gz")
        data = json.dumps(self.to_dict()).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        if gz:
            with gzip.open(path, "wb") as f:
                f.write(data)
        else:
            path.write_bytes(data)
        return path

    # ---- internals -------------------------------------------------------------------------
    def _corr(self, correlation: int | None) -> int:
        if correlation is not None:
            self._next_corr = max(self._next_corr, correlation + 1)
            return correlation
        c = self._next_corr
        self._next_corr += 1
        return c

    def _ext(self) -> int:
        x = self._next_ext
        self._next_ext += 1
        return x

    def _activity(self, kind: str, name: str, ts: float, dur: float, call: str, stream: int,
                  device: int | None, correlation: int | None, launched_by: int | None,
                  launch_at: float | None, tid: int | None, nbytes: int = -1) -> int:
        """A GPU activity on ``stream`` linked to its launch (``cuda<call>``, ``hip<call>`` on
        ROCm: see ``kernel``); returns its correlation id."""
        launch = ("hip" if self.platform == "rocm" else "cuda") + call
        corr = self._link(launch, correlation, launched_by, launch_at, tid)
        self.events.append(
            _Ev(kind, name, ts, dur, stream, stream=stream,
                device=self.device if device is None else device, correlation=corr,
                bytes=nbytes)
        )
        return corr

    def _link(self, launch_name, correlation, launched_by, launch_at, tid) -> int:
        if launched_by is not None:
            return launched_by
        if launch_at is not None:
            return self.runtime(launch_name, launch_at, 1.0, tid=tid, correlation=correlation)
        return self._corr(correlation)

    def _ts(self, t: float, legacy: bool) -> float | int:
        v = self.base_us + t
        return int(round(v)) if legacy else round(v, 3)

    def _dur(self, d: float, legacy: bool) -> float | int:
        return int(round(d)) if legacy else round(d, 3)

    def _emit(self, e, cats, legacy) -> list[dict[str, Any]]:
        ext_key = "external id" if legacy else "External id"
        pid = self.device if e.kind in _GPU_KINDS else (-1 if e.kind == "overhead" else self.pid)
        if e.kind in ("kernel", "memcpy", "memset", "gpu_annotation") and e.device >= 0:
            pid = e.device
        tid: Any = e.tid
        if legacy:
            tid = f"stream {e.stream}" if e.kind in _GPU_KINDS else str(e.tid)
        d: dict[str, Any] = {
            "ph": "X",
            "cat": cats[e.kind],
            "name": e.name,
            "pid": pid,
            "tid": tid,
            "ts": self._ts(e.ts, legacy),
            "dur": self._dur(e.dur, legacy),
        }
        args: dict[str, Any] = dict(e.args)
        flows: list[dict[str, Any]] = []
        if e.kind in ("cpu_op", "annotation", "python"):
            args[ext_key] = self._ext_of_host[id(e)]
        elif e.kind in ("runtime", "driver"):
            args["cbid"] = 211
            args["correlation"] = e.correlation
            ext = self._ext_of_call.get(id(e), -1)
            if ext >= 0:
                args[ext_key] = ext
            flow_cat, flow_name = ("async", "launch") if legacy else ("ac2g", "ac2g")
            if self._launches(e.correlation):
                flows.append({"ph": "s", "id": e.correlation, "pid": self.pid, "tid": e.tid,
                              "ts": self._ts(e.ts, legacy), "cat": flow_cat, "name": flow_name})
        elif e.kind in ("kernel", "memcpy", "memset"):
            args["device"] = e.device
            args["context"] = 1
            args["stream"] = e.stream
            args["correlation"] = e.correlation
            launch = self._launch_of(e.correlation)
            if launch is not None:
                ext = self._ext_of_call.get(id(launch), -1)
                if ext >= 0:
                    args[ext_key] = ext
            if e.kind == "kernel":  # a launch configuration unless the kernel's args give one
                for key, v in {"registers per thread": 32, "shared memory": 0, "grid": [1, 1, 1],
                               "block": [128, 1, 1]}.items():
                    args.setdefault(key, v)
            else:
                args["bytes"] = e.bytes
                args["memory bandwidth (GB/s)"] = (e.bytes / (e.dur * 1e3)) if e.dur else 0.0
            if launch is not None:
                flow_cat, flow_name = ("async", "launch") if legacy else ("ac2g", "ac2g")
                flows.append({"ph": "f", "id": e.correlation, "pid": pid, "tid": tid,
                              "ts": self._ts(e.ts, legacy), "cat": flow_cat, "name": flow_name,
                              "bp": "e"})
        elif e.kind == "gpu_annotation":
            args[ext_key] = self._ext()
            args["device"] = e.device
            args["stream"] = e.stream
        elif e.kind == "sync":
            args["device"] = e.device
            args["stream"] = e.stream
            if e.correlation >= 0:
                args["correlation"] = e.correlation
        d["args"] = {k: v for k, v in args.items() if v is not None}  # None: key left out
        return [d, *flows]

    def _launch_of(self, corr: int) -> _Ev | None:
        return self._launch_by_corr.get(corr)

    def _launches(self, corr: int) -> bool:
        return corr in self._launched


def _innermost_host(host: list[_Ev], calls: list[_Ev], ext_of: dict[int, int]) -> dict[int, int]:
    """External id of the innermost host event enclosing each call on its thread (a sweep)."""
    out: dict[int, int] = {}
    by_tid: dict[int, list] = {}
    for h in host:
        by_tid.setdefault(h.tid, []).append((h.ts, 0, -h.dur, h))
    for c in calls:
        by_tid.setdefault(c.tid, []).append((c.ts, 1, -c.dur, c))
    for items in by_tid.values():
        items.sort(key=lambda x: x[:3])
        stack: list[_Ev] = []
        for t, typ, _, e in items:
            while stack and stack[-1].ts + stack[-1].dur < t:
                stack.pop()
            if typ == 0:
                stack.append(e)
                continue
            for h in reversed(stack):
                if h.ts + h.dur >= e.ts + e.dur:
                    out[id(e)] = ext_of[id(h)]
                    break
    return out

def inputs(*items: tuple) -> dict[str, Any]:
    """The args ``record_shapes=True`` writes on an op, from ``(dims, type)`` for a tensor
    (``([65536, 3328], "float")``), ``(value,)`` for a scalar (``(3328,)``: type ``Scalar``,
    its value in ``Concrete Inputs``) and ``()`` for None."""
    dims, types, concrete = [], [], []
    for it in items:
        if len(it) == 2:
            dims.append(list(it[0]))
            types.append(it[1])
            concrete.append("")
        elif len(it) == 1:
            dims.append([])
            types.append("Scalar")
            concrete.append(str(it[0]))
        else:
            dims.append([])
            types.append("")
            concrete.append("")
    return {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}


def load_built(builder: TraceBuilder, directory: str | Path, name: str = "trace.json"):
    """Write ``builder``'s trace into ``directory`` and read it back with tracekit's loader
    (no cache): the parsed ``Trace`` of its single rank."""
    from tracekit.trace import load

    path = builder.write(Path(directory) / name)
    return load(path, use_cache=False, progress=False).traces[0]


US = 1000
"""Nanoseconds per microsecond: builder times are us, analyses report ns."""


def ns(t_us: float, base_us: float = 1_000_000.0) -> int:
    """The nanosecond timestamp the loader gives a builder time ``t_us``."""
    return int(round((base_us + t_us) * 1000))
