"""Phase rules, and the phase of every GPU activity.

A *phase* names a part of a training step (``optimizer``, ``lookup``, ``backward``...). Every GPU
activity (kernel, memcpy, memset) gets one:

1. the phase of the innermost *phase annotation* enclosing the CPU runtime call that launched
   it (linked by correlation id). A phase annotation is a ``user_annotation`` whose name matches
   an annotation rule. The launching thread's own annotations are searched first; a launch on a
   thread without one (autograd's backward thread, say) falls back to the main thread's (the
   thread that holds ``ProfilerStep#N``, else the one with most phase annotations);
2. else the phase of the first kernel rule whose pattern its name matches;
3. else ``"other"``.

A kernel rule may list annotation phases it ``refines``: a matching kernel inside such a phase
takes the kernel rule's phase (FBGEMM's lookup kernel inside TorchRec's ``## forward {i} ##`` is
``lookup``). The batch index ``{i}`` of the enclosing annotation is kept as ``batch`` (an
annotation without one, like ``Optimizer.step#Adam.step`` inside ``## optimizer 3 ##``, takes
that of the nearest enclosing phase annotation that has one).

Rules file (TOML, passed with ``--rules``; the defaults are ``tracekit/default_rules.toml``)::

    inherit = true            # false: start from no rules instead of the defaults
    [steps]
    profiler_step = '^ProfilerStep#(\\d+)$'   # group 1 = step number
    boundary = '^Optimizer\\.step#'           # without ProfilerStep, steps end at these
    [batch]
    index = '^## .*? (\\d+) ##$'              # group 1 = batch index
    [gap]
    optimizer = "optimizer"                   # phases the optimizer -> lookup gap uses
    lookup = "lookup"
    [classes]
    communication = '(?i)nccl'                # kernels counted as communication
    [[annotation]]                            # tried in order, before the inherited ones
    phase = "optimizer"
    pattern = '^my_optimizer_range$'
    [[kernel]]
    phase = "lookup"
    pattern = 'my_lookup_kernel'
    refines = ["forward"]
    [[gpu]]                                   # peak memory bandwidth of a GPU, before the
    pattern = 'H100 80GB HBM3'                # built-in table (tracekit.hardware); re.search
    hbm_gbps = 3350                           # on deviceProperties' name, any case

Patterns are regular expressions in RE2's syntax (Python's without lookaround and
backreferences: ``tracekit.patterns``), applied as ``re.search`` does, in time linear in the name
whatever the pattern and the name. A bad file, an unknown key or an invalid pattern raises
``RulesError``. Assignment is vectorised: patterns run once per
unique name, and the innermost enclosing annotation is found with sorted-interval searches
(``tracekit.intervals``), never a Python loop per event.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit import _fastnp as fnp
from tracekit import _objarrays as objarrays
from tracekit import intervals, patterns
from tracekit.errors import RulesError
from tracekit.frames import categorical, column, frame
from tracekit.hardware import GpuPeak
from tracekit.trace.model import GPU_ACTIVITY_KINDS, Kind, Trace

OTHER = "other"
"""The phase of an activity no rule covers."""


def _compile(pattern: str, what: str, source: str):
    if not isinstance(pattern, str) or not pattern:
        raise RulesError(f"{what}: pattern must be a non-empty string", path=source)
    try:
        return patterns.compile(pattern)
    except patterns.PatternError as exc:
        raise RulesError(f"{what}: invalid regular expression {pattern!r}: {exc}", path=source) from None


@dataclass(frozen=True)
class PhaseRule:
    """One name pattern and the phase it gives."""

    phase: str
    """The phase an annotation/kernel whose name matches gets."""
    pattern: str
    """Regular expression (RE2 syntax: ``tracekit.patterns``), searched for in the event name."""
    refines: tuple[str, ...] = ()
    """Kernel rules only: annotation phases this kernel rule wins over."""
    source: str = "<default rules>"
    """Where the rule came from (for error messages)."""

    def __post_init__(self) -> None:
        if not isinstance(self.phase, str) or not self.phase.strip():
            raise RulesError("a rule's phase must be a non-empty string", path=self.source)
        _compile(self.pattern, f"rule for phase {self.phase!r}", self.source)
        if not all(isinstance(r, str) for r in self.refines):
            raise RulesError(f"rule for phase {self.phase!r}: refines must be a list of "
                             "phase names", path=self.source)

    @property
    def regex(self):
        return patterns.compile(self.pattern)  # compiled once (patterns caches them)


@dataclass(frozen=True)
class Rules:
    """Everything that maps names to meaning: phase rules, step and batch patterns, classes."""

    annotations: tuple[PhaseRule, ...]
    """Annotation rules, first match wins."""
    kernels: tuple[PhaseRule, ...]
    """Kernel-name rules, first match wins."""
    profiler_step: str = r"^ProfilerStep#(\d+)$"
    """Pattern of torch.profiler's step annotation; group 1 is the step number."""
    step_boundary: str = r"^(## optimizer( \d+)? ##|Optimizer\.step#.*)$"
    """Without ProfilerStep, steps end at annotations matching this (one kind of them)."""
    batch_index: str = r"^## .*? (\d+) ##$"
    """Pattern whose group 1 is the batch index of an annotation name."""
    optimizer_phase: str = "optimizer"
    """Phase whose activities end a step's optimizer, for the optimizer -> lookup gap."""
    lookup_phase: str = "lookup"
    """Phase whose activities start a batch's embedding lookup, for the gap."""
    communication: str = r"(?i)nccl|rccl"
    """Kernel-name pattern of the communication class in the stream overlap."""
    gpus: tuple[GpuPeak, ...] = ()
    """Peak memory bandwidth of GPUs (``[[gpu]]``), tried before ``tracekit.hardware``'s table."""
    source: str = "<default rules>"
    """Path of the rules file, or ``<default rules>``."""

    def __post_init__(self) -> None:
        for what, pat in (("steps.profiler_step", self.profiler_step),
                          ("steps.boundary", self.step_boundary),
                          ("batch.index", self.batch_index),
                          ("classes.communication", self.communication)):
            _compile(pat, what, self.source)
        for what, pat in (("steps.profiler_step", self.profiler_step),
                          ("batch.index", self.batch_index)):
            if patterns.compile(pat).groups < 1:
                raise RulesError(f"{what}: pattern {pat!r} needs a group capturing the number",
                                 path=self.source)
        for what, ph in (("gap.optimizer", self.optimizer_phase), ("gap.lookup", self.lookup_phase)):
            if not isinstance(ph, str) or not ph:
                raise RulesError(f"{what} must be a phase name", path=self.source)

    @property
    def phase_names(self) -> tuple[str, ...]:
        """Every phase these rules can give an activity: their rules' phases and ``other``."""
        return tuple(sorted({r.phase for r in (*self.annotations, *self.kernels)} | {OTHER}))

    def digest(self) -> str:
        """Stable hash of the rules' meaning (not of where they came from)."""
        return self._digest

    @cached_property
    def _digest(self) -> str:
        # once per object: the analyses' memo (``derived``) asks for it at every lookup
        d = asdict(self)
        d.pop("source")
        for r in d["annotations"] + d["kernels"] + d["gpus"]:
            r.pop("source")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


