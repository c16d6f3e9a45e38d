"""The JSON that tracekit writes, as code: one ``TypedDict`` per object, and a checker.

``keys.FORMAT`` (1): keys are only ever added, never renamed or removed within a format. Times are
integer nanoseconds (keys ending ``_ns``; percentiles and means may be fractional), memory is
bytes, ratios are 0..1; a figure that cannot be measured is ``null``. A table is a list of row
objects whose keys are the column names given here. Columns documented as ``-1`` for "none" in
the analyses keep ``-1``; NaN becomes null.

The documents: ``AnalyzeDocument`` (``tracekit analyze --format json``, and
``tracekit.api.job_document`` for one directory), ``ExplainDocument`` (``tracekit explain``),
``CompareDocument`` (``tracekit compare``) and ``CheckDocument`` (``tracekit check``). A rank's
object is ``Rank``; a directory analysed as one job is ``Job``. In the annotations, ``float``
is any JSON number, ``int`` a whole one.

``problems(value, schema)`` lists where a value departs from a schema (``[]``: it conforms);
the tests hold every document tracekit writes to these classes, so a key that is added,
renamed or typed differently in the output must be changed here too. ``tracekit.report.keys``
holds the format number and the key orders (a test holds them to these classes): the writers
import that, not this module, so that a warm run does not build these classes. Standard
library only.
"""

import types
import typing
from typing import Any, Literal, TypedDict, Union

Bound = Literal["host", "gpu", "communication", "sync"]
"""What bounds a step: the class with the largest share of its critical path (``host``;
``gpu`` = compute + memcpy; ``communication``; ``sync``)."""


# ---- one rank (``tracekit analyze``'s ``analyses``) ---------------------------------------------

class Headline(TypedDict):
    """The figures ``compare`` puts side by side and ``check`` tests (``keys.HEADLINE_KEYS``;
    ``keys.TEXT_KEYS`` are words, not figures)."""

    steps: int
    step_source: str
    step_p50_ns: float | None
    """P50 of the step time (``docs/metrics.md``: the one definition) over the counted steps."""
    step_p90_ns: float | None
    step_cpu_p50_ns: float | None
    """The CPU span (the ProfilerStep annotation)'s P50."""
    step_cpu_p90_ns: float | None
    step_gpu_p50_ns: float | None
    """The GPU span's P50 (first start to last end of a step's GPU work)."""
    step_gpu_p90_ns: float | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    unused_at_peak_reserved_bytes: int | None
    unused_fraction: float | None
    mean_gap_ns: float | None
    mean_gap_idle_ns: float | None
    comm_overlap_ratio: float | None
    exposed_comm_ns: int
    exposed_memcpy_ns: int
    stall_count: int
    stall_total_ns: int
    stall_idle_after_ns: int
    bound: Bound | None
    bound_share: float | None
    poll_count: int
    """cudaEventQuery/cudaStreamQuery calls: they return at once, they are not stalls."""
    poll_total_ns: int
    embedding_forward_share: float | None
    """The embedding lookups' (forward) bandwidth over the GPU's peak memory bandwidth
    (``EmbeddingBw``); null without a modelled call or a known GPU."""
    embedding_backward_share: float | None
    """The same for the embedding backward with its fused update: an upper bound (one row read
    and written per lookup)."""


class TopItem(TypedDict):
    """One of a step's largest items on its critical path: its time grouped by lane, name and
    category."""

    lane: str
    name: str
    category: str
    ns: int
    count: int


class _ExplainStep(TypedDict):
    step: int
    start_ns: int
    end_ns: int
    duration_ns: int
    bound: Bound | None
    bound_share: float | None
    breakdown: dict[str, int]
    top: list[TopItem]
    replayed_ns: int
    """The step in the model's replay of the trace as traced (``docs/explain.md``)."""
    replay_error: float | None
    """``replayed_ns`` / the traced step - 1."""
    unexplained_ns: int
    """Time on its critical path the model does not explain (``breakdown['unexplained']``)."""


class ExplainStep(_ExplainStep, total=False):
    """A step's window is its step time (``docs/metrics.md``): from the previous step's
    completion (the first step: its own start) to its completion (its ProfilerStep's end and
    the GPU work it launched on each device's main stream); ``breakdown``'s categories are
    ``host``, ``compute:<phase>``, ``communication``, ``memcpy``, ``sync``, ``idle`` and
    ``unexplained`` and sum to ``duration_ns``. With the overhead's estimate: the step traced
    and estimated untraced."""

    traced_ns: float | None
    untraced_ns: float | None


class Share(TypedDict):
    category: str
    ns: int
    share: float | None


class LaneShare(TypedDict):
    lane: str
    ns: int
    share: float | None


class _Finding(TypedDict):
    id: str
    title: str
    fix: str | None
    evidence: str
    kind: Literal["time", "memory"]
    saving_ns: float | None
    saving_fraction: float | None
    saving_contention_ns: float | None
    saving_contention_fraction: float | None
    observed_step_ns: float | None
    replayed_step_ns: float | None
    predicted_step_ns: float | None
    predicted_contention_step_ns: float | None
    helps: bool
    """False for a time finding predicted to save under 1% of the step ("would not help
    here"); findings are in the order every output shows them: the known fixes that help
    (largest saving first), the memory findings, the generic what-ifs that help, then those
    that would not help."""


class AllocatorPollSite(TypedDict):
    """A call site of the caching allocator's polls (op chain > call), per counted step."""

    call_site: str
    per_step: float
    ns_per_step: float
    """Host time in them in the view explained."""
    traced_ns_per_step: float


class Finding(_Finding, total=False):
    """A fix that applies, with its evidence and predicted saving (``tracekit.analyses.explain``
    says what each one means); findings come first in the text output. A memory finding
    (``kind == "memory"``) has no time saving and carries the bytes instead. The
    ``allocator_polls`` finding carries the caching allocator's polls (``docs/metrics.md``),
    per counted step: how many, their host time in the view explained and as traced, and their
    costliest call sites."""

    polls_per_step: float
    """Every poll call (``cudaEventQuery``/``cudaStreamQuery``), the allocator's among them."""
    allocator_polls_per_step: float
    allocator_poll_ns_per_step: float
    """Their host time in the view explained (the estimated untraced step by default): what the
    what-if takes out."""
    allocator_poll_traced_ns_per_step: float
    allocator_poll_sites: list[AllocatorPollSite]
    """The costliest call sites (at most three), largest host time first."""

    peak_reserved_bytes: int | None
    predicted_peak_reserved_bytes: int | None
    saving_bytes: int | None
    bytes_per_batch_copy: int | None
    batches_in_flight: int | None
    main_stream_reserved_bytes: int | None
    reserved_off_main_bytes: int | None


