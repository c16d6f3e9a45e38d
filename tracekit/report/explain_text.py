"""The explain section as text: the findings, the critical path per step and the what-ifs
(``tracekit explain``, and the Findings and section 8 of ``tracekit analyze``)."""

from __future__ import annotations

from tracekit.report.tables import fmt_bytes, limited, ms, pct, table


def would_not_help(f: dict) -> bool:
    """A time finding predicted to save under 1% of the step (``helps`` False: explain's
    ``NO_HELP_FRACTION``)."""
    return f.get("kind") != "memory" and f.get("helps") is False


def _saving(f: dict) -> str:
    """A finding's predicted saving as text."""
    if f.get("kind") == "memory":
        pr, pk = f.get("predicted_peak_reserved_bytes"), f.get("peak_reserved_bytes")
        if pr is None:
            return "memory: no prediction (needs a memory snapshot beside the trace)"
        return (f"predicted peak reserved {fmt_bytes(pr)} (traced {fmt_bytes(pk)}, "
                f"saves {fmt_bytes(f.get('saving_bytes'))})")
    ns = f.get("saving_ns")
    if ns is None:
        return "no prediction"
    if ns < 0:  # never printed as a saving: the replay predicts a slower step
        frac = f.get("saving_fraction")
        return (f"would not help here: predicted {ms(-ns)} ms/step slower "
                f"({pct(-frac if frac is not None else None)})")
    out = f"saves {ms(ns)} ms/step ({pct(f.get('saving_fraction'))})"
    c = f.get("saving_contention_ns")
    if c is not None and abs(c - ns) >= 1000:
        cf = f.get("saving_contention_fraction")
        out += (f", {ms(c)} ms with contention ({pct(cf)})" if c >= 0 else
                f", {ms(-c)} ms slower with contention ({pct(-cf if cf is not None else None)})")
    if would_not_help(f):
        out += ": would not help here"
    return out


def _text_view(e: dict) -> str:
    """Which step the findings are about: traced, or estimated untraced (and on what)."""
    o = e.get("overhead")
    if not o:
        return ""
    traced, untraced = o.get("traced_step_ns"), o.get("untraced_step_ns")
    out = (f"  step: traced {ms(traced)} ms, estimated untraced {ms(untraced)} ms "
           f"({pct((untraced / traced - 1) if traced and untraced else None)})")
    if o.get("range_ns"):
        lo, hi = o["range_ns"]
        out += f", 8 times in 10 between {ms(lo)} and {ms(hi)} ms (warnings)"
    if o.get("scale") == "given":
        out += f"; untraced step given: {ms(o.get('given_step_ns'))} ms ({o.get('source') or '-'})"
    out += "\n"
    out += f"  the estimate: {o.get('rests_on')}\n"
    if e.get("view") == "untraced":
        out += "  bound and findings: the estimated untraced step (--traced: the traced one)\n"
    else:
        out += "  bound and findings: the traced step, as the trace shows it\n"
    return out


def first_screen(e: dict | None) -> list[str]:
    """What bounds the step and what to do first, as the first lines of ``tracekit analyze``:
    the bound and the critical path's split, the first finding that helps with its fix, then
    every finding on a line of its own (their evidence is in the Findings section)."""
    if not e:
        return ["What bounds the step: not computed"]
    n = len(e.get("steps") or [])
    o = e.get("overhead") or {}
    view = (f"the estimated untraced step, {ms(o.get('untraced_step_ns'))} ms; traced "
            f"{ms(o.get('traced_step_ns'))} ms" if e.get("view") == "untraced" and o else "the traced step")
    if e.get("bound") and e.get("bound_share") is None:  # the verdict the trace's limits decided
        out = [f"What bounds the step: {e['bound']}, not what the path through the recorded events "
               f"says (the warnings say why; {n} step{'s' if n != 1 else ''}; {view})"]
        out += [f"  warning: {w}" for w in (e.get("warnings") or []) if "bound" in w][:2]
    elif e.get("bound"):
        out = [f"What bounds the step: {e['bound']}, {pct(e['bound_share'])} of the critical path "
               f"({n} step{'s' if n != 1 else ''}; {view})"]
    else:
        out = ["What bounds the step: - (no critical path)"]
    bd = e.get("breakdown") or []
    if bd:
        out.append("  critical path: " + ", ".join(f"{r['category']} {pct(r['share'])}" for r in bd[:6]))
    fs = e.get("findings") or []
    first = next((f for f in fs if f.get("helps", True) and not would_not_help(f)), None)
    if first is None:
        out.append("What to do first: no known fix would help much here" if fs else
                   "What to do first: no known fix applies to this trace")
    else:
        out.append(f"What to do first: {first.get('fix') or first['title']}")
        out.append(f"  because {first['title']}: {_saving(first)}")
    for i, f in enumerate(fs[:FIRST_SCREEN_FINDINGS], 1):
        out.append(f"  {i}. {f['title']}: {_saving(f)}")
    if len(fs) > FIRST_SCREEN_FINDINGS:
        out.append(f"  ... {len(fs) - FIRST_SCREEN_FINDINGS} more in section 1")
    return out


