"""Kernels of two streams on the SMs, block by block: the block-level contention model.

A kernel's grid is ``blocks`` thread blocks; its device holds ``slots`` of them at once (the
blocks one SM can keep resident, by threads, registers and shared memory against the device's
``deviceProperties``, times its SMs). It runs in ``waves = ceil(blocks / slots)`` waves, each
about ``dur / waves`` long (its *block duration*), and holds the fraction ``min(1, blocks /
slots)`` of the SMs while it runs (``KernelShape``, read from the trace's launch
configurations, ``Trace.events.launch``).

When a kernel ``X`` of one stream becomes ready while a kernel ``H`` of another stream of its
device holds SMs (``H`` started first, ``rem = end(H) - start(X)`` left), ``X`` is held back:

- ``H``'s queued blocks go first (the block scheduler issues a running kernel's blocks before
  a later kernel's of equal or lower priority): ``X`` waits until ``H``'s last wave is issued,
  ``queued = max(rem - block(H), 0)``;
- then, while ``H``'s last wave holds the share ``f_H`` of the SMs (``held = min(rem - queued,
  block(H))``), its blocks retire evenly over one block duration and ``X`` runs on the SMs
  free, at the pace they allow against the share ``f_X`` it needs, until they are enough
  (``held_back``: all of ``held`` where ``H`` leaves no SM free and ``X`` needs them all, half
  a block duration where ``H``'s wave ends as ``X`` is ready; little beside a collective's few
  blocks).

With priorities honoured (``HONOUR_PRIORITIES``) a kernel of a higher-priority stream takes the
SMs ``H``'s blocks free before ``H``'s queued blocks: no ``queued`` part.

A kernel held by several keeps the longest wait; a run of kernels that each became ready beside
one holder waits once, the first (``carried``: the others are behind it on their stream).
``waits(...)`` gives the wait of every kernel of a schedule; the contention-aware what-if
(``tracekit.graph.whatif``, ``CONTENTION_MODEL = "blocks"``) charges each kernel the larger of
the wait it gained over the unchanged replay's and the overlap it gained (the overlap model's
charge: the kernels that do run side by side share the SMs and their memory), and replays again.

Stream priorities: Kineto does not record them. CUDA's legacy default stream (CUPTI's stream
7: torch's default stream, on which TorchRec trains) has priority 0, the lowest. Assumed
(``stream_priorities``): a device's main stream (the most kernel time) that is not the default
stream was made by the program for its main work at a higher priority than its side streams
(the runtime's ``--main-stream-priority -2``); every other stream at -1 (the side streams
TorchRec's pipelines and the runtime make: memcpy, data dist, the fused lookup), as are the
side streams a what-if adds.

A trace without launch configurations (older Kineto, sampled, another profiler) or without
``deviceProperties`` gives no shape: ``KernelShape.known`` is False and the what-ifs keep the
overlap model (``whatif.CONTENTION_SHARE``), saying so (``SHAPE_WARNING``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp

DEFAULT_STREAM = 7
"""CUPTI's id of CUDA's legacy default stream (priority 0, the lowest)."""

PRIORITY_DEFAULT = 0
"""CUDA's default priority: the legacy default stream's."""
PRIORITY_MAIN = -2
"""Assumed for a device's main stream that is not the default stream (module docstring)."""
PRIORITY_SIDE = -1
"""Assumed for every other stream (TorchRec's and the runtime's side streams)."""

MAX_BLOCKS_PER_SM = 32
"""Resident blocks per SM at most (compute capability 8.0 and 9.0); ``deviceProperties`` does not
say."""
REG_ALLOC_UNIT = 256
"""Registers are allocated per warp in units of this many."""

KNOWN_SHARE = 0.5
"""The block-level model is used where at least this share of a graph's kernel time has a
shape; below it the overlap model."""

MAX_LANES = 32
"""Kernel streams per device beyond which the overlap model is used (one pass per pair of
streams)."""

SHAPE_WARNING = ("the kernels' launch configurations (grid, block, registers, shared memory) or "
                 "the GPU's deviceProperties are not in this trace: the contention-aware "
                 "what-ifs charge each kernel the whole overlap it gains with other streams' "
                 "kernels (the overlap model), not the block-level model")


@dataclass(frozen=True)
class KernelShape:
    """Per node of a graph (``tracekit.graph.model.Graph.shape``)."""

    blocks: np.ndarray
    """int64: the kernel's grid blocks (0: not a kernel, or not recorded)."""
    slots: np.ndarray
    """int64: how many of its blocks its device holds at once (0: unknown)."""

    @property
    def known(self) -> np.ndarray:
        return (self.blocks > 0) & (self.slots > 0)


