"""``tracekit analyze DIR``'s text for a job of many ranks: the summary, then the cross-rank
sections, from the job object (``tracekit.report.schema.Job``)."""

from __future__ import annotations

from tracekit.report.tables import bound_text, clip, fmt_bytes, limited, ms, ranges, share, table


def _notable(rows: list[dict], job: dict, limit: int) -> tuple[list[dict], str]:
    """All rows up to ``limit``; beyond, the ranks worth a look (straggler, slowest, fastest,
    heaviest, most waited-for) and the slowest by P90 step time, in rank order."""
    if len(rows) <= limit:
        return rows, ""
    keep = {job["stragglers"]["rank"], job["all_to_all"]["heaviest_rank"]}
    sp = job.get("spread") or {}
    for q in ("p50", "p90"):
        if sp.get(q):
            keep |= {sp[q]["slowest_rank"], sp[q]["fastest_rank"]}
    keep |= {r["rank"] for r in sorted(rows, key=lambda r: -r["caused_wait_ns"])[:5]}
    key = sp.get("figure", "step_gpu") + "_p90_ns"
    for r in sorted(rows, key=lambda r: -(r.get(key) or 0)):
        if len(keep - {None}) >= limit:
            break
        keep.add(r["rank"])
    shown = [r for r in rows if r["rank"] in keep]
    return shown, (f"  ... {len(rows) - len(shown)} more ranks (the straggler, the slowest, "
                   "fastest and heaviest ranks and the slowest by P90 are shown; every rank: "
                   "--format json)\n")


CLASS_TEXT = {"host": "host work", "gpu": "GPU work", "communication": "collectives moving data",
              "sync": "syncs", "idle": "idle", "unexplained": "time the trace does not explain "
              "(a sleep, a wait for something it does not show)"}


def _classes(c: dict, total: float) -> str:
    parts = sorted(((k, v) for k, v in c.items() if v and total and v / total >= 0.05),
                   key=lambda kv: -kv[1])
    return ", ".join(f"{k} {ms(v)}" for k, v in parts)


def _helps(w: dict) -> bool:
    return bool(w.get("helps", w["saving_ns"] > 0.01 * w["step_ns"]))


def _what_first(g: dict) -> list[str]:
    """"What to do first": the change across ranks that saves most (balancing, a fix on every
    rank) before the straggler at the median rank's speed, which says what the host work the
    straggler does beyond the other ranks costs, not how to remove it (it is then the line
    beside); none that helps: said."""
    helps = [w for w in g["what_ifs"] if _helps(w)]
    if not helps:
        return ["What to do first: no change across ranks would help much here (what-ifs below); "
                "each rank's own findings: analyze DIR --rank N"] if g["what_ifs"] else []
    changes = [w for w in helps if w["id"] != "straggler_at_median"]
    w = max(changes or helps, key=lambda x: x["saving_ns"])
    out = [f"What to do first: {w['title']}: saves {ms(w['saving_ns'])} ms per job step "
           f"({share(w['saving_fraction'], 1)}), {ms(w['step_ns'])} -> {ms(w['predicted_ns'])} ms"]
    strag = next((x for x in helps if x["id"] == "straggler_at_median" and x is not w), None)
    if strag is not None:
        out.append(f"  the straggler's extra host work: {strag['title']} would save "
                   f"{ms(strag['saving_ns'])} ms ({share(strag['saving_fraction'], 1)})")
    return out


def headline(job: dict) -> list[str]:
    """The job's answer in two or three lines, from its graph: what bounds the job and what to
    do first (``analyze DIR``'s first lines, the dashboard's job overview); [] without a graph."""
    g = job.get("graph")
    if not g:
        return []
    steps = g["counted_steps"]
    span = (f"step {steps[0]}" if len(steps) == 1 else
            f"steps {steps[0]}-{steps[-1]}") if steps else "no counted step"
    view = ("estimated untraced" if g["view"] == "untraced" else
            "as traced" if g["view"] == "traced" else "ranks untraced and traced")
    b = g["bound"]
    where = (f"rank {b['rank']}'s {CLASS_TEXT.get(b['class'], b['class'])}, "
             f"{share(b['share'], 1)} of the job's critical path" if b else
             "- (no critical path across ranks)")
    return [f"What bounds the job: {where} (job step {ms(g['step_ns'])} ms, {view}; "
            f"the ranks' graphs joined at their collectives, {span})"] + _what_first(g)


