from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from shadowtutor_cli import main
from shadowtutor_lab.scenes.generator import make_scene


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_bench_traffic_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scene = make_scene("moving-street", 8, 4, tmp_path / "moving-street-s4", size=(48, 32), progress=False)
    report = tmp_path / "docs" / "traffic_budget"
    code = main(["bench", "traffic", "--scenes", str(scene), "--settings", "jpeg@60/f32", "--out",
                 str(tmp_path / "runs"), "--report", str(report), "--backend", "torch", "--threads", "1",
                 "--no-progress", "--note", "tiny"])
    assert code == 0
    results = json.loads(report.with_suffix(".json").read_text())
    assert [s["label"] for s in results["settings"]][::2] == ["raw / f32", "jpeg@60 / f32"]
    assert results["meta"]["command"].startswith("shadowtutor ")
    assert "- tiny" in report.with_suffix(".md").read_text()
    out = capsys.readouterr().out
    assert "raw / f32: " in out and "kB per key frame at 720p (frame 2764.9 + update" in out
    assert f"wrote {report}.json" in out


def test_bench_traffic_refuses_a_bad_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scene = make_scene("moving-street", 2, 4, tmp_path / "s", size=(32, 24), progress=False)
    assert main(["bench", "traffic", "--scenes", str(scene), "--settings", "jpeg/q8delta+zstd"]) == 2
    assert "float codec" in capsys.readouterr().err
