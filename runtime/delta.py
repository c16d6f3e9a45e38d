"""Delta tracking: stream the rows the fused optimizer updated each step to a host consumer.

After every backward of a :class:`runtime.embedding.TableBatchedEmbedding`, the rows its
optimizer updated (per table: the row numbers and their new values) are handed to a consumer
on the host, in step order, each step exactly once. Two modes:

``blocking`` (the old way)
    Inside the step: read the number of updated rows (``.item()``, a host sync), then copy the
    ids and the gathered rows device -> host into pageable memory (``.cpu()``, each a
    ``cudaMemcpyAsync`` to pageable memory followed by a sync). The host stalls until the GPU
    has caught up, every step.

``async`` (FBGEMM's raw-embedding-streaming design, see DESIGN.md change 3)
    Nothing in the step waits for the GPU. Buffers are allocated once and reused:

    * a device *staging* buffer (ids, count, values) sized for ``capacity`` rows;
    * a ring of ``slots`` pinned host buffers of the same shape (cudaHostAlloc memory: on a
      UVA system also mapped into the device's address space), plus (transport ``mapped``) a
      CUDA view of each (the host pointer is a valid device pointer), so that a kernel on the
      device can write straight into host memory.

    Per step k, on the stream that ran the update (the main stream): gather the updated rows
    into the staging buffer (device-to-device, at HBM speed) and record ``staged``. On the
    tracker's copy stream: wait for ``staged``, copy staging -> host buffer k % slots
    (``memcpy``: copy-engine ``cudaMemcpyAsync``s into the pinned buffer; ``mapped``: copy
    kernels writing through its device-mapped view), in pieces of at most ``chunk_bytes`` so
    that other streams' device-to-host copies (and kernels) interleave, then record that
    buffer's ``copied`` event. The tracker's copy thread (one per tracker, steps in order)
    polls ``copied`` (``cudaEventQuery``, never a blocking ``cudaEventSynchronize``), copies
    the delta out of the host buffer into fresh CPU tensors and hands it on.

    With ``copy_after="next_forward"`` step k's copy is queued by the module's next forward
    instead, behind that forward's kernels (see :class:`DeltaConfig`).

    Step k waits for the copy thread (the "join") only if it is still reading host buffer
    k % slots, i.e. still busy with step k - slots; the main stream also waits (on the GPU,
    not the host) for the previous copy before it overwrites the staging buffer. With
    ``slots=1`` every step waits for the previous step's copy-out, which the host reaches
    only after the GPU has finished the previous step: when the host runs ahead of the GPU
    (the usual case) that wait happens every step. Two slots give the copy thread a step.

    The number of updated rows is only known on the device, so each step moves the padded
    row list (N = number of indices of the batch, an upper bound of the unique rows) and the
    count; the copy thread reads the count from the host buffer. Buffer size rule: the
    buffers hold ``capacity`` rows; a step with N > capacity first waits for the copy thread
    to finish every step, then reallocates them for max(N, 2 * capacity) rows (so
    reallocations are rare: at most log2 of the largest batch).

On a CPU (CI) the async mode runs the same buffer, thread and join logic; the "device" copy is
a CPU copy into the host buffer and there are no events.

Consumers: a callable ``consumer(delta)`` or a ``queue.Queue`` (``put(delta)``). A callable
runs on one dispatcher thread of the tracker, in step order, so a slow consumer never holds up
the copy thread (deltas queue up instead); :meth:`DeltaTracker.flush` waits until every delta
produced so far has been consumed. An exception raised by the consumer is re-raised by the
next ``flush``/``on_update``.

The embedding module knows nothing of this: :func:`track_deltas` attaches a tracker from
outside through the module's update hook.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Union

import torch
from torch import Tensor
from torch.profiler import record_function

from runtime.kernels.common import RowUpdate, TBELayout

__all__ = [
    "DeltaMode",
    "Transport",
    "DeltaConfig",
    "TableDelta",
    "Delta",
    "DeltaStats",
    "DeltaTracker",
    "track_deltas",
    "mapped_device_view",
]


class DeltaMode(Enum):
    """How a step's delta leaves the device."""

    BLOCKING = "blocking"
    ASYNC = "async"


