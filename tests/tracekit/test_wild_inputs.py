"""Issue 14, "inputs from the wild": every bug report as a test, on inputs that
``tests/damage.py`` makes from a hand-built trace. The promise: one clear line on stderr and
exit 2, or exit 0 with every changed figure explained by a warning; no traceback, no hang,
inputs never modified."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from tests import damage
from tests.damage import DROP
from tests.tracegen import TraceBuilder
from tests.tracekit.test_report import full_builder
from tracekit import api, reportcache
from tracekit.cli import main


def run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def headline(path, capsys, *extra):
    """(exit code, headline dict or None, stderr lines) of ``analyze --format json``."""
    code, out, err = run(["analyze", path, "--format", "json", "--no-hta", "--no-cache", *extra],
                         capsys)
    assert "Traceback" not in err
    doc = json.loads(out) if code == 0 else None
    return code, doc["analyses"][0]["headline"] if doc else None, err.splitlines()


def one_error(code, err_lines, *words):
    assert code == 2, err_lines
    assert len(err_lines) == 1 and err_lines[0].startswith("tracekit: error: "), err_lines
    for w in words:
        assert w in err_lines[0], err_lines


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture()
def good(tmp_path):
    """A hand-built trace (3 steps, kernels on two streams, NCCL, a sync, [memory] events) as a
    dict, and its path."""
    path = full_builder().write(tmp_path / "good.json")
    return damage.read_doc(path), path


# ---- tracebacks, hangs, memory ---------------------------------------------------------------


def test_invalid_utf8_in_a_name_is_read_with_a_warning(good, tmp_path, capsys):
    doc, path = good
    _, base, _ = headline(path, capsys)
    bad = damage.invalid_utf8(doc, damage.first(doc, cat="cpu_op"), tmp_path / "u.json")
    code, head, err = headline(bad, capsys)
    assert code == 0 and head == base
    assert len(err) == 1 and "bytes that are not UTF-8" in err[0] and "U+FFFD" in err[0]
    gz = damage.write_bytes(bad.read_bytes(), tmp_path / "u.json.gz")
    assert headline(gz, capsys)[1] == base


@pytest.mark.parametrize("kind", ["[]", "{}"])
def test_deep_nesting_is_one_error(tmp_path, capsys, kind):
    code, _, err = headline(damage.nested(5000, tmp_path / "n.json", kind=kind), capsys)
    one_error(code, err, "nested too deeply")


def test_a_file_name_that_is_not_utf8(good, tmp_path, capsys):
    _, path = good
    name = os.path.join(os.fsencode(tmp_path), b"tr\xff.json")
    with open(name, "wb") as f:
        f.write(open(path, "rb").read())
    cache = tmp_path / "cache"
    for _ in range(2):  # cold, then from the report cache
        code, out, err = run(["analyze", os.fsdecode(name), "--cache-dir", cache], capsys)
        assert code == 0 and err == "" and "tr\\xff.json" in out
    code, out, err = run(["analyze", os.fsdecode(name), "--format", "json", "--cache-dir", cache],
                         capsys)
    assert code == 0 and json.loads(out)["analyses"][0]["source"].endswith("tr\\xff.json")


def _cli(*args, timeout=60, cwd=None):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_fifo_and_devices_are_refused_without_reading(good, tmp_path):
    _, path = good
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    rules_fifo = tmp_path / "rules.toml"
    os.mkfifo(rules_fifo)
    for args, what in [
        (["analyze", fifo], "is a FIFO"),
        (["compare", path, fifo], "is a FIFO"),
        (["check", fifo, "--max", "stall_count=1"], "is a FIFO"),
        (["analyze", "/dev/zero"], "is a character device"),
        (["analyze", tmp_path / "zero.json"], "is a character device"),
        (["analyze", path, "--rules", rules_fifo], "is a FIFO"),
        (["analyze", path, "--snapshot", fifo], "is a FIFO"),
    ]:
        r = _cli(*args, "--cache-dir", tmp_path / "c", timeout=30)  # a hang is a failure
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and what in r.stderr, (args, r.stderr)


_RSS = textwrap.dedent("""
    import sys
    from tracekit.cli import main
    try:
        main(sys.argv[2:])
    finally:  # VmHWM: this process's peak (ru_maxrss would carry pytest's over from the fork)
        peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        with open(sys.argv[1], "w") as f:
            f.write(peak)
