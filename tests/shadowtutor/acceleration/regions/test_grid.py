from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.acceleration.regions.grid import RegionConfigError, RegionGrid, crop, grid_shape, inner


@pytest.mark.parametrize(("regions", "shape"), [(1, (1, 1)), (2, (1, 2)), (4, (2, 2)), (6, (2, 3)), (5, (1, 5)),
                                                (9, (3, 3))])
def test_grid_is_as_square_as_possible(regions: int, shape: tuple[int, int]) -> None:
    assert grid_shape(regions) == shape


@pytest.mark.parametrize("regions", [0, -4])
def test_zero_regions_is_a_clear_error(regions: int) -> None:
    with pytest.raises(RegionConfigError, match="regions must be a positive integer"):
        grid_shape(regions)


def test_boxes_tile_the_frame_exactly_once() -> None:
    grid = RegionGrid(width=641, height=359, regions=6, margin=16)
    cover = np.zeros((359, 641), dtype=np.int32)
    for box in grid.boxes:
        cover[box[1]:box[3], box[0]:box[2]] += 1
    assert (cover == 1).all()


def test_margins_are_clipped_and_context_holds_them() -> None:
    grid = RegionGrid(width=640, height=360, regions=4, margin=32)
    assert grid.boxes[0] == (0, 0, 320, 180)
    assert grid.margin_box(0) == (0, 0, 352, 212)
    assert grid.margin_box(3) == (288, 148, 640, 360)
    assert grid.context_box([0, 1]) == (0, 0, 640, 212)
    context = grid.context_box([3])
    image = np.arange(360 * 640).reshape(360, 640)
    assert (crop(crop(image, context), inner(grid.boxes[3], context)) == crop(image, grid.boxes[3])).all()


def test_bad_margin_and_tiny_frame_are_errors() -> None:
    with pytest.raises(RegionConfigError, match="margin"):
        RegionGrid(width=640, height=360, regions=4, margin=-1)
    with pytest.raises(RegionConfigError, match="cannot hold"):
        RegionGrid(width=2, height=2, regions=9)
