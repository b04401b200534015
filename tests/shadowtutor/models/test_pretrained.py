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
    info = loaded.metadata["pretrain"]
    assert info["scenes"] and all(scene["seed"] >= info["eval_seed_limit"] for scene in info["scenes"])
    assert info["init"] is None  # not derived from the authors' checkpoint


def test_a_missing_asset_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pretrained, "default_student_path", lambda: tmp_path / "absent.pt")
    with pytest.raises(CheckpointError, match="shadowtutor pretrain"):
        pretrained.load_default_student()
