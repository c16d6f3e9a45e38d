"""Issue 29's promise, property-based, on the commands that came after the first round:
``explain`` with random ``--what-if``s, ``explain --annotate`` to random destinations, and
``analyze`` of rank directories built from damaged ranks. Each case runs the CLI in a process
of its own (its time and peak memory are its own), on a trace the first round's mutations
(``tests/damage.py``, ``test_wild_property.mutation``) damaged.

On every case: exit 0 or 2; at most 3 lines on stderr; no traceback; exit 2 is exactly one
``tracekit: error:`` line; at most 10 s of CPU (the process and its children: the wall time of a
busy machine says nothing of tracekit; a hang is caught by a 60 s wall limit) and 1 GB (cases of
at most 10 k events); every input
byte-identical afterwards (the traces, the rules file, the other files of the directory); and
with exit 0, no figure outside its physical range (a negative duration, size or busy time; a
step longer than the trace) without a warning.

CI runs a fixed (derandomized) set of ``EXAMPLES`` cases (about a minute on 2 cores);
``TRACEKIT_FUZZ_EXAMPLES=N`` runs N random ones instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import damage
from tests.tracekit.ranks.jobhelp import Coll, write_job
from tests.tracekit.test_wild_property import SOURCES, _doc, mutation

EXAMPLES = int(os.environ.get("TRACEKIT_FUZZ_EXAMPLES", "12"))
MAX_SECONDS = 10.0
"""CPU seconds of one case (its process and its children)."""
MAX_WALL_SECONDS = 60.0
"""Wall seconds of one case: a hang, whatever the machine's load."""
MAX_RSS_KB = 1 << 20  # 1 GB

_DRIVER = textwrap.dedent("""
    import resource, sys, time
    t = time.perf_counter()
    from tracekit.cli import main
    code = 0
    try:
        main(sys.argv[2:])
    except SystemExit as e:
        code = e.code
    finally:  # VmHWM: this process's own peak
        peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        cpu = sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                    resource.getrusage(resource.RUSAGE_CHILDREN)))
        with open(sys.argv[1], "w") as f:
            f.write(f"{peak} {cpu} {time.perf_counter() - t}")
    sys.exit(code)
""")


def _cli(tmp: Path, *args) -> tuple[int, str, list[str], int, float]:
    """(exit code, stdout, stderr lines, peak RSS KB, CPU seconds inside main) of one CLI run;
    its wall time inside main at most ``MAX_WALL_SECONDS``."""
    probe = tmp / "probe"
    r = subprocess.run([sys.executable, "-c", _DRIVER, str(probe), *map(str, args)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TRACEKIT_CACHE_DIR": str(tmp / "cache")})
    rss, cpu, wall = probe.read_text().split()
    assert float(wall) <= MAX_WALL_SECONDS, (args, wall)
    return r.returncode, r.stdout, r.stderr.splitlines(), int(rss), float(cpu)


def _digests(paths) -> dict:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest()
            for p in paths if Path(p).is_file()}


def _kept_promise(label, code, err, rss, took):
    assert not any("Traceback" in ln for ln in err), (label, err)
    assert code in (0, 2), (label, code, err)
    assert len(err) <= 3, (label, err)
    if code == 2:
        assert len(err) == 1 and err[0].startswith("tracekit: error: "), (label, err)
    else:
        assert all(ln.startswith("tracekit: ") for ln in err), (label, err)
    assert took <= MAX_SECONDS, (label, took)
    assert rss <= MAX_RSS_KB, (label, rss)


def _in_range(label, figures: dict, span_ns: float | None, warned: bool):
    """Durations, sizes and busy times non-negative, a step no longer than the trace; else a
    warning was given."""
    bad = {}
    for k, v in figures.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v < 0 \
                and (k.endswith(("_ns", "_bytes")) or "p50" in k or "p90" in k):
            if k.startswith("gap") or "gap" in k:  # a gap may be negative (the lookup ran ahead)
                continue
            bad[k] = v
        if span_ns is not None and k.startswith("step_") and k.endswith("_ns") \
                and isinstance(v, (int, float)) and v == v and v > span_ns:
            bad[k] = v  # a step longer than the trace
    assert not bad or warned, (label, bad)


# ---- the cases --------------------------------------------------------------------------------

FACTORS = ["2", "1", "1e300", "0", "0.5", "1e-21", "-1", "nan", "inf", "3x", ""]
REGEXES = [".*", "gemm", "(a+)+$", "(?=x)y", "(", "nccl|rccl", "\\b" * 3, "tbe::" * 50, "all"]


@st.composite
def what_if(draw) -> str:
    kind = draw(st.sampled_from(["kernel", "phase", "host", "sync"]))
    factor = draw(st.sampled_from(FACTORS))
    pattern = draw(st.one_of(st.sampled_from(REGEXES),
                             st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                     max_size=12)))
    if kind == "host":
        return f"host={factor}"
    if kind == "sync":
        return f"sync:{pattern}"
    if kind == "phase":
        pattern = draw(st.sampled_from(["optimizer", "lookup", "other", pattern]))
    return f"{kind}:{pattern}={factor}"


