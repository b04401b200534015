"""The real teacher: MediaPipe's person segmentation, converted to ONNX, run tiled on the CPU (no mock)."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.teachers import TeacherError, build_teacher
from shadowtutor.teachers.mediapipe import MODEL, install_model, tile_boxes

PERSON, BACKGROUND = LVS_CLASSES.index("person"), background_index(LVS_CLASSES)


def vtest_frame(path: Path, index: int, width: int = 640) -> np.ndarray:
    cap = cv2.VideoCapture(str(path))
    cap.set(cv2.CAP_PROP_POS_FRAMES, index)
    ok, frame = cap.read()
    cap.release()
    assert ok
    return cv2.resize(frame, (width, width * 3 // 4), interpolation=cv2.INTER_AREA)


@pytest.mark.parametrize(("width", "height", "tile"), [(640, 480, 180), (1280, 720, 180), (300, 97, 180)])
def test_tiles_cover_the_frame_and_keep_the_models_aspect(width: int, height: int, tile: int) -> None:
    boxes = tile_boxes(width, height, tile)
    assert boxes[0] == (0, 0, width, height)
    covered = np.zeros((height, width), bool)
    for x, y, w, h in boxes[1:]:
        assert 0 <= x and x + w <= width and 0 <= y and y + h <= height
        assert w == min(round(min(tile, height) * 256 / 144), width)
        covered[y : y + h, x : x + w] = True
    assert len(boxes) == 1 or covered.all()


def test_the_real_teacher_finds_the_pedestrians_of_a_real_clip(
    mediapipe_model: Path, real_clips: dict[str, Path]
) -> None:
    teacher = build_teacher("mediapipe")
    frames = [vtest_frame(real_clips["vtest"], i) for i in (100, 400)]
    teacher.label(frames[0])  # warm-up
    start = time.perf_counter()
    labels = teacher.label_batch(frames)
    seconds = (time.perf_counter() - start) / len(frames)
    for lab in labels:
        assert lab.shape == (480, 640) and lab.dtype == np.uint8
        assert set(np.unique(lab).tolist()) == {PERSON, BACKGROUND}
        # a handful of walkers, each a few hundred pixels: between 0.3 % and 15 % of the frame
        assert 0.003 < float((lab == PERSON).mean()) < 0.15
    assert seconds < 5.0, f"{seconds:.2f} s per frame"  # its real cost; about 0.1 s here
    described = teacher.describe()
    assert described["backend"] == "mediapipe" and described["licence"].startswith("Apache-2.0")


def test_a_blank_frame_has_no_person(mediapipe_model: Path) -> None:
    labels = build_teacher("mediapipe").label(np.full((360, 640, 3), 128, np.uint8))
    assert (labels == BACKGROUND).all()


def test_the_conversion_is_repeatable_and_carries_its_licence(
    mediapipe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Converting the kept TFLite file again (no download: its digest matches) gives the same labels."""
    import onnx

    monkeypatch.setenv("SHADOWTUTOR_ASSETS_DIR", str(mediapipe_model.parents[1]))
    again = install_model(out=tmp_path / "again.onnx")
    props = {p.key: p.value for p in onnx.load(str(again)).metadata_props}
    assert props["licence"] == MODEL.licence and MODEL.package in props["source"]
    frame = np.random.default_rng(0).integers(0, 255, (144, 256, 3), dtype=np.uint8)
    first = build_teacher("mediapipe", model_path=mediapipe_model).label(frame)
    second = build_teacher("mediapipe", model_path=again).label(frame)
    assert np.array_equal(first, second)


def test_a_missing_model_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(TeacherError, match="shadowtutor teacher install mediapipe"):
        build_teacher("mediapipe", model_path=tmp_path / "absent.onnx")


def test_task_classes_without_person_are_refused() -> None:
    with pytest.raises(TeacherError, match="no 'person'"):
        install_model(class_names=("dog", "background"))
