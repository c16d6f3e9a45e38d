"""Issue 29's reproductions, each rebuilt and run through the command, against its promise.

    python -m bench.wild_inputs [--only NAME ...] [--timeout 120] [--out-dir bench/results]

Every reproduction listed in issue 29's body ("Inputs from the wild, round 2") is built in a
fresh temporary directory with ``tests/tracegen.py`` (the traces tiny but for the cases that are
about size) and run as the user runs it: ``python -m tracekit.cli ...`` with this tree's
``tracekit``, a fresh process, ``--no-cache`` wherever the command takes it. Each run is held to
the promise of ``docs/limits.md``:

- exit 0 or 2 (and the case's own: 2 where the input is refused), within the time limit;
- at most 3 lines on stderr, and no ``Traceback``;
- bounded time: at most 10 s wall for a case of at most 10,000 events (the rest: its seconds
  are reported, and the waits' three sizes should grow about linearly), killed at ``--timeout``;
- bounded memory: peak RSS (the command and its workers, ``os.wait4``) at most 1 GB;
- every input byte for byte as before (files hashed before and after; a FIFO still a FIFO, a
  device node still one), and no file written but the case's own output;
- no figure out of its physical range without a warning: in a JSON output, a duration, busy time
  or size below -1 (-1 is "unknown"), or the case's own figure (a step longer than the trace...),
  only beside a warning; and the case's own words on stderr where it names them.

The ``--scheduler`` cases talk to a server this process runs on 127.0.0.1 (one that accepts and
never speaks, one that answers HTTP). The "device node" is one this runner makes in its own
directory (``mknod``: ``/dev/null``'s numbers; a FIFO where mknod is not allowed): nothing is
ever pointed at a real device.

Writes ``bench/results/wild-inputs-<UTC date>.json`` (each case's exit code, wall seconds, peak
RSS, stderr lines, the load before it, and the promises it broke) and prints a table; exits 1
when any case broke one. Figures: ``docs/limits.md`` ("Issue 29's reproductions, re-run").
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench.common import REPO as ROOT

MAX_LINES = 3
SMALL_EVENTS = 10_000
SMALL_SECONDS = 10.0
MAX_RSS_MB = 1024.0


@dataclass
class Case:
    """One reproduction: ``build(dir)`` makes its inputs and returns the command's arguments
    (after ``tracekit``); ``rc``: the exit code
    the promise asks (None: 0 or 2); ``words``: what stderr must say; ``lines``: how many
    stderr lines (None: at most 3); ``check(rc, stdout, stderr_lines, dir)``: a problem or
    None; ``outputs``: the names (in ``dir``) the command may write."""

    name: str
    what: str
    build: Callable[[Path], list[str]]
    rc: int | None = None
    words: tuple[str, ...] = ()
    lines: int | None = None
    check: Callable | None = None
    outputs: tuple[str, ...] = ()
    needs_server: bytes | None | bool = False
    extra: dict = field(default_factory=dict)


# ---- the traces --------------------------------------------------------------------------------

def _builder(**kw):
    sys.path.insert(0, str(ROOT))
    from tests.tracegen import TraceBuilder

    return TraceBuilder(**kw)


def _small(**kw):
    b = _builder(**kw)
    b.profiler_step(1, 0, 1000)
    b.kernel("gemm", 100, 50, launch_at=10)
    return b


def _json_args(path) -> list[str]:
    return ["analyze", str(path), "--no-hta", "--no-cache", "--format", "json"]


def tbe_name(d: Path) -> list[str]:
    b = _builder()
    b.profiler_step(1, 0, 1000)
    b.kernel("tbe::" * 20_000, 100, 50, launch_at=10)
    return _json_args(b.write(d / "tbe.json"))


def streams(n: int):
    def build(d: Path) -> list[str]:
        b = _builder()
        b.profiler_step(1, 0, 10_000)
        for s in range(n):
            b.kernel("k", 10 + s, 5, stream=s + 1, launch_at=1)
        return _json_args(b.write(d / "streams.json"))
    return build


def waits(n: int):
    def build(d: Path) -> list[str]:
        b = _builder()
        b.profiler_step(1, 0, 10 * n + 100)
        for i in range(n):
            b.kernel("a", 10 * i + 1, 2, stream=7, launch_at=10 * i)
            b.stream_wait(record_at=10 * i + 1, wait_at=10 * i + 2, on_stream=7, stream=8,
                          gpu_at=10 * i + 4)
            b.kernel("b", 10 * i + 5, 2, stream=8, launch_at=10 * i + 3)
        return _json_args(b.write(d / "waits.json"))
    return build


def _job(d: Path, n: int, **kw) -> Path:
    job = d / "job"
    for r in range(n):
        _small(rank=r, **kw).write(job / f"rank{r}.json")
    return job


def world_trillion(d: Path) -> list[str]:
    return ["analyze", str(_job(d, 2, world_size=10**12)), "--no-cache", "--no-hta"]


def scheduler(d: Path) -> list[str]:
    return ["analyze", str(_job(d, 1, world_size=1)), "--no-cache", "--no-hta", "--scheduler",
            "tcp://127.0.0.1:{port}", "--scheduler-timeout", "3"]


def nonzero(d: Path) -> list[str]:
    b = _builder()
    b.profiler_step(1, 0, 1000)
    b.cpu_op("aten::nonzero", 100, 0)
    c = b.runtime("cudaLaunchKernel", 100, 0)
    b.kernel("k", 101, 5, launched_by=c)
    b.runtime("cudaStreamSynchronize", 100, 0)
    return ["explain", str(b.write(d / "z.json")), "--format", "json", "--no-cache"]


def odd_rank(declared: int, fmt: str):
    def build(d: Path) -> list[str]:
        job = d / "job"
        _small(rank=0, world_size=2).write(job / "a_rank0.json")
        _small(rank=declared, world_size=2).write(job / "b_odd.json")
        return ["analyze", str(job), "--no-cache", "--no-hta", *(["--format", "json"]
                                                               if fmt == "json" else [])]
    return build


def memory_bytes(d: Path) -> list[str]:
    b = _small()
    for i in range(3):
        b.memory(10 + i, 2**62)
    b.memory(20, 1024)
    return _json_args(b.write(d / "m.json"))


def profiler_step_huge(d: Path) -> list[str]:
    b = _builder()
    b.annotation("ProfilerStep#1" + "0" * 25, 0, 1000)
    b.kernel("gemm", 100, 50, launch_at=10)
    return ["analyze", str(b.write(d / "p.json")), "--format", "json", "--hta", "--no-cache"]


def scheduler_args(*args: str):
    def build(d: Path) -> list[str]:
        return ["analyze", str(_job(d, 1, world_size=1)), "--no-cache", *args]
    return build


def annotate_own_input(d: Path) -> list[str]:
    p = _small().write(d / "t.json")
    return ["explain", str(p), "--annotate", str(p), "--no-cache"]


def annotate_tmp_name(d: Path) -> list[str]:
    p = _small().write(d / "t.json.gz.tmp")
    return ["explain", str(p), "--annotate", str(d / "t.json.gz"), "--no-cache"]


def annotate_rules(d: Path) -> list[str]:
    p = _small().write(d / "t.json")
    rules = d / "r.toml"
    rules.write_text("inherit = true\n")
    return ["explain", str(p), "--annotate", str(rules), "--rules", str(rules), "--no-cache"]


def annotate_device(kind: str):
    def build(d: Path) -> list[str]:
        p = _small().write(d / "t.json")
        target = d / f"out.{kind}"
        if kind == "fifo":
            os.mkfifo(target)
        else:  # a character device node of this runner's own (/dev/null's numbers)
            os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return ["explain", str(p), "--annotate", str(target), "--no-cache"]
    return build


def annotate_empty(d: Path) -> list[str]:
    return ["explain", str(_small().write(d / "t.json")), "--annotate", "", "--no-cache"]


def negated_ts(d: Path) -> list[str]:
    b = _small()
    b.kernel("late", 300, 50, launch_at=20)
    doc = b.to_dict()
    k = next(e for e in doc["traceEvents"] if e.get("name") == "late")
    k["ts"] = -k["ts"]
    (d / "neg.json").write_text(json.dumps(doc))
    return _json_args(d / "neg.json")


def same_correlation(d: Path) -> list[str]:
    b = _builder()
    b.profiler_step(1, 0, 1000)
    for i in range(3):
        b.kernel("gemm", 100 + 100 * i, 50, launch_at=10 + 10 * i)
    doc = b.to_dict()
    for e in doc["traceEvents"]:
        if "correlation" in e.get("args", {}):
            e["args"]["correlation"] = 7
    (d / "c.json").write_text(json.dumps(doc))
    return _json_args(d / "c.json")


def nelems(d: Path) -> list[str]:
    b = _builder(rank=0, world_size=1)
    b.profiler_step(1, 0, 100)
    args = {"Collective name": "all_to_allv", "In msg nelems": 2**60, "Out msg nelems": 30,
            "dtype": "Long", "Process Group Name": "0", "Group size": 1}
    b.kernel("ncclDevKernel_SendRecv", 20, 5, stream=17, launch_at=11, args=args)
    return _json_args(b.write(d / "a2a.json"))


def day_long(d: Path) -> list[str]:
    b = _builder()
    b.profiler_step(1, 0, 100)
    for dev in (0, 1):
        b.kernel(f"k{dev}", 10 + dev, 5e15, device=dev, launch_at=1)  # 5e18 ns each
    return _json_args(b.write(d / "long.json"))


def what_if(spec: str):
    def build(d: Path) -> list[str]:
        return ["explain", str(_small().write(d / "t.json")), "--what-if", spec, "--no-cache"]
    return build


def plain(n: int):
    def build(d: Path) -> list[str]:
        job = d / "plain"
        for r in range(n):
            _small().write(job / f"r{r:03d}.json")
        return ["analyze", str(job), "--no-cache", "--no-hta"]
    return build


def broken(n: int):
    def build(d: Path) -> list[str]:
        job = d / "broken"
        _small(rank=0, world_size=n + 1).write(job / "rank000.json")
        for r in range(1, n + 1):
            (job / f"rank{r:03d}.json").write_text("not json")
        return ["analyze", str(job), "--no-cache", "--no-hta"]
    return build


def tiny_ranks(n: int):
    def build(d: Path) -> list[str]:
        job = d / "tiny"
        for r in range(n):
            b = _builder(rank=r, world_size=n)
            for s in range(3):
                b.profiler_step(s + 1, 1000.0 * s, 900)
                b.kernel("gemm_kernel", 1000.0 * s + 10, 100, launch_at=1000.0 * s + 5)
            b.write(job / f"rank{r}.json")
        return ["analyze", str(job), "--no-cache", "--no-hta"]
    return build


def cut_number(tail: str):
    def build(d: Path) -> list[str]:
        b = _small()
        b.kernel("late", 300, 5.5, launch_at=20)
        text = json.dumps(b.to_dict())
        at = text.rindex('"dur": 5.5') + len('"dur": 5')
        (d / "cut.json").write_text(text[:at] + tail)
        return _json_args(d / "cut.json")
    return build


def zero_durations(d: Path) -> list[str]:
    b = _builder()
    for k in range(3):
        b.profiler_step(k + 1, 100 * k, 0)
        b.kernel("gemm", 100 * k + 10, 0, launch_at=100 * k + 1)
    return ["explain", str(b.write(d / "z.json")), "--step", "1", "--format", "json",
            "--no-cache"]


def odd_entries(d: Path) -> list[str]:
    job = _job(d, 2, world_size=2)
    os.mkfifo(job / "fifo.json")
    (job / "loop.json").symlink_to("loop.json")
    (job / "dir.json").mkdir()
    return ["analyze", str(job), "--no-cache", "--no-hta"]


# ---- the cases' own checks ---------------------------------------------------------------------

def _doc(out: str):
    try:
        return json.loads(out)
    except ValueError:
        return None


def _analyses(out: str) -> list[dict]:
    doc = _doc(out) or {}
    return doc.get("analyses") or doc.get("explain") or []


def steps_within_span(rc, out, err, d) -> str | None:
    """The negated ts: each step's GPU P50 at most the trace's span (1.68e18 ns in the issue)."""
    for a in _analyses(out):
        h = a.get("headline") or {}
        for k in ("gpu_p50_ns", "step_gpu_p50_ns", "p50_ns"):
            v = h.get(k)
            if isinstance(v, (int, float)) and abs(v) > 10**12:
                return f"{k} {v} beyond the trace's span"
    return None


def same_step_figures(rc, out, err, d) -> str | None:
    """Every correlation id the same: the warning says so (the step's GPU time moved 0.23 ->
    1.13 ms in the issue, without one)."""
    return None if any("share a correlation id" in e for e in err) else "no warning"


def no_json_negative(rc, out, err, d) -> str | None:
    return None  # the generic scan does it


def ranks_read(n: int):
    def check(rc, out, err, d) -> str | None:
        doc = _doc(out)
        if doc is None:
            return None if f"{n} ranks read" in out else f"not '{n} ranks read'"
        got = (doc.get("jobs") or [{}])[0].get("ranks_read")
        return None if got == n else f"ranks_read {got}, not {n}"
    return check


def annotated_written(rc, out, err, d) -> str | None:
    return None if (d / "t.json.gz").is_file() else "t.json.gz not written"


def still_kind(kind: str):
    def check(rc, out, err, d) -> str | None:
        m = os.lstat(d / f"out.{kind}").st_mode
        ok = stat.S_ISFIFO(m) if kind == "fifo" else stat.S_ISCHR(m)
        return None if ok else f"out.{kind} is no longer a {kind}"
    return check


def steps_listed(want: list[int]):
    def check(rc, out, err, d) -> str | None:
        got = [s.get("step") for a in _analyses(out) for s in a.get("steps") or []]
        return None if got == want else f"steps {got}, not {want}"
    return check


CASES = [
    # a trace can hang tracekit or take all memory
    Case("tbe_name", 'one kernel named "tbe::" x 20,000 (139 s in the issue)', tbe_name),
    Case("streams_3000", "3,000 streams with one kernel each (306 s, 3.16 GB)", streams(3000),
         rc=0, words=("pairwise overlap is of its 64 busiest",
                            "waits inferred into the 256")),
    Case("waits_30k", "4,285 recorded Stream Wait Events, 30 k events (the issue's 30 k: "
         "6.6 s)", waits(4_285), rc=0),
    Case("waits_60k", "8,570 recorded Stream Wait Events, 60 k events (21.7 s)", waits(8_570),
         rc=0),
    Case("waits_120k", "17,140 recorded Stream Wait Events, 120 k events (94 s)",
         waits(17_140), rc=0),
    Case("world_size_1e12", "two rank files declaring world_size 10**12 (23.7 GB)",
         world_trillion, rc=2, lines=1, words=("have no trace file",)),
    Case("scheduler_silent", "--scheduler at a port that accepts and never speaks "
         "(--scheduler-timeout 3; still running at 300 s)", scheduler, rc=2, lines=1,
         words=("no answer within 3 s",), needs_server=None),
    Case("scheduler_http", "--scheduler at a port that answers HTTP (3 EiB allocated)",
         scheduler, rc=2, lines=1, words=("does not speak Dask's protocol",),
         needs_server=b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
    # tracebacks
    Case("nonzero_0us", "a 0 us aten::nonzero on the thread of a launch and a sync "
         "(IndexError)", nonzero, rc=0, lines=0),
    Case("rank_1e30", "distributedInfo.rank 10**30 (OverflowError)", odd_rank(10**30, "json"),
         rc=0, lines=1, words=("is not a rank",), check=ranks_read(2)),
    Case("rank_minus_1", "rank -1 beside rank 0, text output (KeyError 'overlap'; "
         "'ranks_read 1')", odd_rank(-1, "text"), rc=0, lines=1,
         words=("is not a rank",), check=ranks_read(2)),
    Case("memory_2e62", "[memory] Bytes 2^62 three times (OverflowError)", memory_bytes,
         rc=0, lines=1, words=("2^52 (4 PiB) or more",)),
    Case("profiler_step_1e25", "ProfilerStep#10^25 (OverflowError in hta.py)",
         profiler_step_huge, rc=0, lines=0),
    Case("scheduler_timeout_nan", "--scheduler-timeout nan",
         scheduler_args("--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "nan"),
         rc=2, lines=1, words=("finite number",)),
    Case("scheduler_ucx", "--scheduler ucx://127.0.0.1:1",
         scheduler_args("--scheduler", "ucx://127.0.0.1:1"), rc=2, lines=1,
         words=("only tcp://HOST:PORT",)),
    # inputs overwritten
    Case("annotate_own_input", "--annotate onto its own input", annotate_own_input, rc=2,
         lines=1, words=("an input this command reads",)),
    Case("annotate_tmp_name", "--annotate t.json.gz beside the input t.json.gz.tmp (truncated "
         "to 34 bytes)", annotate_tmp_name, rc=0, lines=1, words=("wrote",),
         check=annotated_written, outputs=("t.json.gz",)),
    Case("annotate_rules", "--annotate r.toml with --rules r.toml (the rules overwritten)",
         annotate_rules, rc=2, lines=1, words=("an input this command reads",)),
    Case("annotate_fifo", "--annotate naming a FIFO", annotate_device("fifo"), rc=2,
         lines=1, words=("is a FIFO",), check=still_kind("fifo")),
    Case("annotate_device", "--annotate naming a character device node (this runner's own, "
         "/dev/null's numbers; /dev/full was replaced in the issue)", annotate_device("chr"),
         rc=2, lines=1, words=("is a character device",), check=still_kind("chr")),
    Case("annotate_empty", '--annotate "" (silently ignored)', annotate_empty, rc=2, lines=1,
         words=("--annotate needs a file name",)),
    # wrong numbers without a warning
    Case("negated_ts", "one kernel's ts negated (step GPU P50 1.68e18 ns)", negated_ts, rc=0,
         lines=1, words=("ts negative",), check=steps_within_span),
    Case("same_correlation", "every correlation id the same (step GPU P50 0.23 -> 1.13 ms)",
         same_correlation, rc=0, lines=1, check=same_step_figures),
    Case("nelems_2e60", "all-to-all In msg nelems 2^60 (sent_bytes -9.2e18)", nelems, rc=0,
         lines=1, words=("1 PiB",)),
    Case("kernels_5e18", "two 5e18 ns kernels on two devices (gpu_busy_ns -8.45e18)",
         day_long, rc=0, words=("longer than a day",)),
    Case("what_if_host_1e-21", "--what-if host=1e-21 (a 482.6 ms saving, 4 RuntimeWarnings)",
         what_if("host=1e-21"), rc=2, lines=1, words=("finite number >= 1",)),
    # more than three lines
    Case("plain_500", "500 rank files without distributedInfo (500 warning lines)", plain(500),
         rc=0, lines=1, words=("500 files: no usable distributedInfo.rank",)),
    Case("broken_499", "499 broken rank files beside one good one (499 error lines)",
         broken(499), rc=2, lines=1, words=("499 files: not valid JSON",)),
    Case("tiny_1000", "1,000 tiny rank files of 9 events (111 s in the issue)", tiny_ranks(1000),
         rc=0, lines=0),
    # smaller
    Case("cut_after_dot", "a trace cut right after a '.' inside a number", cut_number("."),
         rc=0, lines=1, words=("the trace is truncated",)),
    Case("cut_after_minus", "a trace cut right after a '-' inside a number", cut_number("-"),
         rc=0, lines=1, words=("the trace is truncated",)),
    Case("zero_durations_step_1", "all durations 0 with --step 1 ('no step 1 here')",
         zero_durations, rc=0, lines=0, check=steps_listed([1, 2, 3])),
    Case("odd_rank_entries", "a symlink loop, a FIFO and a directory named *.json in a rank "
         "directory (skipped unnamed)", odd_entries, rc=2,
         words=("dir.json", "fifo.json", "loop.json")),
]


# ---- running one ---------------------------------------------------------------------------------

def local_server(reply: bytes | None):
    """A local TCP server that accepts and says nothing (``reply`` None) or answers each
    connection's first bytes with ``reply``; its port, and a function that stops it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    stop, held = threading.Event(), []

    def serve():
        while not stop.is_set():
            try:
                c, _ = sock.accept()
            except OSError:
                continue
            held.append(c)
            if reply is not None:
                c.settimeout(1)
                try:  # its first bytes, if the client speaks first; then the reply
                    c.recv(1000)
                except OSError:
                    pass
                try:
                    c.sendall(reply)
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join()
        for c in held:
            c.close()
        sock.close()

    return sock.getsockname()[1], close


