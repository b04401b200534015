"""The change-based student as an edge inference backend, wrapping a full-frame one.

Frames that change too much (and nothing else) go to the wrapped backend (``torch`` or
``onnx``); weight updates go to both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from shadowtutor.acceleration.change_based.runner import (
    DEFAULT_FALLBACK_FRACTION,
    DEFAULT_REFRESH_INTERVAL,
    ChangeBasedStudent,
    ChangeStats,
)
from shadowtutor.acceleration.change_based.thresholds import load_thresholds, scaled
from shadowtutor.models.inference import InferenceBackend
from shadowtutor.models.student import StudentNet


@dataclass(kw_only=True, frozen=True)
class ChangeBasedOptions:
    """``thresholds_file`` None = the built-in thresholds of the packaged student; ``scale``
    multiplies them all."""

    thresholds_file: Path | None = None
    scale: float = 1.0
    fallback_fraction: float = DEFAULT_FALLBACK_FRACTION
    refresh_interval: int = DEFAULT_REFRESH_INTERVAL

    def thresholds(self) -> dict[str, float]:
        return scaled(load_thresholds(self.thresholds_file), self.scale)


class ChangeBasedBackend:
    """``infer`` / ``load_weights`` / ``apply`` like every backend; :attr:`stats` tells what the
    last frame did."""

    def __init__(
        self, base: InferenceBackend, student: StudentNet, options: ChangeBasedOptions
    ) -> None:
        self.base = base
        self.kind = f"{base.kind}+change-based"
        self.runner = ChangeBasedStudent(
            student,
            options.thresholds(),
            base.infer,
            fallback_fraction=options.fallback_fraction,
            refresh_interval=options.refresh_interval,
        )

    @property
    def stats(self) -> ChangeStats:
        return self.runner.stats

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        return self.runner.infer(frame_bgr)

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        self.runner.load_weights(update)
        self.base.load_weights(update)

    apply = load_weights