_TOP_KEYS = {"inherit", "steps", "batch", "gap", "classes", "annotation", "kernel", "gpu"}
_TABLE_KEYS = {
    "steps": {"profiler_step": "profiler_step", "boundary": "step_boundary"},
    "batch": {"index": "batch_index"},
    "gap": {"optimizer": "optimizer_phase", "lookup": "lookup_phase"},
    "classes": {"communication": "communication"},
}


def _rule_list(items: object, key: str, source: str, kernel: bool) -> list[PhaseRule]:
    if not isinstance(items, list):
        raise RulesError(f"[[{key}]] must be an array of tables", path=source)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RulesError(f"[[{key}]] #{i + 1} must be a table", path=source)
        allowed = {"phase", "pattern", "refines"} if kernel else {"phase", "pattern"}
        unknown = set(item) - allowed
        if unknown:
            raise RulesError(f"[[{key}]] #{i + 1}: unknown key(s) {sorted(unknown)}", path=source)
        if "phase" not in item or "pattern" not in item:
            raise RulesError(f"[[{key}]] #{i + 1}: needs both 'phase' and 'pattern'", path=source)
        refines = item.get("refines", [])
        if not isinstance(refines, list):
            raise RulesError(f"[[{key}]] #{i + 1}: refines must be a list", path=source)
        out.append(PhaseRule(item["phase"], item["pattern"], tuple(refines), source))
    return out