class WhatIf(TypedDict):
    """Every fix and user what-if, replayed (mean step, all steps but the first)."""

    id: str
    title: str
    applies: bool
    evidence: str
    observed_step_ns: float | None
    replayed_step_ns: float | None
    """The model's replay of the unchanged graph (the saving is measured from it)."""
    predicted_step_ns: float | None
    """The step less the saving."""
    predicted_contention_step_ns: float | None
    saving_ns: float | None
    saving_fraction: float | None
    saving_contention_ns: float | None


class GraphSize(TypedDict):
    nodes: int
    edges: dict[str, int]
    launch_latency_ns: int
    gap_ns: int
    handoff_ns: int


class Replay(TypedDict):
    """The model's replay of the trace as traced against it, over the counted steps."""

    steps: int
    median_abs_error: float | None
    worst_error: float | None


class Explain(TypedDict):
    """``tracekit.analyses.explain``: critical path, bound and findings; ``bound`` and
    ``bound_share`` over all steps' critical paths."""

    view: Literal["traced", "untraced"]
    """``untraced``: bound, findings and steps are those of the estimated untraced step (the
    profiler's host overhead taken out); ``traced``: as the trace shows it."""
    overhead: dict[str, Any] | None
    """``tracekit.graph.overhead.Estimate.to_dict()`` but its steps, plus ``source`` (where a
    given untraced step came from); null when not estimated (no host calls)."""
    bound: Bound | None
    bound_share: float | None
    steps: list[ExplainStep]
    breakdown: list[Share]
    findings: list[Finding]
    what_ifs: list[WhatIf]
    lanes: list[LaneShare]
    graph: GraphSize
    replay: Replay
    warnings: list[str]


class StepRow(TypedDict):
    step: int
    step_start: int
    """The step's window (``docs/metrics.md``'s step time): from the previous step's
    completion..."""
    step_end: int
    """... to its own."""
    step_ns: int
    cpu_start: int
    cpu_end: int
    cpu_ns: int
    gpu_start: int
    gpu_end: int
    gpu_ns: int
    activities: int


class Steps(TypedDict):
    """``tracekit.steps``: each step's time (the one definition, ``docs/metrics.md``), and its
    CPU and GPU span (``gpu_*`` -1 for a step that launched no GPU work)."""

    steps: list[StepRow]
    source: str
    boundary: str | None
    p50_ns: float | None
    """The step time's P50 over the counted steps (all but the first when there are two or
    more)."""
    p90_ns: float | None
    cpu_p50_ns: float | None
    cpu_p90_ns: float | None
    gpu_p50_ns: float | None
    gpu_p90_ns: float | None


class StreamRow(TypedDict):
    device: int
    stream: int
    activities: int
    busy_ns: int
    first_ts: int
    last_end: int


class PairRow(TypedDict):
    device: int
    stream_a: int
    stream_b: int
    overlap_ns: int


class ClassRow(TypedDict):
    device: int
    compute_ns: int
    communication_ns: int
    memcpy_ns: int
    gpu_busy_ns: int
    comm_compute_overlap_ns: int
    exposed_comm_ns: int
    exposed_memcpy_ns: int
    comm_overlap_ratio: float | None


class Overlap(TypedDict):
    """``tracekit.analyses.overlap``: stream overlap."""

    streams: list[StreamRow]
    pairs: list[PairRow]
    classes: list[ClassRow]
    compute_ns: int
    communication_ns: int
    memcpy_ns: int
    gpu_busy_ns: int
    comm_compute_overlap_ns: int
    exposed_comm_ns: int
    exposed_memcpy_ns: int
    comm_overlap_ratio: float | None
    warnings: list[str]
    """A device of more streams than the pairwise table holds (also in the rank's warnings)."""


class GapRow(TypedDict):
    device: int
    step: int
    optimizer_batch: int
    lookup_batch: int
    optimizer_start: int
    optimizer_end: int
    lookup_start: int
    lookup_end: int
    gap_ns: int
    overlap_ns: int
    idle_ns: int
    matched_by: str


class Gaps(TypedDict):
    """``tracekit.analyses.gaps``: the optimizer -> next lookup gap per step."""

    gaps: list[GapRow]
    optimizer_occurrences: int
    lookup_occurrences: int
    mean_gap_ns: float | None
    median_gap_ns: float | None
    mean_idle_ns: float | None
    mean_overlap_ns: float | None
    note: str


class StallRow(TypedDict):
    ts: int
    end: int
    dur_ns: int
    name: str
    tid: int
    device: int
    op_chain: str
    call_site: str
    phase: str
    step: int
    idle_after_ns: float | None
    source: str


class StallGroupRow(TypedDict):
    call_site: str
    count: int
    total_ns: int
    max_ns: int
    idle_after_ns: int


class StallPhaseRow(TypedDict):
    phase: str
    count: int
    total_ns: int
    max_ns: int
    idle_after_ns: int


class StallStepRow(TypedDict):
    step: int
    count: int
    total_ns: int
    idle_after_ns: int


class PollGroupRow(TypedDict):
    call_site: str
    count: int
    total_ns: int
    max_ns: int
    allocator_count: int


class PollStepRow(TypedDict):
    step: int
    count: int
    total_ns: int
    allocator_count: int
    allocator_ns: int