def _state(d: Path) -> dict[str, str]:
    """Every entry under ``d``: a file's sha256, else its kind (a FIFO, a device, a link...)."""
    out = {}
    for root, dirs, files in os.walk(d, followlinks=False):
        for name in dirs + files:
            p = Path(root) / name
            m = os.lstat(p).st_mode
            key = str(p.relative_to(d))
            if stat.S_ISREG(m):
                out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(m):
                out[key] = "link -> " + os.readlink(p)
            else:
                out[key] = stat.filemode(m)[0]
    return out


def _count_events(d: Path) -> int:
    """The events of every trace file under ``d`` (a file that is no JSON trace: none), flow
    events (a launch's arrow to its kernel) and metadata (process and thread names) not
    counted, as the issue counts them."""
    n = 0
    for p in d.rglob("*.json*"):
        try:
            if p.is_file() and not p.is_symlink():
                n += sum(1 for e in json.loads(p.read_bytes()).get("traceEvents", [])
                         if e.get("ph") not in ("s", "f", "t", "M"))
        except (ValueError, OSError, AttributeError):
            pass
    return n


_JSON_FIGURE_KEYS = ("_ns", "_bytes", "bytes", "busy")


def _negative_figures(doc, path="") -> list[str]:
    """A duration, busy time or size below -1 anywhere in a JSON output (-1: unknown)."""
    got = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = f"{path}.{k}"
            if isinstance(v, (int, float)) and not isinstance(v, bool) and \
                    str(k).endswith(_JSON_FIGURE_KEYS) and v < -1:
                got.append(f"{p}={v}")
            else:
                got += _negative_figures(v, p)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            got += _negative_figures(v, f"{path}[{i}]")
    return got