def _gpu_list(items: object, source: str) -> list[GpuPeak]:
    if not isinstance(items, list):
        raise RulesError("[[gpu]] must be an array of tables", path=source)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RulesError(f"[[gpu]] #{i + 1} must be a table", path=source)
        unknown = set(item) - {"pattern", "hbm_gbps", "label"}
        if unknown:
            raise RulesError(f"[[gpu]] #{i + 1}: unknown key(s) {sorted(unknown)}", path=source)
        if "pattern" not in item or "hbm_gbps" not in item:
            raise RulesError(f"[[gpu]] #{i + 1}: needs both 'pattern' and 'hbm_gbps'", path=source)
        bw = item["hbm_gbps"]
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not 0 < bw < 1e6:
            raise RulesError(f"[[gpu]] #{i + 1}: hbm_gbps must be a number of GB/s > 0", path=source)
        label = item.get("label", "")
        if not isinstance(label, str):
            raise RulesError(f"[[gpu]] #{i + 1}: label must be a string", path=source)
        _compile(item["pattern"], f"[[gpu]] #{i + 1}", source)
        out.append(GpuPeak(item["pattern"], float(bw), label, source))
    return out


def rules_from_dict(doc: dict, source: str, base: Rules | None = None) -> Rules:
    """Rules from a parsed TOML document, layered over ``base`` unless ``inherit = false``."""
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise RulesError(f"unknown key(s) {sorted(unknown)}; expected some of "
                         f"{sorted(_TOP_KEYS)}", path=source)
    inherit = doc.get("inherit", True)
    if not isinstance(inherit, bool):
        raise RulesError("inherit must be true or false", path=source)
    kwargs: dict = {}
    if base is not None and inherit:
        kwargs = {k: getattr(base, k) for k in
                  ("profiler_step", "step_boundary", "batch_index", "optimizer_phase",
                   "lookup_phase", "communication")}
    for table, keys in _TABLE_KEYS.items():
        t = doc.get(table, {})
        if not isinstance(t, dict):
            raise RulesError(f"[{table}] must be a table", path=source)
        bad = set(t) - set(keys)
        if bad:
            raise RulesError(f"[{table}]: unknown key(s) {sorted(bad)}", path=source)
        for k, attr in keys.items():
            if k in t:
                if not isinstance(t[k], str):
                    raise RulesError(f"{table}.{k} must be a string", path=source)
                kwargs[attr] = t[k]
    ann = _rule_list(doc.get("annotation", []), "annotation", source, kernel=False)
    ker = _rule_list(doc.get("kernel", []), "kernel", source, kernel=True)
    gpus = _gpu_list(doc.get("gpu", []), source)
    if base is not None and inherit:
        ann += list(base.annotations)
        ker += list(base.kernels)
        gpus += list(base.gpus)
    return Rules(annotations=tuple(ann), kernels=tuple(ker), gpus=tuple(gpus), source=source,
                 **kwargs)


@lru_cache(maxsize=1)
def default_rules() -> Rules:
    """The rules in ``tracekit/default_rules.toml``."""
    text = resources.files("tracekit").joinpath("default_rules.toml").read_text()
    return rules_from_dict(tomllib.loads(text), "<default rules>")


