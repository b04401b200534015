from __future__ import annotations

import numpy as np
import torch
from skimage import data

from shadowtutor.acceleration.change_based.calibrate import agreement, calibrate, full_frame_labels
from shadowtutor.acceleration.change_based.thresholds import THRESHOLD_NAMES, zero_thresholds
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.pretrained import default_student_path


def _noisy_clip(frames: int, seed: int) -> list[np.ndarray]:
    """A fixed camera with sensor noise and one moving patch, 48x64."""
    import cv2

    rng = np.random.default_rng(seed)
    background = cv2.resize(data.coffee()[:, :, ::-1], (64, 48)).astype(int)
    out = []
    for i in range(frames):
        frame = background + rng.integers(-4, 5, background.shape)
        frame[8 + 2 * i: 20 + 2 * i, 10 + 3 * i: 22 + 3 * i] = (40, 200, 90)
        out.append(np.ascontiguousarray(np.clip(frame, 0, 255).astype(np.uint8)))
    return out


def test_calibration_keeps_agreement_within_its_allowance() -> None:
    student = load_student(default_student_path()).model
    torch.manual_seed(0)
    clips = [_noisy_clip(3, 0)]
    steps_seen = []
    thresholds, steps = calibrate(student, clips, step_loss=0.002, input_loss=0.01, progress=steps_seen.append)
    assert tuple(thresholds) == THRESHOLD_NAMES and steps == steps_seen
    assert thresholds["in_conv1"] >= 4  # the sensor noise (4 grey levels) is not a change
    references = full_frame_labels(student, clips)
    assert agreement(student, zero_thresholds(), clips, references) == 1.0
    reached = agreement(student, thresholds, clips, references)
    assert reached == steps[-1].agreement
    assert reached >= 1 - 0.01 - 0.002 * (len(THRESHOLD_NAMES) - 1)
