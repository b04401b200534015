"""Lighting drift and sensor noise."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.lighting import Lighting, LightingParams


def test_gains_drift_slowly_and_noise_has_the_asked_strength() -> None:
    params = LightingParams(brightness=0.15, colour=0.05, trend=0.1, noise=3.0)
    lighting = Lighting(params, 300, 30.0, (64, 48), np.random.default_rng(0))
    assert lighting.gains.shape == (300, 3)
    assert 0.6 < lighting.gains.min() and lighting.gains.max() < 1.4
    assert np.ptp(lighting.gains[:, 0]) > 0.05  # it drifts...
    assert np.abs(np.diff(lighting.gains, axis=0)).max() < 0.02  # ...smoothly
    grey = np.full((48, 64, 3), 100.0, np.float32)
    out = lighting.apply(grey.copy(), 10)
    assert out.dtype == np.uint8
    residual = out.astype(np.float64) - 100.0 * lighting.gains[10]
    assert abs(residual.mean()) < 0.7 and 2.4 < residual.std() < 3.6


def test_frames_do_not_depend_on_the_rendering_order() -> None:
    def make() -> Lighting:
        return Lighting(LightingParams(), 20, 30.0, (32, 16), np.random.default_rng(1))

    image = np.full((16, 32, 3), 80.0, np.float32)
    forwards, backwards = make(), make()
    a = [forwards.apply(image.copy(), i) for i in range(20)]
    b = [backwards.apply(image.copy(), i) for i in reversed(range(20))][::-1]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_bad_lighting_params() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        LightingParams(noise=-1.0)
    with pytest.raises(ValueError, match="below 0.9"):
        LightingParams(brightness=0.5, trend=0.5)
