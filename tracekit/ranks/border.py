"""A fix's saving across the band of the job's estimated untraced step: where the job's hosts and
its GPUs trade places.

A job whose estimated untraced step the profiler's cost decides (``overhead.untraced_range``:
the estimate at least ``HOST_DECIDES`` under the traced step) has an untraced step that lies,
8 times in 10, in a band around the estimate (``overhead.UNTRACED_BAND``: how far the host's
speed of the moment moves it, between processes and within one). A fix that moves GPU work
(FusedSparseDist) saves a host-bound job little and a GPU-bound one its GPU time: where the
job sits near the border, the saving the rounds measure follows the hosts' speed of the moment,
not the trace. The 2-GPU runtime preset ``multitask_b14k`` (one run, 30 rounds: its rounds with
a host probe under 4 us/op ran SparseDist at 36.852 ms and FusedSparseDist saved 1.906 ms, the
others 46.256 ms and -0.536; ``bench/NOTES-ranks.md``) is such a job: its raw prediction is one
side's or the other's as the estimate falls.

``at_band`` replays the fix with every rank's host made faster or slower
(``jobgraph.at_host_speed``) until the job step is at each end of the band; ``border_warning``
says so where either end's saving is outside the target's tolerance of the prediction
(``BORDER_TOLERANCE``). Nothing here changes a prediction.
"""

from __future__ import annotations

from tracekit.ranks import jobgraph

BORDER_TOLERANCE = (0.25, 0.02)
"""The target's tolerance (issue 24): a saving differs when it is off by more than this share of
the prediction or of the job step, whichever is larger."""
SPEEDS = (0.25, 4.0)
"""Host speeds searched for a band's end (x faster; ``jobgraph.host_speed_for_step``'s range,
slower and faster); an end none of them reaches is left out."""
TOLERANCE = 0.005
"""A band's end is reached within this share of it."""


def job_band(ranks: list[dict], step_ns: float) -> tuple[float, float] | None:
    """``(low, high)`` ns where the job's untraced step lies 8 times in 10 when the profiler's
    cost decides its estimate ``step_ns`` (``overhead.untraced_range`` against the longest
    traced step of the ranks estimated by the model alone; the slow-host band where a rank was
    traced with the slow-host rule's options), else None (a given untraced step, a GPU-bound
    estimate)."""
    from tracekit.graph import overhead as oh

    traced, slow = 0.0, False
    for r in ranks:
        est = (r.get("explain") or {}).get("overhead") or {}
        if est.get("scale") != "model" or not est.get("traced_step_ns"):
            continue
        traced = max(traced, float(est["traced_step_ns"]))
        slow = slow or bool(est.get("slow_host"))
    if traced <= 0 or step_ns <= 0:
        return None
    return oh.untraced_range(traced, float(step_ns), slow_host=slow)


def at_band(ctx, band_ns: tuple[float, float], replay) -> list[dict]:
    """The change replayed at each end of ``band_ns`` (low: faster hosts; high: slower):
    ``replay(host_speed)`` gives the what-if's row at that speed (``whatif.with_skeletons``).
    Per end reached: ``{"step_ns", "host_speed", "saving_ns"}`` (the step the hosts were
    brought to and the saving there)."""
    out = []
    for target in band_ns:
        f = jobgraph.host_speed_for_step(ctx.inputs, float(target), speeds=SPEEDS,
                                         tolerance=TOLERANCE)
        if f is None:
            continue
        row = replay(f)
        out.append({"step_ns": float(row["step_ns"]), "host_speed": float(f),
                    "saving_ns": float(row["saving_ns"])})
    return out


def border_warning(row: dict, at: list[dict]) -> str | None:
    """Why a fix's prediction ``row`` may be wrong where the job's untraced step is uncertain
    (``at``: ``at_band``'s): a saving at an end of the band outside ``BORDER_TOLERANCE`` of
    the prediction; None where every end is within it."""
    step, saving = float(row["step_ns"]), float(row["saving_ns"])
    tol = max(BORDER_TOLERANCE[0] * abs(saving), BORDER_TOLERANCE[1] * step)
    if not at or all(abs(a["saving_ns"] - saving) <= tol for a in at):
        return None
    ends = "; ".join(
        f"at {a['step_ns'] / 1e6:.3f} ms (every host {_speed(a['host_speed'])}) it saves "
        f"{a['saving_ns'] / 1e6:.3f} ms" for a in at)
    return (f"the job's estimated untraced step ({step / 1e6:.3f} ms) rests on the profiler's "
            f"cost taken out, and where the untraced step lies 8 times in 10 the job's hosts and "
            f"GPUs trade places: {ends}, against {saving / 1e6:.3f} ms predicted; the saving "
            "measured follows the hosts' speed of the moment, which the traces do not record")


def _speed(f: float) -> str:
    return f"{f:.2f}x faster" if f >= 1 else f"{1 / f:.2f}x slower"