class _Blob(bytes):
    """A trace's bytes, shown short in a failing case's report."""

    def __repr__(self) -> str:
        return f"<{len(self):,} bytes>"


@st.composite
def damaged(draw) -> tuple[str, bytes, bool]:
    """A damaged trace (the first round's mutations), or the trace as it is."""
    if draw(st.booleans()):
        i, label, data, gz = draw(mutation())
        return label, _Blob(data), gz
    i = draw(st.sampled_from(range(len(SOURCES))))
    return f"intact{i}", _Blob(damage.text_of(_doc(i))), draw(st.booleans())


def _write(tmp: Path, name: str, data: bytes, gz: bool) -> Path:
    return damage.write_bytes(data, tmp / (name + (".json.gz" if gz else ".json")), gz=gz)


_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                     derandomize="TRACEKIT_FUZZ_EXAMPLES" not in os.environ,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow, HealthCheck.data_too_large])


@_SETTINGS
@given(case=damaged(), specs=st.lists(what_if(), min_size=1, max_size=3))
def test_explain_with_random_what_ifs(case, specs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wi")
    label, data, gz = case
    path = _write(tmp, "case", data, gz)
    before = _digests([path])
    args = ["explain", path, "--format", "json"]
    for s in specs:
        args += ["--what-if", s]
    code, out, err, rss, took = _cli(tmp, *args)
    label = (label, specs)
    _kept_promise(label, code, err, rss, took)
    assert _digests([path]) == before, label
    if code == 0:
        doc = json.loads(out)
        for ex in doc["explain"]:
            for w in ex.get("what_ifs") or []:
                _in_range(label, {k: v for k, v in w.items() if k.endswith("_ns")}, None,
                          bool(err) or bool(ex.get("warnings")))


DESTS = ["new.json.gz", "new.json", "", "@input", "@stem", "@rules", "/dev/null", "@dir"]


@_SETTINGS
@given(case=damaged(), dest=st.sampled_from(DESTS), with_rules=st.booleans())
def test_explain_annotate_to_random_destinations(case, dest, with_rules, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("an")
    label, data, gz = case
    stem = _write(tmp, "case", data, gz)
    path = stem.rename(str(stem) + ".tmp")  # the input is named like a temporary of "stem"
    rules = tmp / "rules.toml"
    rules.write_text("inherit = true\n")
    target = {"@input": str(path), "@stem": str(stem), "@rules": str(rules),
              "@dir": str(tmp)}.get(dest, str(tmp / dest) if dest and dest[0] != "/" else dest)
    inputs = [path] + ([rules] if with_rules else [])  # the rules: read only if given
    before = _digests(inputs)
    args = ["explain", path, "--annotate", target, "--no-cache"]
    if with_rules:
        args += ["--rules", rules]
    code, _, err, rss, took = _cli(tmp, *args)
    label = (label, dest, with_rules)
    _kept_promise(label, code, err, rss, took)
    assert _digests(inputs) == before, label
    if dest in ("", "@input", "@dir", "/dev/null") or (dest == "@rules" and with_rules):
        assert code == 2, (label, err)
    assert not [p for p in tmp.iterdir() if p.name.startswith(".tracekit-")], label


@_SETTINGS
@given(ranks=st.lists(st.one_of(st.just(None), damaged()), min_size=1, max_size=4),
       world=st.sampled_from([None, 8]))
def test_rank_directories_of_damaged_ranks(ranks, world, tmp_path_factory):
    """Good ranks of a hand-built job beside damaged ones (None: a good rank)."""
    tmp = tmp_path_factory.mktemp("job")
    d = tmp / "job"
    good = [i for i, r in enumerate(ranks) if r is None]
    write_job(d, [Coll("0", "all_to_allv", 1, {r: 100 + 10 * r for r in range(len(ranks))}, 400)],
              world=world or len(ranks), ranks=good)
    labels = []
    for i, r in enumerate(ranks):
        if r is not None:
            label, data, gz = r
            _write(d, f"trace_rank{i}", data, gz)
            labels.append(label)
    files = sorted(d.iterdir())
    before = _digests(files)
    t0 = time.monotonic()
    code, out, err, rss, took = _cli(tmp, "analyze", d, "--format", "json", "--no-hta",
                                     "--workers", "1")
    label = (labels, world, time.monotonic() - t0)
    # a job: exit 2 when a rank is not read, its problems folded into the error line(s)
    assert not any("Traceback" in ln for ln in err), (label, err)
    assert code in (0, 2) and len(err) <= 3, (label, code, err)
    assert code == 0 or any(ln.startswith("tracekit: error: ") for ln in err), (label, err)
    assert took <= MAX_SECONDS and rss <= MAX_RSS_KB, (label, took, rss)
    assert _digests(files) == before and sorted(d.iterdir()) == files, label
    if code == 0 or out:
        doc = json.loads(out)
        for a in doc.get("analyses") or []:
            ident = a.get("identity") or {}
            span = (ident["end_ns"] - ident["start_ns"]
                    if ident.get("end_ns") is not None and ident.get("start_ns") is not None
                    else None)
            _in_range(label, a.get("headline") or {}, span, bool(err) or bool(a["warnings"]))