def load_rules(path: str | Path | None) -> Rules:
    """The default rules, overridden by the TOML file at ``path`` when given."""
    if path is None:
        return default_rules()
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise RulesError("rules file not found", path=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"cannot read rules file: {exc}", path=str(p)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"invalid TOML: {exc}", path=str(p)) from None
    return rules_from_dict(doc, str(p), base=default_rules())


# ---- matching names --------------------------------------------------------------------------

def of_kinds(kind: np.ndarray, kinds) -> np.ndarray:
    """bool per row: its ``kind`` (``Trace.events.kind``, int8) is one of ``kinds``; a table
    lookup, several times quicker than ``np.isin`` on a million rows."""
    table = np.zeros(256, bool)
    table[[int(k) & 0xFF for k in kinds]] = True
    return table[np.asarray(kind, np.int8).view(np.uint8)]


def host_ops(trace: Trace) -> tuple[pd.DataFrame, np.ndarray, pd.Index]:
    """Annotations and CPU ops (``name, ts, dur, tid``), their name codes and the categories
    they index: what the steps, the phases and the fixes look through, selected once per trace
    object (memoised: do not modify them)."""

    def compute():
        ops = select(trace, Kind.ANNOTATION, Kind.CPU_OP, columns=("name", "ts", "dur", "tid"))
        return (ops, *name_codes(ops))

    return derived(trace, None, "host_ops", compute)


def select(trace: Trace, *kinds: Kind, columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows of the given kinds with only ``columns`` (cheaper than ``Trace.of_kind`` on big
    traces: the other columns are not copied). ``name`` stays categorical."""
    mask = of_kinds(trace.column("kind"), kinds)
    data = {}
    for c in columns:
        if c in ("name", "launch"):  # categoricals: their codes masked, the same categories
            cat = categorical(trace.events, c)
            data[c] = pd.Categorical.from_codes(cat.codes[mask], dtype=cat.dtype, validate=False)
        else:  # the trace's column, read once per trace (``Trace.column``)
            data[c] = trace.column(c)[mask]
    # copy=False: the columns are fresh; pandas would copy them once more into 2-D blocks
    return frame(data, copy=False)


def per_used_name(codes: np.ndarray, cats: pd.Index, f, fill) -> np.ndarray:
    """``f(names)`` evaluated once per distinct name that ``codes`` use, spread over ``codes``.

    ``f`` takes a ``pd.Index`` of names and returns one value per name, each a function of its
    name alone; ``fill`` is the value for names no row uses (never looked at). Of at most
    ``FEW_NAMES`` names, ``f`` is given them all (finding the used ones and taking them cost
    more than the few names they leave out: ~15 us a call, some twenty calls a trace)."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.asarray(fill).dtype)
    if len(cats) <= FEW_NAMES:
        vals = np.asarray(f(cats))
        if vals.dtype.kind not in "US":  # a width that the used names alone might not need
            full = np.full(len(cats), fill, dtype=vals.dtype)
            full[:] = vals
            return _spread(full, codes, fill)
    used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(cats)))
    vals = f(cats.take(used))  # ``cats[used]``, at a third of its cost
    full = np.full(len(cats), fill, dtype=np.asarray(vals).dtype)
    full[used] = vals
    return _spread(full, codes, fill)


FEW_NAMES = 64
"""Up to this many names (categories), ``per_used_name`` asks ``f`` about every one."""


def _spread(full: np.ndarray, codes: np.ndarray, fill) -> np.ndarray:
    """Each code's value in ``full``, ``fill`` for a negative code."""
    out = full[np.maximum(codes, 0)]
    if (codes < 0).any():
        out = np.where(codes < 0, fill, out)
    return out


def name_strings(codes: np.ndarray, cats: pd.Index) -> np.ndarray:
    """Each row's name as a Python str (object array), converted once per used name."""
    return per_used_name(codes, cats, _as_strings, "")


