"""bench.results_index: which results files a line of text names, and the index of a tiny repository."""

from __future__ import annotations

import subprocess

from bench import results_index as ri

NAMES = {"load-20261124-0424.json", "load-20261124-0428.json", "load-20261124-0428.md",
         "fit-20261127-1025.json", "fit-20261127-1025.md", "fit-20261127-1025-main.md",
         "jobs-20261128-2057.json", "jobs-20261128-2059-main-01dee2c.json"}


def cites(line: str) -> set[str]:
    stems: dict[str, list[str]] = {}
    for n in sorted(NAMES):
        stems.setdefault(n.rsplit(".", 1)[0], []).append(n)
    return ri.cited_names(line, NAMES, stems)


def test_a_full_name_and_a_stem_are_citations():
    assert cites("see `bench/results/load-20261124-0424.json`.") == {"load-20261124-0424.json"}
    assert cites("(fit-20261127-1025.md)") == {"fit-20261127-1025.md"}
    assert cites("the run fit-20261127-1025 before") == {"fit-20261127-1025.json", "fit-20261127-1025.md"}


def test_a_name_in_git_history_is_not_a_citation_of_the_trees_file():
    assert cites("`d124cf4:bench/results/load-20261124-0424.json`") == set()


def test_globs_brace_lists_and_suffixes():
    assert cites("bench/results/fit-2026*-main.md") == {"fit-20261127-1025-main.md"}
    assert cites("load-20261124-{0424,0428}.json") == {"load-20261124-0424.json", "load-20261124-0428.json"}
    assert cites("`load-20261124-0424.json`, `-0428.json`") == {"load-20261124-0424.json", "load-20261124-0428.json"}
    assert cites("`jobs-20261128-2057.json` (`-2059-main-01dee2c.json`)") == set(
        n for n in NAMES if n.startswith("jobs-"))


def test_the_index_of_a_tiny_repository(tmp_path):
    (tmp_path / "bench/results").mkdir(parents=True)
    for n in ("a-20261127-1000.json", "a-20261128-1000.json", "b-20261128-1000.md"):
        (tmp_path / "bench/results" / n).write_text("{}\n")
    (tmp_path / "code.py").write_text('DEFAULT = "bench/results/a-20261127-1000.json"\n')
    (tmp_path / "NOTES.md").write_text("old: `0123abc:bench/results/b-20261128-1000.md`\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    rows = {r["name"]: r for r in ri.index(tmp_path)["rows"]}
    assert rows["a-20261127-1000.json"]["cited_by"] == [{"kind": "code", "where": "code.py:1"}]
    assert not rows["a-20261127-1000.json"]["newest"] and rows["a-20261128-1000.json"]["newest"]
    assert rows["b-20261128-1000.md"]["cited_by"] == [] and rows["b-20261128-1000.md"]["family"] == "b"
