"""The load report: JSON with everything, Markdown tables, a PNG of memory and turnarounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shadowtutor_lab.stress.load_edge import CameraResult, KeyFrameRecord
from shadowtutor_lab.stress.load_memory import MemorySample
from shadowtutor_lab.stress.load_report import markdown, thinned, write_report
from shadowtutor_lab.stress.load_results import MIB, summarise


def results(problem: bool = False) -> dict[str, Any]:
    records = [KeyFrameRecord(0, 8 * i, i * 0.5, None if problem and i == 3 else 0.1 + i / 100, 0.0)
               for i in range(20)]
    memory = [MemorySample(t / 2, (700 + t) * MIB, (700 + t) * MIB, int(-2 <= t <= 20), 1.5) for t in range(-4, 24)]
    summary = summarise([CameraResult("load-000", records, sessions=1)], memory, 10.0, connect_at=-1.0)
    return {
        "command": "shadowtutor bench load --edges 1 --minutes 0.1667",
        "started_at": "2026-01-01T00:00:00+00:00",
        "config": {"edges": 1, "minutes": 10 / 60, "rate": 2.0, "size": [160, 90], "mode": "distill",
                   "interval": 0.5, "notes": ["Distillation is CPU-bound here."]},
        "server": {"url": "ws://127.0.0.1:1/v1/edge", "local": True, "readyz": {"ready": True},
                   "settings": {"distill_workers": 2, "tokens": None},
                   "session_terms": {"frame_codec": "jpeg", "weight_codec": "f16+zstd", "delta_codec": None,
                                     "params": {"max_updates": 8}}},
        "machine": {"cpu_model": "Test CPU", "cpu_count": 2, "platform": "Linux", "python": "3.11", "torch": "2",
                    "load_average_before": [1.0, 1.0, 1.0], "load_average_after": [2.0, 1.5, 1.0]},
        **summary,
    }


def test_markdown_shows_the_verdict_percentiles_memory_and_settings() -> None:
    text = markdown(results(), "load.png")
    assert text.startswith("# Load: 1 edges x 0.166667 min at 2 key frames/s each, 160x90, distill mode")
    assert "**Passed**" in text and "Distillation is CPU-bound here." in text
    assert "`shadowtutor bench load --edges 1 --minutes 0.1667`" in text
    assert "| **all** | 20 | 20 | 2.00 | 195 | 195 | 28" in text  # mean and p50 195 ms, p95 ~ 28x ms
    assert "| load-000 | 20 | 20 |" in text
    assert "Idle before the load 697.0 MiB" in text  # the last sample before t = -1 (t = -1.5)
    assert "**+15.0 MiB**" in text  # means over t in [0, 2.5] and [7.5, 10]: 705 -> 720 MiB
    assert "![server memory and turnarounds](load.png)" in text
    assert "| 0.0 | 700.0 | 700.0 | 1 | 1.50 |" in text  # a memory sample with the machine's load
    assert "`distill_workers=2`" in text and "tokens" not in text
    assert "Test CPU, 2 CPUs" in text and "before 1.00/1.00/1.00, after 2.00/1.50/1.00" in text


def test_markdown_lists_the_problems_of_a_failed_run() -> None:
    text = markdown(results(problem=True), None)
    assert "**Failed**:\n- 1 of 20 key frames got no answer" in text
    assert "![" not in text


def test_thinned_keeps_the_ends_and_about_the_asked_rows() -> None:
    rows = [{"t": i} for i in range(301)]
    kept = thinned(rows, 40)
    assert len(kept) == 40 and kept[0]["t"] == 0 and kept[-1]["t"] == 300
    assert thinned(rows[:10], 40) == rows[:10]


def test_write_report_writes_json_markdown_and_png(tmp_path: Path) -> None:
    data = results(problem=True)
    json_path, md_path, png_path = write_report(tmp_path / "out" / "load", data)
    assert [p.name for p in (json_path, md_path, png_path)] == ["load.json", "load.md", "load.png"]
    assert json.loads(json_path.read_text())["totals"] == data["totals"]
    assert "![server memory and turnarounds](load.png)" in md_path.read_text()
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 10_000