class Syncs(TypedDict):
    """``tracekit.analyses.syncs``: sync stalls; and polls (cudaEventQuery/cudaStreamQuery:
    never stalls), their totals only, the caching allocator's told apart where it can be
    (``allocator_known``)."""

    stalls: list[StallRow]
    by_call_site: list[StallGroupRow]
    by_phase: list[StallPhaseRow]
    by_step: list[StallStepRow]
    count: int
    total_ns: int
    idle_after_ns: int
    polls_by_call_site: list[PollGroupRow]
    polls_by_step: list[PollStepRow]
    poll_count: int
    poll_total_ns: int
    allocator_poll_count: int
    allocator_poll_total_ns: int
    allocator_known: bool


class DeviceMemoryRow(TypedDict):
    device: int
    events: int
    allocations: int
    frees: int
    peak_allocated: int
    peak_allocated_ts: int
    peak_reserved: int
    peak_reserved_ts: int
    allocated_at_peak_reserved: int
    unused_at_peak_reserved: int
    unused_fraction: float | None
    reconstructed: bool


class StepMemoryRow(TypedDict):
    step: int
    device: int
    allocations: int
    allocated_bytes: int


class SeriesPoint(TypedDict):
    device: int
    ts: int
    allocated: int
    reserved: int


class Allocator(TypedDict):
    """``tracekit.analyses.allocator`` (``[memory]`` events). ``series`` holds at most
    ``keys.SERIES_POINTS`` points per device: when there are more events, the series is cut into
    that many equal runs of events and each run keeps its largest allocated and reserved (so
    peaks survive); ``series_points`` is the number of events before that."""

    series: list[SeriesPoint]
    devices: list[DeviceMemoryRow]
    per_step: list[StepMemoryRow]
    peak_allocated: int | None
    peak_reserved: int | None
    unused_at_peak_reserved: int | None
    unused_fraction: float | None
    reconstructed: bool
    note: str
    warnings: list[str]
    """Values left out of the figures (also in the rank's warnings)."""
    series_points: int


class SnapshotStreamRow(TypedDict):
    device: int
    stream: int
    is_main: bool
    segments: int
    reserved: int
    allocated: int
    active: int
    pending_free: int
    free: int
    inactive_split: int


class SnapshotPoolRow(TypedDict):
    device: int
    stream: int
    pool_id: str
    segment_type: str
    segments: int
    reserved: int
    free: int
    free_blocks: int
    largest_free: int
    free_fragmentation: float | None


class SnapshotHistoryRow(TypedDict):
    device: int
    stream: int
    is_main: bool
    segment_events: int
    reserved_at_start: int
    reserved_now: int
    peak_reserved: int


class Snapshot(TypedDict):
    """``tracekit.analyses.snapshot.SnapshotResult``'s fields but its per-address table: a
    memory snapshot beside the trace (or given with ``--snapshot``)."""

    source: str
    main_stream: int
    segments: int
    reserved: int
    allocated: int
    pending_free: int
    free: int
    reserved_off_main: int
    inactive_split: int
    streams: list[SnapshotStreamRow]
    pools: list[SnapshotPoolRow]
    trace_entries: int
    history: list[SnapshotHistoryRow] | None
    peak_reserved_off_main: int | None
    allocator_settings: dict[str, Any]


class CollectiveTypeRow(TypedDict):
    collective: str
    count: int
    kernel_ns: int
    in_bytes: int
    out_bytes: int


class CollectiveGroup(TypedDict):
    group: str
    desc: str | None
    size: int | None
    ranks: list[int] | None


class CollectiveKernelRow(TypedDict):
    group: str
    collective: str
    seq: int
    index: int
    step: int
    stream: int
    ts: int
    end: int
    in_bytes: int
    out_bytes: int


class Collectives(TypedDict):
    """``tracekit.analyses.collectives``: every communication kernel of the rank (its process
    group, collective, sequence number, step, sizes; -1 where unknown)."""

    source: Literal["args", "kernel names", "args and kernel names", "none"]
    count: int
    kernel_ns: int
    by_type: list[CollectiveTypeRow]
    groups: list[CollectiveGroup]
    kernels: list[CollectiveKernelRow]
    warnings: list[str]
    """Message sizes read as unknown (also in the rank's warnings)."""


class Identity(TypedDict):
    """``tracekit.analyses.trace_identity``: the ``distributedInfo`` as written, Kineto's
    ``baseTimeNanoseconds``, the first start and last end on the rank's clock."""

    distributed_info: dict[str, Any] | None
    base_time_ns: int | None
    start_ns: int | None
    end_ns: int | None


class EmbeddingCallRow(TypedDict):
    """One embedding call (``tracekit.analyses.embedding_bw.CALL_COLUMNS``)."""

    op: str
    family: str
    direction: Literal["forward", "backward"]
    tid: int
    ts: int
    end: int
    step: int
    phase: str
    kernel: str
    activities: int
    gpu_start: int
    gpu_end: int
    gpu_ns: int
    lookups: int
    bags: int
    features: int
    dim: float | None
    total_dim: int
    weights_type: str
    bytes: float | None
    fixed_bytes: float | None
    row_bytes: float | None
    upper_bound: bool
    gbps: float | None
    share: float | None
    status: str


class _EmbeddingTotal(TypedDict):
    calls: int
    gpu_ns: int
    bytes: float
    gbps: float | None
    share: float | None
    upper_bound: bool


class EmbeddingKernelRow(_EmbeddingTotal):
    family: str
    direction: str
    op: str
    kernel: str


class EmbeddingPhaseRow(_EmbeddingTotal):
    phase: str
    direction: str


class EmbeddingStepRow(_EmbeddingTotal):
    step: int
    direction: str


class EmbeddingDirectionRow(_EmbeddingTotal):
    direction: str


class EmbeddingMissingRow(TypedDict):
    op: str
    reason: str
    calls: int
    activities: int
    gpu_ns: int


class EmbeddingFinding(TypedDict):
    id: str
    title: str
    evidence: str
    direction: str
    gbps: float
    share: float
    peak_gbps: float
    upper_bound: bool
    gpu_ns: int
    gpu_ns_at_target: int
    per_step_ns: float | None


