"""tracekit's compiled parts: ``tracekit.trace._fastscan`` (a C scanner that turns a piece of a
trace into columns) and ``tracekit.graph._replaycore`` (the replay of a dependency graph in one
pass). Both optional: where they cannot be built (no compiler), the install goes on and the
pure-Python paths (msgspec, numpy) compute the same results more slowly. Everything else is
declared in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.trace._fastscan",
            ["tracekit/trace/_fastscan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "tracekit.graph._replaycore",
            ["tracekit/graph/_replaycore.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
