from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from shadowtutor.teachers.label_store import read_label, write_label
from shadowtutor_cli import main


def make_scene(root: Path, count: int = 5) -> None:
    """A scene-like directory: a video and ground-truth labels/NNNNNN.png with scene.json."""
    (root / "labels").mkdir(parents=True)
    (root / "scene.json").write_text(json.dumps({"class_names": ["person", "auto", "background"]}))
    writer = cv2.VideoWriter(str(root / "video.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10, (32, 24))
    for i in range(count):
        writer.write(np.full((24, 32, 3), 20 * i, np.uint8))
        write_label(root / "labels", i, np.full((12, 16), i % 3, np.uint8))
    writer.release()


def test_label_command_copies_scene_ground_truth(tmp_path: Path, capsys) -> None:
    make_scene(tmp_path / "scene")
    out = tmp_path / "out"
    rc = main(["teacher", "label", "--teacher", "labels", "--labels-dir", str(tmp_path / "scene"),
               "--video", str(tmp_path / "scene" / "video.mp4"), "--out", str(out), "--batch-size", "2",
               "--no-progress"])
    assert rc == 0
    assert "wrote 5 label maps (3 classes)" in capsys.readouterr().out
    for i in range(5):
        labels = read_label(out / f"{i:06d}.png")
        assert labels.shape == (24, 32) and (labels == i % 3).all()  # resized to the video's frames
    assert json.loads((out / "labels.json").read_text())["class_names"] == ["person", "auto", "background"]


def test_info_command_and_generic_options(tmp_path: Path, capsys) -> None:
    make_scene(tmp_path / "scene", count=1)
    rc = main(["teacher", "info", "--teacher", "labels", "--labels-dir", str(tmp_path / "scene"),
               "--option", 'class_names=["a", "b", "background"]'])
    assert rc == 0
    info = json.loads(capsys.readouterr().out)
    assert info["backend"] == "labels" and info["class_names"] == ["a", "b", "background"]


def test_errors_are_reported_not_raised(tmp_path: Path, capsys) -> None:
    rc = main(["teacher", "info", "--teacher", "labels", "--labels-dir", str(tmp_path / "absent")])
    assert rc == 2 and "labels directory not found" in capsys.readouterr().err
    rc = main(["teacher", "info", "--teacher", "labels", "--labels-dir", str(tmp_path), "--option", "oops"])
    assert rc == 2 and "KEY=VALUE" in capsys.readouterr().err
