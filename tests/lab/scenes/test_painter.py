"""Silhouette drawing primitives: binary masks, colours where the shapes are, sprite units."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.painter import Painter


def test_shapes_land_where_the_sprite_units_say() -> None:
    p = Painter(100, 2.0)
    assert (p.width, p.height) == (200, 100)
    p.polygon([(0.1, 0.1), (0.3, 0.1), (0.3, 0.3), (0.1, 0.3)], (10, 20, 30))
    assert p.mask[20, 20] == 255 and p.mask[5, 5] == 0 and p.mask[35, 20] == 0
    np.testing.assert_array_equal(p.colour[20, 20], [10, 20, 30])
    p.circle((1.5, 0.5), 0.1, (1, 2, 3))
    assert p.mask[50, 150] == 255 and p.mask[50, 141] == 255 and p.mask[50, 162] == 0
    assert set(np.unique(p.mask)) == {0, 255}


def test_capsules_have_round_ends_and_the_last_shape_sets_the_colour() -> None:
    p = Painter(100, 1.0)
    p.capsule((0.2, 0.5), (0.8, 0.5), 0.2, (255, 0, 0))
    assert p.mask[50, 12] == 255 and p.mask[50, 88] == 255  # the caps reach past the end points
    assert p.mask[41, 11] == 0  # ...but round, not square
    p.ring((0.5, 0.5), 0.3, 0.04, (0, 0, 255))
    np.testing.assert_array_equal(p.colour[50, 80], [0, 0, 255])
    np.testing.assert_array_equal(p.colour[50, 50], [255, 0, 0])
    assert p.mask[50, 60] == 255


def test_tiny_or_degenerate_canvases_are_refused() -> None:
    with pytest.raises(ValueError, match="height >= 4"):
        Painter(2, 1.0)
    with pytest.raises(ValueError, match="aspect > 0"):
        Painter(10, 0.0)
