"""bench.allocator_polls: the allocator's polls per trace, traced and estimated untraced."""

from __future__ import annotations

from bench import allocator_polls as ap
from tests.tracekit.test_allocator_polls import allocating_trace


def test_host_bound_and_gpu_bound(tmp_path):
    host = ap.measure(str(allocating_trace(kernel_us=3).write(tmp_path / "host.json")))
    gpu = ap.measure(str(allocating_trace(kernel_us=25).write(tmp_path / "gpu.json")))
    h, g = host[0], gpu[0]
    assert h["allocator_known"] and h["polls_in_trace"] == 24 and h["allocator_polls_in_trace"] == 20
    assert h["traced"]["polls_per_step"] == 5 and h["traced"]["all_polls_per_step"] == 6
    assert h["traced"]["bound"] == "host" and h["traced"]["helps"]
    assert h["traced"]["saving_ms"] == h["traced"]["poll_ms_per_step"] == 0.040
    assert g["traced"]["bound"] == "gpu" and not g["traced"]["helps"]
    assert not g["untraced"]["helps"]
    text = ap.render(host + gpu, "cmd", 1.0)
    assert "| 5.0 (6.0) | 0.040 / " in text and "would not help" in text


def test_no_trace_is_exit_2(capsys):
    assert ap.main(["/nonexistent/*.json.gz"]) == 2
    assert "no trace matches" in capsys.readouterr().err
