"""Exact labels: a known sprite at a known place, occlusion by z-order, anti-aliasing on the image only."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from shadowtutor_lab.scenes.compose import Placement, footprint, paste, sprite_affine

H, W = 40, 60
BACKGROUND = 8


def square_sprite(size: int, colour: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    mask = np.full((size, size), 255, np.uint8)
    texture = np.empty((size, size, 3), np.uint8)
    texture[:] = colour
    return texture, mask


def blank() -> tuple[np.ndarray, np.ndarray]:
    return np.full((H, W, 3), 50.0, np.float32), np.full((H, W), BACKGROUND, np.uint8)


def translation(x: float, y: float) -> np.ndarray:
    return np.array([[1.0, 0.0, x], [0.0, 1.0, y]])


def test_a_sprite_at_an_integer_offset_is_copied_exactly() -> None:
    image, label = blank()
    texture, mask = square_sprite(10, (200, 100, 0))
    mask[:3, :3] = 0  # a notch, to see the mask (not the box) is used
    texture[:3, :3] = 0
    paste(image, label, Placement(2, texture, mask, translation(12, 5)))
    expected = np.full((H, W), BACKGROUND, np.uint8)
    expected[5:15, 12:22][mask > 0] = 2
    np.testing.assert_array_equal(label, expected)
    np.testing.assert_array_equal(image[label == 2], np.tile([200.0, 100.0, 0.0], (int((label == 2).sum()), 1)))
    np.testing.assert_array_equal(image[label == BACKGROUND], 50.0)


def test_the_top_most_object_owns_the_overlap() -> None:
    under, over = square_sprite(12, (0, 0, 255)), square_sprite(12, (255, 0, 0))
    image, label = blank()
    paste(image, label, Placement(0, *under, translation(10, 10)))
    paste(image, label, Placement(4, *over, translation(16, 14)))
    assert (label[14:22, 16:22] == 4).all()  # the overlap
    assert (label[10:14, 10:22] == 0).all() and (label[14:22, 10:16] == 0).all()  # what stays visible
    assert (label[22:26, 16:28] == 4).all()
    assert set(np.unique(label)) == {0, 4, BACKGROUND}
    np.testing.assert_array_equal(image[18, 18], [255, 0, 0])

    image, label = blank()  # the other z-order
    paste(image, label, Placement(4, *over, translation(16, 14)))
    paste(image, label, Placement(0, *under, translation(10, 10)))
    assert (label[14:22, 16:22] == 0).all()


@pytest.mark.parametrize("angle", [17.0, 45.0, 120.0])
def test_rotated_sprites_have_hard_label_edges_and_soft_image_edges(angle: float) -> None:
    image, label = blank()
    texture, mask = square_sprite(16, (250, 250, 250))
    affine = sprite_affine((8, 8), (30, 20), 1.0, angle, mirror=False)[:2]
    paste(image, label, Placement(5, texture, mask, affine))
    assert set(np.unique(label)) == {5, BACKGROUND}  # no mixed class values
    coverage = cv2.warpAffine(mask, affine, (W, H), flags=cv2.INTER_LINEAR) / 255.0
    np.testing.assert_array_equal(label == 5, coverage >= 0.5)
    assert abs(int((label == 5).sum()) - 16 * 16) <= 16  # the area survives the rotation
    edge = (coverage > 0.05) & (coverage < 0.95)
    assert edge.any() and (image[edge][:, 0] > 50.5).all() and (image[edge][:, 0] < 249.5).all()


def test_sprite_affine_puts_the_anchor_on_the_position_and_mirrors_about_it() -> None:
    for mirror in (False, True):
        m = sprite_affine((5.0, 10.0), (30.0, 20.0), 2.0, 30.0, mirror)
        np.testing.assert_allclose(m @ [5.0, 10.0, 1.0], [30.0, 20.0, 1.0])
    right = sprite_affine((5.0, 10.0), (0.0, 0.0), 1.0, 0.0, mirror=False) @ [9.0, 10.0, 1.0]
    left = sprite_affine((5.0, 10.0), (0.0, 0.0), 1.0, 0.0, mirror=True) @ [9.0, 10.0, 1.0]
    assert right[0] == pytest.approx(4.0) and left[0] == pytest.approx(-4.0)
    up = sprite_affine((0.0, 0.0), (0.0, 0.0), 1.0, 90.0, mirror=False) @ [1.0, 0.0, 1.0]
    np.testing.assert_allclose(up[:2], [0.0, -1.0], atol=1e-12)  # counter-clockwise on screen


def test_sprites_partly_or_wholly_off_screen() -> None:
    texture, mask = square_sprite(10, (9, 9, 9))
    image, label = blank()
    paste(image, label, Placement(1, texture, mask, translation(-5, 35)))
    assert (label == 1).sum() == 5 * 5 and (label[35:, :5] == 1).all()
    assert footprint(Placement(1, texture, mask, translation(100, 100)), (W, H)) is None
    image, label = blank()
    paste(image, label, Placement(1, texture, mask, translation(100, 100)))
    assert (label == BACKGROUND).all()
