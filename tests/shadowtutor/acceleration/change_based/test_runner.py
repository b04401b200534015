from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from skimage import data

from shadowtutor.acceleration.change_based.runner import STAGES, ChangeBasedStudent, fused_tail_fits
from shadowtutor.acceleration.change_based.thresholds import THRESHOLD_NAMES, zero_thresholds
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.inference import TorchBackend
from shadowtutor.models.pretrained import default_student_path

HEIGHT, WIDTH = 64, 96


@pytest.fixture(scope="module")
def student():
    return load_student(default_student_path()).model


def _scene(frames: int, seed: int = 0) -> list[np.ndarray]:
    """A static photo with a small patch walking across it: a fixed camera."""
    import cv2

    background = np.ascontiguousarray(cv2.resize(data.astronaut()[:, :, ::-1], (WIDTH, HEIGHT)))
    colour = np.random.default_rng(seed).integers(0, 255, 3)
    out = []
    for i in range(frames):
        frame = background.copy()
        frame[10 + i: 26 + i, 8 + 3 * i: 20 + 3 * i] = colour
        out.append(frame)
    return out


def _modes(runner: ChangeBasedStudent, frames: list[np.ndarray]) -> list[str]:
    """How each frame ran."""
    modes = []
    for frame in frames:
        runner.infer(frame)
        modes.append(runner.stats.mode)
    return modes


