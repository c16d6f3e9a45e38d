"""Are the rank objects of this tree byte for byte another tree's? (a speed change must not move
a figure)

For every trace file under ``sample_traces/`` and ``../shared/traces/public/`` (a JSON file that
is no trace is refused alike: its error message compared), ``--random`` traces of
``tests/tracekit/test_fast_tables.py``'s generator and a few of issue 29's tiny ranks
(``bench/small_ranks.py``), each tree computes in a process of its own the rank object whole
(``report(with_hta=False)``) and the job's ``summary`` of ``report(keys=SUMMARY_KEYS)`` (what a
job's worker returns), and the sha256 of their JSON (``sort_keys``, the ``source`` left out).
Run::

    python -m bench.rank_equality --baseline /path/to/checkout/of/main

Prints each case that differs and exits 1 if any does (0: all the same).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import REPO as ROOT

_WORKER = r"""
import glob, hashlib, json, os, sys
tree, cases = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, tree)
import tracekit
assert tracekit.__file__.startswith(tree), tracekit.__file__
from tracekit.errors import TracekitError
from tracekit.loaded import loading
from tracekit.ranks.work import SUMMARY_KEYS, summary

def digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()

out = {}
for path in cases:
    try:
        with loading(path, use_cache=False, progress=False) as traces:
            whole = [lt.report(with_hta=False) for lt in traces]
            brief = [summary(lt.report(with_hta=False, keys=SUMMARY_KEYS)) for lt in traces]
        for r in whole + brief:
            r.pop("source", None)
        out[path] = [digest(whole), digest(brief)]
    except TracekitError as exc:
        out[path] = ["error", str(exc)]
print(json.dumps(out))
"""


def cases(tmp: Path, n_random: int) -> list[str]:
    """The trace files compared (absolute paths)."""
    from tests.tracekit.test_fast_tables import _random_trace
    from tests.tracegen import TraceBuilder

    files = []
    for d in (ROOT / "sample_traces", (ROOT / ".." / "shared" / "traces" / "public").resolve()):
        files += sorted(str(p) for p in d.rglob("*") if p.is_file() and
                        (p.name.endswith(".json") or p.name.endswith(".json.gz")))
    for seed in range(n_random):
        files.append(str(_random_trace(seed).write(tmp / f"random{seed}.json")))
    for r in (0, 1, 7, 500, 999):
        b = TraceBuilder(rank=r, world_size=1000)
        for s in range(3):
            b.profiler_step(s + 1, 1000.0 * s, 900)
            b.kernel("gemm_kernel", 1000.0 * s + 10, 100, launch_at=1000.0 * s + 5)
        files.append(str(b.write(tmp / f"tiny{r}.json")))
    return files


def digests(tree: Path, files: list[str]) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("TRACEKIT_CACHE_DIR", None)
    got = subprocess.run([sys.executable, "-c", _WORKER, str(tree), json.dumps(files)], cwd=tree,
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    ap.add_argument("--random", type=int, default=60, help="random tracegen traces")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = cases(Path(tmp), a.random)
        mine, theirs = digests(ROOT, files), digests(a.baseline.resolve(), files)
    differ = [f for f in files if mine.get(f) != theirs.get(f)]
    refused = sum(1 for f in files if mine.get(f, [""])[0] == "error")
    for f in differ:
        print(f"differs: {f}: {mine.get(f)} against {theirs.get(f)}")
    print(f"{len(files)} files ({refused} refused alike or not), {len(differ)} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
