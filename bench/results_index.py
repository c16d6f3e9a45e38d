"""Who reads or cites each file of ``bench/results/``.

    python -m bench.results_index [--uncited] [--only code|prose|results] [--json]

For every file in ``bench/results/`` (tracked by git): its size, its family (the name before its
UTC date: the benchmark and device), whether it is the newest of its family, and every place in
the tree that names it, as ``kind path:line``. ``kind`` is ``code`` (Python, shell, TOML, CI:
tracekit/, runtime/, bench/, gpu/, dashboards/, tests/, .ci/), ``prose`` (Markdown and text
outside ``bench/results/``: README.md, docs/, bench/NOTES-*.md, gpu/CALLS.md, sample_traces'
READMEs) or ``results`` (another results file: a proof manifest naming its measured run, a
held-out judgment naming its proofs).

A file is named by its full name, by its stem (``wild-inputs-20261128-1509``: every file of that
stem), by a brace list (``load-20261124-{0245,0251,0257}.json``), by a glob
(``bench/results/overhead-fit-*.json``, ``tbe-h200-*.md``: every file it matches), or by a
suffix after a full name on the same line (``ranks-20261124-0424.json``, ``-0428.json``). A name
after ``<commit>:`` (``d124cf4:bench/results/NAME``) is a file in git history, not a citation of
the tree's file. With ``--uncited``: only the files nothing outside ``bench/results/`` names.

The house rule it serves: ``bench/results/`` keeps the current file of each benchmark and what
code, tests and runners read; git history keeps the rest (``git show <commit>:bench/results/NAME``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = "bench/results/"
CODE_EXT = {".py", ".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml"}
PROSE_EXT = {".md", ".txt", ".rst"}
EXTS = ("json", "md", "txt")
DATE = re.compile(r"-(20\d{6})(?:-|$)")
TOKEN = re.compile(r"[A-Za-z0-9_.\-{},*/:]+")
HISTORY = re.compile(r"\b[0-9a-f]{7,40}:(?:bench/results/)?$")


def tracked(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def kind_of(path: str) -> str | None:
    """'code', 'prose', 'results' or None (not searched: traces, pictures, data)."""
    p = Path(path)
    if path.startswith(RESULTS):
        return "results" if p.suffix in (".md", ".json", ".txt") else None
    if p.name == "run" and path.startswith(".ci/"):
        return "code"
    if p.suffix in CODE_EXT:
        return "code"
    if p.suffix in PROSE_EXT:
        return "prose"
    return None


def family(name: str) -> str:
    """The name before its UTC date (``jobs-2gpu-h200``), the whole stem where it has none."""
    stem = name.rsplit(".", 1)[0]
    m = DATE.search(stem)
    return stem[:m.start()] if m else stem


def expand(token: str) -> list[str]:
    """``a-{x,y}.json`` -> ``a-x.json``, ``a-y.json`` (one brace group at a time)."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",") for x in expand(token[:m.start()] + alt + token[m.end():])]


