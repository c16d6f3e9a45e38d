"""The catalog: indices only, report cache first, errors kept per source."""

from __future__ import annotations

import pytest

from dashboards.catalog import Catalog
from tests.conftest import REPO

SAMPLE = str(REPO / "sample_traces" / "public" / "hta_sampled_rank0.json.gz")


def test_summary_comes_from_the_report_cache_without_loading_the_trace(tmp_path):
    from tracekit.api import analyze_path
    from tracekit.report import to_dict

    [(_, analysis)] = analyze_path(SAMPLE, cache_dir=tmp_path, with_hta=False)  # "tracekit analyze" ran before
    catalog = Catalog([SAMPLE], cache_dir=str(tmp_path))
    s = catalog.summary(0)
    assert s.results is None and s.error is None  # served from the cache: no parse, no analysis
    assert s.ranks == [0]
    assert s.report(None)["headline"] == to_dict(analysis)["headline"]
    assert catalog.get(0).results is not None  # the full load still works afterwards


def test_a_directory_analysed_rank_by_rank_is_summarised_from_the_ranks_cache_entries(tmp_path):
    from tracekit.api import analyze_path, cached_report
    from tracekit.ranks import analyze_job

    job = str(REPO / "sample_traces" / "pipelines_2gpu" / "sparse")
    analyze_job(job, cache_dir=str(tmp_path), workers=1, with_hta=False)  # "tracekit analyze DIR" ran before
    assert cached_report(job, cache_dir=str(tmp_path), with_hta=False) is None  # it cached the ranks, not the directory
    s = Catalog([job], cache_dir=str(tmp_path)).summary(0)
    assert s.results is None and s.error is None  # no parse, no analysis
    assert s.ranks == [0, 1]
    whole = {r["rank"]: r for r in analyze_path(job, cache_dir=str(tmp_path / "other"), with_hta=False) and
             cached_report(job, cache_dir=str(tmp_path / "other"), with_hta=False)}
    assert s.report(1)["headline"] == whole[1]["headline"] and s.report(0)["steps"] == whole[0]["steps"]


def test_rank_files_without_their_own_ranks_are_loaded_in_full(tmp_path):
    """Two rank files that do not declare a rank are rank 0 each alone; the directory's loader
    numbers them 0 and 1 with a warning: their cache entries cannot stand in for that."""
    import gzip
    import json

    from tracekit.api import cached_report
    from tracekit.ranks import analyze_job

    job = tmp_path / "job"
    job.mkdir()
    src = REPO / "sample_traces" / "pipelines_2gpu" / "sparse"
    for k in (0, 1):
        doc = json.loads(gzip.open(src / f"trace_rank{k}.json.gz").read())
        doc.pop("distributedInfo", None)
        (job / f"part{k}.json").write_text(json.dumps(doc))
    analyze_job(str(job), cache_dir=str(tmp_path / "c"), workers=1, with_hta=False)
    assert [cached_report(str(f), cache_dir=str(tmp_path / "c"), with_hta=False)[0]["rank"]
            for f in sorted(job.iterdir())] == [0, 0]
    s = Catalog([str(job)], cache_dir=str(tmp_path / "c")).summary(0)
    assert s.results is not None and s.ranks == [0, 1]  # the loader's numbering, from a full load


def test_summary_without_a_cache_loads_and_reports(tmp_path):
    catalog = Catalog([SAMPLE], cache_dir=str(tmp_path), use_cache=False)
    s = catalog.summary(0)
    assert s.results is not None and s.report(0)["rank"] == 0


def test_a_broken_source_keeps_its_error_and_the_others_load(tmp_path):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    catalog = Catalog([str(bad), SAMPLE], cache_dir=str(tmp_path / "c"))
    assert "bad.json.gz" in catalog.summary(0).error and catalog.get(0).results is None
    assert catalog.get(1).error is None and catalog.get(1).ranks == [0]


@pytest.mark.parametrize("index", [-1, 2, 0.5, True, "0", None, [0], {"i": 0}, SAMPLE])
def test_anything_but_an_index_is_no_source(tmp_path, index):
    catalog = Catalog([SAMPLE, SAMPLE], cache_dir=str(tmp_path))
    assert catalog.get(index) is None and catalog.summary(index) is None
    assert all(s.results is None and s.reports is None for s in catalog.sources)


def labels(paths: list[str]) -> list[str]:
    return [s.label for s in Catalog(paths).sources]


def test_labels_are_short_and_unique():
    assert labels(["/a/x/rank0.json", "/b/x/rank0.json", "/c/y.json"]) == ["a/x/rank0", "b/x/rank0", "y"]
    assert labels(["/a/t.json", "/a/t.json"]) == ["t#1", "t#2"]


def test_a_view_of_a_trace_not_yet_loaded_says_so_and_is_drawn_once_loaded(tmp_path):
    """No callback waits for a load: the view polls while its trace is parsed in the background."""
    import time

    from dashboards.views import Views

    catalog = Catalog([SAMPLE], cache_dir=str(tmp_path))
    views = Views(catalog)

    def ids(component) -> set:
        out = {getattr(component, "id", None)}
        for child in getattr(component, "children", None) or []:
            if not isinstance(child, str):
                out |= ids(child)
        return out

    first = views.render("timeline", 0, None)
    assert "view-loading" in ids(first) and "loading-poll" in ids(first)
    deadline = time.monotonic() + 120
    while not catalog.ready((0, None, "trace"), None) and time.monotonic() < deadline:
        time.sleep(0.1)
    drawn = views.render("timeline", 0, None)
    assert "timeline-graph" in ids(drawn) and "view-loading" not in ids(drawn)
    assert catalog.sources[0].results is not None
    # views drawn from report objects never wait
    assert "view-loading" not in ids(Views(Catalog([SAMPLE], cache_dir=str(tmp_path))).render("gaps", 0, None))


def test_the_diff_views_first_answer_is_ready_once_the_background_load_ends(tmp_path):
    """The app has the prefetch compute each trace's diff against its default (the Diff view's
    first answer) after the loads: a first click on the tab then draws it, no "Loading" round."""
    from dashboards.app import create_app

    fused = str(REPO / "sample_traces" / "pipelines_1gpu" / "fused" / "trace_rank0.json.gz")
    catalog = Catalog([SAMPLE, fused], cache_dir=str(tmp_path))
    create_app(catalog)
    (views,) = [w.__self__ for w in catalog.after_loads]  # what create_app wired in: its Views' prepare_diffs
    assert not views._diffs
    catalog.prefetch(defer_s=0).join(300)
    for i in (0, 1):
        _, against = views.diff_options(i, 0)
        assert (int(against.split(":")[0]), 0, i, 0) in views._diffs
        view = views.render("diff", i, None)
        assert "view-loading" not in str(view) and "diff-summary" in str(view)
