"""Choosing the thresholds tau_l (CBinfer, section 3.3).

All thresholds start at zero (labels equal to full-frame inference). Then, layer by layer from the
first to the last, each layer's threshold is swept over increasing candidates, with the thresholds
already chosen for the layers before it in force, and the largest candidate is kept before the pixel
agreement with full-frame labels drops by more than ``step_loss`` against the agreement of the
choices so far ("a clear loss"); the input layer, where compression noise must be told from motion,
has its own allowance ``input_loss``. Feature-map candidates are multiples of the map's standard
deviation on the first sample frame; ``in_conv1`` is in grey levels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shadowtutor.acceleration.change_based.runner import ChangeBasedStudent
from shadowtutor.acceleration.change_based.thresholds import THRESHOLD_NAMES, zero_thresholds
from shadowtutor.models.fast_student import FastStudent, channel_argmax
from shadowtutor.models.student import StudentNet

INPUT_CANDIDATES = (2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
FEATURE_MULTIPLES = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


@dataclass(kw_only=True, frozen=True)
class CalibrationStep:
    """One layer's calibration: the change thresholds tried with the label agreement each gave, and
    the one chosen."""

    layer: str
    # (threshold, agreement)
    tried: tuple[tuple[float, float], ...]
    chosen: float
    agreement: float


def candidates(layer: str, scales: dict[str, float]) -> tuple[float, ...]:
    if layer == "in_conv1":
        return INPUT_CANDIDATES
    return tuple(round(m * scales[layer], 6) for m in FEATURE_MULTIPLES)


def full_frame_labels(
    student: StudentNet, sequences: Sequence[Sequence[np.ndarray]]
) -> list[list[np.ndarray]]:
    fast = FastStudent(student).eval()
    with torch.inference_mode():
        return [
            [
                channel_argmax(fast.logits(torch.from_numpy(np.ascontiguousarray(f)))).numpy()
                for f in seq
            ]
            for seq in sequences
        ]


def agreement(
    student: StudentNet,
    thresholds: dict[str, float],
    sequences: Sequence[Sequence[np.ndarray]],
    references: Sequence[Sequence[np.ndarray]],
) -> float:
    """Mean fraction of pixels labelled as full-frame inference labels them (first frame of each
    sequence excluded)."""
    values = []
    for frames, labels in zip(sequences, references, strict=True):
        runner = ChangeBasedStudent(student, thresholds, refresh_interval=len(frames) + 1)
        for index, (frame, reference) in enumerate(zip(frames, labels, strict=True)):
            out = runner.infer(frame)
            if index:
                values.append(float(np.mean(out == reference)))
    return float(np.mean(values))


def calibrate(
    student: StudentNet,
    sequences: Sequence[Sequence[np.ndarray]],
    step_loss: float = 0.0002,
    input_loss: float = 0.002,
    progress: Callable[[CalibrationStep], None] | None = None,
) -> tuple[dict[str, float], list[CalibrationStep]]:
    """Thresholds for ``student`` from sample ``sequences`` (consecutive frames of fixed
    cameras)."""
    if not sequences or any(len(seq) < 2 for seq in sequences):
        raise ValueError("calibration needs at least one sequence of two or more frames")
    references = full_frame_labels(student, sequences)
    probe = ChangeBasedStudent(student, zero_thresholds())
    probe.infer(np.ascontiguousarray(sequences[0][0]))
    scales = probe.input_scales()
    thresholds = zero_thresholds()
    current = agreement(student, thresholds, sequences, references)
    steps: list[CalibrationStep] = []
    for layer in THRESHOLD_NAMES:
        tried = []
        floor = current - (input_loss if layer == "in_conv1" else step_loss)
        for tau in candidates(layer, scales):
            trial = {**thresholds, layer: tau}
            value = agreement(student, trial, sequences, references)
            tried.append((tau, value))
            if value < floor:
                break
            thresholds, current = trial, value
        step = CalibrationStep(
            layer=layer, tried=tuple(tried), chosen=thresholds[layer], agreement=current
        )
        steps.append(step)
        if progress is not None:
            progress(step)
    return thresholds, steps
