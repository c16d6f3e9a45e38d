"""bench.explain_speed: the tree another checkout's explain runs from (--against) and bad input."""

from __future__ import annotations

import os

from bench import explain_speed as es


def test_tree_env_puts_the_other_tree_first():
    env = es.tree_env({"PYTHONPATH": "/x", "A": "1"}, "/main", "/c")
    assert env["PYTHONPATH"].split(os.pathsep) == ["/main", "/x"]
    assert env["TRACEKIT_CACHE_DIR"] == "/c" and env["A"] == "1"
    mine = es.tree_env({"PYTHONPATH": "/x"}, None, "/d")
    assert mine["PYTHONPATH"] == "/x" and mine["TRACEKIT_CACHE_DIR"] == "/d"


def test_bad_input_one_line_exit_2(tmp_path, capsys):
    assert es.main([str(tmp_path / "none.json.gz")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    t = tmp_path / "t.json.gz"
    t.write_bytes(b"")
    assert es.main([str(t), "--against", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--against" in err
