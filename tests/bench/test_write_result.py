"""bench.common.write_result: the runners' table and figures, side by side under one stamped name."""

import json
import re

from bench.common import write_result


def test_writes_the_table_and_the_figures_under_one_stamped_name(tmp_path):
    out = tmp_path / "new" / "dir"
    base = write_result(str(out), "late-starts", "| a |\n", {"rows": [{"x": 1}]}, command="python -m x", seconds=1.5)
    assert re.fullmatch(r"late-starts-\d{8}-\d{4}", base.rsplit("/", 1)[1])
    assert (out / (base.rsplit("/", 1)[1] + ".md")).read_text() == "| a |\n"
    doc = json.loads(open(base + ".json").read())
    assert doc["command"] == "python -m x" and doc["seconds"] == 1.5 and doc["rows"] == [{"x": 1}]
    assert isinstance(doc["host"], str) and doc["host"]