def _perturbed(student, keys: list[str], seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    state = student.state_dict()
    return {k: state[k] + 0.05 * state[k].std() * torch.randn(state[k].shape, generator=generator)
            for k in keys}


def test_zero_thresholds_give_full_frame_labels(student) -> None:
    runner = ChangeBasedStudent(student, zero_thresholds())
    full = TorchBackend(student)
    modes = []
    for frame in _scene(6):
        assert np.array_equal(runner.infer(frame), full.infer(frame))
        modes.append(runner.stats.mode)
    assert modes == ["full"] + ["change"] * 5
    assert 0 < runner.stats.changed["in_conv1"] < 0.2  # only the patch moved


@pytest.mark.parametrize("mode", ["partial", "full"])
def test_labels_after_a_weight_update_equal_the_updated_students(student, mode: str) -> None:
    runner = ChangeBasedStudent(student, zero_thresholds())
    frames = _scene(6)
    for frame in frames[:3]:
        runner.infer(frame)
    update = _perturbed(student, student.trainable_keys(mode), seed=3)
    runner.load_weights(update)
    updated = TorchBackend(student)
    updated.load_weights(update)
    for frame in frames[3:]:
        assert np.array_equal(runner.infer(frame), updated.infer(frame))


def test_a_partial_update_keeps_the_front_caches(student) -> None:
    runner = ChangeBasedStudent(student, zero_thresholds())
    frame = _scene(1)[0]
    runner.infer(frame)
    runner.load_weights(_perturbed(student, student.trainable_keys("partial"), seed=4))
    runner.infer(frame)  # the same frame: only the updated back may recompute
    changed = runner.stats.changed
    assert runner.stats.mode == "change"
    assert all(changed[name] == 0 for name in ("in_conv1", "in_conv2", "enc1", "enc2", "enc3", "dec1"))
    assert changed["dec2"] == 1.0 and changed["tail"] == 1.0 and changed["output"] == 1.0
    assert STAGES.index("dec2") == runner.full_from or runner.full_from == len(STAGES)


def test_update_keys_outside_the_student_are_refused(student) -> None:
    runner = ChangeBasedStudent(student, zero_thresholds())
    with pytest.raises(ValueError, match="does not have"):
        runner.load_weights({"nope.weight": torch.zeros(1)})


def test_a_large_change_falls_back_to_the_full_frame_backend(student) -> None:
    full = TorchBackend(student)
    calls = []

    def full_frame(frame: np.ndarray) -> np.ndarray:
        calls.append(1)
        return full.infer(frame)

    runner = ChangeBasedStudent(student, zero_thresholds(), full_frame, fallback_fraction=0.3)
    frames = _scene(3)
    runner.infer(frames[0])
    shifted = np.ascontiguousarray(np.roll(frames[1], 7, axis=1))  # the camera turned
    assert np.array_equal(runner.infer(shifted), full.infer(shifted))
    assert runner.stats.mode == "fallback" and calls == [1, 1]  # the first frame times the fallback once
    turned = np.ascontiguousarray(np.roll(frames[2], 7, axis=1))  # the camera stays there
    assert np.array_equal(runner.infer(turned), full.infer(turned))  # caches rebuilt in full
    assert runner.stats.mode == "full"


def test_thresholds_trade_agreement_for_less_work(student) -> None:
    thresholds = {name: 0.0 for name in THRESHOLD_NAMES}
    exact = ChangeBasedStudent(student, thresholds)
    loose = ChangeBasedStudent(student, {**thresholds, "in_conv1": 40.0, "tail": 1.0, "output": 2.0})
    noisy = [np.clip(f.astype(int) + np.random.default_rng(i).integers(-3, 4, f.shape), 0, 255).astype(np.uint8)
             for i, f in enumerate(_scene(4))]
    for frame in noisy:
        exact.infer(frame)
        loose.infer(frame)
    assert loose.stats.changed["in_conv1"] < exact.stats.changed["in_conv1"]
    assert loose.stats.changed["output"] < exact.stats.changed["output"]


def test_periodic_refresh_and_new_sizes_run_in_full(student) -> None:
    runner = ChangeBasedStudent(student, zero_thresholds(), refresh_interval=2)
    assert _modes(runner, _scene(4)) == ["full", "change", "change", "full"]
    runner.infer(np.zeros((HEIGHT + 8, WIDTH, 3), np.uint8))
    assert runner.stats.mode == "full"


@pytest.mark.parametrize("size", [(68, 100), (90, 160)])  # not multiples of 8: the tail runs unfused
def test_frame_sizes_off_the_fused_tails_blocks_are_exact_at_zero_thresholds_too(student, size) -> None:
    import cv2

    runner = ChangeBasedStudent(student, zero_thresholds())
    full = TorchBackend(student)
    frames = [np.ascontiguousarray(cv2.resize(f, (size[1], size[0]))) for f in _scene(5)]
    for index, frame in enumerate(frames):
        if index == 3:
            update = _perturbed(student, student.trainable_keys("partial"), seed=5)
            runner.load_weights(update)
            full.load_weights(update)
        assert np.array_equal(runner.infer(frame), full.infer(frame))
    assert runner.stats.mode == "change" and not fused_tail_fits(*size)


def test_change_based_frames_slower_than_the_fallback_back_off_to_it(student) -> None:
    frames = _scene(5)
    instant = TorchBackend(student).infer(frames[0])
    runner = ChangeBasedStudent(student, zero_thresholds(), lambda frame: instant, backoff_frames=2)
    # the fallback here costs microseconds: one change-based frame shows it does not pay
    assert _modes(runner, frames) == ["full", "change", "fallback", "fallback", "full"]


def test_the_wait_doubles_while_change_based_frames_keep_not_paying(student) -> None:
    frames = _scene(12)
    instant = TorchBackend(student).infer(frames[0])
    runner = ChangeBasedStudent(student, zero_thresholds(), lambda frame: instant, backoff_frames=1)
    # each try (a full evaluation to rebuild the caches, then one change-based frame) waits twice as long
    assert _modes(runner, frames) == ["full", "change", "fallback", "full", "change", "fallback", "fallback",
                     "full", "change", "fallback", "fallback", "fallback"]


def test_a_cold_first_fallback_call_is_no_yardstick(student) -> None:
    """A backend whose first call is slow (session start, caches) must not make change-based frames look cheap."""
    frames = _scene(5)
    instant = TorchBackend(student).infer(frames[0])
    calls = []

    def cold_then_instant(frame: np.ndarray) -> np.ndarray:
        if not calls:
            time.sleep(0.3)
        calls.append(1)
        return instant

    runner = ChangeBasedStudent(student, zero_thresholds(), cold_then_instant, backoff_frames=2)
    assert _modes(runner, frames) == ["full", "change", "fallback", "fallback", "full"]
    assert runner.fallback_seconds < 0.1


def test_the_fallback_is_timed_again_while_frames_run_change_based(student) -> None:
    frames = _scene(8)
    calls = []

    def counted(frame: np.ndarray) -> np.ndarray:
        calls.append(1)
        time.sleep(0.2)  # far slower than change-based frames: never backed off to
        return frame[:, :, 0]

    runner = ChangeBasedStudent(student, zero_thresholds(), counted, probe_interval=3)
    for frame in frames:
        runner.infer(frame)
    # the warm-up at the first frame, then a probe at the first change-based frame and every third after
    assert len(calls) == 1 + 3
    assert runner.stats.mode == "change"