def _as_strings(names) -> np.ndarray:
    """``np.asarray(names.astype(str), dtype=object)``: names that are all Python strings
    already (a trace's) as they are, without the Index pandas builds for the conversion."""
    items = names.tolist()
    if all(type(x) is str for x in items):
        return np.array(items, dtype=object) if items else np.zeros(0, object)
    return np.asarray(names.astype(str), dtype=object)


def name_matches(codes: np.ndarray, cats: pd.Index, rx) -> np.ndarray:
    """Whether each row's name (``codes`` into ``cats``) matches ``rx`` (searched for once per
    distinct name that the rows use, and once per process for a name kept by ``_kept``).
    ``rx``: a pattern string (a rule's, a user's: compiled by ``tracekit.patterns``, linear in
    the name) or a compiled pattern."""
    found = patterns.searcher(rx)
    key = ("search", rx) if isinstance(rx, str) else \
        ("re", rx.pattern, rx.flags) if type(rx) is re.Pattern else None
    if key is None:
        return per_used_name(
            codes, cats, lambda n: np.array([found(str(x)) for x in n.tolist()], bool), False)
    return per_used_name(
        codes, cats, lambda n: np.array(_kept(key, None, n.tolist(), found), bool), False)


KEPT_ANSWERS = 16384
"""``_kept`` holds at most this many answers (then forgets them all)..."""
KEPT_NAME = 1024
"""... each of a name of at most this many characters (a longer one is asked each time):
~16 MB at most."""
_KEPT: dict[tuple, object] = {}
"""(question, name) -> the answer: a pattern found in a name (``name_matches``), the first of
some rules a name matches (``_first_match``), the number a pattern captures in it
(``_captured_int``): the same answer for every trace of a process, so that a job's worker asks
about each name of its ranks once (a job's ranks share most of their names; a tiny rank asked
about its few names ~100 times, ~7 us each through re2)."""
_HELD: dict[int, object] = {}
"""id -> the object a question names by its id (rules), held while answers about it are kept
(so that no other object takes its id meanwhile)."""


def _kept(question: tuple, holder: object, names: list, answer) -> list:
    """``[answer(str(n)) for n in names]``, each kept in ``_KEPT`` under ``question`` (which
    names ``holder`` by its id, if any)."""
    if holder is not None and id(holder) not in _HELD:
        if len(_HELD) >= 256:
            _KEPT.clear()
            _HELD.clear()
        _HELD[id(holder)] = holder
    out = []
    for x in names:
        s = str(x)
        got = _KEPT.get((question, s), _NONE)
        if got is _NONE:
            got = answer(s)
            if len(s) <= KEPT_NAME:
                if len(_KEPT) >= KEPT_ANSWERS:
                    _KEPT.clear()
                    _HELD.clear()
                    if holder is not None:
                        _HELD[id(holder)] = holder
                _KEPT[question, s] = got
        out.append(got)
    return out


_NONE = object()


def _first_match(names: pd.Index, rules: tuple[PhaseRule, ...]) -> np.ndarray:
    """Index of the first rule each name matches, -1 for none (each name asked once per
    process: ``_kept``)."""
    return np.array(_kept(("first", id(rules)), rules, names.tolist(),
                          lambda s: _first_rule(s, rules)), np.int64)


def _first_rule(name: str, rules: tuple[PhaseRule, ...]) -> int:
    for i, rule in enumerate(rules):
        if rule.regex.search(name) is not None:
            return i
    return -1


def _captured_int(names: pd.Index, pattern: str) -> np.ndarray:
    """Group 1 of ``pattern`` in each name as int64, -1 where it does not match (or the number
    is beyond int64: ``ProfilerStep#10000000000000000000000000`` is no step)."""
    rx = patterns.compile(pattern)
    return np.array(_kept(("int", pattern), None, names.tolist(),
                          lambda s: patterns.captured_int(rx, s)), np.int64)


