"""The engine-operations count on the CPU with two sessions: a row per tail and convolution, steps that cost
what a batch's extra step costs, and the Markdown table beside the JSON."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "scripts" / "engine_operations.py"


def test_operations_are_counted_per_tail_convolution_and_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("engine_operations", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script
    try:
        spec.loader.exec_module(script)
        out = tmp_path / "operations.json"
        assert script.main(["--sessions", "2", "--size", "64x64", "--out", str(out)]) == 0
    finally:
        del sys.modules[spec.name]
    results = json.loads(out.read_text())
    rows = {(r["tail"], r["convolution"]): r for r in results["rows"]}
    assert set(rows) == {("written", "grouped"), ("written", "matmul"), ("fused", "grouped"), ("fused", "matmul")}
    for row in rows.values():
        for kind in ("batch_fresh", "batch_trained", "step"):
            assert 0 < row[kind]["compute"] < row[kind]["all"]  # views and allocations are left out of compute
        assert 8 * row["step"]["all"] < row["batch_trained"]["all"]  # eight steps and the batch's own work
    assert rows["fused", "grouped"]["step"]["all"] > rows["written", "grouped"]["step"]["all"]
    printed = capsys.readouterr().out
    assert printed.startswith("aten operations of the batched engine, 2 sessions, 8 steps")
    assert printed.strip().splitlines()[-4:] == out.with_suffix(".md").read_text().strip().splitlines()[-4:]
