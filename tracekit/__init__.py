"""tracekit: where do the steps of a recommendation-model training job go?"""

__version__ = "0.1.0"

_HANDLER_NAMES = ("on_trace_ready", "profiler_kwargs", "CheckFailed")


def __getattr__(name: str):
    """``tracekit.on_trace_ready``, ``tracekit.profiler_kwargs``, ``tracekit.CheckFailed``
    (``tracekit.handler``, a front door beside ``tracekit.api``), resolved on first use (PEP
    562): ``import tracekit`` imports nothing, and the package root, the bottom layer, depends on
    no layer above it when it is imported (tests/test_layers.py)."""
    if name in _HANDLER_NAMES:
        import importlib

        return getattr(importlib.import_module("tracekit.handler"), name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
