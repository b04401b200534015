from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models import pretrained
from shadowtutor.models.checkpoint import CheckpointError


def test_the_packaged_student_loads_and_says_how_it_was_made() -> None:
    path = pretrained.default_student_path()
    assert path.parent.name == "assets" and path.parent.parent.name == "shadowtutor"
    assert path.stat().st_size < 5_000_000
    loaded = pretrained.load_default_student()
    assert loaded.class_names == LVS_CLASSES
    # Made in runs each started from the one before (docs/results/accuracy_diagnosis.md), the first from
    # random weights: every run pre-trained on scenes outside the evaluation seeds, none from the authors' checkpoint.
    runs = [loaded.metadata["pretrain"]]
    while runs[-1]["init"] is not None:
        runs.append(runs[-1]["init"]["metadata"]["pretrain"])
    assert len(runs) == 3
    for info in runs:
        assert info["scenes"] and all(scene["seed"] >= info["eval_seed_limit"] for scene in info["scenes"])
    assert [info.get("sizes", [[320, 180]]) for info in runs] == [[[320, 180], [640, 360]]] * 2 + [[[320, 180]]]


def test_a_missing_asset_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pretrained, "default_student_path", lambda: tmp_path / "absent.pt")
    with pytest.raises(CheckpointError, match="shadowtutor pretrain"):
        pretrained.load_default_student()
