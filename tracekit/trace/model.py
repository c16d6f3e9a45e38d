"""The parsed trace: one rank's Kineto trace as columnar tables with integer-nanosecond times.

This module is the contract between the loader (``tracekit.trace.load``) and every analysis.
Analyses read these tables and never modify them.

``Trace.events`` holds one row per complete (``ph == "X"``) event, sorted by ``ts``:

============== ======== =====================================================================
column         dtype    meaning
============== ======== =====================================================================
kind           int8     a ``Kind`` value (normalised across schemas, see ``Kind``)
name           category the event name (``events.name.cat.categories`` are the unique names)
ts             int64    start, ns, on the trace's own clock (as written, converted to ns)
dur            int64    duration, ns (>= 0)
pid            int64    process id; GPU activities carry the device index here as Kineto does
tid            int64    thread id; for GPU activities the stream; string tids: digits and
                        legacy "stream N" read as the number, any other string -1
stream         int32    CUDA/HIP stream of a GPU activity, GPU annotation or cuda_sync event
                        (args ``stream``, else the tid); a cpu_op's args ``stream`` when it
                        has one (Triton's launcher: HTA counts such an op as a kernel); else -1
device         int16    GPU index of the same events (args ``device``, else the pid), else -1
correlation    int64    links a runtime call to the GPU activity it launched, else -1 (read
                        for every kind but CPU_OP, ANNOTATION and PYTHON, which are -1; a
                        cpu_op that names a stream keeps its correlation)
external_id    int64    Kineto's "External id" (legacy "external id"), else -1
bytes          int64    bytes moved by a memcpy/memset, else -1
launch         category a kernel's launch configuration where its args record it, as compact
                        JSON text (``_schema.launch_text``: ``{"grid":[512,16,1],"block":
                        [128,1,1],"registers":128,"shared_memory":13056,"occupancy":25}``,
                        the fields written, registers per thread, shared memory in bytes,
                        Kineto's "est. achieved occupancy %"); NaN for every other event
============== ======== =====================================================================

Times are exact: ``ts`` is parsed from the JSON number's text (``round(us * 1000)`` on the
decimal digits, never through float64); ``dur`` is ``round(dur_us * 1000)``. A negative ``dur``
reads as 0 (with a warning). Events of other phases (flows ``s``/``f``, metadata ``M``,
counters, instants other than ``[memory]``) are not kept. In the 2021 legacy schema,
record_function ranges were written as ``Operator``: those named like torch's and TorchRec's
annotations (``ProfilerStep#N``, ``## ... ##``, ``Optimizer.step#...``,
``Optimizer.zero_grad#...``) are ``ANNOTATION``, every other ``Operator`` is ``CPU_OP``.

``Trace.memory`` holds one row per ``[memory]`` instant event (torch's allocator records),
sorted by ``ts``:

================ ====== ===================================================================
ts               int64  ns
device_type      int8   c10 DeviceType: 0 CPU, 1 CUDA, 6 HIP (ROCm's builds)
device_id        int16  -1 for the host
bytes            int64  signed: > 0 allocation, < 0 free
total_allocated  int64  allocator's allocated bytes after the event, -1 when not recorded
total_reserved   int64  allocator's reserved bytes after the event, -1 when not recorded
addr             int64  address, -1 when not recorded
tid              int64  thread
================ ====== ===================================================================

``Trace.args`` holds the extra arguments of the few events that carry them, one row per such
event, sorted by ``event``: Kineto's ``cuda_sync`` events (a stream waiting on an event recorded
on another stream; written with ``enable_cuda_sync_events``) and the collective metadata torch
writes on ``record_param_comms`` CPU ops and on the NCCL/RCCL kernels they launched:

================ ======== =================================================================
event            int64    row of ``Trace.events`` the args belong to
wait_stream      int32    ``wait_on_stream``: the stream the waited-on event was recorded on
wait_correlation int64    ``wait_on_cuda_event_record_corr_id``: correlation id of the
                          ``cudaEventRecord`` call that recorded it
wait_event       int64    ``wait_on_cuda_event_id``
collective       category ``Collective name`` (``allreduce``, ``all_to_allv``...), "" if none
group            category ``Process Group Name``, else ``Process Group ID`` as text, else ""
group_desc       category ``Process Group Description``
group_ranks      category ``Process Group Ranks`` as written (``[0, 1]``)
group_size       int64    ``Group size``
in_nelems        int64    ``In msg nelems``
out_nelems       int64    ``Out msg nelems``
in_split         category ``In split size`` as written (``[14, 14]``; long lists end ``...]``)
out_split        category ``Out split size``
dtype            category ``dtype``
seq              int64    ``Seq``: the collective's sequence number in its group
comm_rank        int64    ``Rank``: this rank in the group
src_rank         int64    ``Src Rank`` (recv)
dst_rank         int64    ``Dst Rank`` (send)
input_dims       category ``Input Dims`` (``record_shapes``) as compact JSON text
                          (``[[100,8],[50],[]]``: one list per input, [] for a non-tensor)
input_types      category ``Input type`` as compact JSON text (``["float","long int","Scalar"]``)
concrete_inputs  category ``Concrete Inputs`` as compact JSON text (``["","","3328"]``: the
                          values of scalar inputs, as strings)
================ ======== =================================================================

Integers not written are -1, strings "". Which events are asked for their args: every
``cuda_sync`` event, and ``record_param_comms`` and names matching ``nccl``/``rccl`` (any case);
the three input columns are read for host ops and annotations whose names match
``embedding`` (any case) or start ``tracekit_tbe::`` (and are "" on every other row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a table is built: parsing needs only numpy
    import pandas as pd


class Kind(IntEnum):
    """What an event is, whatever the schema called it."""

    CPU_OP = 0  # "cpu_op"; legacy "Operator"
    ANNOTATION = 1  # "user_annotation" (record_function on the host, ProfilerStep#N too)
    GPU_ANNOTATION = 2  # "gpu_user_annotation" (the same ranges drawn on a GPU stream)
    KERNEL = 3  # "kernel"; legacy "Kernel"
    MEMCPY = 4  # "gpu_memcpy"; legacy "Memcpy"
    MEMSET = 5  # "gpu_memset"; legacy "Memset"
    RUNTIME = 6  # "cuda_runtime", "hip_runtime"; legacy "Runtime" (ROCm calls are named hip*)
    DRIVER = 7  # "cuda_driver", "hip_driver"
    PYTHON = 8  # "python_function" (with_stack=True)
    SYNC = 9  # "cuda_sync" (Kineto's synchronization events)
    OTHER = 10  # anything else ("Trace", "overhead", ...)


GPU_ACTIVITY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
"""Kinds that occupy a GPU stream: the "activities" of docs/metrics.md."""

EVENT_COLUMNS: dict[str, Any] = {
    "kind": np.int8,
    "name": "category",
    "ts": np.int64,
    "dur": np.int64,
    "pid": np.int64,
    "tid": np.int64,
    "stream": np.int32,
    "device": np.int16,
    "correlation": np.int64,
    "external_id": np.int64,
    "bytes": np.int64,
    "launch": "category",
}

ARG_COLUMNS: dict[str, Any] = {
    "event": np.int64,
    "wait_stream": np.int32,
    "wait_correlation": np.int64,
    "wait_event": np.int64,
    "collective": "category",
    "group": "category",
    "group_desc": "category",
    "group_ranks": "category",
    "group_size": np.int64,
    "in_nelems": np.int64,
    "out_nelems": np.int64,
    "in_split": "category",
    "out_split": "category",
    "dtype": "category",
    "seq": np.int64,
    "comm_rank": np.int64,
    "src_rank": np.int64,
    "dst_rank": np.int64,
    "input_dims": "category",
    "input_types": "category",
    "concrete_inputs": "category",
}
SHAPE_NAME = re.compile(r"(?i)embedding|^tracekit_tbe::")
"""Names of the host ops and annotations whose recorded inputs (``record_shapes``: Input Dims,
Input type, Concrete Inputs) go into ``Trace.args``: FBGEMM's TBE ops, torch's embedding ops,
the runtime's ``tracekit_tbe::`` annotations (``tracekit.analyses.embedding_bw`` reads them)."""


