"""What tracekit writes: results as JSON values, and those values as text.

- ``schema``: the JSON as code (one ``TypedDict`` per object; ``problems`` checks a value);
  ``keys``: the format number and the key orders (what a warm run needs of it).
- ``serialise``: results -> JSON values (``to_dict(analysis)``: one rank's ``schema.Rank``;
  ``explain_dict``, ``document``, ``compare_document``).
- one renderer per output, each from the JSON values, so that a cached report prints without
  the trace, numpy or pandas: ``rank_text`` (``tracekit analyze``, one trace), ``job_text``
  (a directory as one job), ``ops_text`` (``analyze --tables``: kernels and operators),
  ``explain_text`` (``tracekit explain``; its findings also head the rank text),
  ``compare_text``, ``check_text``, ``diff_text`` (``tracekit diff``); ``tables`` holds what
  they share.

Results never import this package; it reads them by their fields and imports no analysis.
The names below are the ones other code uses; the package imports only the standard library.
"""

from __future__ import annotations

from tracekit.report.check_text import render_check
from tracekit.report.compare_text import COMPARE_ROWS, render_compare
from tracekit.report.explain_text import (render_explain, text_explain,
                                          text_findings, text_path, would_not_help)
from tracekit.report.diff_text import render_diff
from tracekit.report.job_text import headline as job_headline, render_job
from tracekit.report.ops_text import TABLE_NAMES, render_tables
from tracekit.report.rank_text import render_rank, render_text
from tracekit.report.keys import (FORMAT, HEADLINE_KEYS, RANK_KEYS, SECTION_KEYS, SERIES_POINTS,
                                  TEXT_KEYS)
from tracekit.report.serialise import (compare_document, diff_document, document, explain_dict,
                                       explain_document, headline, jsonable, path_rows,
                                       snapshot_dict, tables_dict, to_dict)
from tracekit.report.tables import (bound_text, clip, fmt_bytes, fmt_figure, limited, ms, pct,
                                    ranges, table, unit_of)

__all__ = [
    "COMPARE_ROWS", "FORMAT", "HEADLINE_KEYS", "RANK_KEYS", "SECTION_KEYS",
    "SERIES_POINTS", "TABLE_NAMES", "TEXT_KEYS", "bound_text", "clip", "compare_document", "diff_document",
    "document",
    "explain_dict", "explain_document", "fmt_bytes", "fmt_figure", "headline", "jsonable", "limited", "ms",
    "path_rows", "pct", "ranges", "render_check", "render_compare", "render_diff", "render_explain",
    "job_headline", "render_job", "render_rank", "render_tables", "render_text", "snapshot_dict", "table",
    "tables_dict", "text_explain",
    "text_findings", "text_path", "to_dict", "unit_of", "would_not_help",
]
