"""tracekit's benchmarks: one runner per question, run from the repository root as
``python -m bench.<runner>`` (bench/README.md lists them); what they share is in
:mod:`bench.common`. Results go to ``bench/results/`` (the current file of each benchmark) and
each benchmark's method, figures and open questions to its ``bench/NOTES-<name>.md``."""
