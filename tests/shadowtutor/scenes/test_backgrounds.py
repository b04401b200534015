"""Background canvases from photographs."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.scenes.backgrounds import CATEGORIES, make_background


@pytest.mark.parametrize("category", CATEGORIES)
def test_canvases_have_a_backdrop_and_a_ground(category: str) -> None:
    for seed in range(3):
        canvas = make_background(np.random.default_rng(seed), category, (200, 120), horizon=50.0)
        assert canvas.shape == (120, 200, 3) and canvas.dtype == np.uint8
        assert canvas.std() > 8  # textured, not flat
        sky, ground = canvas[:40].astype(np.float64), canvas[70:].astype(np.float64)
        assert sky.std() > 3 and ground.std() > 3
    again = make_background(np.random.default_rng(2), category, (200, 120), horizon=50.0)
    np.testing.assert_array_equal(canvas, again)


def test_bad_background_arguments() -> None:
    with pytest.raises(ValueError, match="unknown scene category 'space'"):
        make_background(np.random.default_rng(0), "space", (100, 100), 40.0)
    with pytest.raises(ValueError, match="horizon"):
        make_background(np.random.default_rng(0), "people", (100, 100), 120.0)
