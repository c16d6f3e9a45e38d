"""The dashboard's embedding bandwidth view: its tables and findings from a report object, and
the view drawn for a hand-built trace with FBGEMM's TBE ops (no browser: the component tree)."""

from __future__ import annotations

from dashboards import results
from dashboards.catalog import Catalog
from dashboards.views import Views
from tests.tracekit.test_embedding_bw import tbe_trace
from tracekit.api import report_for_path


def _texts(node) -> list[str]:
    """Every string in a Dash component tree."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, (list, tuple)):
        return [t for n in node for t in _texts(n)]
    kids = getattr(node, "children", None)
    return _texts(kids) if kids is not None else []


def test_view_of_a_trace_with_tbe_ops(tmp_path):
    tr = tbe_trace(tmp_path, fwd_us=4000.0)
    rep = report_for_path(tr.source, cache_dir=tmp_path / "c", with_hta=False)[0]
    e = results.embedding(rep)
    k = e["kernels"].set_index("direction")
    assert e["device"] == "NVIDIA H200" and e["peak_gbps"] == 4800
    assert k.loc["forward", "calls"] == 2 and round(k.loc["forward", "% of peak"]) == 24
    assert k.loc["backward", "bytes"].startswith("at most")
    assert len(e["findings"]) == 1 and "24 %" in e["findings"][0]["title"]
    catalog = Catalog([tr.source], cache_dir=str(tmp_path / "c"))
    view = Views(catalog).render("embedding", 0, None)
    text = " ".join(_texts(view))
    assert "NVIDIA H200: peak 4,800 GB/s" in text
    assert "the embedding lookup (forward) moves 1.14 TB/s, 24 % of the H200's 4.80 TB/s" in text
    assert "fbgemm::split_embedding_codegen_forward_unweighted_cuda" in text


def test_view_says_what_is_missing(tmp_path):
    tr = tbe_trace(tmp_path, fwd_args={}, bwd_args={})
    catalog = Catalog([tr.source], cache_dir=str(tmp_path / "c"))
    text = " ".join(_texts(Views(catalog).render("embedding", 0, None)))
    assert "No embedding call with its inputs recorded" in text
    assert "inputs not recorded (profile with record_shapes=True)" in text
