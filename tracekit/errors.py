"""The one error hierarchy of tracekit.

Every error a user can cause is a ``TracekitError``. Library code raises them; only the CLI
entry point (``tracekit.cli.main``) catches them, prints ``tracekit: error: <message>`` as one
line on stderr and exits with ``exit_code``. Nothing else catches them, so library callers see
the exception itself, with one exception: the per-rank work of a job (``tracekit.ranks.work``)
turns the error of one rank's file into that rank's problem, so that the other ranks are still
analysed (the command then prints a line per problem and exits 2).
"""

from __future__ import annotations

import os


def display(path: str | os.PathLike) -> str:
    """``path`` as text that can be printed and JSON-encoded: bytes of a file name that are not
    UTF-8 (carried as surrogates by Python) are shown as ``\\xNN``."""
    s = os.fspath(path)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return os.fsencode(s).decode("utf-8", "backslashreplace")


class TracekitError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{display(path)}: {message}" if path else message)


class InputError(TracekitError):
    """A file or directory the user named cannot be read as asked (missing, unreadable)."""


class TraceFormatError(TracekitError):
    """The input exists but is not a Kineto trace tracekit can read (bad JSON, bad gzip...)."""


class EmptyTraceError(TraceFormatError):
    """The trace parsed but holds no events."""


class RulesError(TracekitError):
    """A phase-rules TOML file is missing, malformed or has an invalid pattern."""


class SnapshotError(TracekitError):
    """A memory-snapshot pickle cannot be read."""


class RuntimeConfigError(TracekitError):
    """The reference runtime was given an invalid configuration or cannot run here."""


class ClusterError(TracekitError):
    """The executor of a job's per-rank work cannot run it (an unreachable Dask scheduler, a
    cluster without workers, the ``[cluster]`` extra missing)."""
