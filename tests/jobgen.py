"""Write a job of N rank traces from real ones, with three things planted for the analysis to
find: a straggler, an all-to-all imbalance and clock offsets between hosts.

    python -m tests.jobgen OUT_DIR N [--straggler R] [--heavy R] [--seed S]

The templates are rank traces our runtime wrote on GPUs (by default
``sample_traces/pipelines_2gpu/sparse/trace_rank{0,1}``). Generated rank r copies template
``r % len(templates)`` event for event, except:

- its collectives: every NCCL kernel is an instance of its process group (the n-th kernel of the
  group in the template). On a true clock, rank r arrives at instance i when its template's
  kernel started, plus a jitter in ``[0, jitter_us)``, plus ``delay_us`` if r is the planted
  *straggler*, but never before its previous kernel on that stream ended; the instance ends for
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
             seed: int = 0) -> Plan:
    """Write ``n_ranks`` traces ``trace_rank<r>.json.gz`` into ``out_dir`` (see the module
    docstring) and return what was planted."""
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
    # the arrivals and ends of every rank, instance by instance (true clock, us)
    arrive: dict[tuple[int, tuple], float] = {}
    end: dict[tuple[int, tuple], float] = {}
    free: dict[tuple[int, int], float] = {}
    for k in keys:
        for r in range(n_ranks):
            e = inst[r % len(tmpl)][k]
            t = e["ts"] + rng.uniform(0, jitter_us) + (delay_us if r == straggler else 0.0)
            arrive[r, k] = max(t, free.get((r, e["args"]["stream"]), t))
        last = max(arrive[r, k] for r in range(n_ranks))
        for r in range(n_ranks):
            end[r, k] = last + transfer[k] + rng.uniform(0, 1.0)
            free[r, inst[r % len(tmpl)][k]["args"]["stream"]] = end[r, k]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(n_ranks):
        t = tmpl[r % len(tmpl)]
        kernel_key = {id(e): k for k, e in inst[r % len(tmpl)].items()}
        op_key = _a2a_ops(t)
        off = host_offsets[r // per_host]
        events = []
        for orig in t["traceEvents"]:
            e = dict(orig)
            if "ts" in e:
                e["ts"] = round(e["ts"] + off, 3)
            k = kernel_key.get(id(orig))
            if k is not None and k in transfer:
                e["ts"] = round(arrive[r, k] + off, 3)
                e["dur"] = round(end[r, k] - arrive[r, k], 3)
            args = orig.get("args")
            if isinstance(args, dict) and ("Collective name" in args or "Process Group Ranks" in args):
                args = dict(args)
                if "Process Group Ranks" in args and args.get("Group size", 0) > 1:
                    args["Process Group Ranks"] = str(list(range(n_ranks)))
                    args["Group size"] = n_ranks
                if "Rank" in args:
                    args["Rank"] = r
                kk = k if k is not None else op_key.get(id(orig))
                if kk in base:
                    b = base[kk]
                    sent = [int(b * (heavy_factor if j == heavy_rank else 1)) for j in range(n_ranks)]
                    recv = [int(b * (heavy_factor if r == heavy_rank else 1))] * n_ranks
                    args["In split size"] = str(sent)
                    args["Out split size"] = str(recv)
                    args["In msg nelems"] = sum(sent)
                    args["Out msg nelems"] = sum(recv)
                e["args"] = args
            events.append(e)
        doc = {k: v for k, v in t.items() if k != "traceEvents"}
        info = dict(doc.get("distributedInfo") or {})
        info["rank"] = r
        info["world_size"] = n_ranks
        if isinstance(info.get("pg_config"), list):
            info["pg_config"] = [{**g, "pg_size": n_ranks, "ranks": list(range(n_ranks))}
                                 for g in info["pg_config"]]
        doc["distributedInfo"] = info
        doc["traceEvents"] = events
        path = out_dir / f"trace_rank{r}.json.gz"
        with gzip.open(path, "wb", compresslevel=1) as f:
            f.write(json.dumps(doc, separators=(",", ":")).encode())
        files.append(path)
    return Plan(n_ranks=n_ranks, straggler=straggler, delay_us=delay_us, heavy_rank=heavy_rank,
                heavy_factor=heavy_factor, per_host=per_host, host_offsets_us=host_offsets,
                files=tuple(files))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("n_ranks", type=int)
    ap.add_argument("--straggler", type=int, default=None)
    ap.add_argument("--heavy", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    plan = make_job(a.out_dir, a.n_ranks, straggler=a.straggler, heavy_rank=a.heavy, seed=a.seed)
    print(json.dumps({"straggler": plan.straggler, "heavy_rank": plan.heavy_rank,
                      "delay_us": plan.delay_us, "heavy_factor": plan.heavy_factor,
                      "per_host": plan.per_host, "host_offsets_us": plan.host_offsets_us}))


if __name__ == "__main__":
    main()
