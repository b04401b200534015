from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.acceleration.regions.flow import FLOW_METHODS, FlowEstimator
from tests.support.motion import textured


@pytest.mark.parametrize("method", FLOW_METHODS)
def test_warping_follows_a_translation(method: str) -> None:
    key = textured()
    current = np.roll(key, shift=(8, 12), axis=(0, 1))  # the scene moved 12 px right, 8 px down
    key_labels = np.zeros(key.shape[:2], dtype=np.uint8)
    key_labels[60:120, 100:200] = 5
    true_labels = np.roll(key_labels, shift=(8, 12), axis=(0, 1))
    flow = FlowEstimator(method)
    result = flow.estimate(flow.small_grey(current), flow.small_grey(key))
    warped = flow.warp_labels(key_labels, result)
    inside = (slice(16, -16), slice(16, -16))  # away from the wrapped-around border
    assert (warped[inside] == true_labels[inside]).mean() > 0.97  # DIS: 1.0, Farneback: 0.977
    assert (key_labels[inside] == true_labels[inside]).mean() < 0.95  # warping did something
    assert result.part().residual.mean() < result.part().difference


def test_unknown_method_and_bad_scale() -> None:
    with pytest.raises(ValueError, match="unknown flow method"):
        FlowEstimator("lucas-kanade")
    with pytest.raises(ValueError, match="scale"):
        FlowEstimator(scale=0)


def test_a_part_of_an_estimate_is_that_regions_slice_at_its_step() -> None:
    import cv2

    key = textured()
    current = np.roll(key, shift=(0, 6), axis=(0, 1))
    flow = FlowEstimator()
    grey_now, grey_key = flow.small_grey(current), flow.small_grey(key)
    result = flow.estimate(grey_now, grey_key)
    warped = cv2.remap(grey_key, result.maps, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    residual = np.abs(warped.astype(np.float32) - grey_now)  # over the whole image, then cut
    for step in (1, 4):
        area = (slice(30, 120, step), slice(40, 200, step))
        part = result.part((40, 30, 200, 120), step)
        assert part.size == (160, 90) and part.flow.shape == (len(range(30, 120, step)), len(range(40, 200, step)), 2)
        assert np.array_equal(part.flow, result.flow[area])
        assert np.array_equal(part.residual, residual[area])
        assert part.difference == pytest.approx(float(np.abs(grey_now[area] - grey_key[area].astype(float)).mean()))
    whole = np.abs(grey_now.astype(float) - grey_key).mean()
    assert result.part().difference == pytest.approx(float(whole))
