"""The distillation loss against hand-worked cases (x5 in each object's box grown by 15 %), and its region
boxes against every connected region's."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch

from shadowtutor.algorithms.loss import box_weight_map, key_frame_weights, object_weight_map, weighted_cross_entropy
from shadowtutor.algorithms.params import AlgorithmParams

BACKGROUND = 0


def _one_object() -> np.ndarray:
    """20x20, background 0, one 10x10 object of class 1 at rows 5..14, columns 4..13."""
    label = np.zeros((20, 20), np.uint8)
    label[5:15, 4:14] = 1
    return label


def test_the_box_grows_by_7_5_percent_on_each_side() -> None:
    weights = object_weight_map(_one_object(), BACKGROUND)
    # 10 px * 0.075 = 0.75 -> 1 px on each side: rows 4..15, columns 3..14 weigh 5.
    expected = np.ones((20, 20), np.float32)
    expected[4:16, 3:15] = 5.0
    np.testing.assert_array_equal(weights, expected)


def test_background_only_weighs_one_everywhere() -> None:
    weights = object_weight_map(np.full((8, 12), 3, np.uint8), background=3)
    assert weights.dtype == np.float32 and weights.shape == (8, 12)
    assert (weights == 1.0).all()


def test_each_object_gets_its_own_box_clipped_at_the_border() -> None:
    label = np.zeros((20, 40), np.uint8)
    label[0:4, 0:20] = 2  # 20 wide: 1.5 -> 2 px sideways, 4 high: 0.3 -> 0 px
    label[15:20, 30:40] = 1  # touches the bottom-right corner
    weights = object_weight_map(label, BACKGROUND, object_weight=3.0)
    expected = np.ones((20, 40), np.float32)
    expected[0:4, 0:22] = 3.0
    expected[15:20, 29:40] = 3.0  # 10 wide, 5 high: 0.75 -> 1 px, 0.375 -> 0 px
    np.testing.assert_array_equal(weights, expected)


def test_an_l_shaped_object_weighs_its_whole_bounding_box() -> None:
    label = np.zeros((30, 30), np.uint8)
    label[10:20, 10:12] = 1
    label[18:20, 10:20] = 1  # one region (an L): the box 10..19 x 10..19 grown by 1 px
    weights = object_weight_map(label, BACKGROUND, box_dilation=0.2)
    assert (weights[9:21, 9:21] == 5.0).all()
    assert (weights == 5.0).sum() == 12 * 12


def test_loss_is_the_weighted_mean_of_per_pixel_cross_entropy() -> None:
    label = _one_object()
    weights = torch.from_numpy(object_weight_map(label, BACKGROUND))
    classes = 4
    uniform = torch.zeros(1, classes, 20, 20)  # CE = ln 4 at every pixel
    loss = weighted_cross_entropy(uniform, torch.from_numpy(label), weights)
    # 144 pixels weigh 5, 256 weigh 1: mean weight 976 / 400 = 2.44.
    assert float(loss) == pytest.approx(2.44 * math.log(classes), rel=1e-6)


def test_object_pixels_cost_five_times_as_much() -> None:
    label = _one_object()
    weights = torch.from_numpy(object_weight_map(label, BACKGROUND))
    target = torch.from_numpy(label).long()
    logits = torch.nn.functional.one_hot(target, 2).permute(2, 0, 1).unsqueeze(0).float() * 20.0
    wrong_in_object = logits.clone()
    wrong_in_object[0, :, 10, 8] = torch.tensor([20.0, 0.0])  # an object pixel labelled background
    wrong_in_background = logits.clone()
    wrong_in_background[0, :, 0, 19] = torch.tensor([0.0, 20.0])  # a far background pixel labelled object
    base = float(weighted_cross_entropy(logits, target, weights))
    cost_object = float(weighted_cross_entropy(wrong_in_object, target, weights)) - base
    cost_background = float(weighted_cross_entropy(wrong_in_background, target, weights)) - base
    assert cost_object == pytest.approx(5.0 * cost_background, rel=1e-5)


def _authors_loss_mask(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``dod_server.loss_mask`` on the CPU: boxes times the expander matrix, int(), clamp, inclusive ends."""
    s = 0.15 / 2 + 1
    expander = torch.tensor([[s, 0, 1 - s, 0], [0, s, 0, 1 - s], [1 - s, 0, s, 0], [0, 1 - s, 0, s]])
    expanded = torch.matmul(boxes, expander).int()
    expanded[:, 0].clamp_(min=0, max=width)
    expanded[:, 1].clamp_(min=0, max=height)
    expanded[:, 2].clamp_(min=0, max=width)
    expanded[:, 3].clamp_(min=0, max=height)
    mask = torch.ones((height, width))
    for x1, y1, x2, y2 in expanded:
        mask[y1:y2 + 1, x1:x2 + 1] = 5.0
    return mask