class Transport(Enum):
    """How the async mode moves the staging buffer into the pinned host buffer."""

    MAPPED = "mapped"
    """a copy kernel writes through a device-mapped (UVA) view of the pinned buffer"""
    MEMCPY = "memcpy"
    """a copy-engine cudaMemcpyAsync (device -> pinned host), non-blocking"""


@dataclass(frozen=True)
class DeltaConfig:
    """Options of a :class:`DeltaTracker`."""

    mode: DeltaMode
    """BLOCKING (copy inside the step, host stalls) or ASYNC (staging + host thread)"""
    transport: str = "auto"
    """ASYNC on CUDA only: "memcpy" (copy engine), "mapped" (copy kernels writing through a
    device view of the pinned buffer; verified here once, an error if it does not work) or
    "auto" (= memcpy: a kernel writing over PCIe holds SMs for the whole transfer, the copy
    engine does not; see bench/NOTES-fixes.md). Ignored on a CPU and in BLOCKING."""
    initial_rows: int = 0
    """ASYNC: rows the buffers hold from the start (>= 0); 0 sizes them at the first step"""
    poll_interval_s: float = 2e-4
    """ASYNC on CUDA: how often the copy thread polls the copy event (> 0, at most 0.01)"""
    slots: int = 2
    """ASYNC: host buffers in the ring (>= 1); step k waits only for the copy-out of step
    k - slots. 1: every step waits for the previous step's copy-out."""
    chunk_bytes: int = 4 << 20
    """ASYNC on CUDA: the staging -> host copy is issued in pieces of at most this many bytes
    of values (>= 4096), so that another stream's device-to-host copy waits at most one piece"""
    copy_after: str = "update"
    """ASYNC: when step k's staging -> host copy is queued. "update": right after the update
    (it runs as soon as the update is done on the GPU, beside the next step's first kernels).
    "next_forward": by the module's next forward (:meth:`DeltaTracker.on_forward`, which
    :func:`track_deltas` calls from a forward hook), behind that forward's kernels, so that it
    runs under the next step's dense work and no device-to-host copy of that forward waits
    behind it; the delta arrives about one forward later. Without a next forward, the next
    update or :meth:`DeltaTracker.flush` queues it."""

    def __post_init__(self) -> None:
        if not isinstance(self.mode, DeltaMode):
            raise ValueError(f"DeltaConfig.mode must be a DeltaMode, got {self.mode!r}")
        if self.transport not in ("auto", "mapped", "memcpy"):
            raise ValueError(f"DeltaConfig.transport must be 'auto', 'mapped' or 'memcpy', got {self.transport!r}")
        if isinstance(self.initial_rows, bool) or not isinstance(self.initial_rows, int) or self.initial_rows < 0:
            raise ValueError(f"DeltaConfig.initial_rows must be an int >= 0, got {self.initial_rows!r}")
        if not (isinstance(self.poll_interval_s, (int, float)) and 0 < self.poll_interval_s <= 0.01):
            raise ValueError(f"DeltaConfig.poll_interval_s must be in (0, 0.01], got {self.poll_interval_s!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise ValueError(f"DeltaConfig.slots must be an int >= 1, got {self.slots!r}")
        if isinstance(self.chunk_bytes, bool) or not isinstance(self.chunk_bytes, int) or self.chunk_bytes < 4096:
            raise ValueError(f"DeltaConfig.chunk_bytes must be an int >= 4096, got {self.chunk_bytes!r}")
        if self.copy_after not in ("update", "next_forward"):
            raise ValueError(f"DeltaConfig.copy_after must be 'update' or 'next_forward', got {self.copy_after!r}")


@dataclass(frozen=True)
class TableDelta:
    """The rows of one table that one step updated."""

    table: int
    """table index in the module"""
    rows: Tensor
    """(U,) int64, CPU: row numbers within the table, increasing, unique"""
    values: Tensor
    """(U, dim) CPU, the module's dtype: the rows' values after the update"""


@dataclass(frozen=True)
class Delta:
    """Everything one step updated: one entry per table (empty tensors for untouched ones)."""

    step: int
    """0-based count of updates this tracker has seen"""
    tables: tuple[TableDelta, ...]

    @property
    def num_rows(self) -> int:
        return sum(int(t.rows.numel()) for t in self.tables)


@dataclass
class DeltaStats:
    """Counters of a tracker (read them after :meth:`DeltaTracker.flush`)."""

    steps: int = 0
    """updates seen"""
    rows: int = 0
    """rows delivered to the consumer, all steps"""
    joins_waited: int = 0
    """ASYNC: steps (and flushes) that found the copy thread still reading the host buffer
    they need, and waited for it"""
    join_wait_s: float = 0.0
    """ASYNC: host seconds spent in those waits"""
    capacity: int = 0
    """ASYNC: rows the buffers hold now"""
    reallocations: int = 0
    """ASYNC: times the buffers were (re)allocated"""
    transport: str = ""
    """what the async mode uses here: "mapped", "memcpy" or "cpu"; "" for BLOCKING"""


Consumer = Union[Callable[[Delta], Any], "queue.Queue[Delta]"]


# ------------------------------------------------------------------ device view of pinned memory
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


@_DELETER
def _noop_deleter(_: Any) -> None:  # the memory belongs to the pinned host tensor
    return None


_DL_CPU, _DL_CUDA = 1, 2
_DL_DTYPES = {torch.float32: (2, 32), torch.float64: (2, 64), torch.int64: (0, 64), torch.int32: (0, 32)}
_KEEP_ALIVE: list[Any] = []  # DLPack structs must outlive the tensors made from them (few, small)


def _alias(ptr: int, shape: tuple[int, ...], dtype: torch.dtype, device_type: int, device_id: int) -> Tensor:
    """A torch tensor over ``ptr`` (contiguous ``shape``) on the given DLPack device."""
    code, bits = _DL_DTYPES[dtype]
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides = [1] * ndim
    for i in range(ndim - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    mt = _DLManagedTensor()
    mt.dl_tensor = _DLTensor(
        ptr, _DLDevice(device_type, device_id), ndim, _DLDataType(code, bits, 1),
        ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)),
        ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)), 0,
    )
    mt.manager_ctx = None
    mt.deleter = _noop_deleter
    _KEEP_ALIVE.append((mt, shape_arr, strides_arr))
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(mt), b"dltensor", None)
    return torch.utils.dlpack.from_dlpack(capsule)


