"""The benchmark process's host: kept steady, and measured around every run.

On the multitask presets the step is bound by the host (the per-parameter Adam is ~1900 launches
per step, ~20 us of Python and dispatch each), so a pipeline's step time there is the host's
speed at that moment. The GPU run of 2026-11-23 showed that speed moving by 1.3-1.6x within
seconds (d124cf4:bench/NOTES-pipelines.md, "Issue 13", in git history). This module holds what the benchmark does
about it, and what it records so that a run shows whether the host moved:

* :class:`HostPin`: the main thread alone on one CPU (the one with the fewest interrupts, not CPU
  0, its SMT siblings left empty), the autograd engine's threads with it (they run only while
  the main thread waits for them), every other thread of the process and the children named
  elsewhere. Re-applied before every run, since CUDA, NCCL and autograd start threads lazily
  (they inherit the main thread's CPU). Off where the process may use fewer than ``min_cpus``.
* :func:`quiet_gc`: a collection before a run (what survives is frozen: the next one walks only
  what is new, a few ms instead of ~130 ms over torch's whole heap), the collector off during it.
* :func:`host_probe`: microseconds per tiny CPU tensor op (Python + dispatcher, no GPU), timed
  right before each run: the host's speed at that moment, comparable across runs and calls.
* :class:`ThreadCounters`: the main thread's involuntary context switches and CPU time, and the
  steal / interrupt time of its CPU (``/proc/stat``, 10 ms ticks), over a run.

Linux only where it reads ``/proc`` and ``/sys``; elsewhere each piece says it is off.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

COMPANIONS = ("pt_autograd",)
"""Thread-name prefixes that stay on the main thread's CPU: torch's autograd device threads, which
run the backward while the main thread blocks on it (same CPU: no cross-CPU wake-up per call)."""


def parse_cpu_list(text: str) -> set[int]:
    """``"0-3,8,10-11"`` (the kernel's CPU list format) -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def parse_interrupts(text: str) -> dict[int, int]:
    """``/proc/interrupts`` -> interrupts served per CPU since boot (every line summed)."""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    totals = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        fields = line.split()[1 : 1 + len(cpus)]
        for cpu, f in zip(cpus, fields):
            if f.isdigit():
                totals[cpu] += int(f)
    return totals


def choose_cpus(
    allowed: set[int], interrupts: dict[int, int], siblings: dict[int, set[int]], *, rank: int = 0, ranks: int = 1,
    shift: int = 0,
) -> tuple[int, set[int]]:
    """(this rank's main-thread CPU, the CPUs for everything else), for ``ranks`` processes on one
    host (each calls this with its local rank and gets its own CPU). Main CPUs: not CPU 0 (where
    interrupts and housekeeping land first) unless nothing else is left, the fewest interrupts
    served first, then the highest number, never two on one core (SMT siblings); ``shift`` > 0
    starts ``shift * ranks`` candidates further down that order (wrapping). Every main CPU
    and its siblings are left out of the others' set (a busy sibling takes a share of the
    core), unless that would leave the others no CPU."""
    pool = sorted(allowed - {0}, key=lambda c: (interrupts.get(c, 0), -c))
    if pool and shift:  # the next candidates: each pass of the benchmark on other CPUs
        k = (shift * ranks) % len(pool)
        pool = pool[k:] + pool[:k]
    pool += [0] if 0 in allowed else []
    mains: list[int] = []
    for c in pool:
        if len(mains) == ranks:
            break
        if not any(c in siblings.get(m, set()) for m in mains):
            mains.append(c)
    mains += [c for c in pool if c not in mains][: ranks - len(mains)]  # more ranks than cores
    main = mains[rank % len(mains)]
    taken = set(mains).union(*(siblings.get(m, set()) for m in mains))
    return main, (allowed - taken) or (allowed - set(mains)) or (allowed - {main}) or {main}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


@dataclass
class HostPin:
    """Where the process's threads may run (see the module docstring)."""

    enabled: bool = True
    """Pin at all."""
    why_not: str = "disabled"
    """The status's reason when not ``enabled``."""
    min_cpus: int = 4
    """Pin only when the process may use at least this many CPUs (per rank)."""
    rank: int = 0
    """This process's rank among the ``ranks`` benchmark processes on this host (LOCAL_RANK)."""
    ranks: int = 1
    """Benchmark processes on this host (LOCAL_WORLD_SIZE): each gets its own main CPU."""
    main_cpu: int | None = field(default=None, init=False)
    """The main thread's CPU (None: not pinned)."""
    others: tuple[int, ...] = field(default=(), init=False)
    """The CPUs of every other thread."""
    status: str = field(default="off", init=False)
    """``on: ...`` or ``off: <why>``."""

    def __post_init__(self) -> None:
        if self.min_cpus < 2:
            raise ValueError(f"min_cpus must be >= 2, got {self.min_cpus}")
        if not 0 <= self.rank < self.ranks:
            raise ValueError(f"need 0 <= rank < ranks, got rank {self.rank} of {self.ranks}")
        if not self.enabled:
            self.status = f"off: {self.why_not}"
            return
        if not hasattr(os, "sched_setaffinity"):
            self.status = "off: no sched_setaffinity on this platform"
            return
        allowed = os.sched_getaffinity(0)
        if len(allowed) < self.min_cpus * self.ranks:
            self.status = f"off: {len(allowed)} CPU(s) allowed for {self.ranks} process(es) (< {self.min_cpus} each)"
            return
        irq = parse_interrupts(_read("/proc/interrupts") or "")
        sib = {c: parse_cpu_list(t) - {c} for c in allowed
               if (t := _read(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")) is not None}
        self._inputs = (allowed, irq, sib)
        self._main_tid = threading.get_native_id()
        self.select(0)

    def select(self, shift: int) -> None:
        """Chooses the main CPU again, ``shift`` candidates further down the order
        (:func:`choose_cpus`); the next :meth:`apply` moves the threads. No-op when off."""
        if not hasattr(self, "_inputs"):
            return
        allowed, irq, sib = self._inputs
        main, others = choose_cpus(allowed, irq, sib, rank=self.rank, ranks=self.ranks, shift=shift)
        self.main_cpu, self.others = main, tuple(sorted(others))
        self.status = (f"on: main thread on CPU {main} (siblings {sorted(sib.get(main, set())) or 'none'} left empty), "
                       f"other threads on {len(others)} CPUs")

    def apply(self, children: Iterable[int] = ()) -> int:
        """Puts the main thread (call from it) and its companions on the main CPU and every other
        thread of the process, and the ``children`` pids, on the others; returns how many threads
        were moved off the main CPU. Threads that ended meanwhile are skipped."""
        if self.main_cpu is None:
            return 0
        if threading.get_native_id() != self._main_tid:
            raise RuntimeError("HostPin.apply must be called from the thread that made it")
        mine, rest = {self.main_cpu}, set(self.others)
        os.sched_setaffinity(0, mine)
        moved = 0
        for tid in os.listdir("/proc/self/task"):
            t = int(tid)
            if t == self._main_tid:
                continue
            name = (_read(f"/proc/self/task/{tid}/comm") or "").strip()
            with contextlib.suppress(OSError):
                os.sched_setaffinity(t, mine if name.startswith(COMPANIONS) else rest)
                moved += not name.startswith(COMPANIONS)
        for pid in children:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, rest)
        return moved


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """A collection first, whose survivors are frozen (``gc.freeze``: later collections skip
    them; the caller ``gc.unfreeze()``s before dropping long-lived objects it wants collected),
    then the cyclic collector off until the block ends (a run's garbage is freed by reference
    counting; what cycles it leaves wait for the next run's collection)."""
    gc.collect()
    gc.freeze()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def host_probe(ops: int = 500) -> float:
    """Microseconds per ``x.add_(1)`` on a one-element CPU tensor, over ``ops`` calls: Python,
    the dispatcher and the CPU kernel, the same kind of host work as a step's launches; no GPU
    and no allocation. Best of three passes (a probe measures the host's speed, not its
    interruptions: those show in the counters)."""
    import torch

    x = torch.zeros(1)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(ops):
            x.add_(1)
        best = min(best, time.perf_counter() - t0)
    return 1e6 * best / ops


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere ``platform.processor()``), None if unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def _cpu_ticks(cpu: int | None) -> tuple[int, int, int] | None:
    """(steal, irq + softirq, all) ticks of ``cpu`` (None: every CPU) from /proc/stat."""
    text = _read("/proc/stat")
    if text is None:
        return None
    key = "cpu" if cpu is None else f"cpu{cpu}"
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == key:
            v = [int(x) for x in parts[1:]]
            v += [0] * (8 - len(v))
            return v[7], v[5] + v[6], sum(v[:8])
    return None


def _current_cpu() -> int | None:
    text = _read("/proc/thread-self/stat")
    if text is None:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return int(fields[36]) if len(fields) > 36 else None  # field 39 of stat(5), after pid and comm


@dataclass(frozen=True)
class ThreadCounters:
    """The calling thread's counters at one moment (see :meth:`since`)."""

    wall_s: float
    cpu_s: float
    involuntary: int
    voluntary: int
    cpu: int | None
    ticks: tuple[int, int, int] | None

    @classmethod
    def now(cls, cpu: int | None = None) -> "ThreadCounters":
        """Now, with /proc/stat's ticks of ``cpu`` (None: of every CPU)."""
        ru = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
        return cls(time.perf_counter(), ru.ru_utime + ru.ru_stime, ru.ru_nivcsw, ru.ru_nvcsw, _current_cpu(), _cpu_ticks(cpu))

    def since(self, start: "ThreadCounters") -> dict:
        """What happened between ``start`` and this moment: the thread's involuntary / voluntary
        context switches, its CPU time over wall time, the CPU it is on, and the steal and
        interrupt ticks of the CPU(s) counted (10 ms each) against all ticks there."""
        out = {
            "involuntary_switches": self.involuntary - start.involuntary,
            "voluntary_switches": self.voluntary - start.voluntary,
            "thread_cpu_share": round((self.cpu_s - start.cpu_s) / max(self.wall_s - start.wall_s, 1e-9), 3),
            "cpu": self.cpu,
        }
        if self.ticks is not None and start.ticks is not None:
            out["steal_ticks"], out["irq_ticks"], out["all_ticks"] = (a - b for a, b in zip(self.ticks, start.ticks))
        return out
