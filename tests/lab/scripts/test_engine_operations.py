"""The engine-operations count on the CPU with two sessions: a row per tail and convolution, steps that cost
what a batch's extra step costs, the device's work per key frame with its roofline, and the Markdown table
beside the JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.support.lab_scripts import loaded_script


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    with loaded_script("engine_operations") as module:
        yield module


@pytest.mark.slow
def test_operations_are_counted_per_tail_convolution_and_step(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "operations.json"
    assert script.main(["--sessions", "2", "--size", "64x64", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    rows = {(r["tail"], r["convolution"]): r for r in results["rows"]}
    assert set(rows) == {("written", "grouped"), ("written", "matmul"), ("fused", "grouped"), ("fused", "matmul")}
    for row in rows.values():
        for kind in ("batch_fresh", "batch_trained", "step"):
            assert 0 < row[kind]["compute"] < row[kind]["all"]  # views and allocations are left out of compute
        assert 8 * row["step"]["all"] < row["batch_trained"]["all"]  # eight steps and the batch's own work
        work = row["traffic"]
        assert work["gb_per_key_frame"] > 0 and work["gflop_per_key_frame"] > 0
        bytes_ms, flops_ms = 1000 * work["gb_per_key_frame"] / 3350, 1000 * work["gflop_per_key_frame"] / 67e3
        assert max(bytes_ms, flops_ms) <= work["roofline_ms_per_key_frame"] * (1 + 1e-9) <= bytes_ms + flops_ms
        assert len(work["largest"]) == 5 and work["largest"][0][1] >= work["largest"][-1][1]
    assert rows["fused", "grouped"]["step"]["all"] > rows["written", "grouped"]["step"]["all"]
    for tail in ("written", "fused"):  # the same function: a grouped convolution's weight gradient counted once
        assert rows[tail, "grouped"]["traffic"]["gflop_per_key_frame"] == pytest.approx(
            rows[tail, "matmul"]["traffic"]["gflop_per_key_frame"], rel=0.02)
    # the fused tail does less than half the written tail's arithmetic (a quarter at 1280x720)
    assert rows["fused", "grouped"]["traffic"]["gflop_per_key_frame"] < (
        rows["written", "grouped"]["traffic"]["gflop_per_key_frame"] / 2)
    assert results["size"] == "64x64" and results["roofline"] == {"bandwidth": 3350e9, "peak": 67e12}
    printed = capsys.readouterr().out
    assert printed.startswith("aten operations of the batched engine, 2 sessions, 8 steps")
    assert printed.strip().splitlines()[-4:] == out.with_suffix(".md").read_text().strip().splitlines()[-4:]
    assert "the device's work per 64x64 key frame (8 steps) and its roofline at 3,350 GB/s and 67 TFLOP/s:" in printed


def test_the_bytes_of_an_operation_are_its_tensors_broadcasts_once(script: ModuleType) -> None:
    """One addition of a (1000, 1000) float32 matrix and a broadcast row: 4 MB read, 4 kB read, 4 MB written; its
    FLOPs none that the counter knows, so the roofline is the bytes over the bandwidth. A view moves nothing."""
    a, row = torch.ones(1000, 1000), torch.ones(1000)
    with script.OperationCount() as counted:
        a + row.expand(1000, 1000)
        a.view(-1)
    assert dict(counted.bytes) == {"aten.add": 4_000_000 + 4_000 + 4_000_000}
    work = script.traffic(counted, 1, script.Roofline(bandwidth=1e9, peak=1e12))
    assert work["roofline_ms_per_key_frame"] == pytest.approx(8.004)
    assert work["largest"] == [["aten.add", pytest.approx(0.008004)]]