FIRST_SCREEN_FINDINGS = 5
"""Findings listed on analyze's first screen (all of them, with evidence, in its section 1)."""


def text_findings(e: dict | None, limit: int = 8) -> str:
    """The Findings section: the bound, the critical path's split, the findings."""
    if not e:
        return "  not computed\n"
    out = _text_view(e)
    if e.get("bound"):
        n = len(e.get("steps") or [])
        share = (f"{pct(e['bound_share'])} of the critical path" if e.get("bound_share")
                 is not None else "not what the path through the recorded events says: see the "
                 "warnings")
        out += f"  bound: {e['bound']} ({share} over {n} step{'s' if n != 1 else ''})\n"
    elif e.get("steps"):
        out += "  bound: unknown (the trace does not let it be read: see the warnings)\n"
    else:
        out += "  bound: - (no critical path)\n"
    bd = e.get("breakdown") or []
    if bd:
        out += "  critical path: " + ", ".join(f"{r['category']} {pct(r['share'])}"
                                                for r in bd[:6]) + "\n"
    for w in e.get("warnings") or []:
        out += f"  warning: {w}\n"
    fs = e.get("findings") or []
    if not fs:
        out += "  no finding\n"
    for i, f in enumerate(fs[:limit], 1):
        out += f"  {i}. {f['title']}: {_saving(f)}\n"
        if f.get("fix"):
            out += f"     fix: {f['fix']}\n"
        out += f"     evidence: {f['evidence']}\n"
    if len(fs) > limit:
        out += f"  ... {len(fs) - limit} more (see --format json)\n"
    return out


def _replayed(r: dict) -> str:
    """A step's replayed length and its error, ``20.700 (-0.1%)``."""
    if r.get("replayed_ns") is None:
        return "-"
    err = r.get("replay_error")
    return ms(r["replayed_ns"]) + (f" ({100 * err:+.1f}%)" if err is not None else "")


def text_explain(e: dict, limit: int) -> str:
    """The critical path per step and the what-if table."""
    steps = e.get("steps") or []
    if not steps:
        return "  no steps\n"
    rows, more = limited(steps, limit)
    out = table(["step", "ms", "traced ms", "untraced ms (est.)", "model's replay ms", "bound",
                 "share", "unexplained ms", "largest categories on the critical path"],
                [[r["step"], ms(r["duration_ns"]), ms(r.get("traced_ns")),
                  ms(r.get("untraced_ns")), _replayed(r), r["bound"] or "-",
                  pct(r["bound_share"]), ms(r.get("unexplained_ns")),
                  ", ".join(f"{k} {ms(v, 2)}" for k, v in list(r["breakdown"].items())[:3])]
                 for r in rows], left_last=True) + "\n" + more
    rp = e.get("replay") or {}
    if rp.get("steps"):
        out += (f"  the model's replay of the trace: median |error| "
                f"{pct(rp['median_abs_error'])}, worst {100 * rp['worst_error']:+.1f}% over "
                f"{rp['steps']} step{'s' if rp['steps'] != 1 else ''} (all but the first)\n")
    lanes = e.get("lanes") or []
    if lanes:
        out += "  time on the critical path by lane: " + ", ".join(
            f"{r['lane']} {pct(r['share'])}" for r in lanes[:6]) + "\n"
    wis = e.get("what_ifs") or []
    if wis:
        out += "  what-if (mean step, all steps but the first):\n"
        out += table(["what-if", "applies", "step ms", "replayed ms", "predicted ms",
                      "with contention ms", "saving"],
                     [[w["id"], "yes" if w["applies"] else "no",
                       ms(w["observed_step_ns"]), ms(w.get("replayed_step_ns")),
                       ms(w["predicted_step_ns"]), ms(w["predicted_contention_step_ns"]),
                       pct(w["saving_fraction"])]
                      for w in wis], "    ") + "\n"
        out += ("    (predicted = step - (replayed - the changed graph's replay); replayed: the "
                "model's replay of the unchanged graph)\n")
    return out