class EmbeddingBw(TypedDict):
    """``tracekit.analyses.embedding_bw``: each embedding call's bytes from its recorded shapes,
    its GB/s over its kernels' GPU time and its share of the GPU's peak; totals per kernel,
    phase, step and direction; what has no estimate and why; findings."""

    calls: list[EmbeddingCallRow]
    by_kernel: list[EmbeddingKernelRow]
    by_phase: list[EmbeddingPhaseRow]
    by_step: list[EmbeddingStepRow]
    by_direction: list[EmbeddingDirectionRow]
    missing: list[EmbeddingMissingRow]
    device: str | None
    peak_gbps: float | None
    peak_source: str
    findings: list[EmbeddingFinding]
    notes: list[str]


class ProfilePhase(TypedDict):
    phase: str
    gpu_ns: float
    host_ns: float


class ProfileOp(TypedDict):
    name: str
    self_ns: float
    count: float


class ProfileKernel(TypedDict):
    name: str
    gpu_ns: float
    count: float


class Profile(TypedDict):
    """``tracekit.analyses.profile``: where the rank's step goes, per step on average over
    ``steps`` steps: GPU and host time by phase, the host ops with most self time, the kernels
    with most time (what ``tracekit.ranks.straggler`` compares across ranks)."""

    steps: int
    phases: list[ProfilePhase]
    host_ops: list[ProfileOp]
    kernels: list[ProfileKernel]


class SkeletonTerms(TypedDict):
    """Columns, one entry per term: ``target`` (a cut's arrival ``0..cuts-1``, else step
    ``target - cuts``'s completion), ``source`` (the cut whose end it follows, -1: ``lag`` is a
    time on the rank's clock), ``lag`` (ns), the path's time by class (``host``, ``gpu``,
    ``communication``, ``sync``, ``idle``, ``unexplained``) and its compute ``phase`` with most
    time."""

    target: list[int]
    source: list[int]
    lag: list[int]
    host: list[int]
    gpu: list[int]
    communication: list[int]
    sync: list[int]
    idle: list[int]
    unexplained: list[int]
    phase: list[str]


class Skeleton(TypedDict):
    """``tracekit.analyses.skeleton``: explain's graph of the rank reduced to its collective
    kernels (``tracekit.graph.skeleton``), one entry per cut in the first lists: ``kernels``
    (its row in ``collectives.kernels``), ``pinned``, ``arrive`` / ``end`` (ns, the rank's own
    replay); per step window: ``steps``, ``done`` (its completion); ``pin_done`` the pinned
    first step's completion; ``asleep_ns`` the host time per step in which the trace shows
    its main thread doing nothing the model explains (a sleep, a wait outside the trace:
    ``tracekit.analyses.skeleton.host_asleep``); ``op_counts`` every host op's count per step
    (``tracekit.analyses.profile.op_counts``); ``input_dist_gpu`` the distinct names of its GPU
    activities in the input dist, collectives left out (whether it permutes the features by
    owner: the balanced what-if reads again only the ranks it must change)."""

    view: Literal["untraced", "traced"]
    kernels: list[int]
    pinned: list[bool]
    arrive: list[int]
    end: list[int]
    steps: list[int]
    done: list[int]
    pin_done: int
    asleep_ns: float
    op_counts: dict[str, float]
    input_dist_gpu: list[str]
    terms: SkeletonTerms


class Rank(TypedDict):
    """One rank's report (``tracekit.report.to_dict(analysis)``), keys in this order
    (``keys.RANK_KEYS``; the sections: ``keys.SECTION_KEYS``)."""

    source: str
    rank: int
    schema: str
    """``pytorch2`` or ``legacy2021``."""
    platform: Literal["cuda", "rocm", "cpu"]
    warnings: list[str]
    rules: str
    headline: Headline
    explain: Explain | None
    """null when explain did not run."""
    steps: Steps
    overlap: Overlap
    gaps: Gaps
    syncs: Syncs
    allocator: Allocator
    hta: dict[str, Any] | None
    """The HTA section's fields (``tracekit.analyses.hta``), null when it did not run."""
    snapshot: Snapshot | None
    collectives: Collectives | None
    identity: Identity | None
    embedding_bw: EmbeddingBw | None
    """null when it was not computed (a report of a rank read for a job's summary only)."""
    profile: Profile | None
    skeleton: Skeleton | None
    """null without explain or collective kernels."""


# ---- a job of many ranks (``tracekit.ranks``) ---------------------------------------------------

class Problem(TypedDict):
    kind: Literal["unreadable", "other_job", "duplicate_rank", "missing"]
    source: str | None
    rank: int | None
    message: str


class JobRank(TypedDict):
    """A rank in the job's summary; ``bound`` is the rank's explain headline, ``collectives``
    and ``collective_ns`` its collective kernels and their time, ``wait_ns`` its wait at
    collectives, ``last_count`` / ``caused_wait_ns`` the times it arrived last and the wait it
    caused, ``clock_offset_ns`` its clock minus the reference's as fitted (``clock_offset_applied``:
    whether arrivals were compared with it taken out), the bytes over the all-to-alls."""

    rank: int
    source: str
    steps: int
    step_source: str
    step_cpu_p50_ns: float | None
    step_cpu_p90_ns: float | None
    step_gpu_p50_ns: float | None
    step_gpu_p90_ns: float | None
    bound: Bound | None
    bound_share: float | None
    collectives: int
    collective_ns: int
    wait_ns: int
    last_count: int
    caused_wait_ns: int
    clock_offset_ns: int | None
    clock_offset_applied: bool
    sent_bytes: int | None
    received_bytes: int | None
    warnings: list[str]


class SpreadFigure(TypedDict):
    min_ns: float
    median_ns: float
    max_ns: float
    spread_ns: float
    slowest_rank: int
    fastest_rank: int
    max_over_median: float | None


class Spread(TypedDict):
    figure: Literal["step_gpu", "step_cpu"]
    p50: SpreadFigure | None
    p90: SpreadFigure | None


class ClockOffset(TypedDict):
    """A rank's fitted clock offset (``tracekit.ranks.clocks``); ``applied``: taken out of its
    times (its spread is smaller than the offset and the job aligns clocks)."""

    rank: int
    offset_ns: int | None
    spread_ns: float | None
    samples: int
    aligned: bool
    applied: bool


