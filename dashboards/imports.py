"""The imports the views need beyond the first page, and the gate that keeps them apart from the
app's answers.

The first page (the overview, from tracekit's report cache) needs neither numpy nor pandas; every
other view does (``dashboards.figures``, ``dashboards.results``, ``dashboards.timeline``, about
0.7 s of imports). They run once the first page has been answered (``Catalog.prefetch``) or when
something needs them earlier (``ensure``), never while the browser loads the page's scripts:
importing them then, in a thread beside the server's, held the GIL against the threads serving
the scripts and put 0.6-1.1 s on the first page (``bench/NOTES-dashboard.md``).

Dash writes its JSON with plotly's encoder, which looks pandas and numpy up in ``sys.modules``:
while another thread is importing pandas it finds the module half made and fails with a 500
(``partially initialized module 'pandas' has no attribute 'NaT'``). So the app's JSON requests and
these imports never run at the same time (``ImportGate``): requests run side by side, the imports
run alone (they wait for the requests in flight; new requests wait for them).
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MODULES = ("numpy", "pandas", "plotly.io.json", "dashboards.timeline", "dashboards.figures", "dashboards.results")
"""What the views but the overview import (numpy and pandas among them); ``plotly.io.json``: the
encoder Dash answers with, which reads pandas."""


def import_modules() -> None:
    """Import ``MODULES``."""
    for name in MODULES:
        importlib.import_module(name)


class ImportGate:
    """The app's requests (``request``) run side by side; ``ensure`` runs the imports once, alone:
    it waits for the requests in flight to end, and requests that come meanwhile wait for it.

    A request that itself needs the imports (a view shown before they ran) steps out while they
    run, so two such requests never wait for each other."""

    def __init__(self, run: Callable[[], None] = import_modules) -> None:
        """``run``: the imports (``import_modules``)."""
        self._run = run
        self._cond = threading.Condition()
        self._active = 0
        self._importing = False
        self._inside = threading.local()
        self.done = threading.Event()
        """Set once the imports have run."""

    @contextmanager
    def request(self) -> Iterator[None]:
        """The span of one of the app's requests: waits while the imports run."""
        if self.done.is_set():
            yield
            return
        with self._cond:
            while self._importing:
                self._cond.wait()
            self._active += 1
        self._inside.depth = getattr(self._inside, "depth", 0) + 1
        try:
            yield
        finally:
            self._inside.depth -= 1
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def ensure(self) -> None:
        """Run the imports unless they have run (or wait for the thread running them)."""
        if self.done.is_set():
            return
        inside = getattr(self._inside, "depth", 0) > 0
        with self._cond:
            if inside:  # step out: the imports wait for no request of this thread's
                self._active -= 1
                self._cond.notify_all()
            while self._importing:
                self._cond.wait()
            mine = not self.done.is_set()
            if mine:
                self._importing = True
                while self._active:
                    self._cond.wait()
        try:
            if mine:
                self._run()
                self.done.set()
        finally:
            with self._cond:
                if mine:
                    self._importing = False
                if inside:
                    self._active += 1
                self._cond.notify_all()


GATE = ImportGate()
"""The process's gate: the modules a process has imported are every thread's."""


def ensure() -> None:
    """``GATE.ensure()``: numpy, pandas and the views' modules imported, no request answering meanwhile."""
    GATE.ensure()


def module(name: str) -> Any:
    """The module ``name`` of the views (``dashboards.figures``...), the imports ensured first."""
    ensure()
    return importlib.import_module(name)


def without_notebooks() -> None:
    """Keep Dash from importing IPython in this process (call it before ``import dash``; nothing
    when IPython is imported already).

    Dash imports IPython, and with it comm, nest_asyncio and requests, whenever it is installed
    (HolisticTraceAnalysis installs it, through jupyterlab), for apps run inside a notebook: 0.2 s
    of CPU at every start of ``tracekit dashboard``, a process that is never a notebook. A None in
    ``sys.modules`` makes ``import IPython`` fail as if it were not installed, which Dash and
    plotly take as "not in a notebook"."""
    sys.modules.setdefault("IPython", None)