def text_path(rows: list[dict], step: int, limit: int) -> str:
    """One step's critical path (``schema.PathRun`` rows): the ``limit`` longest runs, in time
    order."""
    if not rows:
        return f"  step {step}: no critical path\n"
    t0 = rows[0]["start_ns"]
    shown = sorted(sorted(rows, key=lambda r: -r["ns"])[:limit], key=lambda r: r["start_ns"])
    out = (f"  step {step}: {len(rows)} runs on the critical path; the {len(shown)} longest, in "
           "time order (ms from the step's start):\n")
    out += table(["at ms", "ms", "lane", "category", "segments", "first event"],
                 [[ms(r["start_ns"] - t0), ms(r["ns"]), r["lane"], r["category"],
                   r["segments"], r["first"]] for r in shown], "    ", left_last=True) + "\n"
    return out


def render_explain(ranks: list[dict], *, limit: int = 20, step: int | None = None) -> str:
    """``tracekit explain``'s text: per rank (``{"source", "rank", "explain": schema.Explain |
    None, "path": [PathRun] (with --step)}``) the findings, the critical path per step and,
    with ``step``, that step's path."""
    text = ""
    for r in ranks:
        text += f"== {r['source']}  (rank {r['rank']})\n\n"
        if r.get("job"):
            text += "In its job\n" + text_job(r["job"]) + "\n"
        text += "Findings" + (_alone_heading(r["job"]) if r.get("job") else "") + "\n"
        text += text_findings(r.get("explain"), limit=limit)
        if r.get("explain"):
            text += "\nCritical path per step\n" + text_explain(r["explain"], limit)
        if r.get("path") is not None:
            text += "\n" + text_path(r["path"], step, limit)
    return text


def _job_saving(f: dict) -> str:
    """A finding's saving on the job's graph (``schema.JobFinding``), and on its rank alone."""
    who = f"rank {f['rank']}"
    alone = f.get("alone_saving_ns")
    apart = (f"; {who} alone: saves {ms(alone)} ms/step ({pct(f.get('alone_saving_fraction'))})"
             if alone is not None else "")
    if not f["replayed"]:
        return f"{f.get('note') or 'not replayed on the job graph'}{apart}"
    sv = f["saving_ns"]
    if sv > 0 and f["helps"]:
        out = f"saves the job {ms(sv)} ms/step ({pct(f['saving_fraction'])})"
    else:
        out = (f"would not help the job (job step {ms(f['step_ns'])} -> "
               f"{ms(f['predicted_ns'])} ms)")
    c = f.get("saving_contention_ns")
    if c is not None and sv is not None and abs(c - sv) >= 1000:
        out += f", {ms(c)} ms with contention"
    return out + apart


def _what_if_row(w: dict) -> str:
    """A what-if across ranks (``schema.JobWhatIf``) as one line."""
    sv = w["saving_ns"]
    out = (f"  what-if across ranks: {w['title']}: job step {ms(w['predicted_ns'])} ms"
           + (f", saves {ms(sv)} ms ({pct(w['saving_fraction'])})" if sv > 0 else
              ", would not help"))
    c = w.get("saving_contention_ns")
    asked = str(w["id"]).startswith("rank:")  # the user's: both replays, always
    if c is not None and (asked or abs(c - sv) >= 1000):
        if "predicted_free_ns" in w:
            out += f" (contention-free: job step {ms(w['predicted_free_ns'])} ms)"
        else:
            out += (f" (contention-aware: job step {ms(w['predicted_contention_ns'])} ms"
                    + (f", saves {ms(c)} ms" if c > 0 else "") + ")")
    if asked and w.get("note"):
        out += f" ({w['note']})"
    if w.get("warning"):
        out += f"\n    warning: {w['warning']}"
    return out + "\n"


