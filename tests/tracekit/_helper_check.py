"""Run by test_load.py in a fresh interpreter: the decode with helpers (forked processes, or the
compiled scanner's thread) against the one without.

    python tests/tracekit/_helper_check.py same|fallback TRACE procs|thread

Prints ``OK <which> ...`` (or ``SKIP ...`` where no helper can be forked); exits non-zero on a
mismatch.
"""

from __future__ import annotations

import sys


def main() -> None:
    which, path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    from tracekit.trace import _columns, _parallel, _reader, _scanthread, load, loader

    if kind == "procs":
        if not _parallel.available():
            print("SKIP: no fork-safe helper process here")
            return
        _scanthread.ScanThread.start = classmethod(lambda cls: None)  # the fallback's helpers
        helper = _parallel.Helper
    else:
        if _columns._fastscan is None:
            print("SKIP: the compiled scanner is not built here")
            return
        helper = _scanthread.ScanThread
    serial = load(path, use_cache=False).traces[0]  # small file: one process
    loader.PARALLEL_MIN_BYTES = 0
    _reader._CHUNK = 4096
    _reader._READ_GZ = 2048
    pieces: list[int] = []
    failures: list[str] = []
    real_finish, real_collect = helper.finish, helper.collect

    def finish(self, sink):
        real_finish(self, sink)
        pieces.append(self.pieces)

    def collect(self, sink, *, wait=False):
        try:
            return real_collect(self, sink, wait=wait)
        except _parallel.HelperFailed as exc:
            failures.append(str(exc))
            raise

    helper.finish = finish
    helper.collect = collect
    par = load(path, use_cache=False).traces[0]
    assert par.events.equals(serial.events), "events differ"
    assert par.memory.equals(serial.memory), "memory differs"
    assert par.args.equals(serial.args), "args differ"
    assert list(par.events["name"].cat.categories) == list(serial.events["name"].cat.categories)
    assert par.metadata == serial.metadata and par.warnings == serial.warnings
    if which == "same":
        assert pieces and pieces[0] > 0, f"the helper decoded no piece: {pieces}"
        assert not failures, failures
    else:
        assert failures and "did not decode" in failures[0], failures
    print(f"OK {which} helper pieces {pieces} failures {len(failures)} events {len(par.events)}")


if __name__ == "__main__":
    main()