def mapped_device_view(host: Tensor, device: torch.device) -> Tensor:
    """A CUDA tensor aliasing the pinned host tensor ``host`` (contiguous), so that kernels on
    ``device`` read and write host memory directly.

    Relies on unified virtual addressing: memory from ``cudaHostAlloc`` (torch's pinned
    allocator) is mapped into every device's address space at the same address, so the host
    pointer is the device pointer (CUDA programming guide, "Unified Virtual Address Space").
    The caller keeps ``host`` alive as long as the view. Raises RuntimeError when ``host`` is
    not pinned. Verify the view on the device before relying on it (see the tracker).
    """
    if not host.is_contiguous():
        raise ValueError("mapped_device_view needs a contiguous host tensor")
    if device.type == "cpu":  # used by the tests to check the DLPack plumbing without a GPU
        return _alias(host.data_ptr(), tuple(host.shape), host.dtype, _DL_CPU, 0)
    if not host.is_pinned():
        raise RuntimeError("mapped_device_view needs pinned host memory")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _alias(host.data_ptr(), tuple(host.shape), host.dtype, _DL_CUDA, index)


# ------------------------------------------------------------------ the tracker
class _HostSlot:
    """One pinned host buffer of the ring: (rows,) ids, (1,) count, (rows, max_dim) values, the
    event recorded after the copy into it and, for MAPPED, device views of the three.
    ``free`` is set while the copy thread is not reading it."""

    def __init__(self, rows: int, max_dim: int, dtype: torch.dtype, device: torch.device, transport: str) -> None:
        on_gpu = device.type == "cuda"
        self.ids = torch.empty(rows, dtype=torch.int64, pin_memory=on_gpu)
        self.count = torch.zeros(1, dtype=torch.int64, pin_memory=on_gpu)
        self.vals = torch.empty(rows, max_dim, dtype=dtype, pin_memory=on_gpu)
        self.copied = torch.cuda.Event() if on_gpu else None
        self.free = threading.Event()
        self.free.set()
        if on_gpu and transport == Transport.MAPPED.value:
            self.m_ids = mapped_device_view(self.ids, device)
            self.m_count = mapped_device_view(self.count, device)
            self.m_vals = mapped_device_view(self.vals, device)


