"""``tracekit dashboard``: bad input, what it serves, and that the browser cannot name a path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from tests.conftest import REPO

SAMPLE = REPO / "sample_traces" / "public" / "hta_sampled_rank0.json.gz"
CLI = [sys.executable, "-c", "from tracekit.cli import main; main()"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_missing_path_is_one_line_and_exit_2(tmp_path):
    r = run_cli("dashboard", str(tmp_path / "nope.json"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"tracekit: error: {tmp_path / 'nope.json'}: no such file or directory"]


def test_bad_rules_file_is_refused_before_serving(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text("[[annotation]\nphase=")
    r = run_cli("dashboard", str(SAMPLE), "--rules", str(rules), "--port", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("tracekit: error:") and str(rules) in r.stderr
    assert "http://" not in r.stdout


def test_default_paths_are_the_bundled_samples():
    from tracekit.commands.dashboard import default_paths

    paths = default_paths()
    assert str(SAMPLE) in paths
    assert all(Path(p).resolve().is_relative_to((REPO / "sample_traces").resolve()) for p in paths)


def test_serves_on_localhost_and_prints_the_url(tmp_path):
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([*CLI, "dashboard", str(SAMPLE), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line[line.index("http://"):].split()[0]
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(url + "_dash-layout", timeout=30) as resp:
            layout = resp.read().decode()
        assert SAMPLE.name.removesuffix(".json.gz") in layout  # the trace it was started with is offered, by index
        assert str(SAMPLE.parent) not in layout  # ... and its path is not sent to the browser
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _source_callback(app, value) -> dict:
    """POST the callback that choosing a trace triggers (the page), with ``value`` as the chosen trace
    (every other input and state empty, as the app's callback map lists them)."""
    out = next(k for k in app.callback_map if k.startswith("..url.search"))
    spec = app.callback_map[out]
    given = {"url.search": "", "source.value": value, "tabs.value": "overview"}
    payload = {
        "output": out,
        "outputs": [dict(zip(("id", "property"), o.split("."))) for o in out.strip(".").split("...")],
        "inputs": [[] if i["id"].startswith("{") else dict(i, value=given.get(f"{i['id']}.{i['property']}"))
                   for i in spec["inputs"]],
        "state": [dict(i, value=None) for i in spec["state"]],
        "changedPropIds": ["source.value"],
    }
    r = app.server.test_client().post("/_dash-update-component", json=payload)
    assert r.status_code == 200, r.data
    return json.loads(r.data)["response"]


def test_the_browser_cannot_open_another_path(tmp_path, monkeypatch):
    import tracekit.api
    from dashboards.app import create_app
    from dashboards.catalog import Catalog

    opened: list[str] = []
    real = tracekit.api.analyzed

    def spy(path, **kw):
        opened.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(tracekit.api, "analyzed", spy)
    app = create_app(Catalog([str(SAMPLE)], cache_dir=str(tmp_path)))
    for value in [str(SAMPLE), "/etc/passwd", "../sample_traces", 5, -1, 0.5, True, None, [0]]:
        out = _source_callback(app, value)
        assert "No such trace" in json.dumps(out["source-status"]["children"]), value
    assert set(opened) <= {str(SAMPLE)}  # the overview shown beside the error lists the served trace, nothing else
    ok = _source_callback(app, 0)  # the one index it serves works
    assert ok["rank"]["options"] == [{"label": "0", "value": 0}] and set(opened) == {str(SAMPLE)}


def test_a_path_out_of_the_component_suites_is_a_404_without_a_traceback(tmp_path, caplog):
    import http.client
    import logging

    from dashboards.app import create_app
    from dashboards.catalog import Catalog
    from dashboards.server import Server

    server = Server(create_app(Catalog([str(SAMPLE)], cache_dir=str(tmp_path))), port=0).start()
    caplog.set_level(logging.INFO)
    try:
        for path in ["/_dash-component-suites/../../../etc/passwd", "/_dash-component-suites/dash/../../../../etc/passwd",
                     "/_dash-component-suites/dash/..%2f..%2f..%2fetc%2fpasswd", "/_dash-component-suites/nope/x.js",
                     "/_dash-component-suites/dash/nope.js"]:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", path)  # sent as written: no client-side normalisation of ".."
            r = conn.getresponse()
            body = r.read()
            assert r.status == 404, (path, r.status)
            assert b"root:" not in body and b"Traceback" not in body
            conn.close()
        ok = urllib.request.urlopen(server.url + "_dash-layout", timeout=30)  # what it does serve still works
        assert ok.status == 200
    finally:
        server.shutdown()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_malformed_callback_request_is_a_400_without_a_traceback(tmp_path, caplog):
    import logging

    from dashboards.app import create_app
    from dashboards.catalog import Catalog

    app = create_app(Catalog([str(SAMPLE)], cache_dir=str(tmp_path)))
    client = app.server.test_client()
    caplog.set_level(logging.INFO)
    for body in [b"not json", b"{}", b"[1, 2]", b'{"output": 5}', b'{"output": "nope.children", "inputs": []}',
                 b'{"output": "view.children", "outputs": {"id": "view", "property": "children"}, "inputs": [5]}']:
        r = client.post("/_dash-update-component", data=body, content_type="application/json")
        assert (r.status_code, r.data) == (400, b"Bad request"), body
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    # a request of the shape the page sends still reaches Dash (here: an unknown trace is answered, not refused)
    out = next(k for k in app.callback_map if k.startswith("..url.search"))
    spec = [dict(zip(("id", "property"), o.split("."))) for o in out.strip(".").split("...")]
    short = {"output": out, "outputs": spec, "changedPropIds": ["url.search"],
             "inputs": [{"id": "url", "property": "search", "value": "?trace=nope"}]}
    assert client.post("/_dash-update-component", json=short).status_code == 400  # one input of several
    inputs = [[] if i["id"].startswith("{") else dict(i, value=None) for i in app.callback_map[out]["inputs"]]
    inputs[0]["value"] = "?trace=nope"
    state = [dict(i, value=None) for i in app.callback_map[out]["state"]]
    r = client.post("/_dash-update-component", json=dict(short, inputs=inputs, state=state))
    assert r.status_code == 200, r.data[:200]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_link_names_traces_by_label_only(tmp_path):
    from dashboards.app import make_link, parse_link
    from dashboards.catalog import Catalog

    catalog = Catalog([str(SAMPLE), str(SAMPLE)], cache_dir=str(tmp_path))
    labels = [s.label for s in catalog.sources]
    link = make_link(catalog, 1, 0, "timeline", "52")
    assert parse_link(link, catalog) == {"index": 1, "rank": 0, "view": "timeline", "step": "52"}
    assert labels[1] in urllib.parse.unquote(link) and str(SAMPLE.parent) not in urllib.parse.unquote(link)
    for bad in ["?trace=" + urllib.parse.quote(str(SAMPLE)), "?trace=../x&rank=a&view=nope", "?rank=-1", ""]:
        got = parse_link(bad, catalog)
        assert "index" not in got and got.get("view") is None
        if "trace=" in bad:  # a trace not served (a path is never one): the page says so
            assert got["unknown"] == urllib.parse.unquote(bad.split("trace=")[1].split("&")[0])
    # a source's name works as its label does
    assert parse_link("?trace=" + urllib.parse.quote(catalog.sources[1].name), catalog)["index"] == 1
    assert make_link(catalog, 0, None, "overview", "52") == "?" + urllib.parse.urlencode({"trace": labels[0], "view": "overview"})