def test_instance_boxes_weigh_as_in_the_authors_code() -> None:
    rng = np.random.default_rng(0)
    corners = rng.uniform(-20, 150, (12, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)  # x0, y0, x1, y1; some off-frame
    expected = _authors_loss_mask(torch.from_numpy(boxes), 90, 120).numpy()
    np.testing.assert_array_equal(box_weight_map(boxes, (90, 120)), expected)
    np.testing.assert_array_equal(box_weight_map(np.zeros((0, 4)), (4, 5)), np.ones((4, 5), np.float32))


def test_the_weight_map_option_picks_the_boxes() -> None:
    label, boxes = _one_object(), np.array([[0.0, 0.0, 2.0, 2.0]])
    regions = object_weight_map(label, BACKGROUND)
    instances = AlgorithmParams(weight_map="instances")
    by_regions = AlgorithmParams(weight_map="regions")
    expected = box_weight_map(boxes, (20, 20))
    np.testing.assert_array_equal(key_frame_weights(label, boxes, BACKGROUND, instances), expected)
    np.testing.assert_array_equal(key_frame_weights(label, None, BACKGROUND, instances), regions)  # no boxes: regions
    np.testing.assert_array_equal(key_frame_weights(label, boxes, BACKGROUND, by_regions), regions)


def _every_regions_map(label: np.ndarray, background: int) -> np.ndarray:
    """The weight map from every 8-connected region's box (connected components): the oracle of the outer
    borders' form, nested regions included."""
    height, width = label.shape
    weights = np.ones((height, width), np.float32)
    count, _, stats, _ = cv2.connectedComponentsWithStats((label != background).astype(np.uint8), connectivity=8)
    for x, y, w, h, _area in stats[1:count]:
        dx, dy = int(round(w * 0.075)), int(round(h * 0.075))
        weights[max(0, y - dy):min(height, y + h + dy), max(0, x - dx):min(width, x + w + dx)] = 5.0
    return weights


def _labels(rng: np.random.Generator, kind: int) -> np.ndarray:
    """Labels of classes 0-2 on a random frame size: noise (diagonal contacts everywhere), blocks, rings nested
    in rings (regions in holes) or scattered pixels; regions touch the frame's edges."""
    height, width = (int(v) for v in rng.integers(1, 48, 2))
    if kind == 0:
        return rng.choice(3, (height, width), p=[p := rng.random(), (1 - p) / 2, (1 - p) / 2]).astype(np.uint8)
    if kind == 1:
        blocks = rng.integers(0, 3, (-(-height // 4), -(-width // 4))).astype(np.uint8)
        return np.kron(blocks, np.ones((4, 4), np.uint8))[:height, :width].copy()
    label = np.zeros((height, width), np.uint8)
    if kind == 2:  # rectangle outlines with rectangles inside, some overlapping
        for _ in range(int(rng.integers(1, 6))):
            y0, x0 = int(rng.integers(0, height)), int(rng.integers(0, width))
            y1, x1 = int(rng.integers(y0, height)), int(rng.integers(x0, width))
            cv2.rectangle(label, (x0, y0), (x1, y1), int(rng.integers(1, 3)), thickness=1)
            if y1 - y0 > 3 and x1 - x0 > 3:
                label[(y0 + y1) // 2, (x0 + x1) // 2] = 1
        return label
    label.flat[rng.integers(0, height * width, int(rng.integers(0, 10)))] = 1
    return label


def test_the_weight_map_equals_the_one_every_regions_box_gives() -> None:
    rng = np.random.default_rng(0)
    nested = 0
    for case in range(2000):
        label = _labels(rng, case % 4)
        foreground = (label != BACKGROUND).astype(np.uint8)
        regions = cv2.connectedComponents(foreground, connectivity=8)[0] - 1
        borders = len(cv2.findContours(foreground, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)[0])
        nested += borders < regions
        np.testing.assert_array_equal(object_weight_map(label, BACKGROUND), _every_regions_map(label, BACKGROUND))
    assert nested > 20  # regions inside others' holes were among the cases
