"""The format number and the orders of keys that the writers and readers of tracekit's JSON
share. ``tracekit.report.schema`` describes every key; a test holds these tuples to its classes.
No classes here: a warm run (a report-cache hit) imports this, not the schema."""

FORMAT = 1
"""The format of every document (``"format"``): keys are only ever added, never renamed or
removed within a format."""
SERIES_POINTS = 1000
"""``schema.Allocator.series`` keeps at most this many points per device."""

HEADLINE_KEYS = (
    "steps", "step_source", "step_p50_ns", "step_p90_ns", "step_cpu_p50_ns", "step_cpu_p90_ns",
    "step_gpu_p50_ns",
    "step_gpu_p90_ns", "peak_allocated_bytes", "peak_reserved_bytes",
    "unused_at_peak_reserved_bytes", "unused_fraction", "mean_gap_ns", "mean_gap_idle_ns",
    "comm_overlap_ratio", "exposed_comm_ns", "exposed_memcpy_ns", "stall_count",
    "stall_total_ns", "stall_idle_after_ns", "bound", "bound_share", "poll_count",
    "poll_total_ns", "embedding_forward_share", "embedding_backward_share",
)
"""``schema.Headline``'s keys, in order."""
TEXT_KEYS = ("step_source", "bound")
"""Headline keys whose values are words, not figures."""
SECTION_KEYS = ("explain", "steps", "overlap", "gaps", "syncs", "allocator", "hta", "snapshot",
                "collectives", "identity", "embedding_bw", "profile", "skeleton")
"""The sections of a rank's object, in order."""
RANK_KEYS = ("source", "rank", "schema", "platform", "warnings", "rules", "headline",
             *SECTION_KEYS)
"""``schema.Rank``'s keys, in order."""


BRIEF_EXPLAIN_KEYS = ("bound", "bound_share", "breakdown", "findings", "overhead")
"""What a job reads of a rank's explain section (``tracekit.ranks.work.summary``) besides its
``steps``: ``serialise.explain_dict(brief=True)``'s keys (of ``overhead``, only
``BRIEF_OVERHEAD_KEYS``)."""
BRIEF_OVERHEAD_KEYS = ("scale", "traced_step_ns", "untraced_step_ns", "host_ns_per_step", "slow_host")
"""What a job reads of a rank's untraced estimate (``tracekit.ranks.job.joined_estimate``)."""
BRIEF_EXPLAIN_STEP_KEYS = ("step", "bound", "bound_share", "duration_ns")
"""... and of each of its steps."""
