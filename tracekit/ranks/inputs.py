"""Which rank each file of a job's directory is, and which files are not part of the job.

Input: the per-file results of the per-rank work, in file-name order: a rank object
(``tracekit.report.to_dict``, whole or ``summary``) or a ``Failed`` (the file could not be read).
Output: ``RankSet``, the ranks of the job (each rank object with its rank set) and one
``Problem`` per file or rank that is not read:

- ``unreadable``: the per-rank work failed on the file (truncated before its events, not JSON,
  corrupt gzip...; the message says which), or the process analysing it died.
- ``other_job``: the file's ``distributedInfo`` describes another job than the majority of the
  files (world size, backend or process groups differ), or its wall-clock window (Kineto's
  ``baseTimeNanoseconds`` + its timestamps) lies more than ``JobConfig.other_job_gap_ns`` away
  from the job's.
- ``duplicate_rank``: a second file declaring a rank already taken (the first by name keeps it).
- ``missing``: a rank below the job's world size that no file gives (nor a broken file whose
  name says ``rank<N>``).

A file without ``distributedInfo.rank`` gets its position among the files, or the next free
rank after it (the loader's rule), with a warning.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field

UNREADABLE = "unreadable"
OTHER_JOB = "other_job"
DUPLICATE = "duplicate_rank"
MISSING = "missing"

_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d{1,10})", re.I)
_EPOCH_NS_MIN = 10**18  # 2001-09-09: a wall-clock window before this is not an epoch time


@dataclass(frozen=True)
class Failed:
    """The per-rank work could not produce a rank object for ``source``."""

    source: str
    message: str
    """One sentence, without the file name."""


@dataclass(frozen=True)
class Problem:
    """A file or rank that is not part of the job's analysis."""

    kind: str
    """``unreadable``, ``other_job``, ``duplicate_rank`` or ``missing``."""
    source: str | None
    """The file (None for a missing rank)."""
    rank: int | None
    """The rank it declares (or its name says), None when unknown."""
    message: str
    """One sentence, without the file name."""

    def line(self, directory: str) -> str:
        """The problem as ``tracekit: error:`` prints it: ``<file>: <message>``."""
        return f"{self.source or directory}: {self.message}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "source": self.source, "rank": self.rank,
                "message": self.message}


@dataclass(frozen=True)
class RankSet:
    """The ranks of one job found in a directory."""

    source: str
    ranks: list[dict]
    """Rank objects, sorted by rank, ``rank`` set to the job's rank."""
    problems: list[Problem] = field(default_factory=list)
    world_size: int | None = None
    """The job's ``distributedInfo.world_size`` (None when no rank says)."""

    @property
    def complete(self) -> bool:
        """Every rank of the job read (and at least one)."""
        return bool(self.ranks) and not self.problems


def declared_rank(rank: dict) -> int | None:
    """``distributedInfo.rank`` of a rank object, None when absent, not an integer or not a
    rank (below 0, beyond ``MAX_RANK``): the loader's reading of it."""
    from tracekit.trace.loader import declared_rank as from_metadata

    return from_metadata({"distributedInfo": (rank.get("identity") or {}).get("distributed_info")})


def _fingerprint(rank: dict) -> str | None:
    """What the ranks of one job share in ``distributedInfo``: world size, backend, groups."""
    info = (rank.get("identity") or {}).get("distributed_info")
    if not isinstance(info, dict):
        return None
    groups = info.get("pg_config")
    if isinstance(groups, list):
        groups = sorted((json.dumps(g, sort_keys=True) for g in groups))
    return json.dumps([info.get("world_size"), info.get("backend"), groups], sort_keys=True)


def _describe(fp: str) -> str:
    ws, backend, groups = json.loads(fp)
    return (f"world size {ws}, backend {backend}"
            + (f", {len(groups)} process groups" if isinstance(groups, list) else ""))


def _wall_window(rank: dict) -> tuple[int, int] | None:
    ident = rank.get("identity") or {}
    start, end = ident.get("start_ns"), ident.get("end_ns")
    if start is None or end is None:
        return None
    base = ident.get("base_time_ns") or 0
    if base + start < _EPOCH_NS_MIN:
        return None  # not on a wall clock: cannot be compared across hosts
    return base + start, base + end


def _rank_from_name(path: str) -> int | None:
    from tracekit.trace.loader import MAX_RANK  # here: the loader's imports are not light

    m = _RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_RANK else None


