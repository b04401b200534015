from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shadowtutor.models.checkpoint import load_student
from shadowtutor_cli import main


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_pretrain_writes_a_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "student.pt"
    code = main(["pretrain", "--out", str(out), "--presets", "fixed-animals", "--scenes-per-preset", "1",
                 "--frames", "3", "--size", "64x48", "--epochs", "1", "--seed", "2000", "--threads", "1",
                 "--no-progress"])
    assert code == 0
    info = load_student(out).metadata["pretrain"]
    assert info["scenes"] == [{"preset": "fixed-animals", "seed": 2000, "frames": 3}]
    assert info["command"].startswith("shadowtutor")


def test_pretrain_refuses_evaluation_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pretrain", "--out", str(tmp_path / "s.pt"), "--seed", "5"]) == 2
    assert "reserved for evaluation" in capsys.readouterr().err