def empty_args() -> pd.DataFrame:
    """An ``args`` table without rows."""
    import pandas as pd

    return pd.DataFrame({c: pd.Categorical([]) if t == "category" else np.empty(0, dtype=t)
                         for c, t in ARG_COLUMNS.items()})


MEMORY_COLUMNS: dict[str, Any] = {
    "ts": np.int64,
    "device_type": np.int8,
    "device_id": np.int16,
    "bytes": np.int64,
    "total_allocated": np.int64,
    "total_reserved": np.int64,
    "addr": np.int64,
    "tid": np.int64,
}


@dataclass(frozen=True)
class Trace:
    """One rank's parsed trace. Immutable by convention: analyses only read it."""

    source: str
    """Path of the file it was read from."""
    rank: int
    """``distributedInfo.rank``; for a file without it, its position among the files loaded."""
    events: pd.DataFrame
    """Complete events, see the module docstring."""
    memory: pd.DataFrame
    """``[memory]`` events, see the module docstring."""
    metadata: dict = field(default_factory=dict)
    """Top-level keys of the file other than ``traceEvents`` (deviceProperties, distributedInfo...)."""
    schema: str = "pytorch2"
    """``"pytorch2"`` (cpu_op/kernel/...) or ``"legacy2021"`` (Operator/Runtime/Kernel...)."""
    platform: str = "cuda"
    """``"cuda"``, ``"rocm"`` (hip* runtime calls), or ``"cpu"`` (no GPU activity at all)."""
    warnings: tuple[str, ...] = ()
    """What the loader had to repair or guess (a truncated file, a missing rank...); one
    sentence each, without the file name (``source`` says which file)."""
    args: pd.DataFrame = field(default_factory=empty_args)
    """Extra args of cuda_sync events and collectives, see the module docstring."""
    thread_names: dict[int, str] = field(default_factory=dict)
    """Host thread id -> the name Kineto gave it (``thread_name`` metadata, e.g.
    ``thread 3170 (pt_autograd_0)``); threads it did not name are absent."""

    @property
    def world_size(self) -> int | None:
        info = self.metadata.get("distributedInfo") or {}
        ws = info.get("world_size")
        return int(ws) if ws is not None else None

    @property
    def has_gpu(self) -> bool:
        return bool(self.events["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS]).any())

    def of_kind(self, *kinds: Kind) -> pd.DataFrame:
        """Rows of the given kinds (a view-like selection; do not modify it)."""
        return self.events[self.events["kind"].isin([int(k) for k in kinds])]

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per ``key`` for this trace object and kept as long as
        it: what the analyses derive from a trace (its activities with their phases, its steps,
        its dependency graph...) under the same key is computed once however many of them ask
        (``tracekit.phases.derived`` makes the keys). Callers must not modify what it returns.
        Not pickled: a copy of the trace in another process derives its own."""
        memo = self.__dict__.get("_derived")
        if memo is None:
            memo = self.__dict__.setdefault("_derived", {})
        try:
            return memo[key]
        except KeyError:
            pass
        value = memo[key] = compute()
        return value

    def column(self, name: str, dtype: Any = None) -> np.ndarray:
        """``events[name].to_numpy(dtype)``: the column as stored, read-only and read once per
        trace object (a column read through pandas costs ~10 us whatever the rows, and the
        analyses read the same few columns of a trace some sixty times: a job of thousands of
        tiny ranks paid each); in another ``dtype``, a fresh copy each call (kept, a converted
        column would hold its memory as long as the trace). Not for ``name`` and ``launch``
        (categoricals)."""
        memo = self.__dict__.get("_derived")
        key = ("column", name)
        a = memo.get(key) if memo is not None else None
        if a is None:
            def compute() -> np.ndarray:
                from tracekit.frames import column  # ``events[name].to_numpy()``, faster

                got = column(self.events, name)
                if got.flags.writeable:
                    got = got.view()
                    got.flags.writeable = False
                return got

            a = self.memo(key, compute)
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)

    def forget(self) -> None:
        """Drop what ``memo`` keeps (it is computed again when asked)."""
        self.__dict__.pop("_derived", None)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_derived", None)
        return state


@dataclass(frozen=True)
class TraceSet:
    """What one path given by the user holds: a file (one rank) or a directory of per-rank files."""

    source: str
    traces: tuple[Trace, ...]
    """Sorted by rank."""

    @property
    def ranks(self) -> list[int]:
        return [t.rank for t in self.traces]

    def rank(self, rank: int) -> Trace:
        for t in self.traces:
            if t.rank == rank:
                return t
        raise KeyError(rank)