class ClockDisagreement(TypedDict):
    """A rank whose collectives start further from the other ranks' (the median over its
    instances of its arrival minus the instance's median, on the clocks compared) than the
    job's longest step (the largest P90 step time of its ranks) could explain
    (``tracekit.ranks.job.clock_disagreements``)."""

    rank: int
    source: str | None
    median_ns: float


class Clock(TypedDict):
    aligned: bool
    reference_rank: int | None
    offsets: list[ClockOffset]
    notes: list[str]
    disagree: list[ClockDisagreement]
    """The ranks whose clocks disagree with the others' beyond a step (empty: none)."""
    warnings: list[str]
    """One line naming them (``tracekit: warning:`` on stderr), or none."""


class MatchGroup(TypedDict):
    group: str
    desc: str | None
    ranks: list[int]
    matched_by: Literal["seq", "step and order", "order", "ends"]
    instances: int
    partial: int
    inconsistent: int
    outside_steps: int
    not_overlapping: int
    """Instances of the first match whose kernels never overlapped in time (the group was then
    matched by its kernels' ends, ``tracekit.ranks.match.verify``)."""
    first_matched_by: Literal["seq", "step and order", "order"]


class Matching(TypedDict):
    instances: int
    groups: list[MatchGroup]


class CollectiveType(TypedDict):
    collective: str
    instances: int
    transfer_ns: float
    waited_ns: float
    skew_p50_ns: float
    skew_p90_ns: float
    skew_max_ns: float
    bytes: int


class StragglerStep(TypedDict):
    step: int
    straggler: int
    caused_wait_ns: int
    waited_ns: int
    skew_max_ns: int
    bound: Bound | None


class StragglerDiff(TypedDict):
    """A phase or op where the straggler spends more than the median of the other ranks, per
    step: ``kind`` is ``GPU`` / ``host`` (a phase's time) or ``host op`` / ``kernel``."""

    kind: Literal["GPU", "host", "host op", "kernel"]
    name: str
    straggler_ns: float
    median_ns: float
    diff_ns: float


class StragglerAllToAll(TypedDict):
    """An all-to-all instance where the straggler received the most bytes, against the median of
    the other members."""

    instance: int
    key: str
    step: int
    received_bytes: int
    sent_bytes: int
    median_received_bytes: float | None
    median_sent_bytes: float | None


class StragglerWhy(TypedDict):
    """The straggler against the median of the ``against`` other ranks: ``phases`` and ``ops``
    where it spends more, largest first (communication left out: its time is the wait the
    straggler causes), its ``all_to_all`` instances of most bytes received, largest first."""

    rank: int
    against: int
    steps: int | None
    phases: list[StragglerDiff]
    ops: list[StragglerDiff]
    all_to_all: list[StragglerAllToAll]


class Stragglers(TypedDict):
    """``rank`` is the rank that caused the most wait (null when no instance has a skew of at
    least ``min_skew_ns``), ``instances`` the instances with such a skew, ``waited_ns`` all the
    wait of all ranks, ``share`` the straggler's part of it, ``bound`` its explain bound;
    ``steps`` names each step's straggler and that rank's bound in that step."""

    rank: int | None
    last_count: int
    instances: int
    caused_wait_ns: int
    waited_ns: int
    share: float | None
    bound: Bound | None
    bound_share: float | None
    min_skew_ns: int
    steps: list[StragglerStep]
    why: StragglerWhy | None
    """Why the straggler is slow (``tracekit.ranks.straggler``); null without a straggler or
    the ranks' profiles."""


class AllToAllRank(TypedDict):
    rank: int
    sent_bytes: int
    received_bytes: int
    received_over_mean: float | None


class AllToAll(TypedDict):
    instances: int
    per_rank: list[AllToAllRank]
    imbalance: float | None
    heaviest_rank: int | None
    instance_imbalance_p50: float | None
    instance_imbalance_max: float | None


class JobStep(TypedDict):
    """Ranks x steps, the heatmap's cells: a rank's ``wait_ns`` and ``last_count`` count the
    instances its own kernels launched in that step."""

    rank: int
    step: int
    cpu_ns: int
    gpu_ns: int | None
    wait_ns: int
    last_count: int
    bound: Bound | None


class Arrival(TypedDict):
    rank: int
    start: int
    end: int
    wait_ns: int
    in_bytes: int
    out_bytes: int


class _Instance(TypedDict):
    instance: int
    group: str
    collective: str
    key: str
    step: int
    ranks: int
    first_arrival: int
    last_arrival: int
    skew_ns: int
    straggler: int
    waited_ns: int
    transfer_ns: int
    end_spread_ns: int
    imbalance: float | None


class Instance(_Instance, total=False):
    """One collective matched across ranks; ``arrivals`` on every instance when
    ``arrivals_everywhere``, else on the worst only."""

    arrivals: list[Arrival]


class PathClasses(TypedDict):
    """ns by class: what the piece of path is made of (``tracekit.graph.skeleton.CLASSES``)."""

    host: float
    gpu: float
    communication: float
    sync: float
    idle: float
    unexplained: float


PathPiece = TypedDict("PathPiece", {
    "rank": int, "from": str, "to": str, "ns": int,
    "kind": Literal["work", "transfer", "kept"], "phase": str, "classes": PathClasses})
PathPiece.__doc__ = """A piece of the job's critical path on one rank, ``from`` a collective
(or the step's start) ``to`` another (or the step's end): ``work`` (the rank's own path between
them; ``phase``: its compute phase with most time), ``transfer`` (a collective moving its data
once the last rank arrived) or ``kept`` (as replayed alone: the pinned step)."""

PathBound = TypedDict("PathBound", {"rank": int, "class": str, "ns": float, "share": float})
PathBound.__doc__ = """The (rank, class) with most time on the path, and its share of it."""


class JobGraphStep(TypedDict):
    """A counted step of the job: its length (the rank that completed it last, ``sink_rank``),
    its critical path across ranks (earliest first) and bound."""

    step: int
    ns: int
    sink_rank: int
    bound: PathBound | None
    path: list[PathPiece]


class RankWait(TypedDict):
    rank: int
    ns: float


class RankWaitAt(TypedDict):
    rank: int
    at: str
    ns: float


