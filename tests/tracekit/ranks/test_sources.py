"""A job given as a URL (fsspec): each rank's work fetches its file, the job is the same."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import SAMPLE_TRACES
from tracekit.errors import InputError
from tracekit.ranks import analyze_job, sources

pytest.importorskip("fsspec")


def _without_sources(job: dict) -> dict:
    j = {k: v for k, v in job.items() if k != "source"}
    j["ranks"] = [{k: v for k, v in r.items() if k != "source"} for r in job["ranks"]]
    return j


def test_file_url_gives_the_local_job(tmp_path):
    d = SAMPLE_TRACES / "pipelines_2gpu" / "fused"
    url = d.resolve().as_uri()
    local = analyze_job(d, cache_dir=tmp_path / "a", whole=False, workers=1)
    remote = analyze_job(url, cache_dir=tmp_path / "b", whole=False, workers=1)
    assert _without_sources(remote.job) == _without_sources(local.job)
    # the run directory's metrics*.json are not traces: only the two rank files were fetched
    assert [r["source"] for r in remote.ranks] == [f"{url}/trace_rank{r}.json.gz" for r in (0, 1)]
    assert len(list((tmp_path / "b" / "fetched").iterdir())) == 2
    again = analyze_job(url, cache_dir=tmp_path / "b", whole=False, workers=1)  # copies reused
    assert again.job == remote.job and len(list((tmp_path / "b" / "fetched").iterdir())) == 2


def test_url_without_cache_leaves_no_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    url = (SAMPLE_TRACES / "pipelines_2gpu" / "fused").resolve().as_uri()
    rep = analyze_job(url, use_cache=False, whole=False, workers=1)
    assert len(rep.ranks) == 2 and not list(tmp_path.glob("tracekit-fetched-*"))


def test_bad_urls(tmp_path):
    assert sources.is_url("s3://b/job") and not sources.is_url("/tmp/x") and not sources.is_url("a:b")
    with pytest.raises(InputError, match="no such file or directory"):
        analyze_job((tmp_path / "nope").as_uri())
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", "nosuchproto://x/y",
                        "--cache-dir", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("tracekit: error: nosuchproto://x/y: cannot read this URL")
