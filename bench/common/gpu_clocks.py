"""GPU clocks, temperature and power over a benchmark, sampled by ``nvidia-smi`` in the background.

    log = ClockLog(uuid=...)       # starts `nvidia-smi --query-gpu=... --loop-ms=200` (if there is one)
    ...                            # the benchmark; it notes perf_counter() around each segment
    log.window(t0, t1)             # {"sm_mhz": mean, "mem_mhz": mean, "temp_c_max": .., ...}
    log.stop(); log.samples        # every sample of every GPU: (perf_counter, {field: value})

    log = ClockLog(uuid=..., interval_ms=0)   # no loop: one query each time
    log.sample()                               # ... the caller asks (between timed segments)

A separate process does the sampling (its pid: ``log.pid``), so the benchmark's own process
spends nothing on it; each line is stamped with ``time.perf_counter()`` when it is read (a few ms
after nvidia-smi wrote it: fine at 200 ms sampling). On a host-bound benchmark even that process
competes for the host (and nvidia-smi's queries for the driver), hence the on-demand mode. ``clocks_event_reasons.active`` (``clocks_throttle_reasons``
on older drivers) is the bit mask of why the clocks are below their maximum (power cap,
thermal, idle...). Where nvidia-smi is missing or refuses the query, the log stays empty and
``status`` says why: a benchmark never fails for want of it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Sequence

BASE_FIELDS = ("uuid", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
"""The newer name first; drivers before the rename know only the second."""
NAMES = {"clocks.sm": "sm_mhz", "clocks.mem": "mem_mhz", "temperature.gpu": "temp_c", "power.draw": "power_w"}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_line(line: str, fields: Sequence[str]) -> dict | None:
    """One ``--format=csv,noheader,nounits`` line -> {name: value}; None if it does not fit."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(fields):
        return None
    out: dict = {}
    for f, p in zip(fields, parts):
        if f == "uuid":
            out["uuid"] = p
        elif f in REASON_FIELDS:
            try:
                out["reasons"] = int(p, 16)
            except ValueError:
                out["reasons"] = None
        else:
            out[NAMES[f]] = _number(p)
    return out


class ClockLog:
    """Samples every GPU every ``interval_ms`` until :meth:`stop`; :meth:`window` summarises the
    GPU whose uuid ends with ``uuid`` (torch's ``get_device_properties(i).uuid``; None, or no
    sample of it: every GPU's samples)."""

    def __init__(self, *, uuid: str | None = None, interval_ms: int = 200, command: str = "nvidia-smi") -> None:
        self.samples: list[tuple[float, dict]] = []
        self._command = command
        self.fields: tuple[str, ...] = ()
        self.status = "not started"
        self._uuid = uuid.lower() if uuid else None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        for reasons in (*REASON_FIELDS, None):
            fields = BASE_FIELDS + ((reasons,) if reasons else ())
            try:
                probe = subprocess.run(
                    [command, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=20,
                )
            except (OSError, subprocess.SubprocessError) as e:
                self.status = f"off: {command} could not run ({e})"
                return
            if probe.returncode == 0 and probe.stdout.strip():
                self.fields = fields
                break
            self.status = f"off: {command} exit {probe.returncode}: {(probe.stderr or probe.stdout).strip()[:200]}"
        if not self.fields:
            return
        if interval_ms <= 0:
            self.status = "on demand"
            self._add(probe.stdout.splitlines())
            return
        self._proc = subprocess.Popen(
            [command, f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits", f"--loop-ms={interval_ms}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )
        self.status = "on"
        self._thread = threading.Thread(target=self._read, name="clock-log", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        """The sampling process's pid while it runs (None on demand or off)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _add(self, lines) -> None:  # noqa: ANN001 - lines of nvidia-smi's output
        for line in lines:
            s = parse_line(line, self.fields)
            if s is not None:
                self.samples.append((time.perf_counter(), s))

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._add(self._proc.stdout)

    def sample(self) -> None:
        """One query now (on demand; the loop mode samples by itself and this does nothing)."""
        if self.status != "on demand":
            return
        try:
            q = subprocess.run([self._command, f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return
        if q.returncode == 0:
            self._add(q.stdout.splitlines())

    def _mine(self) -> list[tuple[float, dict]]:
        """The samples of the GPU asked for; every sample if none carries its uuid (a name
        written differently by torch and nvidia-smi must not lose the log)."""
        samples = list(self.samples)
        if not self._uuid:
            return samples
        mine = [(t, s) for t, s in samples if s.get("uuid", "").lower().endswith(self._uuid)]
        return mine or samples

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def window(self, t0: float, t1: float) -> dict:
        """Mean SM/memory clock and power, highest temperature, and the union of the
        reason bits, over the samples taken in ``[t0, t1)`` (perf_counter seconds)."""
        return summarize_window([s for t, s in self._mine() if t0 <= t < t1])


def summarize_window(samples: Sequence[dict]) -> dict:
    def mean(key: str) -> float | None:
        xs = [s[key] for s in samples if s.get(key) is not None]
        return round(sum(xs) / len(xs), 1) if xs else None

    temps = [s["temp_c"] for s in samples if s.get("temp_c") is not None]
    reasons = [s["reasons"] for s in samples if s.get("reasons") is not None]
    union = 0
    for r in reasons:
        union |= r
    return {
        "samples": len(samples),
        "sm_mhz": mean("sm_mhz"),
        "sm_mhz_min": min((s["sm_mhz"] for s in samples if s.get("sm_mhz") is not None), default=None),
        "mem_mhz": mean("mem_mhz"),
        "power_w": mean("power_w"),
        "temp_c_max": max(temps) if temps else None,
        "reasons": f"{union:#x}" if reasons else None,
    }


REASON_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""nvidia-smi's clocks event reason bits (nvml.h's nvmlClocksEventReason*)."""


def reason_names(mask: str | int | None) -> list[str]:
    if mask is None:
        return []
    m = int(mask, 16) if isinstance(mask, str) else int(mask)
    return [name for bit, name in REASON_BITS.items() if m & bit] + ([f"{m:#x}"] if m & ~sum(REASON_BITS) else [])

