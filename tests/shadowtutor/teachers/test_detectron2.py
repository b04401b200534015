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
from shadowtutor.teachers.detectron2 import instances_to_labels

LUT = checked_class_lut(COCO_CLASSES, LVS_CLASSES, "COCO")
BG = LVS_CLASSES.index("background")


@pytest.mark.skipif(importlib.util.find_spec("detectron2") is not None, reason="detectron2 is installed")
def test_missing_detectron2_is_a_clear_error() -> None:
    with pytest.raises(TeacherError, match="needs detectron2.*install.*'maskrcnn' teacher"):
        build_teacher("detectron2", device="cpu")


def test_instances_painted_with_contiguous_coco_ids() -> None:
    masks = torch.zeros(3, 4, 6, dtype=torch.bool)
    masks[0, :, :3] = True  # bus (5) -> auto
    masks[1, :2, :] = True  # person (0), higher score: on top
    masks[2, :, 3:] = True  # motorcycle (3) -> background, dropped
    stand_in = SimpleNamespace(
        image_size=(4, 6),
        pred_masks=masks,
        scores=torch.tensor([0.7, 0.9, 0.95]),
        pred_classes=torch.tensor([5, 0, 3]),
    )
    out = instances_to_labels(stand_in, LUT, BG, len(LVS_CLASSES), 0.5)
    expected = np.full((4, 6), BG, np.uint8)
    expected[:, :3] = LVS_CLASSES.index("auto")
    expected[:2, :] = LVS_CLASSES.index("person")
    assert (out == expected).all()
    with pytest.raises(TeacherError, match="no instance masks"):
        instances_to_labels(SimpleNamespace(scores=torch.ones(1), pred_classes=torch.zeros(1)), LUT, BG, 9, 0.5)
