"""Object trajectories: on the ground, facing their way, sized by depth, in view of the camera."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.camera import CameraParams, camera_path
from shadowtutor_lab.scenes.motion import HORIZON, depth_scale, make_track
from shadowtutor_lab.scenes.presets import PRESETS
from shadowtutor_lab.scenes.sprites import SPECS

VIEW = (320, 180)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_tracks_stand_on_the_ground_or_fly_above_it(name: str) -> None:
    camera = camera_path(CameraParams("fixed"), 200, 30.0, VIEW, np.random.default_rng(0))
    track = make_track(np.random.default_rng(1), name, camera, 30.0, start_x=0.1, speed=1.0, scale=1.0)
    horizon = HORIZON * VIEW[1]
    np.testing.assert_allclose(track.height, SPECS[name].height * VIEW[1] * depth_scale(track.depth))
    assert track.depth.min() >= 0 and track.depth.max() <= 1
    if SPECS[name].flies:
        assert (track.y - 0.5 * track.height < horizon).all()
    else:
        assert (track.y > horizon).all() and (track.y <= VIEW[1]).all()
    vx = np.gradient(track.x)
    moving = np.abs(vx) > 0.05
    assert moving.mean() > 0.9
    np.testing.assert_array_equal(track.facing[moving], np.sign(vx[moving]))
    assert len(np.unique(np.round(track.phase, 6))) > 50  # the gait cycle runs


def test_subjects_of_a_moving_camera_stay_mostly_in_view() -> None:
    preset = PRESETS["moving-animals"]
    camera = camera_path(preset.camera, 600, 30.0, VIEW, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    for name in preset.classes:
        track = make_track(rng, name, camera, 30.0, start_x=0.0, speed=preset.speed, scale=1.0)
        screen_x = np.array([(camera.matrix(i) @ [track.x[i], track.y[i], 1.0])[0] for i in range(600)])
        assert ((screen_x > 0) & (screen_x < VIEW[0])).mean() > 0.5, name


def test_faster_presets_move_faster() -> None:
    camera = camera_path(CameraParams("fixed"), 100, 30.0, VIEW, np.random.default_rng(0))

    def travelled(speed: float) -> float:
        track = make_track(np.random.default_rng(7), "dog", camera, 30.0, 0.0, speed=speed, scale=1.0)
        return float(np.abs(np.diff(track.x)).sum())

    assert travelled(2.0) == pytest.approx(2 * travelled(1.0), rel=0.02)  # reflections cut corners
