"""The dependency graph of one rank's trace: what it holds and what each part means.

A *node* is a span of time on one *lane*: a GPU activity (kernel, memcpy, memset) on its
(device, stream), a CUDA/HIP runtime or driver call on its CPU (pid, tid), a zero-length *step
marker* (the start and end of a ``ProfilerStep``) on the thread that holds the steps, or a
zero-length *thread point* where a CPU thread stopped (blocked, slept: it recorded nothing for
``GraphConfig.idle_ns``) or resumed. Nodes are numbered in a topological order (by their start
on the graph, see below), so every edge goes from a lower to a higher node id.

An *edge* ``u -> v`` with lag ``l`` says: ``v`` cannot start before ``end(u) + l``. The lags are
the model's delays, not copies of the trace's gaps:

========= ============================================================ ======================
kind      from the trace                                               lag (modelled)
========= ============================================================ ======================
program   consecutive nodes of one CPU thread                          the host time between
                                                                       them (host ops keep
                                                                       their durations); 0
                                                                       across a stretch the
                                                                       thread sat blocked
launch    the runtime call -> the GPU activity it launched (correlation the trace's launch
          id)                                                          latency
stream    consecutive activities of one GPU stream                     a stream's gap
wait      a stream waiting on another stream's work                    a stream's gap
          (``cudaStreamWaitEvent``): recorded from the trace's
          ``cuda_sync`` events, else inferred (a stream that sat idle
          with its work launched and started within a few us of
          another stream's activity ending, or of the GPU letting it
          in). Where the events name the waiting activity but not
          what it waited on (torch 2.11 with CUDA 13 writes
          ``wait_on_stream`` -1), that activity's producer is inferred
host_wait the GPU work a blocking call waits for (stream/device/event 0: the call goes on
          synchronize, a blocking copy, the copy a synchronous or      when that work ends
          pageable copy launched itself) -> the call
queue     a launch that blocked on its stream's full launch queue      0
          (Kineto's ``Command Buffer Full``): the activity of that
          stream whose end freed the slot -> the launch
handoff   a thread that stopped -> a thread that resumed right after   the trace's wake-up
          it (autograd's engine thread and the main thread waiting in  (median over its
          ``backward()``, and back)                                    handoffs)
engine    a copy held by a copy of the same direction on another       a stream's gap
          stream of its device (one copy engine runs them one at a
          time): inferred, as cross-stream waits are
fix       added by a what-if (``tracekit.graph.whatif``)               as the fix says
========= ============================================================ ======================

The launch latency is the median, over activities launched onto an idle stream, of activity
start - launch call end; a stream's gap the median gap between queued activities
(``tracekit.graph.build``: each has a default where the trace shows none). A thread that resumes
with nothing in the trace that woke it (a timer, a sleep, another process or rank) has no
handoff: the model lets it go on at once. Polling threads (mostly ``cudaEventQuery`` calls)
neither wake nor are woken by others.

Times on the graph: a node's ``start`` is when it could begin its own work. For a blocking call
that waited, that is the end of the GPU work it waited for (the time before is the wait, which
the critical path sees on the GPU); its ``dur`` is what is left of the call after it. For every
other node, ``start``/``dur`` are the event's own ts/dur.

A node's *binding* edge is the one whose source's observed end + lag is latest (the dependency
that decided when it started); its *unexplained* time is its observed start minus that: what
the model does not explain, named ``unexplained`` on the critical path and reported per step.
The model's replay (``tracekit.graph.replay``) leaves the unexplained time out: replaying the
unchanged graph gives the model's schedule, which ``tracekit.analyses.explain`` measures against
the trace (its error per step); ``tracekit.graph.build.observed_lags`` adds it back (the replay
is then the trace).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit.frames import column

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.graph.blocks import KernelShape


class NodeKind(IntEnum):
    GPU = 0
    """A GPU activity."""
    CALL = 1
    """A runtime/driver call on a CPU thread."""
    MARK = 2
    """The start or end of a step (zero length), on the thread holding the steps."""
    POINT = 3
    """Where a CPU thread stopped (blocked, slept) or resumed work (zero length)."""


class EdgeKind(IntEnum):
    PROGRAM = 0
    LAUNCH = 1
    STREAM = 2
    WAIT_RECORDED = 3
    WAIT_INFERRED = 4
    HOST_WAIT = 5
    HANDOFF = 6
    FIX = 7
    QUEUE = 8
    ENGINE = 9


EDGE_NAMES = {k: k.name.lower() for k in EdgeKind}

# ---- categories of time on the critical path --------------------------------------------------

HOST = "host"
COMMUNICATION = "communication"
MEMCPY = "memcpy"
SYNC = "sync"
IDLE = "idle"
UNEXPLAINED = "unexplained"
"""Time the model does not explain: a node that started later than its dependencies and their
modelled lags say (``Graph.unexplained``), or a node nothing precedes."""
COMPUTE = "compute:"
"""Prefix: GPU compute is ``compute:<phase>``."""

BOUNDS = ("host", "gpu", "communication", "sync")
"""What a step can be bound by."""


def bound_class(category: str) -> str | None:
    """The bound a critical-path category counts toward (None for idle)."""
    if category.startswith(COMPUTE) or category == MEMCPY:
        return "gpu"
    if category in (HOST, COMMUNICATION, SYNC):
        return category
    return None


EDGE_CATEGORY = {
    EdgeKind.PROGRAM: HOST,
    EdgeKind.HANDOFF: HOST,
    EdgeKind.LAUNCH: HOST,
    EdgeKind.STREAM: IDLE,
    EdgeKind.WAIT_RECORDED: SYNC,
    EdgeKind.WAIT_INFERRED: SYNC,
    EdgeKind.HOST_WAIT: SYNC,
    EdgeKind.QUEUE: SYNC,
    EdgeKind.FIX: IDLE,
    EdgeKind.ENGINE: IDLE,
}
"""The category of the time an edge's lag puts on the critical path: host time between calls
and launch latency are host; a stream that sat idle with nothing recorded to wait for is idle;
waits are sync."""


def lane_order(lane: np.ndarray) -> np.ndarray:
    """Node ids ordered by lane, in id order within a lane (``np.lexsort((ids, lane))``): one
    stable sort, a radix sort where the lanes fit in 16 bits (every trace's do)."""
    key = np.asarray(lane)
    if key.size and 0 <= int(key.min()) and int(key.max()) < (1 << 15):
        key = key.astype(np.int16)
    return np.argsort(key, kind="stable")


@dataclass(frozen=True)
class Graph:
    """Nodes (arrays indexed by node id, topological order) and edges (sorted by ``dst``)."""

    kind: np.ndarray
    """int8 ``NodeKind``."""
    lane: np.ndarray
    """int32 row of ``lanes``."""
    start: np.ndarray
    """int64 ns, start on the graph (see the module docstring)."""
    dur: np.ndarray
    """int64 ns."""
    row: np.ndarray
    """int64 row of ``Trace.events`` (-1 for markers)."""
    step: np.ndarray
    """int64 step the node belongs to (CPU: the step holding its start; GPU: the step holding
    its launch, else its start), -1 for none."""
    category: np.ndarray
    """object: the node's category on the critical path (``host``, ``sync`` for a blocking
    call, ``compute:<phase>``, ``communication``, ``memcpy``)."""
    name: np.ndarray
    """object: the event name (``ProfilerStep#N start/end`` for markers)."""
    phase: np.ndarray
    """object: a GPU activity's phase (``tracekit.phases``), else the CPU call's enclosing phase
    annotation's phase, else ``other``."""
    batch: np.ndarray
    """int64 batch index of the phase (-1 none)."""
    lanes: pd.DataFrame
    """``lane, type ("gpu"/"cpu"), device, stream, pid, tid`` (-1 where not applicable)."""
    src: np.ndarray
    """int64 edge sources."""
    dst: np.ndarray
    """int64 edge destinations (sorted)."""
    edge_kind: np.ndarray
    """int8 ``EdgeKind``."""
    lag: np.ndarray
    """int64 ns."""
    binding: np.ndarray
    """int64 per node: the edge that decided its start, -1 for a node nothing precedes."""
    steps: pd.DataFrame
    """``step, cpu_start, cpu_end, start_node, end_node`` (marker ids, -1 without markers)."""
    wait_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 per node: how long a blocking call waited before ``start`` (0 for others)."""
    launched: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 per node: for a call, a GPU activity it launched (-1 for none and other nodes)."""
    launcher: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 per node: for a GPU activity, the call that launched it (its correlation id; -1
    for none and other nodes). A blocking call's launch edge may come from the call before it
    (it launched its work when it began): this says which call launched it."""
    wait_consumers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 node ids: the GPU activities the trace's ``cuda_sync`` events say a cross-stream
    wait preceded (whether or not they also say on what), sorted."""
    launch_latency_ns: int = 0
    """The nominal launch latency used (launch call end -> activity start)."""
    queue_depth: int = 0
    """A stream's launch queue depth the what-ifs keep (``GraphConfig.launch_queue_depth``; 0:
    no limit)."""
    unexplained: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 per node: its observed start minus the start the model gives it from its
    predecessors' observed ends (the binding edge's source end + lag): time the model does not
    explain (negative: the node started earlier than the model says; 0 for a node nothing
    precedes)."""
    gap_ns: int = 0
    """The modelled gap between consecutive activities of a stream (and from a cross-stream
    wait's producer to its consumer)."""
    handoff_ns: int = 0
    """The modelled wake-up of a thread after the thread that woke it stopped."""
    polling_lanes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """CPU lanes of threads that poll (mostly ``cudaEventQuery``/``cudaStreamQuery`` calls)."""
    main_lane: int = -1
    """The lane of the thread holding the steps (-1: none)."""
    poll_loops: int = 0
    """Wait loops of polls on threads that are not polling threads (``GraphConfig.
    poll_loop_ns``), each modelled as a wait for the GPU work its last poll saw end."""
    warnings: tuple[str, ...] = ()
    """What the graph could not see (no correlation ids, edges dropped...)."""
    shape: "KernelShape | None" = None
    """Each kernel's grid and the blocks its device holds at once (``tracekit.graph.blocks``,
    from the trace's launch configurations and ``deviceProperties``): the block-level contention
    model's input (None: not read; unknown entries 0)."""
    limits: tuple[str, ...] = ()
    """Those of ``warnings`` that say a limit of tracekit's own was hit (``build.
    MAX_WAIT_LANES``): figures left out for the cost's sake, which the rank's warnings repeat
    (a ``tracekit: warning:`` line, as the overlap's stream limit)."""

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    @cached_property
    def completing(self) -> np.ndarray:
        """``completes`` (bool per node), computed once: every replay's step windows ask for
        it."""
        return completes(self)

    @cached_property
    def kernels(self) -> np.ndarray:
        """bool per node: a GPU kernel (compute or communication; not a copy), computed once:
        every contention-aware replay asks for it."""
        inv, uniq = fnp.factorize(self.category)  # per distinct category (a few), not per node
        is_kernel = np.array([str(c) == COMMUNICATION or str(c).startswith(COMPUTE) for c in uniq],
                             bool)
        return (self.kind == NodeKind.GPU) & is_kernel[inv]

    @property
    def n(self) -> int:
        return int(self.kind.size)

    def with_host_cost(self, cost: "HostCost") -> "Graph":
        """This graph with ``cost`` taken out of its host work (``HostCost``): CPU calls'
        durations and program edges' lags reduced, each clipped at 0. Observed times
        (``start``) stay the trace's; a replay of the result is the schedule without that cost.
        Build changes (``tracekit.graph.whatif``) on the graph this returns."""
        if cost.own_ns.size != self.n:
            raise ValueError(f"HostCost has {cost.own_ns.size} nodes, the graph {self.n}")
        cpu = self.kind != NodeKind.GPU
        dur = self.dur.copy()
        dur[cpu] = np.maximum(dur[cpu] - np.asarray(cost.own_ns, np.int64)[cpu], 0)
        lag = self.lag.copy()
        prog = self.edge_kind == int(EdgeKind.PROGRAM)
        lag[prog] = np.maximum(lag[prog] - np.asarray(cost.before_ns, np.int64)[self.dst[prog]], 0)
        return replace(self, dur=dur, lag=lag)

    def edge_counts(self) -> dict[str, int]:
        """Edges by kind (``EDGE_NAMES``)."""
        c = np.bincount(self.edge_kind.astype(np.int64), minlength=len(EdgeKind))
        return {EDGE_NAMES[k]: int(c[int(k)]) for k in EdgeKind}

    def lane_label(self, lane: int) -> str:
        # the lane's columns read as arrays: a row of the table (``iloc``) is a Series of
        # objects built for four values (~60 us; explain labels a few lanes a trace)
        lanes, i = self.lanes, int(lane)
        if column(lanes, "type", object)[i] == "gpu":
            return f"GPU {int(column(lanes, 'device')[i])} stream {int(column(lanes, 'stream')[i])}"
        return f"CPU {int(column(lanes, 'pid')[i])}/{int(column(lanes, 'tid')[i])}"


@dataclass(frozen=True)
class HostCost:
    """Host time to take out of a replay, per node: what the profiler cost the host (estimated
    by an overhead model from what the trace records), or any other correction of host work.

    The replay (``tracekit.graph.replay.Plan.of``, ``tracekit.graph.whatif.predict``,
    ``tracekit.analyses.explain.compute``) subtracts ``own_ns`` from a CPU node's duration and
    ``before_ns`` from the host time before it on its thread (the lag of its program edge),
    each clipped at 0. Which host time a node stands for: ``tracekit.graph.build.host_spans``
    (the call's own span, and the gap since the previous node of its thread).
    """

    own_ns: np.ndarray
    """int64 per node: taken off a CPU call's duration (0 for GPU activities and markers)."""
    before_ns: np.ndarray
    """int64 per node: taken off the host time between the previous node of its thread and it
    (0 for GPU activities)."""

    def __post_init__(self) -> None:
        for f in ("own_ns", "before_ns"):
            a = np.asarray(getattr(self, f))
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"HostCost.{f} must be a 1-d integer array (ns per node)")
        if self.own_ns.shape != self.before_ns.shape:
            raise ValueError("HostCost.own_ns and before_ns must have one value per node")

    @classmethod
    def zero(cls, n: int) -> "HostCost":
        """No correction, for a graph of ``n`` nodes."""
        return cls(np.zeros(n, np.int64), np.zeros(n, np.int64))


