"""Surface detail maps cut from the photographs."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.textures import RECIPES, detail_map


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_detail_maps_vary_around_one(name: str) -> None:
    detail = detail_map(np.random.default_rng(0), name, (40, 30))
    assert detail.shape == (30, 40, 3) and detail.dtype == np.float32
    assert 0.6 < float(detail.mean()) < 1.3 and detail.std() > 0.01
    if not RECIPES[name].colour:
        np.testing.assert_array_equal(detail[:, :, 0], detail[:, :, 2])  # luminance only


def test_a_giraffe_has_dark_patches() -> None:
    detail = detail_map(np.random.default_rng(0), "giraffe", (120, 120))[:, :, 0]
    dark = detail < 0.8
    assert 0.3 < dark.mean() < 0.75