class _Buffers:
    """The device staging buffer (filled on the main stream) and the ring of host slots."""

    def __init__(
        self, rows: int, max_dim: int, dtype: torch.dtype, device: torch.device, transport: str, slots: int
    ) -> None:
        self.rows = rows
        # staging on the tracker's device (on a CPU: a CPU buffer, same logic)
        self.s_ids = torch.empty(rows, dtype=torch.int64, device=device)  # (rows,)
        self.s_count = torch.zeros(1, dtype=torch.int64, device=device)  # (1,)
        self.s_vals = torch.empty(rows, max_dim, dtype=dtype, device=device)  # (rows, max_dim)
        if device.type == "cuda":
            self.arange = torch.arange(rows, device=device)  # (rows,) row numbers for the copy kernels
        self.slots = [_HostSlot(rows, max_dim, dtype, device, transport) for _ in range(slots)]


def _pieces(n: int, rows_per_piece: int) -> list[tuple[int, int]]:
    """[start, end) row ranges covering 0..n, each at most ``rows_per_piece`` long."""
    return [(a, min(n, a + rows_per_piece)) for a in range(0, n, rows_per_piece)]


def _verify_mapped(device: torch.device) -> str | None:
    """Write through a mapped view with a kernel and read it on the host: None if it works,
    else why not. One synchronize, once per tracker."""
    try:
        host = torch.zeros(256, dtype=torch.int64, pin_memory=True)
        view = mapped_device_view(host, device)
        src = torch.arange(7, 7 + 256, device=device)
        torch.index_select(src, 0, torch.arange(256, device=device), out=view)
        torch.cuda.synchronize(device)
        if not torch.equal(host, torch.arange(7, 7 + 256)):
            return "a kernel's writes through the mapped view did not reach the host buffer"
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means: use memcpy
        return f"{type(exc).__name__}: {exc}"


