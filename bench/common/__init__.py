"""What the benchmarks share: the method (:mod:`.method`: interleaved rounds, medians with
bootstrap intervals, agreement of two runs), the host (:mod:`.host`: pinning, probes), GPU clocks
(:mod:`.gpu_clocks`), the explain proof's manifests (:mod:`.proof_manifest`) and the trace
generators (:mod:`.synthetic_trace`, :mod:`.large_trace`)."""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root: the runners' subprocesses run from here."""


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m module args...`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def repo_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the repository root first on ``PYTHONPATH``, so that
    a subprocess started anywhere imports ``bench``, ``runtime`` and ``tracekit`` from this tree."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def write_result(out_dir: str, prefix: str, text: str, doc: dict, *, command: str, seconds: float) -> str:
    """Write a runner's table and its figures as ``OUT_DIR/PREFIX-YYYYMMDD-HHMM.md`` (``text``) and
    ``.json`` (``doc`` after ``command``, ``seconds`` and ``host``: this machine's name), the stamp in
    UTC, creating ``out_dir``; returns that path without its suffix."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{prefix}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M')}")
    with open(base + ".md", "w") as fh:
        fh.write(text)
    with open(base + ".json", "w") as fh:
        json.dump({"command": command, "seconds": seconds, "host": platform.node(), **doc}, fh, indent=1,
                  default=str)
    return base
