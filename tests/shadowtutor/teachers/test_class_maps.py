from __future__ import annotations

import pytest

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.class_maps import (
    COCO_CATEGORY_NAMES,
    COCO_CLASSES,
    checked_class_lut,
    class_lut,
)

LVS_IDS_91 = {"person": 1, "bicycle": 2, "car": 3, "bus": 6, "truck": 8, "bird": 16, "dog": 18, "horse": 19,
              "elephant": 22, "giraffe": 25}
LVS_IDS_80 = {"person": 0, "bicycle": 1, "car": 2, "bus": 5, "truck": 7, "bird": 14, "dog": 16, "horse": 17,
              "elephant": 20, "giraffe": 23}


def test_coco_91_list_is_torchvisions() -> None:
    from torchvision.models.detection import MaskRCNN_ResNet50_FPN_Weights

    assert COCO_CATEGORY_NAMES == tuple(MaskRCNN_ResNet50_FPN_Weights.COCO_V1.meta["categories"])
    assert len(COCO_CLASSES) == 80
    assert tuple(n for n in COCO_CATEGORY_NAMES if n not in ("__background__", "N/A")) == COCO_CLASSES


@pytest.mark.parametrize(("source", "ids"), [(COCO_CATEGORY_NAMES, LVS_IDS_91), (COCO_CLASSES, LVS_IDS_80)])
def test_lvs_mapping(source, ids) -> None:
    lut = checked_class_lut(source, LVS_CLASSES, "COCO")
    lvs = LVS_CLASSES.index
    for name, coco_id in ids.items():
        expected = lvs("auto") if name in ("car", "bus", "truck") else lvs(name)
        assert lut[coco_id] == expected, name
    mapped = {i for i, t in enumerate(lut) if t != lvs("background")}
    assert mapped == set(ids.values())


def test_other_task_lists_map_by_name() -> None:
    target = ("background", "Car", "traffic_light", "person")
    lut = checked_class_lut(COCO_CATEGORY_NAMES, target, "COCO")
    assert lut[3] == 1 and lut[10] == 2 and lut[1] == 3
    assert lut[6] == 0 and lut[8] == 0  # bus and truck: no alias on "Car"
    # a task class's own name beats another class's alias
    both = ("auto", "car", "background")
    lut = class_lut(COCO_CATEGORY_NAMES, both)
    assert lut[3] == 1 and lut[6] == 0 and lut[8] == 0


def test_unreachable_or_backgroundless_task_lists_are_refused() -> None:
    with pytest.raises(TeacherError, match=r"\['tree'\] match no COCO class"):
        checked_class_lut(COCO_CATEGORY_NAMES, ("person", "tree", "background"), "COCO")
    with pytest.raises(TeacherError, match="no 'background'"):
        class_lut(COCO_CATEGORY_NAMES, ("person", "car"))
