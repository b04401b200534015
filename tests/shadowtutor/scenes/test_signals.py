"""Smooth noise and bouncing motion."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.scenes.signals import bounce, smooth_noise


def test_smooth_noise_is_bounded_smooth_and_seeded() -> None:
    a = smooth_noise(np.random.default_rng(0), 600, 30.0, (2.0, 5.0))
    assert a.shape == (600,) and np.abs(a).max() <= 1.0 and a.std() > 0.1
    assert np.abs(np.diff(a)).max() < 0.15  # no jumps between frames
    np.testing.assert_array_equal(a, smooth_noise(np.random.default_rng(0), 600, 30.0, (2.0, 5.0)))


@pytest.mark.parametrize("velocity", [3.0, -3.0])
def test_bounce_reflects_off_the_walls(velocity: float) -> None:
    position = bounce(5.0, velocity, 0.0, 10.0, 40)
    np.testing.assert_allclose(position[:2], [5.0, 5.0 + velocity])
    assert position.min() >= 0.0 and position.max() <= 10.0
    assert position.min() <= 1.0 and position.max() >= 9.0  # it reaches both walls
    steps = np.abs(np.diff(position))
    assert steps.max() <= 3.0 + 1e-9 and np.isclose(steps, 3.0).mean() > 0.5


def test_bounce_needs_a_room() -> None:
    with pytest.raises(ValueError, match="low < high"):
        bounce(0.0, 1.0, 2.0, 2.0, 5)
