"""bench/common/host.py: the CPU choice worked out by hand, pinning applied to real threads (in a child
process, so the test process keeps its CPUs), the GC guard, the host probe and the counters."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from bench.common.host import ThreadCounters, choose_cpus, host_probe, parse_cpu_list, parse_interrupts, quiet_gc

REPO = Path(__file__).resolve().parents[2]

INTERRUPTS = """\
           CPU0       CPU1       CPU2       CPU3
  24:        900          0          5          0  IO-APIC   5-edge      ACPI:Ged
  30:        100         20          5          7  PCI-MSIX  nvidia
 NMI:          1          1          1          1   Non-maskable interrupts
 ERR:          0
"""


def test_cpu_lists_and_interrupts():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("5") == {5} and parse_cpu_list("") == set()
    # every line's per-CPU columns summed; a line with fewer columns (ERR) adds what it has
    assert parse_interrupts(INTERRUPTS) == {0: 1001, 1: 21, 2: 11, 3: 8}
    assert parse_interrupts("") == {}


def test_the_main_cpu_is_the_quietest_but_cpu0_and_its_sibling_is_left_empty():
    irq = {0: 1001, 1: 21, 2: 11, 3: 8}
    # CPU 3 has the fewest interrupts; its SMT sibling 1 is left out of the others' set
    assert choose_cpus({0, 1, 2, 3}, irq, {3: {1}, 1: {3}}) == (3, {0, 2})
    # CPU 0 never, even with no interrupts; ties go to the highest number
    assert choose_cpus({0, 1, 2}, {0: 0, 1: 5, 2: 5}, {}) == (2, {0, 1})
    # a sibling that is every other CPU: the others keep it rather than have none
    assert choose_cpus({0, 1}, {}, {1: {0}}) == (1, {0})
    # only CPU 0 allowed: there is no other choice
    assert choose_cpus({0}, {}, {}) == (0, {0})
    # two ranks on one host: each its own main CPU, never two on one core, both cores left empty
    sib = {1: {5}, 5: {1}, 2: {6}, 6: {2}, 3: {7}, 7: {3}}
    irq = {c: 10 for c in range(8)} | {3: 1, 7: 2}
    cpus = set(range(8))
    assert choose_cpus(cpus, irq, sib, rank=0, ranks=2) == (3, {0, 1, 4, 5})  # 3 and 7 share a core: 7 is skipped
    assert choose_cpus(cpus, irq, sib, rank=1, ranks=2) == (6, {0, 1, 4, 5})  # then the highest of the rest; 2 and 7 left empty
    # shift: each pass of the benchmark starts further down the order (CPU 0 stays last)
    assert choose_cpus({0, 1, 2, 3}, {}, {}, shift=1)[0] == 2 and choose_cpus({0, 1, 2, 3}, {}, {}, shift=3)[0] == 3


PIN_CHILD = textwrap.dedent("""
    import json, os, threading
    from bench.common.host import HostPin
    stop = threading.Event()
    def wait(name):
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name)
        stop.wait()
    threads = [threading.Thread(target=wait, args=(n,)) for n in ("pt_autograd_0", "worker")]
    for t in threads:
        t.start()
    while any(t.native_id is None for t in threads):
        pass
    import time; time.sleep(0.2)  # the names are written
    pin = HostPin(min_cpus=2)
    moved = pin.apply()
    out = {"status": pin.status, "main_cpu": pin.main_cpu, "others": list(pin.others), "moved": moved,
           "main": sorted(os.sched_getaffinity(0)),
           "autograd": sorted(os.sched_getaffinity(threads[0].native_id)),
           "worker": sorted(os.sched_getaffinity(threads[1].native_id))}
    stop.set()
    print(json.dumps(out))
""")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or not Path("/proc/self/task").is_dir(),
                    reason="needs Linux and 2 CPUs")
def test_pinning_puts_the_main_thread_alone_and_the_autograd_thread_with_it():
    r = subprocess.run([sys.executable, "-c", PIN_CHILD], capture_output=True, text=True, timeout=60,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"].startswith("on:") and out["main_cpu"] != 0
    assert out["main"] == [out["main_cpu"]] == out["autograd"]
    assert out["worker"] == out["others"] and out["main_cpu"] not in out["others"]
    assert out["moved"] >= 1  # the worker (and whatever else the interpreter runs)


def test_pinning_is_off_with_too_few_cpus_or_when_asked():
    from bench.common.host import HostPin

    few = HostPin(min_cpus=10_000)
    assert few.status.startswith("off:") and few.main_cpu is None and few.apply() == 0
    assert HostPin(enabled=False, why_not="a CPU smoke run").status == "off: a CPU smoke run"
    with pytest.raises(ValueError):
        HostPin(min_cpus=1)


class _Node:
    pass


def test_quiet_gc_collects_first_and_is_off_inside():
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle only the collector frees
    ref = weakref.ref(a)
    del a, b
    assert gc.isenabled()
    try:
        with quiet_gc():
            assert ref() is None and not gc.isenabled()
            assert gc.get_freeze_count() > 0  # what survived is left out of later collections
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_host_probe_and_thread_counters():
    us = host_probe(ops=200)
    assert 0 < us < 1000
    start = ThreadCounters.now()
    x = 0
    for i in range(200_000):  # some CPU time on this thread
        x += i
    got = ThreadCounters.now().since(start)
    assert got["involuntary_switches"] >= 0 and got["voluntary_switches"] >= 0
    assert 0 < got["thread_cpu_share"] <= 1.5
    if Path("/proc/stat").is_file():
        assert got["all_ticks"] >= got["steal_ticks"] >= 0 and got["irq_ticks"] >= 0