def _alone_heading(j: dict) -> str:
    """The heading of a job's rank's own findings: of its trace alone, and where it waits,
    for whom."""
    if j["waiting"] and j["waits_for"]:
        w = j["waits_for"][0]
        return (f" (of this rank alone: in its job it waits {ms(w['ns'])} ms per step for rank "
                f"{w['rank']}; what each saves the job is above)")
    return " (of this rank alone: what each saves the job is above)" if j.get("findings") \
        else " (of this rank alone)"


def _text_joined(u: dict | None) -> str:
    """The warnings on a rank's step on the job's graph (``schema.JobUntraced``), as explain
    warns on one rank's own estimate."""
    if not u:
        return ""
    out = ""
    if u.get("range_ns"):
        lo, hi = u["range_ns"]
        out += (f"  warning: this rank's step on the job's graph ({ms(u['step_ns'])} ms, traced "
                f"{ms(u['traced_step_ns'])} ms) is decided by the profiler's cost taken out: "
                f"the untraced step lay 8 times in 10 between {ms(lo)} and {ms(hi)} ms on such "
                "runs\n")
    if u.get("kept") == "unexplained":
        out += (f"  warning: this rank's step on the job's graph ({ms(u['step_ns'])} ms, traced "
                f"{ms(u['traced_step_ns'])} ms) did not follow the {ms(u['taken_ns'])} ms of "
                f"host time a step taken out: {pct(u['unexplained_share'])} of the job's critical "
                "path is time the model does not explain, kept whole; the untraced step may be "
                "much shorter (--step-ms N sets the scale)\n")
    elif u.get("kept") == "above":
        out += (f"  warning: this rank's step on the job's graph ({ms(u['step_ns'])} ms) is above "
                f"its traced step ({ms(u['traced_step_ns'])} ms) with {ms(u['taken_ns'])} ms of "
                "host time a step taken out: the replay, not the profiler's cost, sets it "
                "(--step-ms N sets the scale)\n")
    return out


def text_job(j: dict) -> str:
    """A rank's place in its job (``schema.ExplainJob``)."""
    out = (f"  the job ({j['ranks']} ranks): step {ms(j['job_step_ns'])} ms on its graph (the "
           "ranks' graphs joined at their collectives); this rank per step: own work "
           f"{ms(j['own_ns'])} ms, collectives moving data {ms(j['transfer_ns'])} ms, waiting "
           f"for other ranks {ms(j['wait_ns'])} ms ({pct(j['wait_share'])})\n")
    out += _text_joined(j.get("untraced"))
    wd = j.get("waited")
    if j["waiting"] and j["waits_for"]:
        w = j["waits_for"][0]
        at = j["waits_at"][0]["at"] if j["waits_at"] else ""
        out += (f"  bound: waiting for rank {w['rank']} ({ms(w['ns'])} ms per step"
                + (f", most at {at}" if at else "") + "): making this rank faster would not "
                "shorten the job's step")
        out += (f"; rank {wd['rank']}'s own work is {ms(wd['own_ns'])} ms per step, mostly "
                f"{wd['class'] or '-'}: its fixes shorten this rank's step\n" if wd else "\n")
    elif j.get("job_bound"):
        b = j["job_bound"]
        wd = b
        out += (f"  {pct(j['path_share'])} of the job's critical path is on this rank: its "
                f"findings barely shorten the job's step; rank {b['rank']} bounds it (own work "
                f"{ms(b['own_ns'])} ms per step, mostly {b['class'] or '-'}): its fixes "
                "shorten the job's step\n")
    else:
        out += (f"  {pct(j['path_share'])} of the job's critical path is on this rank: its "
                "findings shorten the job's step where they shorten that path\n")
    found = j.get("findings") or []
    if found:
        out += ("  findings on the job's graph (each change made on the rank that found it, "
                "the job's graph replayed; that rank's own prediction apart, on the same "
                "estimated untraced steps: no untraced step given):\n")
    elif wd:
        out += (f"  (no finding of rank {wd['rank']} or of this rank predicts a saving: "
                f"tracekit explain DIR --rank {wd['rank']})\n")
    for i, f in enumerate(found, 1):
        out += f"    {i}. rank {f['rank']}: {f['title']}: {_job_saving(f)}\n"
        out += f"       fix (on rank {f['rank']}): {f['fix']}\n"
    for w in j["what_ifs"]:
        out += _what_if_row(w)
    return out
