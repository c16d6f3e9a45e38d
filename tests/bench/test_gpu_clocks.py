"""bench/common/gpu_clocks.py against a fake nvidia-smi: the query it falls back to, the lines it keeps,
the window summaries, and no failure where there is no nvidia-smi."""

from __future__ import annotations

import sys
import time

from bench.common.gpu_clocks import ClockLog, parse_line, reason_names, summarize_window

FAKE = r'''#!{python}
import sys, time
args = " ".join(sys.argv[1:])
if "clocks_event_reasons" in args:  # a driver from before the rename
    print('Field "clocks_event_reasons.active" is not a valid field to query.'); sys.exit(2)
lines = ["GPU-aaaa-1111, 1980, 3201, 41, 120.50, 0x0000000000000000",
         "GPU-bbbb-2222, 1410, 3201, 35, [N/A], 0x0000000000000001",
         "GPU-aaaa-1111, 1755, 3201, 63, 690.00, 0x0000000000000004"]
if "--loop-ms" not in args:
    print(lines[0]); sys.exit(0)
for line in lines:
    print(line, flush=True); time.sleep(0.05)
'''


def _fake(tmp_path):
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE.replace("{python}", sys.executable))
    path.chmod(0o755)
    return str(path)


def test_falls_back_to_the_old_reason_field_and_keeps_its_gpu(tmp_path):
    log = ClockLog(uuid="aaaa-1111", command=_fake(tmp_path), interval_ms=50)
    assert log.status == "on" and log.fields[-1] == "clocks_throttle_reasons.active"
    deadline = time.time() + 10
    while len(log.samples) < 3 and time.time() < deadline:
        time.sleep(0.05)
    log.stop()
    assert [s["sm_mhz"] for _, s in log.samples] == [1980.0, 1410.0, 1755.0]
    w = log.window(0, time.perf_counter() + 1)  # GPU-bbbb's sample left out
    assert w == {"samples": 2, "sm_mhz": 1867.5, "sm_mhz_min": 1755.0, "mem_mhz": 3201.0, "power_w": 405.2,
                 "temp_c_max": 63.0, "reasons": "0x4"}
    assert reason_names(w["reasons"]) == ["sw_power_cap"]
    assert log.window(0, 0)["samples"] == 0
    # a uuid no line carries: every GPU's samples rather than none
    log._uuid = "ffff"
    assert log.window(0, time.perf_counter() + 1)["samples"] == 3


def test_parse_line_and_missing_values():
    fields = ("uuid", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")
    assert parse_line("GPU-x, 1410, 3201, 35, [N/A]", fields) == {
        "uuid": "GPU-x", "sm_mhz": 1410.0, "mem_mhz": 3201.0, "temp_c": 35.0, "power_w": None}
    assert parse_line("not, enough", fields) is None
    assert summarize_window([])["sm_mhz"] is None and reason_names(None) == []


def test_no_nvidia_smi_is_a_status_not_an_error(tmp_path):
    log = ClockLog(command=str(tmp_path / "no-such-nvidia-smi"))
    assert log.status.startswith("off:") and log.samples == []
    log.stop()
    assert log.window(0, 1)["samples"] == 0