def name_codes(events: pd.DataFrame) -> tuple[np.ndarray, pd.Index]:
    """The categorical codes of ``events.name`` and the categories they index."""
    got = categorical(events, "name")
    if got is not None:
        # the Categorical's own codes and categories: what ``name.cat`` gives, without the
        # accessor (~60 us a call, a few calls a trace) nor the Series
        return got.codes.astype(np.int64), got.categories
    cat = events["name"].astype("category")
    return cat.cat.codes.to_numpy(np.int64), cat.cat.categories


# ---- steps ------------------------------------------------------------------------------------

def profiler_steps(trace: Trace, rules: Rules) -> pd.DataFrame:
    """``ProfilerStep#N`` annotations: columns ``step, ts, end`` (ns), sorted by ts (memoised
    per trace object and rules: do not modify the frame)."""
    return derived(trace, rules, "profiler_steps", lambda: _profiler_steps(trace, rules))


def _profiler_steps(trace: Trace, rules: Rules) -> pd.DataFrame:
    ann, codes, cats = host_ops(trace)
    step = per_used_name(codes, cats, lambda n: _captured_int(n, rules.profiler_step), -1)
    keep = step >= 0
    ts = column(ann, "ts", np.int64)
    st, ts, end = step[keep].astype(np.int64), ts[keep], (ts + column(ann, "dur", np.int64))[keep]
    # by ts (stably), the first of each step number: numpy, as pandas' sort and
    # drop_duplicates cost ~1 ms a trace whatever its size; one int64 block (``frame``: the
    # table pandas makes of the 2-D block, without its ~0.1 ms of checks)
    o = np.argsort(ts, kind="stable")
    first = np.sort(np.unique(st[o], return_index=True)[1])
    o = o[first]
    return frame({"step": st[o], "ts": ts[o], "end": end[o]}, copy=False)