class JobGraphRank(TypedDict):
    """A rank's step in the job's graph, per counted step on average: its own work
    (``own_classes`` by class), transfers and the wait for the other ranks (``waits_for``: by
    the rank it waited for; ``waits_at``: the five largest (rank, collective)); ``waiting``:
    it waits more than it works."""

    rank: int
    steps: int
    step_ns: float
    own_ns: float
    transfer_ns: float
    wait_ns: float
    wait_share: float | None
    own_classes: PathClasses
    waits_for: list[RankWait]
    waits_at: list[RankWaitAt]
    waiting: bool


class JobWhatIf(TypedDict, total=False):
    """A what-if across ranks replayed on the job's graph (``tracekit.ranks.whatif``): the
    job step (``step_ns``: the unchanged graph's replay), predicted contention-free and
    contention-aware, the savings; ``factors`` (balancing): per rank, phase -> times faster."""

    id: str
    title: str
    ranks_changed: list[int]
    step_ns: float
    predicted_ns: float
    """The prediction: contention-free, or contention-aware for a change that moves GPU work
    beside other work (a fix such as FusedSparseDist on every rank), as explain's."""
    predicted_contention_ns: float
    predicted_free_ns: float
    """The contention-free replay's, where ``predicted_ns`` is the contention-aware one."""
    saving_ns: float
    saving_contention_ns: float
    saving_fraction: float | None
    helps: bool
    """It saves at least ``NO_HELP_FRACTION`` of the job step (as explain's findings)."""
    note: str
    factors: dict[str, dict[str, float]]
    period_saving_ns: float
    """A change that only takes work out whose replayed period grew (the first counted step
    absorbs the ranks' skew at the pinned step): the period's own change (negative); the row
    predicts no saving. Or one whose period fell by more than the work it takes out a step
    (the straggler at the median rank's speed): the period's own change (positive); the row
    predicts that work as its saving (``tracekit.ranks.whatif._row``)."""
    applies: bool
    """A what-if on one rank (``rank:R:SPEC``): whether the change touched that rank."""
    warning: str
    """Why the prediction may be wrong (the straggler at the median rank's speed saving less
    than half the host work it takes out: what bounds the job after the change,
    ``tracekit.ranks.whatif.capped_warning``, or still bound by the straggler with every
    other rank waiting for it, which may save less, ``tracekit.ranks.whatif.behind_warning``;
    a fix on every rank whose saving at an end of the
    band of the job's estimated untraced step is outside the target's tolerance of it,
    ``tracekit.ranks.border``)."""
    at_band: list[dict[str, float]]
    """A fix on every rank where the job's estimated untraced step rests on the profiler's cost:
    per end of its band reached (``tracekit.ranks.border.at_band``), ``step_ns`` (the job step
    every rank's host was brought to), ``host_speed`` (x faster; below 1 slower) and
    ``saving_ns`` (the fix's saving there)."""
    taken_out: dict[str, Any]
    """The straggler at the median rank's speed: what it took out of the straggler, per step
    (``ops``: host op -> the share of its self time; ``ops_ns``, ``asleep_ns``: the host time
    of those ops and of the idle host time; ``asleep_share``: the share of the idle host time
    beyond the other ranks' median; ``others_host_speed``: rank -> how many times faster its
    host work is replayed, the straggler's speed where its host ran slower,
    ``tracekit.ranks.straggler.host_speeds``; ``tracekit.ranks.whatif.straggler_at_median``)."""


class JobGraph(TypedDict):
    """The ranks' graphs joined at the collectives (``tracekit.ranks.jobgraph``): ``step_ns``
    the job's step (its period over the counted steps), ``view`` the graphs' (``untraced``:
    the estimated untraced steps), the critical path per step, the bound over them, each rank's
    split into own work, transfers and waits, and the what-ifs."""

    step_ns: float
    slowest_rank: int | None
    counted_steps: list[int]
    bound: PathBound | None
    steps: list[JobGraphStep]
    ranks: list[JobGraphRank]
    view: str
    ranks_joined: int
    warnings: list[str]
    what_ifs: list[JobWhatIf]


class Job(TypedDict):
    """A directory of per-rank traces analysed as one job (``tracekit.ranks``; definitions in
    ``tracekit.ranks.job``). Every time is in ns on the reference rank's clock once the offsets
    are applied. ``bound`` fields read the rank objects' ``explain`` section and are null where
    it is absent."""

    source: str
    """The directory."""
    world_size: int | None
    """``distributedInfo.world_size`` of the job's ranks."""
    ranks_read: int
    complete: bool
    """Every rank read, nothing left out."""
    problems: list[Problem]
    ranks: list[JobRank]
    spread: Spread | None
    clock: Clock
    matching: Matching
    by_type: list[CollectiveType]
    """``transfer_ns``: the shortest kernel of each instance; ``waited_ns``: summed over ranks,
    last arrival - each rank's arrival."""
    stragglers: Stragglers
    all_to_all: AllToAll
    steps: list[JobStep]
    arrivals_everywhere: bool
    instances: list[Instance]
    worst: list[Instance]
    """``JobConfig.worst_kept`` instances of the largest skews, with their arrivals."""
    graph: JobGraph | None
    """The job's graph (``tracekit.ranks.jobgraph``); null when fewer than two ranks have a
    skeleton (no explain section, no collectives)."""


# ---- the documents ------------------------------------------------------------------------------

class KernelRow(TypedDict):
    """``tracekit.analyses.kernels``: one GPU activity name and launch configuration over all
    steps (times in ns)."""

    name: str
    kind: Literal["kernel", "memcpy", "memset"]
    calls: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    share: float
    """Of the GPU time of every activity (``KernelsTable.gpu_ns``), 0..1."""
    launched_by: str
    """The host op that launched most of its calls; "" when none is known."""
    launchers: int
    unlaunched: int
    """Calls no host op is known to have launched."""
    phase: str
    streams: str
    """``device:stream`` it ran on, comma-separated."""
    grid: str
    """``[x, y, z]``; "" where the trace does not record it (memcpys, memsets, older traces)."""
    block: str
    registers: float | None
    """Per thread; null where not recorded."""
    shared_memory: float | None
    """Bytes per block; null where not recorded."""
    occupancy: float | None
    """Kineto's estimated achieved occupancy, %; null where not recorded."""
    configs: int
    """Launch configurations of this name (each its own row)."""


