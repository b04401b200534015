"""Background canvases from photographs."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.backgrounds import CATEGORIES, make_background


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


def test_each_background_set_draws_on_its_own_photos_only() -> None:
    from shadowtutor_lab.scenes.backgrounds import BACKGROUND_SETS
    from shadowtutor_lab.scenes.photos import HELD_OUT_PHOTOS, PHOTOS
    from shadowtutor_lab.scenes.textures import RECIPES

    def photos_of(name: str) -> set[str]:
        backdrops, grounds = BACKGROUND_SETS[name]
        assert set(backdrops) == set(grounds) == set(CATEGORIES)
        return {s.photo for surfaces in (*backdrops.values(), *grounds.values()) for s in surfaces}

    assert photos_of("training") <= set(PHOTOS)
    assert photos_of("held-out") == set(HELD_OUT_PHOTOS)  # every held-out photo is used, none other
    assert {photo for recipe in RECIPES.values() for photo, _ in recipe.photos} <= set(PHOTOS)  # sprites too


@pytest.mark.parametrize("category", CATEGORIES)
def test_held_out_canvases(category: str, held_out_photos: dict[str, object]) -> None:
    canvas = make_background(np.random.default_rng(1), category, (200, 120), 50.0, backgrounds="held-out")
    assert canvas.shape == (120, 200, 3) and canvas.std() > 8
    training = make_background(np.random.default_rng(1), category, (200, 120), 50.0)
    assert np.abs(canvas.astype(int) - training).mean() > 10  # other photos, not the same canvas


def test_an_unknown_background_set_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown background set 'moon'.*held-out"):
        make_background(np.random.default_rng(0), "people", (100, 100), 40.0, backgrounds="moon")
