"""Write a job of N rank traces from real ones, with three things planted for the analysis to
find: a straggler, an all-to-all imbalance and clock offsets between hosts.

    python -m tests.jobgen OUT_DIR N [--straggler R] [--heavy R] [--seed S]

The templates are rank traces our runtime wrote on GPUs (by default
``sample_traces/pipelines_2gpu/sparse/trace_rank{0,1}``). Generated rank r copies template
``r % len(templates)`` event for event, except:

- its collectives: every NCCL kernel is an instance of its process group (the n-th kernel of the
  group in the template). On a true clock, rank r arrives at instance i when the templates'
  kernels had all started (the latest of their starts: the templates' own skew, up to 5.9 ms
  between the ranks of the 2026-11-27 traces, would hide what is planted), plus a jitter in
  ``[0, jitter_us)``, plus ``delay_us`` if r is the planted *straggler*, but never before its
  previous kernel on that stream ended; the instance ends for
  every rank at the last arrival + the template's transfer time (its first end - its last
  start, at least 1 us) + a jitter of at most 1 us. Each kernel runs from its arrival to that end.
- its all-to-all sizes: at instance i every rank sends ``base_i`` elements to every rank
  (``base_i``: the first template's ``In split size[0]``), ``heavy_factor`` times as many to the
  planted *heavy* rank; ``In/Out split size`` and ``In/Out msg nelems`` say so, on the kernels
  and on the ``record_param_comms`` ops.
- its process groups: ``N`` ranks (``Process Group Ranks``, ``Group size``, ``distributedInfo``),
  its rank, and its clock: every timestamp plus the offset of its host (ranks ``h * per_host`` ..
  ``(h+1) * per_host - 1`` are host h; host 0's offset is 0, the others uniform in
  ``+-max_offset_us``).

``make_job`` returns the ``Plan`` (what was planted) for the test or benchmark to compare with.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = tuple(REPO / "sample_traces" / "pipelines_2gpu" / "sparse" / f"trace_rank{r}.json.gz"
                  for r in (0, 1))
A2A_NAMES = ("all_to_allv", "all_to_all", "alltoall_base")


@dataclass(frozen=True)
class Plan:
    """What ``make_job`` planted."""

    n_ranks: int
    straggler: int
    delay_us: float
    heavy_rank: int
    heavy_factor: float
    per_host: int
    host_offsets_us: tuple[float, ...]
    files: tuple[Path, ...]

    def offset_us(self, rank: int) -> float:
        """Rank ``rank``'s clock minus the true clock (= minus rank 0's)."""
        return self.host_offsets_us[rank // self.per_host]


def _is_collective_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()


def _group(e: dict) -> str:
    a = e.get("args") or {}
    return str(a.get("Process Group Name", f"stream {a.get('stream')}"))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.strip("[] ").split(",") if x.strip()]


def _instances(template: dict) -> dict[tuple[str, int], dict]:
    """(group, n) -> the n-th collective kernel of the group (by start time)."""
    ks = sorted((e for e in template["traceEvents"] if e.get("ph") == "X"
                 and _is_collective_kernel(e)), key=lambda e: e["ts"])
    out, seen = {}, {}
    for e in ks:
        g = _group(e)
        n = seen.get(g, 0)
        seen[g] = n + 1
        out[(g, n)] = e
    return out


def _a2a_ops(template: dict) -> dict[int, tuple[str, int]]:
    """id() of each all-to-all ``record_param_comms`` op -> (group, n) in issue order."""
    out, seen = {}, {}
    ops = sorted((e for e in template["traceEvents"] if e.get("ph") == "X"
                  and e.get("name") == "record_param_comms"
                  and (e.get("args") or {}).get("Collective name") in A2A_NAMES),
                 key=lambda e: e["ts"])
    for e in ops:
        g = _group(e)
        n = seen.get(g, 0)
        seen[g] = n + 1
        out[id(e)] = (g, n)
    return out


def make_job(out_dir: str | Path, n_ranks: int, *, templates=TEMPLATES, straggler: int | None = None,
             delay_us: float = 500.0, heavy_rank: int | None = None, heavy_factor: float = 4.0,
             per_host: int = 2, max_offset_us: float = 50_000.0, jitter_us: float = 5.0,
             seed: int = 0, repeat: int = 1, ranks=None) -> Plan:
    """Write ``n_ranks`` traces ``trace_rank<r>.json.gz`` into ``out_dir`` (see the module
    docstring) and return what was planted. ``repeat``: each rank's events that many times over
    (copies one after the other: a longer trace, ~14 MB of JSON per copy); ``ranks``: write only
    these ranks' files (the others are then missing from the job)."""
    if n_ranks < 2:
        raise ValueError("a job needs at least 2 ranks")
    straggler = n_ranks // 2 - 1 if straggler is None else straggler
    heavy_rank = n_ranks - 3 if heavy_rank is None and n_ranks > 3 else (
        n_ranks - 1 if heavy_rank is None else heavy_rank)
    rng = random.Random(seed)
    n_hosts = -(-n_ranks // per_host)
    host_offsets = tuple([0.0] + [round(rng.uniform(-max_offset_us, max_offset_us), 3)
                                  for _ in range(n_hosts - 1)])
    tmpl = []
    for p in templates:
        with gzip.open(p, "rb") as f:
            tmpl.append(json.loads(f.read()))
    inst = [_instances(t) for t in tmpl]
    keys = sorted(set.intersection(*(set(i) for i in inst)),
                  key=lambda k: min(i[k]["ts"] for i in inst))
    # per instance: template starts, transfer time, all-to-all base split (elements)
    transfer, base = {}, {}
    for k in keys:
        starts = [i[k]["ts"] for i in inst]
        ends = [i[k]["ts"] + i[k]["dur"] for i in inst]
        transfer[k] = max(min(ends) - max(starts), 1.0)
        a = inst[0][k].get("args") or {}
        if a.get("Collective name") in A2A_NAMES:
            base[k] = _ints(a["In split size"])[0]
    # copy c of a rank's events is shifted by c * span (the same for every template)
    timed = [e for t in tmpl for e in t["traceEvents"] if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    # the arrivals and ends of every rank, instance by instance (true clock, us)
    arrive: dict[tuple[int, tuple], float] = {}
    end: dict[tuple[int, tuple], float] = {}
    free: dict[tuple[int, int], float] = {}
    for k in keys:
        for r in range(n_ranks):
            e = inst[r % len(tmpl)][k]
            t = max(i[k]["ts"] for i in inst) + rng.uniform(0, jitter_us) + \
                (delay_us if r == straggler else 0.0)
            arrive[r, k] = max(t, free.get((r, e["args"]["stream"]), t))
        last = max(arrive[r, k] for r in range(n_ranks))
        for r in range(n_ranks):
            end[r, k] = last + transfer[k] + rng.uniform(0, 1.0)
            free[r, inst[r % len(tmpl)][k]["args"]["stream"]] = end[r, k]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for r in (range(n_ranks) if ranks is None else ranks):
        path = out_dir / f"trace_rank{r}.json.gz"
        _write_rank(path, tmpl[r % len(tmpl)], inst[r % len(tmpl)], r, n_ranks,
                    offset_us=host_offsets[r // per_host], repeat=repeat, span_us=span,
                    timing={k: (arrive[r, k], end[r, k]) for k in keys},
                    a2a={k: _a2a_split(base[k], r, n_ranks, heavy_rank, heavy_factor)
                         for k in base})
        files.append(path)
    return Plan(n_ranks=n_ranks, straggler=straggler, delay_us=delay_us, heavy_rank=heavy_rank,
                heavy_factor=heavy_factor, per_host=per_host, host_offsets_us=host_offsets,
                files=tuple(files))


def _a2a_split(b: int, r: int, n: int, heavy: int, factor: float) -> tuple[list[int], list[int]]:
    """(elements rank r sends to each rank, elements it receives from each) when every rank
    sends ``b`` to every rank and ``factor`` times as many to ``heavy``."""
    sent = [int(b * (factor if j == heavy else 1)) for j in range(n)]
    return sent, [int(b * (factor if r == heavy else 1))] * n


_BATCH = re.compile(r"^(## .*? )(\d+)( ##)$")
_STEP = re.compile(r"^(ProfilerStep#)(\d+)$")


def _write_rank(path: Path, t: dict, inst: dict, r: int, n: int, *, offset_us: float,
                repeat: int, span_us: float, timing: dict, a2a: dict) -> None:
    """Rank r's trace: the template's events ``repeat`` times (copy c shifted in time past copy
    c - 1, its ids, step numbers and batch indices offset so that they stay unique), with the
    planned collective times and sizes (see the module docstring), streamed to a gzip file."""
    kernel_key = {id(e): k for k, e in inst.items()}
    op_key = _a2a_ops(t)
    evs = t["traceEvents"]
    ids = max([int((e.get("args") or {}).get("correlation", 0)) for e in evs]
              + [int(e.get("id", 0)) for e in evs if e.get("ph") in ("s", "f")]) + 1
    ext = max(int((e.get("args") or {}).get("External id", 0)) for e in evs) + 1
    steps = [int(m.group(2)) for e in evs if (m := _STEP.match(e.get("name", "")))]
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    batches = [int(m.group(2)) for e in evs if (m := _BATCH.match(e.get("name", "")))]
    batch_stride = (max(batches) + 1) if batches else 0
    doc = {k: v for k, v in t.items() if k != "traceEvents"}
    info = dict(doc.get("distributedInfo") or {})
    info["rank"] = r
    info["world_size"] = n
    if isinstance(info.get("pg_config"), list):
        info["pg_config"] = [{**g, "pg_size": n, "ranks": list(range(n))} for g in info["pg_config"]]
    doc["distributedInfo"] = info
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(dumps(doc)[:-1].encode() + b',"traceEvents":[')
        first = True
        for c in range(repeat):
            shift = offset_us + c * span_us
            chunk = []
            for orig in evs:
                if c and orig.get("ph") == "M":
                    continue
                e = dict(orig)
                if "ts" in e:
                    e["ts"] = round(e["ts"] + shift, 3)
                if c and e.get("ph") in ("s", "f") and "id" in e:
                    e["id"] = int(e["id"]) + c * ids
                if c and (m := _STEP.match(e.get("name", ""))):
                    e["name"] = f"{m.group(1)}{int(m.group(2)) + c * step_stride}"
                elif c and (m := _BATCH.match(e.get("name", ""))):
                    e["name"] = f"{m.group(1)}{int(m.group(2)) + c * batch_stride}{m.group(3)}"
                k = kernel_key.get(id(orig))
                if k is not None and k in timing:
                    a, z = timing[k]
                    e["ts"] = round(a + shift, 3)
                    e["dur"] = round(z - a, 3)
                args = orig.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    if c:
                        for key, stride in (("correlation", ids), ("External id", ext)):
                            if isinstance(args.get(key), int) and args[key] > 0:
                                args[key] += c * stride
                    if "Process Group Ranks" in args and args.get("Group size", 0) > 1:
                        args["Process Group Ranks"] = str(list(range(n)))
                        args["Group size"] = n
                    if "Rank" in args and "Collective name" in args:
                        args["Rank"] = r
                    kk = k if k is not None else op_key.get(id(orig))
                    if kk in a2a:
                        sent, recv = a2a[kk]
                        args["In split size"] = str(sent)
                        args["Out split size"] = str(recv)
                        args["In msg nelems"] = sum(sent)
                        args["Out msg nelems"] = sum(recv)
                    e["args"] = args
                chunk.append(dumps(e))
            if chunk:
                f.write(((b"" if first else b",") + ",".join(chunk).encode()))
                first = False
        f.write(b"]}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("n_ranks", type=int)
    ap.add_argument("--straggler", type=int, default=None)
    ap.add_argument("--heavy", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="copies of each rank's events")
    ap.add_argument("--ranks", type=int, nargs="*", default=None, help="write only these ranks")
    a = ap.parse_args(argv)
    plan = make_job(a.out_dir, a.n_ranks, straggler=a.straggler, heavy_rank=a.heavy, seed=a.seed,
                    repeat=a.repeat, ranks=a.ranks)
    print(json.dumps({"straggler": plan.straggler, "heavy_rank": plan.heavy_rank,
                      "delay_us": plan.delay_us, "heavy_factor": plan.heavy_factor,
                      "per_host": plan.per_host, "host_offsets_us": plan.host_offsets_us}))


if __name__ == "__main__":
    main()
