"""Smooth noise and bouncing motion."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.signals import bounce, dwell_clock, smooth_noise


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


def test_a_dwell_clock_travels_and_holds_still_in_turn() -> None:
    clock = dwell_clock(np.random.default_rng(3), 900, 30.0, travel_s=(1.0, 3.0), dwell_s=(1.5, 4.0))
    speed = np.diff(clock) * 30.0  # seconds of motion per second
    assert clock[0] == 0.0 and speed.min() >= 0.0 and speed.max() <= 1.0 + 1e-9
    still, moving = speed < 0.01, speed > 0.99
    assert 0.25 < still.mean() < 0.75 and 0.2 < moving.mean() < 0.7
    starts = np.flatnonzero(still[1:] & ~still[:-1])
    assert len(starts) >= 3  # several dwells in 30 s
    np.testing.assert_array_equal(clock, dwell_clock(np.random.default_rng(3), 900, 30.0, (1.0, 3.0), (1.5, 4.0)))


def test_smooth_noise_on_a_clock_stands_still_with_it() -> None:
    clock = np.repeat(np.arange(10) / 30.0, 3)  # every instant held for 3 frames
    signal = smooth_noise(np.random.default_rng(0), 30, 30.0, (2.0, 5.0), clock=clock)
    np.testing.assert_array_equal(signal[0::3], signal[1::3])
    np.testing.assert_array_equal(signal[0::3], smooth_noise(np.random.default_rng(0), 10, 30.0, (2.0, 5.0)))