class DeltaTracker:
    """Receives each step's :class:`RowUpdate` (call :meth:`on_update` right after the fused
    update, on the stream that ran it) and streams the delta to ``consumer``."""

    def __init__(
        self,
        layout: TBELayout,
        *,
        config: DeltaConfig,
        consumer: Consumer,
        device: torch.device | str,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not isinstance(config, DeltaConfig):
            raise ValueError(f"config must be a DeltaConfig, got {config!r}")
        if not (callable(consumer) or isinstance(consumer, queue.Queue)):
            raise ValueError("consumer must be a callable or a queue.Queue")
        self.layout = layout
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        self.stats = DeltaStats()
        self._queue_consumer = consumer if isinstance(consumer, queue.Queue) else None
        self._callback = None if self._queue_consumer is not None else consumer
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._closed = False
        self._hook_handles: list[Any] = []
        # per-table host data to split a row list into tables
        self._row_offsets = torch.tensor(layout.row_offsets_list, dtype=torch.int64)
        # device-side index math for the gather, made once (no per-step host->device copies)
        self._d_row_offsets = self._row_offsets.to(self.device)
        self._d_w_offsets = layout.table_weights_offsets.to(self.device)
        self._d_dims = layout.table_dims_t.to(self.device)
        self._d_cols = torch.arange(layout.max_dim, device=self.device)
        # every table has the same dim and they lie back to back in the flat weights: a delta
        # row is a row of a (total_rows, dim) view, gathered without an (n, dim) index
        dim0 = layout.table_dims[0]
        self._row_view_dim = dim0 if all(
            d == dim0 and w == r * dim0
            for d, w, r in zip(layout.table_dims, layout.weights_offsets_list, layout.row_offsets_list)
        ) else None
        # async state
        self._buffers: _Buffers | None = None
        self._copy_stream = None
        self._staged = None
        self._forward_done = None  # recorded by on_forward behind the next forward's kernels
        self._last_copied = None  # the copied event of the latest step's copy (CUDA)
        self._pending: tuple[int, int] | None = None  # (step, n) staged, copy not queued yet
        self._transport = ""
        self._jobs: queue.Queue | None = None  # (step, slot, event) for the copy thread; None stops it
        self._copier: threading.Thread | None = None
        if config.mode is DeltaMode.ASYNC:
            self._transport = self._pick_transport()
            self.stats.transport = self._transport
            if self.device.type == "cuda":
                self._copy_stream = torch.cuda.Stream(device=self.device)
                self._staged = torch.cuda.Event()
                self._forward_done = torch.cuda.Event()
            if config.initial_rows > 0:
                self._allocate(config.initial_rows)
            self._jobs = queue.Queue()
            self._copier = threading.Thread(target=self._copy_loop, name="delta-copy", daemon=True)
            self._copier.start()
        # dispatcher thread for a callable consumer
        self._dispatch_q: queue.Queue | None = None
        self._dispatcher: threading.Thread | None = None
        if self._callback is not None:
            self._dispatch_q = queue.Queue()
            self._dispatcher = threading.Thread(target=self._dispatch_loop, name="delta-consumer", daemon=True)
            self._dispatcher.start()

    # ------------------------------------------------------------ public
    def on_update(self, weights: Tensor, update: RowUpdate) -> None:
        """Stream the rows ``update`` names, read from the flat ``weights`` (after the update)."""
        if self._closed:
            raise RuntimeError("DeltaTracker is closed")
        self._raise_consumer_error()
        step = self.stats.steps
        self.stats.steps += 1
        with record_function("## delta_tracking ##"):
            if self.config.mode is DeltaMode.BLOCKING:
                self._blocking(step, weights, update)
            else:
                self._async(step, weights, update)

    def on_forward(self) -> None:
        """Called after each forward of the module has been launched (on its stream): queues
        the previous step's copy behind that forward's kernels when ``copy_after`` is
        "next_forward" (see :class:`DeltaConfig`); does nothing otherwise."""
        if self._closed or self._pending is None:
            return
        after = None
        if self.device.type == "cuda":
            self._forward_done.record(torch.cuda.current_stream(self.device))
            after = self._forward_done
        with record_function("## delta_tracking_copy ##"):
            self._issue_copy(after)

    def flush(self) -> None:
        """Wait until every delta produced so far has reached the consumer."""
        if self._pending is not None:
            self._issue_copy(None)
        if self._buffers is not None:
            self._wait_for(self._buffers.slots)
        if self._dispatch_q is not None:
            self._dispatch_q.join()
        self._raise_consumer_error()

    def close(self) -> None:
        """Flush, detach from the module (if attached) and stop the tracker's threads."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            for handle in self._hook_handles:
                handle.remove()
            self._hook_handles = []
            if self._jobs is not None:
                self._jobs.put(None)
                self._copier.join()
            if self._dispatch_q is not None:
                self._dispatch_q.put(None)
                self._dispatcher.join()

    def __enter__(self) -> "DeltaTracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ blocking mode
    def _blocking(self, step: int, weights: Tensor, update: RowUpdate) -> None:
        count = int(update.count.item())  # host sync: the GPU must have finished the update
        ids = update.linear_ids[:count]  # (U,) device
        values = self._gather(weights, ids)  # (U, max_dim) device
        # device -> pageable host copies: each blocks the host until done
        delta = self._split(step, ids.cpu(), values.cpu())
        self._emit(delta)

    # ------------------------------------------------------------ async mode
    def _pick_transport(self) -> str:
        if self.device.type != "cuda":
            return "cpu"
        if self.config.transport != "mapped":  # "auto" and "memcpy": the copy engine
            return Transport.MEMCPY.value
        problem = _verify_mapped(self.device)
        if problem is not None:
            raise RuntimeError(f"transport 'mapped' is not available here: {problem}")
        return Transport.MAPPED.value

    def _allocate(self, rows: int) -> None:
        self._buffers = _Buffers(rows, self.layout.max_dim, self.dtype, self.device, self._transport, self.config.slots)
        self.stats.capacity = rows
        self.stats.reallocations += 1

    def _async(self, step: int, weights: Tensor, update: RowUpdate) -> None:
        n = int(update.linear_ids.numel())  # host-known (padded length): no sync
        on_gpu = self.device.type == "cuda"
        main = torch.cuda.current_stream(self.device) if on_gpu else None
        if self._pending is not None:  # no forward since the last update: queue its copy now
            self._issue_copy(None)
        if self._buffers is None or n > self._buffers.rows:
            old = self._buffers.rows if self._buffers is not None else 0
            if old:
                self._wait_for(self._buffers.slots)  # the copy thread is done with every host slot
            if self._last_copied is not None:  # the copy stream may still read the old staging buffer
                main.wait_event(self._last_copied)
            self._allocate(max(n, 2 * old, 1))
        buf = self._buffers
        if self._last_copied is not None:
            main.wait_event(self._last_copied)  # GPU-side: the previous copy has finished reading staging
        # 1. main stream: gather into staging (device -> device; on a CPU, a CPU copy)
        buf.s_count.copy_(update.count.view(1))
        buf.s_ids[:n].copy_(update.linear_ids)
        if n > 0:
            self._gather(weights, update.linear_ids, out=buf.s_vals[:n])
        if on_gpu:
            self._staged.record(main)
        self._pending = (step, n)
        # 2. the copy: now, or behind the next forward
        if self.config.copy_after == "update":
            self._issue_copy(None)

    def _issue_copy(self, after: Any) -> None:
        """Queue the staged step's copy into its host slot (on the copy stream, behind
        ``staged`` and, if given, the event ``after``) and hand it to the copy thread."""
        step, n = self._pending
        self._pending = None
        buf = self._buffers
        slot = buf.slots[step % len(buf.slots)]
        # host slot step % slots: the copy thread must be done with step - slots (join only if not)
        self._wait_for([slot])
        slot.free.clear()
        if self.device.type != "cuda":
            # CPU: staging -> host slot right here
            slot.count.copy_(buf.s_count)
            slot.ids[:n].copy_(buf.s_ids[:n])
            slot.vals[:n].copy_(buf.s_vals[:n])
            self._jobs.put((step, slot, None))
            return
        # copy stream: staging -> host slot, in pieces of at most chunk_bytes
        row_bytes = max(1, self.layout.max_dim * buf.s_vals.element_size())
        val_rows = max(1, self.config.chunk_bytes // row_bytes)
        id_rows = max(1, self.config.chunk_bytes // 8)
        side = self._copy_stream
        with torch.cuda.stream(side):
            side.wait_event(self._staged)
            if after is not None:
                side.wait_event(after)
            if self._transport == Transport.MAPPED.value:
                # copy kernels writing through the device-mapped views of the pinned slot
                torch.index_select(buf.s_count, 0, buf.arange[:1], out=slot.m_count)
                for a, b in _pieces(n, id_rows):
                    torch.index_select(buf.s_ids, 0, buf.arange[a:b], out=slot.m_ids[a:b])
                for a, b in _pieces(n, val_rows):
                    torch.index_select(buf.s_vals, 0, buf.arange[a:b], out=slot.m_vals[a:b])
            else:
                # copy-engine device -> pinned host copies
                slot.count.copy_(buf.s_count, non_blocking=True)
                for a, b in _pieces(n, id_rows):
                    slot.ids[a:b].copy_(buf.s_ids[a:b], non_blocking=True)
                for a, b in _pieces(n, val_rows):
                    slot.vals[a:b].copy_(buf.s_vals[a:b], non_blocking=True)
            slot.copied.record(side)
        self._last_copied = slot.copied
        # the copy thread waits for the copy and hands the delta on
        self._jobs.put((step, slot, slot.copied))

    def _copy_loop(self) -> None:
        """The copy thread: one job per step, in step order."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            step, slot, event = job
            try:
                self._deliver(step, slot, event)
            except BaseException as exc:  # noqa: BLE001 - re-raised on the training thread
                with self._lock:
                    self._errors.append(exc)
            finally:
                slot.free.set()

    def _deliver(self, step: int, slot: _HostSlot, event: Any) -> None:
        if event is not None:
            delay = self.config.poll_interval_s
            while not event.query():  # cudaEventQuery: never blocks the host
                time.sleep(delay)
        count = int(slot.count[0])
        ids = slot.ids[:count].clone()
        values = slot.vals[:count].clone()
        self._emit(self._split(step, ids, values))

    def _wait_for(self, slots: list[_HostSlot]) -> None:
        """Wait until the copy thread is done with ``slots`` (the "join"), only if it is not."""
        busy = [s for s in slots if not s.free.is_set()]
        if not busy:
            return
        t0 = time.perf_counter()
        with record_function("## delta_tracking_join ##"):
            for s in busy:
                s.free.wait()
        self.stats.joins_waited += 1
        self.stats.join_wait_s += time.perf_counter() - t0

    # ------------------------------------------------------------ shared
    def _gather(self, weights: Tensor, ids: Tensor, out: Tensor | None = None) -> Tensor:
        """(n, max_dim) values of the rows with linear ids ``ids`` (columns >= a table's dim are
        unspecified; the sentinel id total_rows reads an arbitrary valid element). No sync.
        ``out``: a contiguous (n, max_dim) tensor to write into."""
        lay = self.layout
        if self._row_view_dim is not None:  # whole rows of a (total_rows, dim) view
            rows = weights[: lay.total_rows * self._row_view_dim].view(lay.total_rows, self._row_view_dim)
            safe = ids.clamp(max=lay.total_rows - 1)  # (n,) the padding id total_rows reads the last row
            if out is None:
                return rows.index_select(0, safe)
            torch.index_select(rows, 0, safe, out=out)
            return out
        row_offsets, w_offsets, dims, cols = self._d_row_offsets, self._d_w_offsets, self._d_dims, self._d_cols
        table = torch.searchsorted(row_offsets[1:], ids, right=True).clamp_(max=lay.num_tables - 1)  # (n,)
        base = w_offsets[table] + (ids - row_offsets[table]) * dims[table]  # (n,)
        flat = (base[:, None] + cols[None, :]).clamp_(0, lay.total_weights - 1)  # (n, max_dim)
        if out is None:
            return weights[flat]
        torch.index_select(weights, 0, flat.view(-1), out=out.view(-1))
        return out

    def _split(self, step: int, ids: Tensor, values: Tensor) -> Delta:
        """CPU ids (U,) increasing + values (U, max_dim) -> a Delta with one entry per table."""
        cuts = torch.searchsorted(ids, self._row_offsets).tolist()
        tables = []
        for k in range(self.layout.num_tables):
            s, e = cuts[k], cuts[k + 1]
            dim = self.layout.table_dims[k]
            tables.append(
                TableDelta(k, ids[s:e] - self.layout.row_offsets_list[k], values[s:e, :dim].contiguous())
            )
        return Delta(step, tuple(tables))

    def _emit(self, delta: Delta) -> None:
        self.stats.rows += delta.num_rows
        if self._queue_consumer is not None:
            self._queue_consumer.put(delta)
        else:
            self._dispatch_q.put(delta)

    def _dispatch_loop(self) -> None:
        q = self._dispatch_q
        while True:
            delta = q.get()
            try:
                if delta is None:
                    return
                self._callback(delta)
            except BaseException as exc:  # noqa: BLE001 - re-raised on the training thread
                with self._lock:
                    self._errors.append(exc)
            finally:
                q.task_done()

    def _raise_consumer_error(self) -> None:
        with self._lock:
            if self._errors:
                exc = self._errors.pop(0)
                raise RuntimeError(f"delta tracking failed: {type(exc).__name__}: {exc}") from exc