def cited_names(line: str, names: set[str], stems: dict[str, list[str]]) -> set[str]:
    """The results files a line of text names (not those after ``<commit>:``)."""
    got: set[str] = set()
    last_stem = None
    for m in TOKEN.finditer(line):
        raw = m.group(0).rstrip(".,:;")
        before = line[max(0, m.start() - 64):m.start()]
        if ":" in raw:  # ``d124cf4:bench/results/NAME`` or ``NAME:judged``: split off the commit
            head, _, rest = raw.partition(":")
            if re.fullmatch(r"[0-9a-f]{7,40}", head):
                continue
            raw = head if head else rest
        if HISTORY.search(before):
            continue
        base = raw.split("/")[-1]
        if not base or len(base) > 200:
            continue
        for tok in (expand(base) if base.count("{") <= 2 else [base]):
            tok = tok.rstrip(".")
            if "*" in tok:
                if len(tok.split("*", 1)[0]) >= 4 and "-" in tok:
                    got |= {n for n in names if fnmatch.fnmatchcase(n, tok)
                            or fnmatch.fnmatchcase(n.rsplit(".", 1)[0], tok)}
                continue
            if tok in names:
                got.add(tok)
                last_stem = tok.rsplit(".", 1)[0]
                continue
            stem, dot, ext = tok.rpartition(".")
            if dot and ext in EXTS and stem in stems:
                got |= {n for n in stems[stem] if n.endswith("." + ext) or n == stem}
                last_stem = stem
                continue
            if tok in stems:
                got |= set(stems[tok])
                last_stem = tok
                continue
            if last_stem and tok.startswith("-") and re.match(r"-\w", tok):  # ``-0428.json`` after a full name
                suffix, dot, ext = tok.rpartition(".") if tok.rsplit(".", 1)[-1] in EXTS else (tok, "", "")
                parts = last_stem.split("-")
                for k in range(1, len(parts)):  # ``-0428`` and ``-2059-main-01dee2c`` alike
                    cand = "-".join(parts[:-k]) + suffix
                    if cand in stems:
                        got |= {n for n in stems[cand] if not ext or n.endswith("." + ext)}
                        break
        # ``NAME.md/.json``: the other extension after a slash
        if "/." in raw:
            stem = raw.split("/")[-2].rsplit(".", 1)[0] if raw.count("/") >= 1 else ""
            for e in EXTS:
                if raw.endswith("/." + e) and stem in stems:
                    got |= {n for n in stems[stem] if n.endswith("." + e)}
    return got


def index(repo: Path = REPO) -> dict:
    files = tracked(repo)
    names = sorted(p[len(RESULTS):] for p in files if p.startswith(RESULTS) and "/" not in p[len(RESULTS):])
    nameset = set(names)
    stems: dict[str, list[str]] = defaultdict(list)
    for n in names:
        stems[n.rsplit(".", 1)[0]].append(n)
    cites: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
    for path in files:
        kind = kind_of(path)
        if kind is None or path == "bench/results_index.py":
            continue
        try:
            text = (repo / path).read_text(errors="replace")
        except OSError:
            continue
        if len(text) > 2_000_000:
            continue
        own = path[len(RESULTS):] if kind == "results" else None
        for i, line in enumerate(text.splitlines(), 1):
            if "-20" not in line and "*" not in line:
                continue
            for n in cited_names(line, nameset, stems):
                if n != own:
                    cites[n].append((kind, f"{path}:{i}"))
    newest: dict[str, str] = {}
    for n in names:
        f = family(n)
        if n.rsplit(".", 1)[0] > newest.get(f, "").rsplit(".", 1)[0]:
            newest[f] = n
    rows = []
    for n in names:
        f = family(n)
        rows.append({"name": n, "bytes": (repo / RESULTS / n).stat().st_size, "family": f,
                     "newest": n.rsplit(".", 1)[0] == newest[f].rsplit(".", 1)[0],
                     "cited_by": [{"kind": k, "where": w} for k, w in cites[n]]})
    return {"files": len(rows), "bytes": sum(r["bytes"] for r in rows), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.results_index", description=__doc__.split("\n\n")[0])
    ap.add_argument("--uncited", action="store_true", help="only files nothing outside bench/results names")
    ap.add_argument("--only", choices=("code", "prose", "results"), help="only citations of this kind")
    ap.add_argument("--json", action="store_true", help="the index as JSON")
    a = ap.parse_args(argv)
    doc = index()
    rows = doc["rows"]
    for r in rows:
        if a.only:
            r["cited_by"] = [c for c in r["cited_by"] if c["kind"] == a.only]
    if a.uncited:
        rows = [r for r in rows if not any(c["kind"] != "results" for c in r["cited_by"])]
    if a.json:
        print(json.dumps({**doc, "rows": rows}, indent=1))
        return 0
    for r in rows:
        kinds = sorted({c["kind"] for c in r["cited_by"]})
        print(f"{r['name']}  {r['bytes']} B  {r['family']}{'  (newest)' if r['newest'] else ''}"
              f"  cited: {','.join(kinds) or 'nothing'}")
        for c in r["cited_by"]:
            print(f"    {c['kind']:7} {c['where']}")
    print(f"{len(rows)} of {doc['files']} files; {doc['bytes']} bytes in bench/results/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
