from __future__ import annotations

import json
from pathlib import Path

from shadowtutor_lab.stress.fuzz_report import markdown, summary_lines, write_report


def results(violations: list) -> dict:
    return {
        "command": "shadowtutor fuzz --seconds 5", "started_at": "2026-01-01T00:00:00+00:00", "seconds": 5.2,
        "seed": 1, "cases": 40, "passed": not violations, "violations": violations,
        "machine": {"cpu_model": "cpu", "cpu_count": 2, "python": "3.11", "load_average_after": [1.0, 0.5, 0.2]},
        "server": {"url": "ws://127.0.0.1:1/v1/edge", "local": True, "version": "0.1.0", "serve_args": ["--port", "1"],
                   "max_message_bytes": 1024},
        "canary": {"round_trips": 3, "sessions": 1, "worst_seconds": 0.1, "failures": []},
        "categories": {"oversize": {"cases": 20, "variants": 3, "outcomes": {"close 1009": 20}, "violations": 0,
                                    "mean_seconds": 0.02},
                       "valid": {"cases": 20, "variants": 5, "outcomes": {"answered": 19, "timeout": 1},
                                 "violations": len(violations), "mean_seconds": 0.5}},
    }


def test_report_files_and_summary(tmp_path: Path) -> None:
    bad = [{"case": 7, "category": "valid", "variant": "1 raw key frame(s)", "outcome": "timeout",
            "what": "hang: neither an answer nor a close within 20 s"},
           {"category": None, "what": "server log: Traceback (most recent call last):"}]
    json_path, md_path = write_report(results(bad), tmp_path / "out" / "fuzz")
    assert json.loads(json_path.read_text())["violations"] == bad
    text = md_path.read_text()
    assert "**2 violations**" in text and "| valid | 20 | 5 | 0.500 | answered: 19, timeout: 1 | 2 |" in text
    assert "- case 7 valid (1 raw key frame(s)): hang" in text and "- server log: Traceback" in text
    lines = summary_lines(results(bad))
    assert lines[0].startswith("fuzz: 40 cases in 5 s (seed 1, 2 categories)") and lines[2] == "violations: 2"


def test_a_clean_run_says_passed() -> None:
    assert "**passed**: no violations" in markdown(results([]))
    assert summary_lines(results([]))[2] == "violations: 0 (passed)"
