"""The scene generator: exact labels through the whole pipeline, determinism, presets, camera, cuts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.scene_store import META_NAME, Scene, SceneError
from shadowtutor_lab.scenes.generator import SceneRenderer, make_scene
from shadowtutor_lab.scenes.presets import PRESETS

BACKGROUND = LVS_CLASSES.index("background")


def normalised_difference(a: np.ndarray, b: np.ndarray, where: np.ndarray) -> float:
    """Mean absolute difference of two frames over ``where``, with each channel's mean divided out
    (so that a global lighting change alone gives ~0)."""
    x, y = a[where].astype(np.float64), b[where].astype(np.float64)
    return float(np.abs(x / x.mean(axis=0) - y / y.mean(axis=0)).mean() * 128)


def test_labels_are_the_z_ordered_coverage_of_every_sprite() -> None:
    renderer = SceneRenderer("fixed-animals", 30, seed=4, size=(320, 180))
    shot = renderer.shot(0)
    overlaps = 0
    for frame in (0, 13, 29):
        placements = shot.placements(frame)
        by_depth = sorted(range(len(shot.tracks)), key=lambda k: shot.tracks[k].depth[frame])
        assert [LVS_CLASSES[p.class_index] for p in placements] == [
            layer.class_name for k in by_depth for layer in shot.sprites[k].layers]
        expected = np.full((180, 320), BACKGROUND, np.uint8)
        covered = np.zeros((180, 320), np.int32)
        for p in placements:  # an independent full-frame warp of each mask, painted far to near
            inside = cv2.warpAffine(p.mask, p.affine, (320, 180), flags=cv2.INTER_LINEAR) >= 128
            expected[inside] = p.class_index
            covered += inside
        np.testing.assert_array_equal(shot.render(frame).label, expected)
        overlaps += int((covered > 1).sum())
    assert overlaps > 0  # the check saw occlusions


def test_same_seed_same_scene_other_seed_other_scene() -> None:
    first = list(SceneRenderer("egocentric-people", 8, seed=11, size=(160, 90)))
    again = list(SceneRenderer("egocentric-people", 8, seed=11, size=(160, 90)))
    other = list(SceneRenderer("egocentric-people", 8, seed=12, size=(160, 90)))
    for a, b in zip(first, again, strict=True):
        assert a.label.tobytes() == b.label.tobytes()
        assert a.image.tobytes() == b.image.tobytes()
    assert any(a.label.tobytes() != c.label.tobytes() for a, c in zip(first, other, strict=True))
    assert first[0].image.dtype == np.uint8 and first[0].image.shape == (90, 160, 3)


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_shows_exactly_the_classes_it_promises(name: str) -> None:
    seen: set[int] = set()
    for frame in SceneRenderer(name, 10, seed=1, size=(320, 180)):
        seen |= set(np.unique(frame.label).tolist())
    assert {LVS_CLASSES[i] for i in seen} == set(PRESETS[name].classes) | {"background"}


@pytest.mark.parametrize("name", list(PRESETS))
def test_moving_cameras_move_and_fixed_ones_do_not(name: str) -> None:
    later = 150 if PRESETS[name].camera.dwell_s else 30  # a dwell lasts up to 4 s: compare across one
    renderer = SceneRenderer(name, later + 1, seed=1, size=(160, 90))
    shot = renderer.shot(0)
    same_view = np.array_equal(shot.background_view(0), shot.background_view(later))
    assert same_view == (PRESETS[name].camera.regime == "fixed")
    a, b = shot.render(0), shot.render(later)
    difference = normalised_difference(a.image, b.image, (a.label == BACKGROUND) & (b.label == BACKGROUND))
    if PRESETS[name].camera.regime == "fixed":
        assert difference < 7  # sensor noise and soft object edges only
    else:
        assert difference > 10


def test_cuts_fall_where_scene_json_says(tmp_path: Path) -> None:
    preset = dataclasses.replace(PRESETS["fixed-people"], cut_interval=10)
    out = make_scene(preset, 25, seed=2, out=tmp_path / "cuts", size=(160, 90), fps=10, progress=False)
    scene = Scene.open(out)
    assert scene.meta.cuts == (10, 20)
    frames = list(scene.frames())
    everywhere = np.ones(frames[0].shape[:2], bool)
    change = [normalised_difference(a, b, everywhere) for a, b in zip(frames[:-1], frames[1:], strict=True)]
    jumps = sorted(int(i) + 1 for i in np.argsort(change)[-2:])
    assert jumps == [10, 20]
    within = max(c for i, c in enumerate(change) if i + 1 not in (10, 20))
    assert min(change[9], change[19]) > 3 * within


@pytest.mark.parametrize("name", list(PRESETS))
def test_one_frame_shots(name: str) -> None:
    preset = dataclasses.replace(PRESETS[name], cut_interval=2)
    frames = list(SceneRenderer(preset, 3, seed=0, size=(64, 36)))  # shots of 2 and 1 frames
    assert len(frames) == 3 and len(list(SceneRenderer(name, 1, seed=0, size=(64, 36)))) == 1


def test_short_scenes_have_no_cut() -> None:
    assert SceneRenderer("moving-street", PRESETS["moving-street"].cut_interval, 0).cuts == ()
    assert SceneRenderer("moving-street", 600, 0).cuts == (240, 480)


def test_the_written_scene_reads_back_exactly(small_scene: Path, small_scene_args: dict) -> None:
    args = dict(small_scene_args)
    renderer = SceneRenderer(args.pop("preset"), args.pop("frames"), args.pop("seed"), **args)
    scene = Scene.open(small_scene)
    assert scene.meta == renderer.meta
    assert len(scene) == renderer.frames == len(list(scene.labels()))
    decoded = list(scene.frames())
    assert len(decoded) == len(scene)
    for index, (rendered, frame) in enumerate(zip(renderer, decoded, strict=True)):
        np.testing.assert_array_equal(scene.label(index), rendered.label)  # labels are lossless
        assert cv2.PSNR(rendered.image, frame) > 25  # the video is lossy but faithful


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(preset="fixed-zebras"), "unknown scene preset 'fixed-zebras'"),
        (dict(frames=0), "frames must be positive"),
        (dict(seed=-1), "seed must be >= 0"),
        (dict(size=(161, 90)), "must be even"),
        (dict(size=(8, 8)), "at least 16x16"),
        (dict(fps=0), "fps must be positive"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(tmp_path: Path, kwargs: dict,
                                                              message: str) -> None:
    args = dict(preset="fixed-people", frames=4, seed=0, out=tmp_path / "out", size=(32, 32), progress=False)
    with pytest.raises(ValueError, match=message):
        make_scene(**(args | kwargs))
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_is_replaced_only_with_force_and_only_if_it_is_a_scene(tmp_path: Path) -> None:
    args = dict(preset="fixed-people", frames=3, size=(32, 32), progress=False)
    out = make_scene(seed=0, out=tmp_path / "scene", **args)
    with pytest.raises(SceneError, match="not empty"):
        make_scene(seed=1, out=out, **args)
    assert Scene.open(out).meta.seed == 0
    make_scene(seed=1, out=out, force=True, **args)
    assert Scene.open(out).meta.seed == 1

    other = tmp_path / "photos"
    other.mkdir()
    (other / "holiday.jpg").write_bytes(b"precious")
    with pytest.raises(SceneError, match="not a scene directory"):
        make_scene(seed=0, out=other, force=True, **args)
    assert (other / "holiday.jpg").read_bytes() == b"precious"

    empty = tmp_path / "empty"
    empty.mkdir()
    assert (make_scene(seed=0, out=empty, **args) / META_NAME).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "photos", "scene"]  # no leftovers


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A full disk cannot be arranged here; a PNG writer that reports failure stands in for it.
    monkeypatch.setattr(cv2, "imwrite", lambda *a, **k: False)
    with pytest.raises(RuntimeError, match="cannot write"):
        make_scene("fixed-people", 3, 0, tmp_path / "scene", size=(32, 32), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_instance_boxes_are_the_visible_extent_of_each_object() -> None:
    # Each box is tight around pixels of its class; the boxes of a class cover all of its pixels.
    for frame in list(SceneRenderer("fixed-people", 40, seed=4, size=(160, 90)))[::13]:
        assert frame.instances.shape[1] == 5 and len(frame.instances)
        covered = np.zeros(frame.label.shape, bool)
        for class_index, x0, y0, x1, y1 in frame.instances:
            inside = frame.label[y0:y1, x0:x1] == class_index
            assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()
            covered[y0:y1, x0:x1] |= inside
        assert (covered == (frame.label != BACKGROUND)).all()


def test_the_written_scene_reads_its_boxes_back(small_scene: Path, small_scene_args: dict) -> None:
    args = dict(small_scene_args)
    renderer = SceneRenderer(args.pop("preset"), args.pop("frames"), args.pop("seed"), **args)
    scene = Scene.open(small_scene)
    for index, rendered in enumerate(renderer):
        np.testing.assert_array_equal(scene.boxes(index), rendered.instances[:, 1:])
    half = (scene.meta.width // 2, scene.meta.height // 2)
    np.testing.assert_allclose(scene.boxes(0, half), renderer.shot(0).render(0).instances[:, 1:] / 2)
