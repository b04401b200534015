from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.algorithms.scene_cut import CutDetector, thumbnail


def _street(shift: int, seed: int = 0) -> np.ndarray:
    """A 720p frame of large blocks, moved ``shift`` pixels to the right (a panning camera)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (9, 16, 3), dtype=np.uint8).repeat(80, axis=0).repeat(80, axis=1)
    return np.roll(base, shift, axis=1)


def test_a_thumbnail_is_small_grey_and_scaled_to_one() -> None:
    thumb = thumbnail(np.full((720, 1280, 3), 255, np.uint8))
    assert thumb.shape == (18, 32) and thumb.dtype == np.float32
    assert np.allclose(thumb, 1.0)


def test_camera_motion_is_no_cut_and_a_new_scene_is() -> None:
    detector = CutDetector(0.08)
    frames = [_street(4 * i) for i in range(10)] + [_street(0, seed=1)]
    cuts = [detector.is_cut(frame) for frame in frames]
    assert cuts == [False] * 10 + [True]


def test_the_first_frame_and_a_new_size_are_no_cut() -> None:
    detector = CutDetector(0.01)
    assert detector.change(np.zeros((36, 64, 3), np.uint8)) == 0.0
    assert detector.change(np.full((36, 64, 3), 255, np.uint8)) == pytest.approx(1.0)


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5])
def test_a_threshold_outside_zero_to_one_is_refused(threshold: float) -> None:
    with pytest.raises(ValueError, match="cut threshold"):
        CutDetector(threshold)