def track_deltas(
    module: Any,
    *,
    mode: DeltaMode | str,
    consumer: Consumer,
    transport: str = "auto",
    initial_rows: int = 0,
    slots: int = 2,
    chunk_bytes: int = 4 << 20,
    copy_after: str = "update",
) -> DeltaTracker:
    """Attach a :class:`DeltaTracker` to a ``TableBatchedEmbedding`` through its update hook.

    Every later backward of ``module`` streams its updated rows to ``consumer``. Call
    ``tracker.flush()`` to wait for delivery and ``tracker.close()`` to detach. The keyword
    options are :class:`DeltaConfig`'s.
    """
    mode = DeltaMode(mode) if isinstance(mode, str) else mode
    config = DeltaConfig(
        mode=mode, transport=transport, initial_rows=initial_rows, slots=slots, chunk_bytes=chunk_bytes,
        copy_after=copy_after,
    )
    weights = module.weights
    tracker = DeltaTracker(
        module.layout, config=config, consumer=consumer, device=weights.device, dtype=weights.dtype
    )

    def hook(mod: Any, update: RowUpdate) -> None:
        tracker.on_update(mod.weights.detach(), update)

    tracker._hook_handles.append(module.register_update_hook(hook))
    if config.mode is DeltaMode.ASYNC and config.copy_after == "next_forward":
        tracker._hook_handles.append(module.register_forward_hook(lambda mod, args, out: tracker.on_forward()))
    return tracker
