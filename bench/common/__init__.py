"""What the benchmarks share: the method (:mod:`.method`: interleaved rounds, medians with
bootstrap intervals, agreement of two runs), the host (:mod:`.host`: pinning, probes), GPU clocks
(:mod:`.gpu_clocks`), the explain proof's manifests (:mod:`.proof_manifest`) and the trace
generators (:mod:`.synthetic_trace`, :mod:`.large_trace`)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
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


def run_stamp(module: str, argv: list[str] | None, t0: float, now: datetime) -> dict:
    """What a runner's results say of the run that wrote them: its ``command`` (``python -m
    module`` and ``argv``, default this process's arguments), the ``machine`` (name and cores),
    ``date_utc`` (``now``) and the ``seconds`` since ``t0`` (``time.perf_counter()``)."""
    return {"command": f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.node()} ({os.cpu_count()} cores)",
            "date_utc": now.isoformat(timespec="seconds"),
            "seconds": round(time.perf_counter() - t0, 1)}


def named_dirs(values: list[str]) -> list[tuple[str, str]] | None:
    """``NAME=DIR`` arguments (the runners' repeated ``--set``) as ``(name, dir)`` pairs, in order;
    ``None`` after one line on stderr where one is not a name and an existing folder."""
    out = []
    for s in values:
        name, _, root = s.partition("=")
        if not root or not os.path.isdir(root):
            print(f"--set {s}: not NAME=DIR with DIR a folder", file=sys.stderr)
            return None
        out.append((name, root))
    return out


def stamp_and_report(doc: dict, render, *, module: str, argv: list[str] | None, t0: float,
                     out_dir: str | None, prefix: str, tag: str = "") -> str:
    """A runner's ending: ``doc`` stamped (``run_stamp``), rendered by ``render(doc)`` and printed,
    and written as ``OUT_DIR/PREFIX-YYYYMMDD-HHMM[TAG].md`` / ``.json`` (``write_pair``) where
    ``out_dir`` is given; returns the text."""
    now = datetime.now(timezone.utc)
    doc |= run_stamp(module, argv, t0, now)
    text = render(doc)
    print(text)
    if out_dir:
        write_pair(out_dir, f"{prefix}-{now:%Y%m%d-%H%M}{tag}", text, doc)
    return text


def write_pair(out_dir: str, stem: str, text: str, doc: dict) -> str:
    """Write ``OUT_DIR/STEM.md`` (``text``) and ``.json`` (``doc``), creating ``out_dir``, and say
    so on stderr; returns the path without its suffix (the runners that name their own stems)."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, stem)
    with open(base + ".md", "w") as fh:
        fh.write(text)
    with open(base + ".json", "w") as fh:
        json.dump(doc, fh, indent=1)
    print(f"wrote {base}.md and .json", file=sys.stderr)
    return base


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


def model_table(title: str, command: str, seconds: float, intro: str, first: str, rows: list[dict],
                keys: list[str], labels: list[str], where) -> list[str]:
    """The head and the table of a runner that judges several models' predicted savings on the
    same pairs (``bench.contention_model``, ``bench.collective_term``): a title stamped in UTC, the
    command, ``intro``, then one row a pair: ``where(row)`` (the first column, headed ``first``), the
    pair's name, its measured saving with its interval and tolerance, and per model key (headed by
    its label) the predicted saving and whether it is within. Each row holds ``name``,
    ``measured_ms``, ``lo``/``hi`` (None without an interval), ``tolerance_ms``, and
    ``predicted_ms``/``within`` by key. Returns the lines (the caller adds its summary)."""
    out = [f"# {title} ({datetime.now(timezone.utc).isoformat(timespec='seconds')})", "",
           f"Command: `{command}` ({seconds:.1f} s on {platform.node()}).", "", intro, "",
           f"| {first} | pair | measured [95 %] | tolerance | "
           + " | ".join(f"{lab}: saving, within?" for lab in labels) + " |",
           "|---|---|---|---|" + "---|" * len(keys)]
    for r in rows:
        iv = "" if r["lo"] is None else f" [{r['lo']:.3f}, {r['hi']:.3f}]"
        cells = ["-" if r["predicted_ms"][k] is None
                 else f"{r['predicted_ms'][k]:.3f}, {'yes' if r['within'][k] else 'no'}" for k in keys]
        out.append(f"| {where(r)} | {r['measured_ms']:.3f}{iv} | {r['tolerance_ms']:.3f} | "
                   + " | ".join(cells) + " |")
    out.append("")
    return out
