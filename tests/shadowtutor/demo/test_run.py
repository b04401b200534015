"""``shadowtutor demo`` end to end on a short, small scene: real server and agent processes on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowtutor.cli import main

pytestmark = pytest.mark.slow


def test_the_demo_runs_both_modes_and_writes_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    cache = tmp_path / "cache"
    code = main(["demo", "--out", str(out), "--frames", "24", "--size", "128x72", "--cache-dir", str(cache)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| frames labelled | 24/24 | 24/24 |" in printed
    data = json.loads((out / "report.json").read_text())
    shadow, naive = data["shadowtutor"], data["naive"]
    assert shadow["mode"] == "distill" and naive["mode"] == "naive"
    assert shadow["updates_applied"] >= 2  # key frames at 0, 8, 16 at least; each update applied
    assert naive["key_frame_ratio"] == 1.0 and shadow["key_frame_ratio"] < 0.5
    assert shadow["handshake_bytes"] > 100_000  # the WELCOME carries the whole student
    assert naive["miou_percent"] == pytest.approx(100.0)  # naive shows the teacher's own labels
    assert (out / "shadowtutor" / "overlay.mp4").stat().st_size > 0
    assert len(list((out / "naive" / "labels").glob("*.png"))) == 24