def _resident(threads: int, regs: int, smem: int, props: dict) -> int:
    """Blocks of this shape one SM holds at once (0: unknown)."""
    max_threads = props.get("maxThreadsPerMultiprocessor")
    if not isinstance(max_threads, int) or threads <= 0:
        return 0
    warps = -(-threads // 32)
    n = max(max_threads // (warps * 32), 0)
    regs_sm = props.get("regsPerMultiprocessor")
    if isinstance(regs_sm, int) and regs > 0:
        per_warp = -(-regs * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        n = min(n, regs_sm // (per_warp * warps))
    smem_sm = props.get("sharedMemPerMultiprocessor")
    if isinstance(smem_sm, int) and smem > 0:
        n = min(n, smem_sm // smem)
    return max(min(n, MAX_BLOCKS_PER_SM), 1)


def _prod(v) -> int:
    return int(math.prod(v)) if isinstance(v, list) and v else 0


def kernel_shape(ev: pd.DataFrame, rows: np.ndarray, device: np.ndarray,
                 metadata: dict) -> KernelShape:
    """The shape of the events ``rows`` of ``ev`` (``Trace.events``; -1: none) on devices
    ``device`` (module docstring), from their ``launch`` column and the trace's
    ``deviceProperties``."""
    n = rows.size
    blocks = np.zeros(n, np.int64)
    slots = np.zeros(n, np.int64)
    props = metadata.get("deviceProperties") if isinstance(metadata, dict) else None
    if "launch" not in ev or not isinstance(props, list) or not n:
        return KernelShape(blocks, slots)
    by_dev = {}
    for i, p in enumerate(props):
        if isinstance(p, dict) and isinstance(p.get("numSms"), int):
            d = p.get("id", i)
            by_dev[d if isinstance(d, int) else i] = p
    if not by_dev:
        return KernelShape(blocks, slots)
    col = ev["launch"]
    codes = np.full(n, -1, np.int64)
    ok = rows >= 0
    codes[ok] = col.cat.codes.to_numpy()[rows[ok]]
    cats = [str(c) for c in col.cat.categories]
    for code in np.unique(codes[codes >= 0]):
        try:
            cfg = json.loads(cats[code]) if cats[code] else {}
        except ValueError:
            continue
        b = _prod(cfg.get("grid"))
        threads = _prod(cfg.get("block"))
        if b <= 0 or threads <= 0:
            continue
        at = codes == code
        blocks[at] = b
        for d in np.unique(device[at]):
            p = by_dev.get(int(d))
            if p is None:
                continue
            per_sm = _resident(threads, int(cfg.get("registers") or 0),
                               int(cfg.get("shared_memory") or 0), p)
            slots[at & (device == d)] = per_sm * int(p["numSms"])
    return KernelShape(blocks, slots)


def stream_priorities(lanes: pd.DataFrame, main: np.ndarray, n_lanes: int) -> np.ndarray:
    """Assumed priority of each of ``n_lanes`` lanes (a plan's: the graph's ``lanes`` then the
    side lanes a what-if adds), ``main``: bool per graph lane, its device's main GPU lane
    (module docstring). Lower is higher, as CUDA's."""
    pr = np.full(n_lanes, PRIORITY_SIDE, np.int64)
    stream = lanes["stream"].to_numpy(np.int64)
    k = len(lanes)
    pr[:k][main] = PRIORITY_MAIN
    pr[:k][stream == DEFAULT_STREAM] = PRIORITY_DEFAULT
    return pr


HONOUR_PRIORITIES = False
"""Whether a higher-priority stream's kernel takes SMs before a holding kernel's queued blocks
(module docstring); False: the holding kernel's queued blocks always go first."""


def waits(lane: np.ndarray, dev: np.ndarray, prio: np.ndarray, kern: np.ndarray,
          shape: KernelShape, start: np.ndarray, end: np.ndarray,
          dur: np.ndarray | None = None) -> np.ndarray | None:
    """Per node of a schedule (``start``, ``end``; lanes ``lane``, each lane's device ``dev``
    and priority ``prio``): how long each kernel ``kern`` waits for SMs another stream's kernel
    holds, float ns (module docstring); ``dur``: the kernels' own durations (default: their
    span in the schedule). None where a device holds more than ``MAX_LANES`` kernel streams."""
    n = start.size
    wait = np.zeros(n, np.float64)
    ids = np.flatnonzero(kern)
    if not ids.size:
        return wait
    # the kernels alone (a graph's nodes are mostly host calls)
    lk, sk, ek = lane[ids], start[ids], end[ids]
    busy = ek - sk
    dk = (busy if dur is None else np.minimum(dur[ids], busy)).astype(np.float64)
    bl, sl = shape.blocks[ids], shape.slots[ids]
    known = (bl > 0) & (sl > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(known, np.minimum(bl / np.maximum(sl, 1), 1.0), 1.0)
        waves = np.where(known, np.ceil(bl / np.maximum(sl, 1)), 1.0)
    block = dk / np.maximum(waves, 1.0)
    wk = np.zeros(ids.size, np.float64)
    kdev = dev[lk]
    order = np.lexsort((sk, lk))  # by lane, then start
    for d in np.unique(kdev):
        on = order[kdev[order] == d]
        lanes_d, first = np.unique(lk[on], return_index=True)
        if lanes_d.size > MAX_LANES:
            return None
        per = dict(zip(lanes_d.tolist(), np.split(on, first[1:])))
        for lx, xs_ids in per.items():
            xs = sk[xs_ids]
            for lh, h_ids in per.items():
                if lh == lx:
                    continue
                at = np.searchsorted(sk[h_ids], xs, side="left") - 1  # H started before X
                ok = at >= 0
                h = np.where(ok, h_ids[np.maximum(at, 0)], 0)
                rem = ek[h] - xs
                ok &= (rem > 0) & (dk[h] > 0)
                if not ok.any():
                    continue
                x, h, rem = xs_ids[ok], h[ok], rem[ok].astype(np.float64)
                f_h, b_h = frac[h], block[h]
                if HONOUR_PRIORITIES and prio[lx] < prio[lh]:
                    queued = np.zeros_like(rem)
                else:
                    queued = np.maximum(rem - b_h, 0.0)
                held = np.minimum(rem - queued, b_h)  # H's last wave (or the one X meets first)
                w = queued + held_back(frac[x], f_h, b_h, held, dk[x])
                np.maximum.at(wk, x, w)
    wait[ids] = wk
    return wait


def held_back(f_x, f_h, b_h, held, dur_x):
    """How much later a kernel of ``dur_x`` needing the share ``f_x`` of the SMs finishes for
    meeting a holder's wave of blocks (``f_h`` of the SMs, each ``b_h`` long, ``held`` of it
    left). The SMs free at once (``1 - f_h``) grow as the wave's blocks retire, evenly over
    ``b_h``: the kernel runs at the pace ``p(t) = min(1, p0 + k t)``, ``p0 = (1 - f_h) / f_x``,
    ``k = f_h / (f_x b_h)``, full from ``t1 = (1 - p0) / k`` (or when the holder ends, ``held``).
    It loses what its pace falls short over ``[0, a]``, ``a = min(t1, held)``: ``a - (p0 a +
    k a^2 / 2)``, or, when it finishes within ``a`` (its work ``dur_x`` done by ``T``: ``p0 T +
    k T^2 / 2 = dur_x``), ``T - dur_x``."""
    f_x = np.maximum(np.asarray(f_x, np.float64), 1e-9)
    f_h = np.maximum(np.asarray(f_h, np.float64), 1e-9)
    b_h = np.maximum(np.asarray(b_h, np.float64), 1e-9)
    dur_x = np.asarray(dur_x, np.float64)
    p0 = np.minimum((1.0 - f_h) / f_x, 1.0)
    k = f_h / (f_x * b_h)
    a = np.minimum((1.0 - p0) / k, held)
    done = p0 * a + k * a * a / 2.0  # the work done over [0, a]
    t_end = (-p0 + np.sqrt(p0 * p0 + 2.0 * k * dur_x)) / k  # when dur_x of work is done
    return np.where(p0 >= 1.0, 0.0, np.where(dur_x <= done, t_end - dur_x, a - done))


def carried(wait: np.ndarray, lane: np.ndarray, gpu: np.ndarray, start: np.ndarray,
            end: np.ndarray) -> np.ndarray:
    """What each GPU activity's ``wait`` adds beyond what its stream's earlier waits already
    push it by: a kernel held back pushes the activities behind it on its stream by its wait,
    less the idle time between them; ``shift[i] = max(shift[i-1] - idle[i], wait[i])``, and
    the wait added to activity ``i`` is ``shift[i] - carry[i]`` (a run of kernels that each
    started beside one holder waits once, the first). One cumulative maximum per lane."""
    out = np.zeros(wait.size, np.float64)
    ids = np.flatnonzero(gpu & (wait >= 0))
    if not ids.size or not wait[ids].any():
        return out
    order = np.lexsort((start[ids], lane[ids]))
    v = ids[order]
    ln = lane[v]
    new = fnp.r_(True, ln[1:] != ln[:-1])
    idle = fnp.r_(0.0, np.maximum(start[v][1:] - end[v][:-1], 0).astype(np.float64))
    idle[new] = 0.0
    grp = np.cumsum(new) - 1
    s_cum = np.cumsum(idle)
    s_cum -= s_cum[np.flatnonzero(new)][grp]  # per lane
    u = wait[v] + s_cum
    # cumulative max within each lane: offset lanes so that a maximum never crosses a lane
    big = float(np.abs(u).max() + s_cum.max() + 1.0) * 4
    um = np.maximum.accumulate(u + grp * big) - grp * big
    shift = np.maximum(um - s_cum, 0.0)
    prev = fnp.r_(0.0, shift[:-1])
    carry = np.where(new, 0.0, np.maximum(prev - idle, 0.0))
    out[v] = np.maximum(shift - carry, 0.0)
    return out


__all__ = ["KernelShape", "carried", "kernel_shape", "stream_priorities", "waits", "SHAPE_WARNING"]