def first_screen(job: dict, *, limit: int = 64) -> list[str]:
    """What ``analyze DIR`` opens with: what bounds the job (the rank and the class of time on
    the job's critical path, from the ranks' graphs joined at their collectives), what to do
    first (the what-if across ranks that saves most), who waits for whom, the straggler and why
    it is slow, every what-if, and each rank's own work against its wait."""
    out: list[str] = []
    g = job.get("graph")
    st = job["stragglers"]
    if g:
        out += headline(job)
        out += [f"  warning: {w}" for w in g.get("warnings") or []]
        waiting = [r for r in g["ranks"] if r["waiting"]]
        for r in waiting[:3]:
            top = r["waits_for"][0] if r["waits_for"] else None
            at = r["waits_at"][0]["at"] if r["waits_at"] else ""
            if top:
                out.append(f"  rank {r['rank']} waits {ms(r['wait_ns'])} ms per step "
                           f"({share(r['wait_share'], 1)} of its step) for rank {top['rank']}"
                           + (f", most at {at}" if at else ""))
        if len(waiting) > 3:
            out.append(f"  ... {len(waiting) - 3} more ranks wait more than they work "
                       "(Job graph below)")
    if st["rank"] is not None:
        out.append(f"  straggler: rank {st['rank']}, last to arrive at {st['last_count']} of "
                   f"{st['instances']} collectives; the others waited {ms(st['caused_wait_ns'])} "
                   "ms for it in all")
        why = st.get("why")
        if why and (why["phases"] or why["ops"]):
            out.append(f"  why rank {why['rank']} is slow (per step, against the median of the "
                       f"{why['against']} other rank{'s' if why['against'] != 1 else ''}; "
                       "largest first):")
            rows = sorted(why["ops"][:5] + why["phases"][:3], key=lambda x: -x["diff_ns"])[:6]
            out.append(table(["", "name", "+ms", "rank ms", "median ms"],
                             [[x["kind"], clip(x["name"], 60), ms(x["diff_ns"]),
                               ms(x["straggler_ns"]), ms(x["median_ns"])] for x in rows],
                             indent="    "))
            big = [a for a in why["all_to_all"] if a["median_received_bytes"]
                   and a["received_bytes"] > 1.1 * a["median_received_bytes"]][:2]
            for a in big:
                out.append(f"    all-to-all {a['key']}: it received {fmt_bytes(a['received_bytes'])}"
                           f", the median rank {fmt_bytes(a['median_received_bytes'])}")
    if g and g["what_ifs"]:
        out.append(f"  what-ifs, replayed on the job's graph (job step {ms(g['step_ns'])} ms):")
        for w in g["what_ifs"]:
            sv = w["saving_ns"]
            verdict = (f"saves {ms(sv)} ms ({share(w['saving_fraction'], 1)})" if _helps(w)
                       else f"would not help ({ms(sv)} ms)")
            aware = (f"; with contention {ms(w['predicted_contention_ns'])} ms"
                     if abs(w["predicted_contention_ns"] - w["predicted_ns"]) > 1_000 else "")
            out.append(f"    {w['title']}: {ms(w['predicted_ns'])} ms, {verdict}{aware}")
            if w.get("note") and not w["note"].startswith("skeletons only"):
                out.append(f"      ({w['note']})")
            if w.get("warning"):
                out.append(f"      warning: {w['warning']}")
    if g and g["ranks"]:
        out.append("  each rank's step on the job's graph (per step): its own work, its "
                   "collectives moving data, its wait for the others")
        rows = sorted(g["ranks"], key=lambda r: (-r["wait_ns"], r["rank"]))
        rows, more = limited(rows, min(limit, 16))
        out.append(table(["rank", "step ms", "own ms", "transfer ms", "wait ms", "waits for",
                          "own work is mostly"],
                         [[r["rank"], ms(r["step_ns"]), ms(r["own_ns"]), ms(r["transfer_ns"]),
                           ms(r["wait_ns"]),
                           ", ".join(f"rank {w['rank']} {ms(w['ns'])}" for w in
                                     r["waits_for"][:2]) or "-",
                           _classes(r["own_classes"], r["own_ns"]) or "-"]
                          for r in sorted(rows, key=lambda r: r["rank"])], indent="    "))
        if more:
            out.append("  " + more.strip())
        note = window_note(g)
        if note:
            out.append(f"  ({note})")
    return out