def main_lanes(g: Graph) -> np.ndarray:
    """bool per lane: the GPU lane with the most activity time on its device (the stream a
    training loop's step-time events are recorded on)."""
    out = np.zeros(len(g.lanes), bool)
    gpu = g.kind == NodeKind.GPU
    if gpu.any():
        # busy time per lane (lanes ascending), then per device the lane that ends its run
        # sorted by busy time (a stable sort: of lanes tied on it, the highest); numpy, as a
        # pandas group-by costs ~1 ms a call on a graph of any size
        lane = g.lane[gpu].astype(np.int64)
        order = np.argsort(lane, kind="stable")
        by_lane = lane[order]
        first = np.flatnonzero(fnp.r_(True, by_lane[1:] != by_lane[:-1]))
        lanes = by_lane[first]
        busy = np.add.reduceat(g.dur[gpu].astype(np.int64)[order], first)
        dev = column(g.lanes, "device", np.int64)[lanes]
        by = np.lexsort((busy, dev))
        out[lanes[by[fnp.r_(dev[by][1:] != dev[by][:-1], True)]]] = True
    return out


def completes(g: Graph) -> np.ndarray:
    """bool per node: whether it can complete its step: the calls and markers of the thread
    holding the steps (another thread's work holds a step open only where the main thread
    waits for it), and activities on a device's main GPU lane (a copy prefetched on a side
    stream for a later batch does not hold its step open)."""
    cpu = (g.kind == NodeKind.CALL) | (g.kind == NodeKind.MARK)
    if g.main_lane >= 0:
        cpu &= g.lane == g.main_lane
    return cpu | ((g.kind == NodeKind.GPU) & main_lanes(g)[g.lane])
