"""Whether this process may fork a helper: the loader's decoding helpers, the prefetch of a cold
``tracekit analyze`` and the sections computed in a child (``tracekit.analyses.forked``) all
ask here. Standard library only."""

from __future__ import annotations

import os
import sys
import threading

ENV_DISABLE = "TRACEKIT_LOAD_PARALLEL"
"""Set to ``0`` to never start the helper (nor any other forked child: the prefetch, the
explain child of ``tracekit.analyses.forked``)."""


def available(allow_threads: tuple[str, ...] = ()) -> bool:
    """Whether a helper can be forked safely here and is worth it (more than one CPU): no
    thread running but this one (and threads named in ``allow_threads``, which the caller
    knows the child does not need)."""
    if os.environ.get(ENV_DISABLE, "1") == "0":
        return False
    if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2:
        return False
    me = threading.current_thread()
    return all(t is me or t.name in allow_threads for t in threading.enumerate())