def window_note(g: dict) -> str | None:
    """Why a rank's step on the job's graph can be longer than the job step: said where one is
    (by more than 2 %), so the two figures do not read as contradicting each other."""
    if not any(r["step_ns"] > 1.02 * g["step_ns"] for r in g["ranks"]):
        return None
    return (f"a rank's step is its window, from its step's start to its end; the job step, "
            f"{ms(g['step_ns'])} ms, is the period between the job's step ends: where steps "
            f"overlap, as in a pipeline, a window is longer than the job step")


def render_job(job: dict, *, limit: int = 64) -> str:
    """A job object (``tracekit.ranks``) as text: the summary first, then the cross-rank
    sections. ``limit``: rows shown in the longest tables."""
    n, ws = job["ranks_read"], job["world_size"]
    state = "complete" if job["complete"] else "INCOMPLETE"
    head = (f"== job {job['source']}: {n} rank{'s' if n != 1 else ''} read"
            + (f" of world size {ws}" if ws else "") + f" ({state})")
    out = [head, "  per-rank detail: --rank N (one rank) or --detail (every rank)"]
    if job["problems"]:
        out.append(f"  not read ({len(job['problems'])}):")
        missing = [p["rank"] for p in job["problems"] if p["kind"] == "missing"]
        for p in job["problems"]:
            if p["kind"] != "missing":
                out.append(f"    {p['source']}: {p['message']}")
        if missing:
            out.append(f"    ranks without a trace file: {ranges(missing)}")
    if not job["ranks"]:
        return "\n".join(out) + "\n"
    sp = job["spread"] or {}
    which = "GPU" if sp.get("figure") == "step_gpu" else "CPU"
    fig = sp.get("figure", "step_gpu")
    align = job["clock"]["aligned"]
    out += first_screen(job, limit=limit)

    out += ["", "Ranks"]
    rows, more = _notable(job["ranks"], job, limit)
    out.append(table(
        ["rank", "trace", "steps", f"{which} P50 ms", f"{which} P90 ms", "bound",
         "collectives", "wait ms", "last", "caused wait ms"]
        + (["clock offset ms"] if align else []),
        [[r["rank"], clip(r["source"].rsplit("/", 1)[-1], 40), r["steps"],
          ms(r[f"{fig}_p50_ns"]), ms(r[f"{fig}_p90_ns"]), bound_text(r["bound"], r["bound_share"]),
          r["collectives"], ms(r["wait_ns"]), r["last_count"], ms(r["caused_wait_ns"])]
         + ([ms(r["clock_offset_ns"])] if align else []) for r in rows]))
    if more:
        out.append(more.rstrip("\n"))
    for q in ("p50", "p90"):
        v = sp.get(q)
        if v:
            over = v["max_over_median"]
            out.append(f"  spread of {which} step {q.upper()} over ranks: {ms(v['min_ns'])} .. "
                       f"{ms(v['max_ns'])} ms (median {ms(v['median_ns'])}); slowest rank "
                       f"{v['slowest_rank']}" + (f" (+{100 * (over - 1):.1f}% over the median)"
                                                 if over else "")
                       + f", fastest rank {v['fastest_rank']}")
    if any(r["bound"] is None for r in job["ranks"]):
        out.append("  bound: what each rank's steps are bound by (tracekit explain); - where "
                   "the rank's report has no explain section")

    c = job["clock"]
    out += ["", "Clocks"]
    if c["reference_rank"] is None:
        out.append("  no collective shared by two ranks: clocks not compared")
    else:
        offs = [o for o in c["offsets"] if o["rank"] != c["reference_rank"]]
        big = sorted(offs, key=lambda o: -abs(o["offset_ns"] or 0))[:limit]
        out.append(f"  offsets from collective ends (a rank's clock minus rank "
                   f"{c['reference_rank']}'s); "
                   + ("applied before arrivals are compared" if c["aligned"]
                      else "NOT applied (--no-align)"))
        if big:
            out.append(table(["rank", "offset ms", "± ms", "collectives"],
                             [[o["rank"], ms(o["offset_ns"]), ms(o["spread_ns"]), o["samples"]]
                              for o in sorted(big, key=lambda o: o["rank"])]))
        if len(offs) > len(big):
            out.append(f"  ... {len(offs) - len(big)} more ranks (largest offsets shown)")
        for note in c["notes"] + (c.get("warnings") or []):
            out.append(f"  warning: {note}")

    mt = job["matching"]
    out += ["", f"Collectives ({mt['instances']} instances matched across ranks in "
                f"{len(mt['groups'])} process group{'s' if len(mt['groups']) != 1 else ''})"]
    if mt["groups"]:
        out.append(table(["group", "description", "ranks", "matched by", "instances", "partial",
                          "inconsistent"],
                         [[g["group"], g["desc"] or "-", clip(ranges(g["ranks"]), 30),
                           g["matched_by"], g["instances"], g["partial"], g["inconsistent"]]
                          for g in mt["groups"]]))
        if any(g["inconsistent"] for g in mt["groups"]):
            out.append("  warning: inconsistent instances name different collectives on "
                       "different ranks: the traces may not start at the same collective; "
                       "they are left out")
    if job["by_type"]:
        out.append(table(["collective", "instances", "transfer ms", "waited ms", "skew P50 ms",
                          "skew P90 ms", "skew max ms", "bytes sent"],
                         [[t["collective"], t["instances"], ms(t["transfer_ns"]),
                           ms(t["waited_ns"]), ms(t["skew_p50_ns"]), ms(t["skew_p90_ns"]),
                           ms(t["skew_max_ns"]), fmt_bytes(t["bytes"])]
                          for t in job["by_type"]]))
        out.append("  transfer: the shortest kernel of each instance; waited: summed over ranks, "
                   "last arrival - each rank's arrival")

    st = job["stragglers"]
    out += ["", "Stragglers"]
    if st["rank"] is None:
        out.append(f"  none: no instance with an arrival skew of "
                   f"{ms(st['min_skew_ns'])} ms or more")
    else:
        srow = next(r for r in job["ranks"] if r["rank"] == st["rank"])
        out.append(f"  rank {st['rank']} arrived last at {st['last_count']} of the "
                   f"{st['instances']} instances with a skew of {ms(st['min_skew_ns'])} ms or "
                   f"more; the others waited {ms(st['caused_wait_ns'])} ms for it "
                   f"({share(st['caused_wait_ns'], st['waited_ns'])} of the "
                   f"{ms(st['waited_ns'])} ms all ranks waited)")
        out.append(f"  its bound (tracekit explain): {bound_text(st['bound'], st['bound_share'])}"
                   f"; its {which} step P90 {ms(srow[f'{fig}_p90_ns'])} ms")
        rows_s, more_s = limited(st["steps"], limit)
        out.append(table(["step", "straggler", "caused wait ms", "all waited ms", "max skew ms",
                          "straggler's bound"],
                         [[x["step"], x["straggler"], ms(x["caused_wait_ns"]),
                           ms(x["waited_ns"]), ms(x["skew_max_ns"]), x["bound"] or "-"]
                          for x in rows_s]))
        if more_s:
            out.append(more_s.rstrip("\n"))
        counts = sorted((r for r in job["ranks"] if r["last_count"]),
                        key=lambda r: (-r["caused_wait_ns"], r["rank"]))[:10]
        out.append("  last to arrive (count, wait caused): " + ", ".join(
            f"rank {r['rank']} {r['last_count']}x {ms(r['caused_wait_ns'])} ms" for r in counts))

    a = job["all_to_all"]
    out += ["", f"All-to-all sizes ({a['instances']} instances)"]
    if a["imbalance"] is None:
        out.append("  no all-to-all with known sizes")
    else:
        out.append(f"  imbalance: rank {a['heaviest_rank']} received {a['imbalance']:.3f}x the "
                   f"mean over ranks (per instance: median {a['instance_imbalance_p50']:.3f}, "
                   f"max {a['instance_imbalance_max']:.3f})")
        rows_a = sorted(a["per_rank"], key=lambda r: (-r["received_bytes"], r["rank"]))
        rows_a, more_a = limited(rows_a, min(limit, 16))
        out.append(table(["rank", "sent", "received", "received / mean"],
                         [[r["rank"], fmt_bytes(r["sent_bytes"]), fmt_bytes(r["received_bytes"]),
                           f"{r['received_over_mean']:.3f}"] for r in rows_a]))
        if more_a:
            out.append(more_a.rstrip("\n"))

    if job["worst"]:
        out += ["", "Worst instances (largest arrival skew)"]
        out.append(table(["group", "collective", "key", "step", "skew ms", "last rank",
                          "waited ms", "transfer ms"],
                         [[w["group"], w["collective"], w["key"], w["step"], ms(w["skew_ns"]),
                           w["straggler"], ms(w["waited_ns"]), ms(w["transfer_ns"])]
                          for w in job["worst"][:10]]))
    return "\n".join(out) + "\n"
