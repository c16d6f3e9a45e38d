"""``JobConfig``: the few choices of the cross-rank analysis."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.errors import TracekitError


class JobConfigError(TracekitError):
    """A ``JobConfig`` field out of its range."""


@dataclass(frozen=True)
class JobConfig:
    """How a job's ranks are combined (every field has a default that suits a training job)."""

    align_clocks: bool = True
    """Estimate each rank's clock offset from the ends of the collectives it shares with the
    reference rank (a collective ends at nearly the same instant on every rank) and put every
    time on the reference rank's clock before arrivals are compared. False: compare the
    timestamps as written (ranks of one host share a clock)."""
    straggler_min_skew_ns: int = 20_000
    """An instance counts towards its last rank's "last to arrive" only when its arrival skew
    is at least this (20 us): below it, the order of arrival is noise. The wait it causes is
    counted whatever its size."""
    other_job_gap_ns: int = 60 * 10**9
    """A file whose wall-clock window lies further than this (60 s) from the job's belongs to
    another run (clocks of hosts in one job differ by far less)."""
    worst_kept: int = 20
    """Instances listed under ``worst`` (largest arrival skew first)."""
    arrivals_kept: int = 100_000
    """Every instance lists each rank's arrival (start, end, wait, sizes) when there are at most
    this many (rank, instance) pairs; beyond, only the ``worst`` instances do (a job of 1,024
    ranks with 864 collectives each has 884,736)."""
    min_alignment_samples: int = 3
    """A clock offset estimated from fewer shared collectives than this comes with a warning."""
    overlap_slack_ns: int = 10_000
    """The kernels of one collective instance overlap in time (``tracekit.ranks.match.verify``):
    the last one starts no later than the first one ends plus this (10 us of clock noise)."""
    end_tolerance_ns: int = 50_000
    """Kernels matched again by their ends (``tracekit.ranks.match.by_ends``) end within this
    of each other (50 us) ..."""
    end_tolerance_share: float = 0.05
    """... or within this share of the shorter kernel's duration, whichever is larger."""
    job_graph: bool = True
    """Join the ranks' graphs at their collectives (the job's graph: what bounds the job, each
    rank's own work and wait, the what-ifs across ranks), each rank's explain graph reduced to
    its collectives for it (its ``skeleton``). False: leave it out (no skeleton in the ranks'
    reports, no ``graph`` in the job object): the rest of the job (matching, clocks,
    stragglers, all-to-all sizes) as always, in less time (``bench/ranks.py --job-graph``
    measures how much)."""
    balance_what_if: bool = True
    """Predict what balancing the all-to-all would save when the job is imbalanced
    (``balance_min_imbalance``): the ranks whose work differs from the mean rank's are loaded
    again and their graphs reduced with it changed (``tracekit.ranks.whatif``)."""
    balance_min_imbalance: float = 1.1
    """The all-to-all imbalance from which the balanced what-if runs: the largest all-to-all
    instance's (the most bytes a rank received in it over the mean; ``whatif.imbalance_gate``),
    not the job's total, which balanced instances of fixed size can dilute."""
    offset_note_min_ns: int = 100_000
    """A clock offset that is not applied (its spread is not smaller than itself) is noted when
    its spread is at least this (0.1 ms); below it, the clocks agree within noise."""

    def __post_init__(self) -> None:
        for name in ("straggler_min_skew_ns", "other_job_gap_ns", "worst_kept",
                     "arrivals_kept", "min_alignment_samples", "overlap_slack_ns",
                     "end_tolerance_ns", "offset_note_min_ns"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise JobConfigError(f"JobConfig.{name} must be an integer >= 0, not {v!r}")
        if isinstance(self.balance_min_imbalance, bool) or not isinstance(
                self.balance_min_imbalance, (int, float)) or not self.balance_min_imbalance >= 1:
            raise JobConfigError("JobConfig.balance_min_imbalance must be a number >= 1, not "
                                 f"{self.balance_min_imbalance!r}")
        if not isinstance(self.job_graph, bool):
            raise JobConfigError(f"JobConfig.job_graph must be True or False, not "
                                 f"{self.job_graph!r}")
        if not isinstance(self.balance_what_if, bool):
            raise JobConfigError("JobConfig.balance_what_if must be True or False, not "
                                 f"{self.balance_what_if!r}")
        if isinstance(self.end_tolerance_share, bool) or not isinstance(
                self.end_tolerance_share, (int, float)) or not 0 <= self.end_tolerance_share < 1:
            raise JobConfigError("JobConfig.end_tolerance_share must be a number in [0, 1), not "
                                 f"{self.end_tolerance_share!r}")
        if not isinstance(self.align_clocks, bool):
            raise JobConfigError(f"JobConfig.align_clocks must be True or False, not "
                                 f"{self.align_clocks!r}")
