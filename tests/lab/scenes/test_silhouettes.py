"""The class silhouettes: inside their box, standing on the ground, and articulated."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.painter import Painter
from shadowtutor_lab.scenes.sprites import PHASES, SPECS


def draw(name: str, phase: float, height: int = 200) -> np.ndarray:
    spec = SPECS[name]
    look = spec.palette(np.random.default_rng(0))
    p = Painter(height, spec.aspect)
    for _, draw_layer in spec.layers:
        draw_layer(p, phase, look)
    return p.mask


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_figure_fits_its_box_and_stands_on_the_ground(name: str) -> None:
    for k in range(PHASES):
        mask = draw(name, k / PHASES) > 0
        rows = np.flatnonzero(mask.any(axis=1))
        cols = np.flatnonzero(mask.any(axis=0))
        assert mask.mean() > 0.08, "a figure, not a speck"
        assert rows[0] > 0 and cols[0] > 0 and cols[-1] < mask.shape[1] - 1, "clipped by the sprite box"
        if not SPECS[name].flies:
            assert rows[-1] >= mask.shape[0] - 12, "walks on the ground, does not float"


@pytest.mark.parametrize("name", ["person", "bicycle", "bird", "dog", "horse", "elephant", "giraffe"])
def test_limbs_wings_and_pedals_move_through_the_cycle(name: str) -> None:
    masks = [draw(name, k / PHASES) > 0 for k in range(PHASES)]
    changed = max(float((masks[0] ^ m).mean()) for m in masks[1:])
    assert changed > 0.01


def test_a_walking_person_swings_the_legs_apart_and_together() -> None:
    def stride(phase: float) -> int:  # width of the leg region near the feet
        cols = np.flatnonzero(draw("person", phase)[185:195].any(axis=0))
        return int(cols[-1] - cols[0])

    assert stride(0.25) > 2 * stride(0.0)
