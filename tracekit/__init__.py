"""tracekit: where do the steps of a recommendation-model training job go?"""

__version__ = "0.1.0"

_HANDLER_NAMES = ("on_trace_ready", "profiler_kwargs", "CheckFailed")


def __getattr__(name: str):
    """``tracekit.on_trace_ready``, ``tracekit.profiler_kwargs``, ``tracekit.CheckFailed``
    (``tracekit.handler``), imported on first use: ``import tracekit`` stays light."""
    if name in _HANDLER_NAMES:
        from tracekit import handler

        return getattr(handler, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