def _warnings_in(doc) -> int:
    n = 0
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "warnings" and isinstance(v, list):
                n += len(v)
            else:
                n += _warnings_in(v)
    elif isinstance(doc, list):
        n += sum(_warnings_in(v) for v in doc)
    return n


def _build(case: Case, d: Path) -> tuple[list[str], int]:
    """``case.build(d)`` and ``_count_events(d)`` in a process of its own: the traces built and
    read there (some of hundreds of MB while built) leave this process small, and the command
    forked from it is measured alone (a forked child's peak RSS counts what it had before its
    ``exec``)."""
    got = subprocess.run([sys.executable, "-m", "bench.wild_inputs", "--build", case.name, str(d)],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                         text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def run_case(case: Case, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"wild-{case.name}-") as tmp:
        d = Path(tmp)
        args, events = _build(case, d)
        close = None
        if case.needs_server is not False:
            port, close = local_server(case.needs_server)
            args = [a.replace("{port}", str(port)) for a in args]
        before = _state(d)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("TRACEKIT_CACHE_DIR", None)
        env["TRACEKIT_CACHE_DIR"] = str(d / ".cache-never-used")  # --no-cache: nothing there
        load = [round(x, 2) for x in os.getloadavg()]
        t0 = time.perf_counter()
        out_f, err_f = (tempfile.TemporaryFile() for _ in range(2))
        p = subprocess.Popen([sys.executable, "-m", "tracekit.cli", *args], cwd=ROOT, env=env,
                             stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL)
        killed = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                p.kill()
                _, status, ru = os.wait4(p.pid, 0)
                killed = True
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        if close:
            close()
        out_f.seek(0)
        err_f.seek(0)
        out = out_f.read().decode(errors="replace")
        err = err_f.read().decode(errors="replace").splitlines()
        rc = os.waitstatus_to_exitcode(status)
        after = _state(d)
        problems = []
        if killed:
            problems.append(f"killed after {timeout:.0f} s")
        if rc not in (0, 2):
            problems.append(f"exit {rc}")
        elif case.rc is not None and rc != case.rc:
            problems.append(f"exit {rc}, not {case.rc}")
        if any("Traceback" in e for e in err):
            problems.append("a traceback")
        if len(err) > MAX_LINES:
            problems.append(f"{len(err)} stderr lines")
        if case.lines is not None and len(err) != case.lines:
            problems.append(f"{len(err)} stderr lines, not {case.lines}")
        for w in case.words:
            if not any(w in e for e in err):
                problems.append(f"stderr lacks {w!r}")
        if events <= SMALL_EVENTS and wall > SMALL_SECONDS:
            problems.append(f"{wall:.1f} s for {events:,} events")
        rss = ru.ru_maxrss / 1024
        if rss > MAX_RSS_MB:
            problems.append(f"peak RSS {rss:.0f} MB")
        changed = sorted(k for k in set(before) | set(after)
                         if before.get(k) != after.get(k) and k not in case.outputs and
                         not k.startswith(".cache-never-used"))
        if changed:
            problems.append(f"inputs or entries changed: {', '.join(changed[:5])}")
        doc = _doc(out) if "--format" in args else None
        if doc is not None:
            neg = _negative_figures(doc)
            if neg and not _warnings_in(doc) and not err:
                problems.append(f"figures below zero without a warning: {', '.join(neg[:3])}")
        if case.check is not None and not killed:
            got = case.check(rc, out, err, d)
            if got:
                problems.append(got)
    return {"case": case.name, "what": case.what, "events": events, "rc": rc,
            "wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
            "peak_rss_mb": round(rss, 1), "stderr_lines": len(err), "stderr": err[:MAX_LINES + 1],
            "load_before": load, "problems": problems, "held": not problems}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", help="these cases only (names)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is killed")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--build", nargs=2, metavar=("CASE", "DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.build:  # one case's inputs (``_build``)
        d = Path(a.build[1])
        args = next(c for c in CASES if c.name == a.build[0]).build(d)
        print(json.dumps([args, _count_events(d)]))
        return
    cases = [c for c in CASES if not a.only or c.name in a.only]
    rows = []
    for c in cases:
        r = run_case(c, a.timeout)
        rows.append(r)
        print(f"{r['case']:24s} rc {r['rc']:3d}  {r['events']:7,} ev  {r['wall_s']:6.2f} s  "
              f"{r['cpu_s']:6.2f} CPU-s  {r['peak_rss_mb']:6.1f} MB  {r['stderr_lines']} lines  "
              f"load {r['load_before'][0]:5.2f}  "
              f"{'held' if r['held'] else 'BROKE: ' + '; '.join(r['problems'])}", flush=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    now = dt.datetime.now(dt.timezone.utc)
    doc = {"when": now.isoformat(timespec="seconds"), "host": platform.node(),
           "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
           "commit": head, "promise": {"exit": [0, 2], "max_stderr_lines": MAX_LINES,
                                       "small_events": SMALL_EVENTS, "small_seconds": SMALL_SECONDS,
                                       "max_rss_mb": MAX_RSS_MB},
           "held": sum(r["held"] for r in rows), "cases": len(rows), "runs": rows}
    out = Path(a.out_dir) / f"wild-inputs-{now:%Y%m%d-%H%M}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{doc['held']} of {len(rows)} cases held the promise; wrote {out}")
    sys.exit(0 if doc["held"] == len(rows) else 1)


if __name__ == "__main__":
    main()