""")


def test_a_gzip_bomb_costs_bounded_memory(tmp_path):
    """256 MiB of zeros in a 256 KiB gzip: refused after MAX_PREFIX (64 MiB) of it; the issue's
    2 GB bomb took 5.2 GB of memory before its error."""
    bomb = damage.gzip_bomb(tmp_path / "bomb.json.gz", 256 << 20)
    rss = tmp_path / "rss"
    r = subprocess.run([sys.executable, "-c", _RSS, rss, "analyze", bomb, "--no-cache"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "no traceEvents array in its first 64 MiB" in r.stderr
    assert int(rss.read_text()) < 400 * 1024  # KiB: the zeros are never all held


# ---- inputs overwritten ----------------------------------------------------------------------


def test_out_never_overwrites_anything_read(good, tmp_path, capsys):
    _, path = good
    hard = tmp_path / "hard.json"
    os.link(path, hard)
    soft = tmp_path / "soft.json"
    soft.symlink_to(path)
    d = tmp_path / "ranks"
    d.mkdir()
    rank0 = d / "rank0.json"
    rank0.write_bytes(path.read_bytes())
    snap = tmp_path / "good.pickle"  # found beside good.json
    snap.write_bytes(b"not read here")
    before = {p: sha(p) for p in (path, rank0, snap)}
    for argv in (["analyze", path, "--out", hard], ["analyze", path, "--out", soft],
                 ["analyze", d, "--out", rank0], ["compare", path, d, "--out", rank0],
                 ["check", d, "--max", "stall_count=9", "--out", rank0],
                 ["analyze", path, "--out", snap]):
        code, _, err = run([*argv, "--no-cache"], capsys)
        one_error(code, err.splitlines(), "an input this command reads; it would be overwritten")
    assert {p: sha(p) for p in before} == before
    # a new file, even inside the input directory, is fine
    code, _, err = run(["analyze", d, "--out", d / "report.txt", "--no-cache", "--no-hta"],
                       capsys)
    assert (d / "report.txt").stat().st_size > 0, err
    # the directory is a job of world size 2 with rank 0 only: written, and the one missing
    # rank said (exit 2: not every rank was read)
    assert code == 2 and err.splitlines() == [
        f"tracekit: error: {d}: rank 1 of world size 2: no trace file"], err


# ---- wrong numbers without a warning ---------------------------------------------------------


@pytest.mark.parametrize("value", [None, DROP, "600", " 600 ", 1e300, True, [600]])
def test_one_unreadable_kernel_ts_is_left_out_and_named(good, tmp_path, capsys, value):
    doc, _ = good
    k = damage.first(doc, cat="kernel", name="gemm")
    code, head, err = headline(damage.write_doc(damage.with_event(doc, k, ts=value),
                                                tmp_path / "t.json"), capsys)
    # the figures are those of the trace without that kernel, with one warning naming it
    _, expected, _ = headline(damage.write_doc(damage.without_event(doc, k), tmp_path / "w.json"),
                              capsys)
    assert code == 0 and head == expected
    assert len(err) == 1 and "1 events could not be read and are left out" in err[0]
    assert "'gemm'" in err[0] and "kernel 1" in err[0] and "(GPU) may be off" in err[0]


def test_a_ts_string_with_spaces_shifts_nothing(good, tmp_path, capsys):
    doc, _ = good
    i = damage.first(doc, cat="cpu_op", name="aten::item")
    from tracekit.trace import load

    bad = load(damage.write_doc(damage.with_event(doc, i, ts=" 7 0 0 "), tmp_path / "s.json"),
               use_cache=False).traces[0]
    ref = load(damage.write_doc(damage.without_event(doc, i), tmp_path / "r.json"),
               use_cache=False).traces[0]
    assert bad.events[["name", "ts", "dur"]].equals(ref.events[["name", "ts", "dur"]])


def test_ns_written_as_us_is_an_error_not_nonsense(good, tmp_path, capsys):
    doc, _ = good
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = int(e["ts"] * 1000) + 1_700_000_000_000_000_000
    code, _, err = headline(damage.write_doc(doc, tmp_path / "ns.json"), capsys)
    one_error(code, err, "none of its", "beyond int64 ns", "nanoseconds written as µs?")


def test_every_ts_unreadable_is_an_error(good, tmp_path, capsys):
    doc, _ = good
    for e in doc["traceEvents"]:
        e["ts"] = "soon"
    code, _, err = headline(damage.write_doc(doc, tmp_path / "x.json"), capsys)
    one_error(code, err, "none of its", "could be read")


def test_a_rank_file_cut_before_its_events_is_not_dropped(tmp_path, capsys):
    d = tmp_path / "job"
    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2)
        b.profiler_step(1, 0, 100)
        b.write(d / f"rank{r}.json")
    text = (d / "rank1.json").read_bytes()
    damage.truncate(text, text.index(b"traceEvents") - 3, d / "rank1.json")
    code, _, err = run(["analyze", d, "--no-cache", "--no-hta"], capsys)
    one_error(code, err.splitlines(), "rank1.json")


def test_report_cache_checks_its_entry_and_the_whole_file(good, tmp_path, capsys):
    _, path = good
    cache = tmp_path / "cache"
    argv = ["analyze", path, "--format", "json", "--no-hta", "--cache-dir", cache]
    code, first_out, _ = run(argv, capsys)
    (entry,) = (cache / "reports").iterdir()
    # an edited entry is not served
    data = entry.read_bytes()
    entry.write_bytes(data.replace(b'"steps": 3', b'"steps": 4', 1))
    assert b'"steps": 4' in entry.read_bytes()
    assert run(argv, capsys)[1] == first_out
    # a same-size edit in the middle of the trace with its mtime put back is a new trace
    st = os.stat(path)
    text = path.read_bytes()
    i = text.index(b'"dur": 100', text.index(b'"gemm"'))  # gemm 100 us -> 900 us
    path.write_bytes(text[:i] + b'"dur": 900' + text[i + 10:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    code, out, _ = run(argv, capsys)
    assert code == 0 and json.loads(out)["analyses"][0]["headline"] != \
        json.loads(first_out)["analyses"][0]["headline"]
    assert api.report_key(str(path), reportcache.rules_bytes(None), False) is not None


# ---- misleading messages ---------------------------------------------------------------------


def test_huge_dur_is_one_warning_no_numpy_noise(good, tmp_path, capsys):
    doc, _ = good
    k = damage.first(doc, cat="kernel", name="gemm")
    code, _, err = headline(damage.write_doc(damage.with_event(doc, k, dur=1e300),
                                             tmp_path / "d.json"), capsys)
    assert code == 0 and len(err) == 1 and "dur missing or not a number: 1" in err[0]
    assert "RuntimeWarning" not in " ".join(err)


def test_trace_events_of_non_events(tmp_path, capsys):
    p = damage.write_bytes(b'{"traceEvents": [1, null, [2], "x"]}', tmp_path / "n.json")
    code, _, err = headline(p, capsys)
    one_error(code, err, "4 elements that are not events")


def test_bom_is_read_utf16_is_named(good, tmp_path, capsys):
    doc, path = good
    _, base, _ = headline(path, capsys)
    code, head, err = headline(damage.bom(doc, tmp_path / "b.json"), capsys)
    assert code == 0 and head == base and err == []
    code, _, err = headline(damage.utf16(doc, tmp_path / "u16.json"), capsys)
    one_error(code, err, "UTF-16")


def test_check_units_are_required_and_finite(good, capsys):
    _, path = good
    for spec, word in [("stall_total=5", "give a unit"), ("peak_reserved=6", "give a unit"),
                       ("stall_total=1e999", "not a finite number")]:
        code, _, err = run(["check", path, "--max", spec, "--no-cache"], capsys)
        one_error(code, err.splitlines(), word)
    for spec in ("stall_total=5µs", "stall_total=5μs", "stall_total_ns=5000"):
        code, out, err = run(["check", path, "--max", spec, "--no-cache"], capsys)
        assert code in (0, 1) and "<= 0.005 ms" in out, (spec, err)


def test_a_figure_that_cannot_be_measured_says_why(tmp_path, capsys):
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.kernel("k", 10, 5, launch_at=1)
    path = b.write(tmp_path / "t.json")
    code, out, _ = run(["check", path, "--min", "comm_overlap_ratio=80%", "--no-cache"], capsys)
    assert code == 1
    assert "comm_overlap_ratio of" in out and "cannot be measured: no communication" in out
    code, out, _ = run(["check", path, "--min", "comm_overlap_ratio=80%", "--format", "json",
                        "--no-cache"], capsys)
    assert json.loads(out)["checks"][0]["reason"].startswith("no communication")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_cache_dir_is_said_once(good, tmp_path, capsys):
    _, path = good
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code, _, err = run(["analyze", path, "--no-hta", "--cache-dir", ro], capsys)
    finally:
        ro.chmod(stat.S_IRWXU)
    assert code == 0 and err.count("cannot write the cache") == 1


def test_an_unwritable_cache_dir_is_said_once(good, tmp_path, capsys):
    _, path = good
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache dir would be")
    code, _, err = run(["analyze", path, "--no-hta", "--cache-dir", blocker / "c"], capsys)
    assert code == 0 and err.count("\n") == 1 and "cannot write the cache" in err


# ---- fidelity --------------------------------------------------------------------------------


def test_rocm_memory_events_device_type_6(tmp_path, capsys):
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.memory(10, 1024, total_allocated=1024, total_reserved=2048)
    doc = b.to_dict()
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            e["args"]["Device Type"] = 6
    code, head, err = headline(damage.write_doc(doc, tmp_path / "rocm.json"), capsys)
    assert code == 0 and head["peak_allocated_bytes"] == 1024 and head["peak_reserved_bytes"] == 2048


def test_torchrec_benchmark_snapshot_name(tmp_path):
    from tracekit._files import find_snapshot

    trace = tmp_path / "trace-sparse-rank0.json.gz"
    trace.write_bytes(b"")
    (tmp_path / "memory-sparse-rank0.pickle").write_bytes(b"")
    assert find_snapshot(trace) == tmp_path / "memory-sparse-rank0.pickle"


def test_nothing_printed_points_outside_the_repository(capsys):
    code, out, _ = run(["analyze", "--help"], capsys)
    assert code == 0 and "docs/metrics.md" in out and "DESIGN" not in out
    code, out, _ = run(["check", "--help"], capsys)
    assert "docs/metrics.md" in out


def test_inputs_unchanged_and_gzip_untouched(good, tmp_path, capsys):
    doc, path = good
    gz = damage.write_doc(doc, tmp_path / "g.json.gz")
    before = sha(gz)
    t0 = time.monotonic()
    assert headline(gz, capsys)[0] == 0
    assert sha(gz) == before and time.monotonic() - t0 < 30
    with gzip.open(gz) as f:
        assert json.load(f) == doc


@pytest.mark.parametrize("inner,code", [(b"[" * 3000 + b"]" * 3000, 2), (b'"a\xffb"', 0)])
def test_the_read_whole_layout_keeps_the_promise(tmp_path, capsys, inner, code):
    """"traceEvents" inside a string before the real key makes the reader decode the whole
    document: deep nesting and bad UTF-8 there are one line too, not a traceback."""
    text = (b'{"meta": "a \\"traceEvents\\": [ b", "traceEvents": [{"ph": "X", "cat": "cpu_op", '
            b'"name": ' + (inner if code == 0 else b'"a"') + b', "pid": 1, "tid": 1, "ts": 1, '
            b'"dur": 1' + (b', "args": {"x": ' + inner + b"}" if code == 2 else b"") + b"}]}")
    got, _, err = headline(damage.write_bytes(text, tmp_path / "w.json"), capsys)
    assert got == code and len(err) == 1 and "Traceback" not in " ".join(err)