def assign(directory: str, results: list[dict | Failed], *,
           other_job_gap_ns: int) -> RankSet:
    """The job's ranks and problems from the per-file ``results`` (file-name order)."""
    problems: list[Problem] = []
    good: list[dict] = []
    for r in results:
        if isinstance(r, Failed):
            problems.append(Problem(UNREADABLE, r.source, _rank_from_name(r.source), r.message))
        else:
            good.append(r)

    # the job: the most common distributedInfo (ties: the first file's)
    fps = [_fingerprint(r) for r in good]
    known = [f for f in fps if f is not None]
    job_fp = Counter(known).most_common(1)[0][0] if known else None
    kept = []
    for r, fp in zip(good, fps):
        if fp is not None and job_fp is not None and fp != job_fp:
            problems.append(Problem(OTHER_JOB, r["source"], declared_rank(r),
                                    f"belongs to another job ({_describe(fp)}; this job: "
                                    f"{_describe(job_fp)})"))
        else:
            kept.append(r)
    kept = _same_time(kept, problems, other_job_gap_ns)

    # ranks: declared first (the first file by name keeps a rank), then positions
    taken: dict[int, str] = {}
    rank_of: list[int | None] = []
    for r in kept:
        d = declared_rank(r)
        if d is not None and d in taken:
            problems.append(Problem(DUPLICATE, r["source"], d,
                                    f"declares rank {d}, as {taken[d]} does; left out"))
            rank_of.append(-1)  # left out (a declared rank is never -1: declared_rank)
            continue
        if d is not None:
            taken[d] = r["source"]
        rank_of.append(d)
    ranks = []
    for i, (r, d) in enumerate(zip(kept, rank_of)):
        if d == -1:
            continue
        r = dict(r)
        if d is None:
            d = i
            while d in taken:
                d += 1
            taken[d] = r["source"]
            from tracekit.trace.loader import MAX_RANK

            said = ((r.get("identity") or {}).get("distributed_info") or {})
            said = said.get("rank") if isinstance(said, dict) else None
            what = (f"distributedInfo.rank {_short(said)} is not a rank (0 to {MAX_RANK:,})"
                    if said is not None else "no usable distributedInfo.rank")
            r["warnings"] = list(r.get("warnings", [])) + [f"{what}; loaded as rank {d}"]
        r["rank"] = d
        ranks.append(r)
    ranks.sort(key=lambda r: r["rank"])

    world = None
    if job_fp is not None:
        ws = json.loads(job_fp)[0]
        world = ws if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0 else None
    if world is not None:
        broken = {p.rank for p in problems if p.kind == UNREADABLE and p.rank is not None}
        problems += _missing(world, set(taken) | broken)
    return RankSet(source=directory, ranks=ranks, problems=problems, world_size=world)


MAX_LISTED_MISSING = 65_536
"""Up to this many ranks without a file are one ``missing`` problem each; more (a world size of
10**12 declared by two files) are one problem naming the first ranges: time and memory grow
with the files, never with the declared world size."""


def _missing(world: int, have: set[int]) -> list[Problem]:
    """The ranks below ``world`` not in ``have``, as problems (see ``MAX_LISTED_MISSING``)."""
    spans, prev = [], -1  # [first, last] of each run of missing ranks
    for r in sorted(x for x in have if 0 <= x < world):
        if r > prev + 1:
            spans.append((prev + 1, r - 1))
        prev = r
    if prev < world - 1:
        spans.append((prev + 1, world - 1))
    count = sum(b - a + 1 for a, b in spans)
    if count <= MAX_LISTED_MISSING:
        return [Problem(MISSING, None, m, f"rank {m} of world size {world}: no trace file")
                for a, b in spans for m in range(a, b + 1)]
    shown = ", ".join(f"{a:,}" if a == b else f"{a:,}-{b:,}" for a, b in spans[:4])
    return [Problem(MISSING, None, spans[0][0],
                    f"{count:,} ranks of world size {world:,} have no trace file: {shown}"
                    + (f" and {len(spans) - 4:,} more ranges" if len(spans) > 4 else ""))]


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:20] + "..."


def _same_time(ranks: list[dict], problems: list[Problem], gap_ns: int) -> list[dict]:
    """Leave out the files whose wall-clock window is more than ``gap_ns`` away from the
    windows of the others (two runs of one program have the same distributedInfo)."""
    windows = [_wall_window(r) for r in ranks]
    known = [w for w in windows if w is not None]
    if len(known) < 2:
        return ranks
    # the job's window: the one overlapping (within the gap) the most others
    def near(a, b) -> bool:
        return a[0] - gap_ns <= b[1] and b[0] - gap_ns <= a[1]

    # (counted with two binary searches per window, not a pass over the others: a job of
    # 10,000 files would cost 10**8 comparisons)
    import bisect

    ends = sorted(w[1] for w in known)
    starts = sorted(w[0] for w in known)
    count = [len(known) - bisect.bisect_left(ends, w[0] - gap_ns)
             - (len(known) - bisect.bisect_right(starts, w[1] + gap_ns)) for w in known]
    best = known[count.index(max(count))]  # ties: the first
    kept = []
    for r, w in zip(ranks, windows):
        if w is None or near(w, best):
            kept.append(r)
            continue
        apart = (w[0] - best[1]) if w[0] > best[1] else (best[0] - w[1])
        problems.append(Problem(OTHER_JOB, r["source"], declared_rank(r),
                                f"belongs to another run: its trace is {apart / 1e9:,.0f} s "
                                f"{'after' if w[0] > best[1] else 'before'} the others' "
                                "(wall clock)"))
    return kept