class KernelsTable(TypedDict):
    """Every GPU activity of a rank by name and launch configuration, largest total first."""

    gpu_ns: int
    """GPU time of every activity (of one step's table: of those launched in the step, the whole
    its rows' ``share`` is of)."""
    rows: list[KernelRow]


class OperatorRow(TypedDict):
    """``tracekit.analyses.operators``: one host op (name and recorded input shapes) over all
    steps (times in ns)."""

    name: str
    """As written, an annotation's step or batch number left out (``{i}``, ``{step}``)."""
    kind: Literal["cpu_op", "annotation"]
    input_dims: str
    """The recorded input shapes as compact JSON; "" where none."""
    calls: int
    cpu_total_ns: int
    cpu_self_ns: int
    gpu_self_ns: int
    """GPU time of the activities it launched itself."""
    gpu_total_ns: int
    """With its children's."""
    activities: int


class OperatorsTable(TypedDict):
    """Every host op of a rank, largest GPU total first, then largest CPU total."""

    gpu_ns: int
    """GPU time of every activity; of one step's table: what the step's ops launched (their GPU
    self times summed)."""
    unlaunched_gpu_ns: int | None
    """GPU time no host op is known to have launched; null in one step's table (known over the
    whole trace only)."""
    rows: list[OperatorRow]


class RankTables(TypedDict):
    """``tracekit analyze --tables``: a rank's kernels and operators tables (null: not asked for)."""

    source: str
    rank: int
    step: int | None
    """The step the tables are of (``--step``); null: over all steps."""
    kernels: KernelsTable | None
    operators: OperatorsTable | None


class _AnalyzeDocument(TypedDict):
    tracekit_version: str
    format: int
    analyses: list[Rank]
    jobs: list[Job]


class AnalyzeDocument(_AnalyzeDocument, total=False):
    """``tracekit analyze --format json``; ``jobs``: one per directory analysed."""

    tables: list[RankTables]
    """With ``--tables``: per rank analysed, every row of the tables asked for."""


class PathRun(TypedDict):
    """A run of a step's critical path: consecutive segments of one lane and category."""

    start_ns: int
    end_ns: int
    ns: int
    lane: str
    category: str
    first: str
    what: str
    segments: int


class _ExplainRank(TypedDict):
    source: str
    rank: int


WaitedRank = TypedDict("WaitedRank", {"rank": int, "class": str | None, "own_ns": float})
WaitedRank.__doc__ = """The rank waited for most: its own work per step and the class most of
it is."""


class JobFinding(TypedDict):
    """A rank's finding replayed on its job's graph (``tracekit.ranks.job.job_findings``): the
    change (``change``: a what-if spec or ``fix:ID``) applied to the rank that found it
    (``rank``), the other ranks as they are. ``step_ns``, ``predicted_ns``, ``saving_*`` and
    ``helps`` are the job's (null when not ``replayed``: ``note`` says why); ``alone_*`` what
    that rank's own explain predicts."""

    rank: int
    id: str
    title: str
    fix: str
    change: str | None
    replayed: bool
    step_ns: float | None
    predicted_ns: float | None
    saving_ns: float | None
    saving_fraction: float | None
    saving_contention_ns: float | None
    helps: bool
    alone_saving_ns: float | None
    alone_saving_fraction: float | None
    alone_saving_contention_ns: float | None
    alone_helps: bool
    note: str


class JobUntraced(TypedDict):
    """How far a rank's step on the job's graph (every rank's profiler overhead out) can be
    trusted (``tracekit.ranks.job.joined_estimate``): its own estimate's traced step and host
    time taken out a step, its step on the job's graph, the share of the job's critical path the
    ranks' models do not explain, the range where the profiler's cost decides the step
    (``range_ns``, else null) and why it rests on unexplained time or the replay (``kept``:
    ``unexplained`` or ``above``, else null)."""

    traced_step_ns: float
    step_ns: float
    taken_ns: float
    unexplained_share: float
    range_ns: list[float] | None
    kept: str | None


class ExplainJob(TypedDict):
    """A rank in its job (``tracekit explain DIR``, or one rank's file beside its job's others;
    ``tracekit.ranks.job.rank_context``): its step on the job's graph (own work, transfers,
    wait per step), ``waiting`` (it waits more than it works: bound by waiting), for whom and
    where, its share of the job's critical path, its findings replayed on the job's graph
    (``findings``: for a waiting rank those of the rank it waits for first) and the job's
    what-ifs (the user's ``rank:R:SPEC`` among them)."""

    job: str
    ranks: int
    job_step_ns: float
    step_ns: float
    own_ns: float
    transfer_ns: float
    wait_ns: float
    wait_share: float | None
    waiting: bool
    waits_for: list[RankWait]
    waits_at: list[RankWaitAt]
    path_share: float | None
    waited: WaitedRank | None
    job_bound: WaitedRank | None
    """A rank that does not wait but holds under ``OFF_PATH_SHARE`` of the job's critical
    path: the rank that bounds the job (its findings are offered first)."""
    untraced: JobUntraced | None
    findings: list[JobFinding]
    what_ifs: list[JobWhatIf]


_ExplainFields = TypedDict("_ExplainFields", {**Explain.__annotations__, "path": list[PathRun],
                                              "job": ExplainJob}, total=False)


class ExplainRank(_ExplainRank, _ExplainFields):
    """One rank in ``tracekit explain --format json``: its source and rank, then the
    ``Explain`` fields (none when explain did not run), and with ``--step`` that step's
    critical path (``path``: ``PathRun`` rows)."""


class ExplainDocument(TypedDict):
    tracekit_version: str
    format: int
    jobs: list[Job]
    explain: list[ExplainRank]


class CompareEntry(TypedDict):
    label: str
    source: str
    rank: int
    headline: Headline


class CompareDocument(TypedDict):
    """``tracekit compare --format json``: each difference is the trace's headline figure minus
    the first trace's (null where either is null), for every numeric headline key, and its
    ``label``."""

    tracekit_version: str
    format: int
    baseline: str
    traces: list[CompareEntry]
    differences: list[dict[str, Union[float, str, None]]]


