"""detectron2 is not installable here (no PyPI wheels), so these tests check the clear error and
paint a stand-in for detectron2's ``Instances`` (the attributes its predictor returns)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.teachers import TeacherError, build_teacher
from shadowtutor.teachers.class_maps import COCO_CLASSES, checked_class_lut
from shadowtutor.teachers.detectron2 import Detectron2Teacher, instances_to_teaching

LUT = checked_class_lut(COCO_CLASSES, LVS_CLASSES, "COCO")
BG = LVS_CLASSES.index("background")


@pytest.mark.skipif(importlib.util.find_spec("detectron2") is not None, reason="detectron2 is installed")
def test_missing_detectron2_is_a_clear_error() -> None:
    with pytest.raises(TeacherError, match="needs detectron2.*install.*'maskrcnn' teacher"):
        build_teacher("detectron2", device="cpu")


def _stand_in() -> SimpleNamespace:
    masks = torch.zeros(4, 4, 6, dtype=torch.bool)
    masks[0, :, :3] = True  # bus (5) -> auto
    masks[1, :2, :] = True  # person (0), higher score: on top by score
    masks[2, :, 3:] = True  # motorcycle (3) -> background, dropped from the labels, its box kept
    masks[3, 3:, 5:] = True  # person below the score threshold: dropped everywhere
    return SimpleNamespace(
        image_size=(4, 6),
        pred_masks=masks,
        pred_boxes=SimpleNamespace(tensor=torch.tensor([[0, 0, 3, 4], [0, 0, 6, 2], [3, 0, 6, 4], [5, 3, 6, 4.0]])),
        scores=torch.tensor([0.7, 0.9, 0.95, 0.3]),
        pred_classes=torch.tensor([5, 0, 3, 0]),
    )


def test_instances_painted_with_contiguous_coco_ids_and_their_boxes_kept() -> None:
    out = instances_to_teaching(_stand_in(), LUT, BG, len(LVS_CLASSES), 0.5)
    expected = np.full((4, 6), BG, np.uint8)
    expected[:, :3] = LVS_CLASSES.index("auto")
    expected[:2, :] = LVS_CLASSES.index("person")
    assert (out.labels == expected).all()
    # every instance above the threshold, of any class (the motorcycle too), as the authors' weight map
    np.testing.assert_array_equal(out.boxes, [[0, 0, 3, 4], [0, 0, 6, 2], [3, 0, 6, 4]])
    with pytest.raises(TeacherError, match="no instance masks"):
        instances_to_teaching(SimpleNamespace(scores=torch.ones(1), pred_classes=torch.zeros(1)), LUT, BG, 9, 0.5)


def test_class_paint_order_puts_the_later_class_on_top() -> None:
    out = instances_to_teaching(_stand_in(), LUT, BG, len(LVS_CLASSES), 0.5, paint_order="class")
    # auto (index 2) comes after person (0) in LVS_CLASSES: the bus lies over the person despite its score
    assert (out.labels[:, :3] == LVS_CLASSES.index("auto")).all()
    assert (out.labels[:2, 3:] == LVS_CLASSES.index("person")).all()


class _Model:
    """Records the images it is given; answers with the stand-in's instances (detectron2 is not installable)."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def __call__(self, inputs: list[dict]) -> list[dict]:
        self.shapes += [tuple(i["image"].shape) for i in inputs]
        return [{"instances": _stand_in()} for _ in inputs]


class _HalfSize:
    def get_transform(self, image: np.ndarray) -> SimpleNamespace:
        return SimpleNamespace(apply_image=lambda im: im[::2, ::2])


@pytest.mark.parametrize("native, shape", [(False, (3, 2, 3)), (True, (3, 4, 6))])
def test_native_resolution_skips_the_configs_resize(native: bool, shape: tuple[int, ...]) -> None:
    # The teacher's plumbing with the model and the config's resize stood in for (no detectron2 here).
    teacher = object.__new__(Detectron2Teacher)
    teacher.class_names, teacher._lut, teacher._background = LVS_CLASSES, LUT, BG
    teacher.score_threshold, teacher.paint_order, teacher._rgb_input = 0.5, "score", False
    teacher.native_resolution, teacher._model, teacher._resize = native, _Model(), _HalfSize()
    taught = teacher.teach_batch([np.zeros((4, 6, 3), np.uint8)])
    assert teacher._model.shapes == [shape] and taught[0].labels.shape == (4, 6)


@pytest.mark.skipif(importlib.util.find_spec("detectron2") is not None, reason="detectron2 is installed")
@pytest.mark.parametrize("option, value", [("native_resolution", "maybe"), ("paint_order", "depth")])
def test_bad_options_are_refused_before_detectron2_is_needed(option: str, value: str) -> None:
    with pytest.raises(TeacherError, match=option):
        build_teacher("detectron2", device="cpu", **{option: value})
