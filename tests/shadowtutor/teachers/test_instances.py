from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.class_maps import COCO_CATEGORY_NAMES, checked_class_lut
from shadowtutor.teachers.instances import paint_instances

LUT = checked_class_lut(COCO_CATEGORY_NAMES, LVS_CLASSES, "COCO")
BG = LVS_CLASSES.index("background")
PERSON, AUTO, DOG = (LVS_CLASSES.index(n) for n in ("person", "auto", "dog"))


def box_mask(h: int, w: int, top: int, left: int, bottom: int, right: int) -> np.ndarray:
    m = np.zeros((1, h, w), np.float32)
    m[0, top:bottom, left:right] = 0.9
    return m


def paint(masks, scores, labels, **kw):
    return paint_instances(np.stack(masks), np.array(scores, np.float32), np.array(labels, np.int64), LUT, BG,
                           len(LVS_CLASSES), **kw)


def test_torchvision_style_output_painted_by_score() -> None:
    # torchvision returns (N, 1, H, W) probabilities, COCO category ids and scores sorted descending
    person = box_mask(6, 8, 0, 0, 4, 4)
    truck = box_mask(6, 8, 2, 2, 6, 8)
    dog_low = box_mask(6, 8, 0, 0, 6, 8)
    out = paint([truck, person, dog_low], [0.9, 0.8, 0.55], [8, 1, 18])
    assert out.dtype == np.uint8 and out.shape == (6, 8)
    assert (out[2:6, 2:8] == AUTO).all()  # truck (0.9) above person (0.8) above dog (0.55)
    assert (out[0:2, 0:4] == PERSON).all() and (out[2:4, 0:2] == PERSON).all()
    assert (out[0:2, 4:8] == DOG).all() and (out[4:6, 0:2] == DOG).all()
    # the same instances given in another order paint the same map
    assert (paint([dog_low, person, truck], [0.55, 0.8, 0.9], [18, 1, 8]) == out).all()


def test_thresholds_and_unmapped_classes() -> None:
    person = box_mask(4, 4, 0, 0, 4, 4)
    chair = box_mask(4, 4, 0, 0, 2, 2)  # COCO 62 (chair) maps to background: dropped, not painted
    out = paint([person, chair], [0.6, 0.99], [1, 62])
    assert (out == PERSON).all()
    assert (paint([person], [0.49], [1]) == BG).all()  # below the 0.5 score threshold
    assert (paint([person], [0.49], [1], score_threshold=0.4) == PERSON).all()
    assert (paint([person], [0.6], [1], mask_threshold=0.95) == BG).all()  # 0.9 probabilities
    bool_masks = np.zeros((1, 4, 4), bool)
    bool_masks[0, 1, 1] = True
    out = paint_instances(bool_masks, np.array([0.7]), np.array([1]), LUT, BG, len(LVS_CLASSES))
    assert out[1, 1] == PERSON and (out != PERSON).sum() == 15


def test_no_instances_and_bad_shapes() -> None:
    empty = paint_instances(np.zeros((0, 1, 3, 5)), np.zeros(0), np.zeros(0, np.int64), LUT, BG, 9)
    assert empty.shape == (3, 5) and (empty == BG).all()
    with pytest.raises(TeacherError, match="2 masks"):
        paint_instances(np.zeros((2, 3, 5)), np.zeros(1), np.zeros(2, np.int64), LUT, BG, 9)
    with pytest.raises(TeacherError, match=r"class ids must lie in \[0, 91\)"):
        paint_instances(np.zeros((1, 3, 5)), np.ones(1), np.array([91]), LUT, BG, 9)
    with pytest.raises(TeacherError, match=r"\(N, H, W\)"):
        paint_instances(np.zeros((3, 5)), np.ones(1), np.array([1]), LUT, BG, 9)


def test_class_order_paints_the_later_class_on_top_whatever_the_scores() -> None:
    # the authors' rule (dod_server.sem_seg_label): bicycle (index 1) over person (index 0)
    person = box_mask(6, 8, 0, 0, 6, 5)
    bicycle = box_mask(6, 8, 3, 2, 6, 8)
    by_score = paint([person, bicycle], [0.95, 0.6], [1, 2])
    by_class = paint([person, bicycle], [0.95, 0.6], [1, 2], order="class")
    bicycle_index = LVS_CLASSES.index("bicycle")
    assert (by_score[3:6, 2:5] == PERSON).all() and (by_class[3:6, 2:5] == bicycle_index).all()
    with pytest.raises(TeacherError, match="paint_order"):
        paint([person], [0.9], [1], order="depth")
