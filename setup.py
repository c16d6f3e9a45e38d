"""The one compiled part of tracekit: ``tracekit.trace._fastscan`` (a C scanner that turns a
piece of a trace into columns). Optional: where it cannot be built (no compiler), the install
goes on and the loader decodes with msgspec alone, the same tables more slowly. Everything
else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.trace._fastscan",
            ["tracekit/trace/_fastscan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
