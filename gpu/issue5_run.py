"""Issue 5 on a GPU: the GPU tests of delta tracking and writeback, then the benchmark.

    python gpu/issue5_run.py            # writes under $OUT/issue5 (OUT must be set)

Writes $OUT/issue5/pytest_gpu.txt (the tests' output, first: they also build the TBE CUDA
kernels once, which the benchmark then reuses from the build cache), then everything
``bench/fixes.py`` writes (issue5_results.{json,md}, issue5_<part>.json, traces/).
Runs on torch + pytest only (no hypothesis, msgspec or tracekit needed). Prints the
benchmark's summary table last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    out = Path(os.environ.get("OUT", "out")) / "issue5"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-o", "addopts=",
         "tests/runtime/test_delta.py", "tests/runtime/test_writeback.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    log = tests.stdout + tests.stderr
    (out / "pytest_gpu.txt").write_text(log)
    print(f"[issue5] GPU tests exit {tests.returncode} in {time.perf_counter() - t0:.0f} s; tail:")
    print("\n".join(log.strip().splitlines()[-15:]), flush=True)
    budget = 505 - (time.perf_counter() - t0)  # run_all.sh gives the part 540 s
    bench = subprocess.run(
        [sys.executable, "-m", "bench.fixes", "--out", str(out), "--budget-s", f"{budget:.0f}"],
        cwd=ROOT, env=env, timeout=budget + 15,
    )
    print(f"[issue5] total {time.perf_counter() - t0:.0f} s", flush=True)
    return tests.returncode or bench.returncode


if __name__ == "__main__":
    sys.exit(main())
