"""Camera paths: a fixed camera rests, moving ones stay on their canvas while they move."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.camera import CameraParams, camera_path
from shadowtutor_lab.scenes.presets import PRESETS

VIEW = (320, 180)


def test_a_fixed_camera_shows_the_canvas_as_it_is() -> None:
    path = camera_path(CameraParams("fixed"), 50, 30.0, VIEW, np.random.default_rng(0))
    assert path.canvas == VIEW
    for frame in (0, 49):
        np.testing.assert_allclose(path.matrix(frame), np.eye(3), atol=1e-12)


@pytest.mark.parametrize("name", [n for n, p in PRESETS.items() if p.camera.regime != "fixed"])
def test_the_view_stays_on_the_canvas(name: str) -> None:
    path = camera_path(PRESETS[name].camera, 900, 30.0, VIEW, np.random.default_rng(1))
    w, h = VIEW
    corners = np.array([[0, 0, 1], [w, 0, 1], [0, h, 1], [w, h, 1]], np.float64)
    for frame in range(0, 900, 7):
        world = corners @ np.linalg.inv(path.matrix(frame)).T
        assert world[:, 0].min() >= -0.5 and world[:, 0].max() <= path.canvas[0] + 0.5
        assert world[:, 1].min() >= -0.5 and world[:, 1].max() <= path.canvas[1] + 0.5
    moved = np.linalg.norm(path.centre - path.centre[0], axis=1).max()
    assert moved > 0.1 * w


def test_egocentric_shake_is_faster_than_a_moving_pan() -> None:
    def mean_speed(name: str) -> float:
        path = camera_path(PRESETS[name].camera, 300, 30.0, VIEW, np.random.default_rng(2))
        return float(np.linalg.norm(np.diff(path.centre, axis=0), axis=1).mean())

    assert mean_speed("egocentric-people") > 1.5 * mean_speed("moving-people")


def test_a_dwelling_camera_holds_still_between_travels() -> None:
    path = camera_path(PRESETS["patrol-street"].camera, 900, 30.0, VIEW, np.random.default_rng(4))
    speed = np.linalg.norm(np.diff(path.smooth, axis=0), axis=1)
    assert (speed < 1e-6).mean() > 0.2  # dwells: the smooth path stands still
    assert speed.max() > 0.2  # and it travels in between


def test_bad_camera_params() -> None:
    with pytest.raises(ValueError, match="cannot pan"):
        CameraParams("fixed", pan=0.1)
    with pytest.raises(ValueError, match=">= 0"):
        CameraParams("moving", zoom=-0.1)
    with pytest.raises(ValueError, match="unknown camera regime"):
        CameraParams("drone")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive ranges"):
        CameraParams("moving", pan=0.1, dwell_s=(3.0, 1.0))
    with pytest.raises(ValueError, match="only a moving camera dwells"):
        CameraParams("egocentric", pan=0.1, dwell_s=(1.0, 2.0))
