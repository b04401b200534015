from __future__ import annotations

import json

from shadowtutor_cli import main


def test_calibrate_refuses_an_unknown_clip(tmp_path, capsys) -> None:
    out = tmp_path / "t.json"
    assert main(["change-based", "calibrate", "--clip", str(tmp_path / "none.mp4"), "--out", str(out)]) == 2
    assert "neither PRESET:SEED" in capsys.readouterr().err
    assert not out.exists()


def test_bench_refuses_a_malformed_threshold_file_before_any_work(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "shadowtutor-change-thresholds", "version": 1, "thresholds": {}}))
    assert main(["bench", "change-based", "--change-thresholds", str(bad), "--clip", "fixed-people:1"]) == 2
    assert "no threshold for" in capsys.readouterr().err