def step_of(steps: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """The step number whose ``[ts, end)`` holds each time, -1 for none."""
    ts = np.asarray(ts, dtype=np.int64)
    if steps.empty or ts.size == 0:
        return np.full(ts.size, -1, np.int64)
    s = column(steps, "ts", np.int64)
    e = column(steps, "end", np.int64)
    k = np.searchsorted(s, ts, side="right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & (ts < e[kk])
    return np.where(inside, column(steps, "step", np.int64)[kk], -1)


# ---- annotations enclosing CPU calls ------------------------------------------------------------

@dataclass(frozen=True)
class AnnotationIndex:
    """The phase annotations of a trace, per thread, ready for innermost-enclosing queries."""

    table: pd.DataFrame
    """One row per phase annotation: ``tid, ts, end, name, phase, batch``; ids = row positions.
    ``batch`` is the name's batch index, else the nearest enclosing phase annotation's, else -1."""
    threads: dict = field(default_factory=dict)
    """tid -> (row ids sorted by (ts, -end), starts, ends, parents)."""
    main_tid: int = -1
    """Thread whose annotations serve launches from threads that have none."""

    def enclosing(self, tid: np.ndarray, qs: np.ndarray, qe: np.ndarray) -> np.ndarray:
        """Row id of the innermost phase annotation enclosing each ``[qs, qe]``, -1 for none."""
        tid = np.asarray(tid, dtype=np.int64)
        qs = np.asarray(qs, dtype=np.int64)
        qe = np.asarray(qe, dtype=np.int64)
        out = np.full(tid.size, -1, np.int64)

        def search(thread: int, sel: np.ndarray) -> None:  # the queries sel in thread's annotations
            if sel.size:
                ids, s, e, par = self.threads[thread]
                k = intervals.innermost_enclosing(s, e, par, qs[sel], qe[sel])
                out[sel] = np.where(k >= 0, ids[np.maximum(k, 0)], -1)

        for t in self.threads:
            search(t, np.flatnonzero(tid == t))
        if self.main_tid in self.threads:
            search(self.main_tid, np.flatnonzero((out < 0) & (tid != self.main_tid)))
        return out


def annotation_index(trace: Trace, rules: Rules) -> AnnotationIndex:
    """Index the annotations whose names match an annotation rule."""
    # legacy traces wrote record_function ranges as operators: look at both kinds
    ann, codes, cats = host_ops(trace)
    rule = per_used_name(codes, cats, lambda n: _first_match(n, rules.annotations), -1)
    keep = rule >= 0
    kcodes = codes[keep]
    phases = np.array([r.phase for r in rules.annotations] or [""], dtype=object)
    ts = column(ann, "ts", np.int64)[keep]
    t_tid = column(ann, "tid", np.int64)[keep]
    t_ts, t_end = ts, ts + column(ann, "dur", np.int64)[keep]
    batch = per_used_name(kcodes, cats, lambda n: _captured_int(n, rules.batch_index),
                          -1).astype(np.int64)
    threads = {}
    # per thread (ascending), its rows by (ts, end descending), stably: by numpy, as a pandas
    # group-by and sort cost ~1 ms a trace whatever its size
    for t in np.unique(t_tid).tolist():
        rows = np.flatnonzero(t_tid == t)
        ids = rows[np.lexsort((-t_end[rows], t_ts[rows]))].astype(np.int64)
        s = t_ts[ids]
        e = t_end[ids]
        par = intervals.innermost_containers(s, e)
        threads[int(t)] = (ids, s, e, par)
        # an annotation without a batch index inherits its nearest enclosing one's
        # ("Optimizer.step#Adam.step" inside "## optimizer 3 ##" is batch 3)
        b = batch[ids]
        while True:
            todo = (b < 0) & (par >= 0)
            todo &= b[np.maximum(par, 0)] >= 0
            if not todo.any():
                break
            b[todo] = b[par[todo]]
        batch[ids] = b
    # built once its batches are known (a column assigned afterwards: ~0.1 ms a trace)
    table = frame({
        "tid": t_tid,
        "ts": ts,
        "end": t_end,
        "name": name_strings(kcodes, cats),
        "phase": phases[rule[keep]] if keep.any() else np.zeros(0, dtype=object),
        "batch": batch,
    })
    # main thread: the one holding ProfilerStep#N, else the one with most phase annotations
    main = -1
    is_step = per_used_name(codes, cats, lambda n: _captured_int(n, rules.profiler_step), -1) >= 0
    if is_step.any():
        main = _mode(column(ann, "tid", np.int64)[is_step])
    elif not table.empty:
        main = _mode(t_tid)
    return AnnotationIndex(table=table, threads=threads, main_tid=main)


def _mode(values: np.ndarray) -> int:
    """The most frequent value (of several, the smallest): ``pd.Series(values).mode()[0]``."""
    u, n = np.unique(values, return_counts=True)
    return int(u[np.argmax(n)])


# ---- GPU activities with their phase -----------------------------------------------------------

def _launches(trace: Trace) -> pd.DataFrame:
    """Runtime/driver calls that carry a correlation id, one row per id: ``correlation, ts, end, tid``."""
    rt = select(trace, Kind.RUNTIME, Kind.DRIVER, columns=("correlation", "ts", "dur", "tid"))
    corr = column(rt, "correlation", np.int64)
    linked = np.flatnonzero(corr >= 0)
    corr = corr[linked]
    if corr.size > 1 and not bool(np.all(corr[1:] > corr[:-1])):  # else sorted and unique
        corr, first = np.unique(corr, return_index=True)  # sorted; each id's first call
        linked = linked[first]
    ts = column(rt, "ts", np.int64)[linked]
    return frame({"correlation": corr, "ts": ts,
                  "end": ts + column(rt, "dur", np.int64)[linked],
                  "tid": column(rt, "tid", np.int64)[linked]}, copy=False)


def assign_activities(
    trace: Trace, rules: Rules, *, index: AnnotationIndex | None = None
) -> pd.DataFrame:
    """Every GPU activity with its phase, sorted by ``ts``.

    Columns: ``device, stream, kind`` (a ``Kind`` value), ``name`` (str), ``ts, end`` (ns),
    ``correlation``, ``launch_ts, launch_tid`` (the launching runtime call, -1 when the trace has
    none), ``phase`` (str), ``batch`` (the enclosing annotation's batch index, -1 when none),
    ``annotation`` (row id in ``annotation_index(trace, rules).table``, -1 when none),
    ``phase_source`` (``"annotation"``, ``"kernel name"`` or ``"none"``).
    """
    act = select(trace, *GPU_ACTIVITY_KINDS, columns=("device", "stream", "kind", "name", "ts",
                                                      "dur", "correlation"))
    n = len(act)
    codes, cats = name_codes(act)
    corr = column(act, "correlation", np.int64)
    launches = _launches(trace)
    lc = column(launches, "correlation", np.int64)
    if lc.size:
        k = np.minimum(np.searchsorted(lc, corr), lc.size - 1)
        linked = (corr >= 0) & (lc[k] == corr)
    else:
        k, linked = np.zeros(n, np.int64), np.zeros(n, bool)

    def launch(name: str) -> np.ndarray:  # the linked launch's column, -1 where none
        return np.where(linked, column(launches, name, np.int64)[k], -1) if lc.size \
            else np.full(n, -1, np.int64)

    launch_ts, launch_end, launch_tid = launch("ts"), launch("end"), launch("tid")

    # 1. innermost phase annotation around the launch
    index = annotation_index(trace, rules) if index is None else index
    ann_id = np.full(n, -1, np.int64)
    sel = np.flatnonzero(linked)
    if sel.size and not index.table.empty:
        ann_id[sel] = index.enclosing(launch_tid[sel], launch_ts[sel], launch_end[sel])
    has_ann = ann_id >= 0
    ann_phase = column(index.table, "phase", object)
    phase = objarrays.full(n, OTHER)
    phase[has_ann] = ann_phase[ann_id[has_ann]]
    source = objarrays.where(has_ann, "annotation", "none")
    batch = np.full(n, -1, np.int64)
    batch[has_ann] = column(index.table, "batch", np.int64)[ann_id[has_ann]]

    # 2. kernel-name rules: for activities without an annotation phase, or ones they refine
    kr = per_used_name(codes, cats, lambda n: _first_match(n, rules.kernels), -1)
    if rules.kernels:
        kphase = np.array([r.phase for r in rules.kernels], dtype=object)
        hit = kr >= 0
        refine = np.zeros(n, bool)
        for i, r in enumerate(rules.kernels):
            if r.refines:
                refine |= (kr == i) & has_ann & fnp.isin(phase, list(r.refines))
        take = hit & (~has_ann | refine)
        phase[take] = kphase[kr[take]]
        source[take & ~has_ann] = "kernel name"

    names = name_strings(codes, cats)
    ts = column(act, "ts", np.int64)
    out = frame({
        "device": column(act, "device", np.int64),
        "stream": column(act, "stream", np.int64),
        "kind": column(act, "kind", np.int64),
        "name": names,
        "ts": ts,
        "end": ts + column(act, "dur", np.int64),
        "correlation": corr,
        "launch_ts": launch_ts,
        "launch_tid": launch_tid,
        "phase": phase,
        "batch": batch,
        "annotation": ann_id,
        "phase_source": source,
    }, copy=False)
    if intervals.is_nondecreasing(ts):  # events are sorted by ts: so are these
        return out
    return out.sort_values("ts", kind="stable").reset_index(drop=True)


def derived(trace: Trace, rules: Rules | None, what: str, compute):
    """``compute()`` once per (trace object, rules' meaning, ``what``): one trace is read by
    several sections and by the graph, which share what they derive from it (``Trace.memo``).
    Callers must not modify the value."""
    return trace.memo((what, rules.digest() if rules is not None else ""), compute)


def activities(trace: Trace, rules: Rules) -> tuple[pd.DataFrame, AnnotationIndex]:
    """``assign_activities`` and ``annotation_index``, memoised per (trace object, rules).
    The frames are shared: callers must not modify them."""

    def compute():
        index = annotation_index(trace, rules)
        return assign_activities(trace, rules, index=index), index

    return derived(trace, rules, "activities", compute)