class CheckRow(TypedDict):
    """One threshold on one rank, or (``key == "ranks_read"``, ``rank`` null) a job's "every
    rank read"."""

    source: str
    rank: int | None
    key: str
    op: str
    bound: float | None
    value: float | None
    passed: bool
    reason: str | None


class CheckDocument(TypedDict):
    """``tracekit check --format json``."""

    tracekit_version: str
    passed: bool
    checks: list[CheckRow]


# ---- tracekit diff A B --------------------------------------------------------------------------

class DiffSide(TypedDict):
    source: str
    rank: int
    steps: int


class DiffStep(TypedDict):
    """``figure``: ``step_gpu_ns`` or ``step_cpu_ns`` (the mean span of a step)."""

    figure: str
    a: float | None
    b: float | None
    delta: float | None


class DiffPhase(TypedDict):
    """GPU time of a phase's activities per step."""

    phase: str
    a_ns: float
    b_ns: float
    delta_ns: float


class DiffStream(TypedDict):
    """GPU time of a phase on a stream per step; ``stream``: ``main`` (the stream with the most
    forward/backward/optimizer time on its device) or ``side <device>:<id>``; ``a_streams`` /
    ``b_streams``: the ``device:stream`` ids it stands for in each trace."""

    stream: str
    phase: str
    a_ns: float
    b_ns: float
    delta_ns: float
    a_streams: str
    b_streams: str


class DiffOverlap(TypedDict):
    """GPU time per step when both phases ran at once."""

    phase_a: str
    phase_b: str
    a_ns: float
    b_ns: float
    delta_ns: float


class DiffCategory(TypedDict):
    """explain's critical path per step in a category."""

    category: str
    a_ns: float
    b_ns: float
    delta_ns: float


class DiffOp(TypedDict):
    """A host op (and its recorded input shapes): calls, CPU total and GPU total (its own and its
    children's) per step; ``status``: ``both``, ``added`` (only in B) or ``removed`` (only in A)."""

    name: str
    input_dims: str
    status: Literal["both", "added", "removed"]
    a_calls: float
    b_calls: float
    a_cpu_ns: float
    b_cpu_ns: float
    a_gpu_ns: float
    b_gpu_ns: float
    delta_gpu_ns: float
    delta_cpu_ns: float


class DiffKernel(TypedDict):
    """A GPU activity name: calls and time per step."""

    name: str
    kind: str
    status: Literal["both", "added", "removed"]
    a_calls: float
    b_calls: float
    a_ns: float
    b_ns: float
    delta_ns: float


class Diff(TypedDict):
    """``tracekit.analyses.diff``: where B differs from A, every figure per step."""

    a: DiffSide
    b: DiffSide
    summary: list[str]
    step: list[DiffStep]
    phases: list[DiffPhase]
    streams: list[DiffStream]
    overlaps: list[DiffOverlap]
    critical_path: list[DiffCategory]
    ops: list[DiffOp]
    kernels: list[DiffKernel]


class DiffDocument(TypedDict):
    """``tracekit diff A B --format json``."""

    tracekit_version: str
    format: int
    diff: Diff


# ---- the checker --------------------------------------------------------------------------------

def problems(value: Any, schema: Any, where: str = "$") -> list[str]:
    """Where ``value`` (plain JSON values) departs from ``schema`` (a class of this module or a
    type built of ``int``, ``float``, ``str``, ``bool``, ``None``, ``list[...]``,
    ``dict[str, ...]``, unions, ``Literal`` and ``Any``): one line per problem, ``[]`` when it
    conforms. A ``TypedDict`` must have its required keys and no others."""
    if schema is Any:
        return []
    if schema is None or schema is type(None):
        return [] if value is None else [f"{where}: {_what(value)}, not null"]
    if _is_typeddict(schema):
        if not isinstance(value, dict):
            return [f"{where}: {_what(value)}, not an object ({schema.__name__})"]
        hints = typing.get_type_hints(schema)
        out = [f"{where}: no key {k!r} ({schema.__name__})"
               for k in hints if k in schema.__required_keys__ and k not in value]
        out += [f"{where}: key {k!r} not in {schema.__name__}" for k in value if k not in hints]
        for k, v in value.items():
            if k in hints:
                out += problems(v, hints[k], f"{where}.{k}")
        return out
    origin, args = typing.get_origin(schema), typing.get_args(schema)
    if origin in (Union, types.UnionType):
        tries = [problems(value, a, where) for a in args]
        if any(not t for t in tries):
            return []
        shaped = [t for a, t in zip(args, tries) if not _is_scalar(a)]
        return min(shaped, key=len) if value is not None and shaped else [
            f"{where}: {_what(value)}, not {_name(schema)}"]
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} not one of {list(args)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {_what(value)}, not a list"]
        out: list[str] = []
        for i, v in enumerate(value):
            out += problems(v, args[0], f"{where}[{i}]")
            if len(out) > 20:
                break
        return out
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {_what(value)}, not an object"]
        out = []
        for k, v in value.items():
            if not isinstance(k, str):
                out.append(f"{where}: key {k!r} is not a string")
            out += problems(v, args[1], f"{where}.{k}")
        return out
    ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str), bool: lambda v: isinstance(v, bool)}.get(schema)
    if ok is None:
        raise TypeError(f"problems: no rule for {schema!r}")
    return [] if ok(value) else [f"{where}: {_what(value)}, not {_name(schema)}"]


def _is_typeddict(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


def _is_scalar(t: Any) -> bool:
    return t in (int, float, str, bool, type(None)) or typing.get_origin(t) is Literal


def _name(t: Any) -> str:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (Union, types.UnionType):
        return " | ".join(_name(a) for a in args)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if t is None or t is type(None):
        return "null"
    return getattr(t, "__name__", None) or str(t).replace("typing.", "")


def _what(v: Any) -> str:
    return "null" if v is None else f"{type(v).__name__} {str(v)[:40]!r}"


__all__ = [name for name, v in list(globals().items())
           if not name.startswith("_") and _is_typeddict(v)] + ["Bound", "problems"]
