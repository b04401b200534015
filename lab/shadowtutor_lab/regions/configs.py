"""The settings of the region benchmark and of the decision network's training, without their
dependencies (torch, numpy), so that ``shadowtutor bench regions`` and ``shadowtutor regions
train-decision`` take their flags' defaults from here at no import cost.

Both are valid once made (else ``ValueError``). A :class:`RegionBenchConfig` has at least one decision
setting and two fixed intervals (the baseline is interpolated between them). A
:class:`DecisionTrainingConfig`'s seeds are >= :data:`TRAIN_SEED_FLOOR` (lower seeds stay for
benchmarks), its key ages lie in ``1..max_key_age`` and below ``frames``, its validation preset is one
of at least two presets, and its target one of :data:`TARGETS`.
"""

from __future__ import annotations

from dataclasses import dataclass

TRAIN_SEED_FLOOR = 3000
DEFAULT_PRESETS = ("moving-street", "moving-people", "moving-animals", "egocentric-people",
                   "fixed-street", "fixed-people", "fixed-animals")
DEFAULT_AGES = (1, 2, 3, 4, 6, 8, 11, 15)
TARGETS = ("student", "truth")


@dataclass(frozen=True)
class DecisionTrainingConfig:
    presets: tuple[str, ...] = DEFAULT_PRESETS
    seeds: tuple[int, ...] = (3000,)
    frames: int = 90
    size: tuple[int, int] = (640, 360)
    regions: int = 4
    max_key_age: int = 15
    ages: tuple[int, ...] = DEFAULT_AGES
    epochs: int = 400
    learning_rate: float = 3e-3
    weight_decay: float = 1e-3
    validation_preset: str = "moving-people"  # its scenes are held out of training, for the report
    target: str = "student"  # "truth" was measured no better (docs/results/regions/decision_study.md)
    spliced: bool = False  # also a clip spliced from the other presets' scenes, with hard cuts
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.seeds) < TRAIN_SEED_FLOOR:
            raise ValueError(f"decision-network training scenes use seeds >= {TRAIN_SEED_FLOOR} "
                             f"(lower ones are kept for benchmarks), got {list(self.seeds)}")
        if not self.ages or min(self.ages) < 1 or max(self.ages) > self.max_key_age:
            raise ValueError(f"key ages must lie in 1..{self.max_key_age}, got {list(self.ages)}")
        if self.frames <= max(self.ages):
            raise ValueError(f"scenes need more than {max(self.ages)} frames, got {self.frames}")
        if self.validation_preset not in self.presets or len(self.presets) < 2:
            raise ValueError("the validation preset must be one of at least two presets")
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}: choose one of {', '.join(TARGETS)}")


@dataclass(frozen=True)
class RegionBenchConfig:
    decisions: tuple[tuple[float, int], ...] = ((0.95, 4), (0.96, 4), (0.97, 3), (0.97, 4), (0.98, 6))  # (thr, max age)
    budgets: tuple[tuple[float, int], ...] = ((0.03, 8), (0.05, 8), (0.08, 8))  # (budget, max age)
    intervals: tuple[int, ...] = (2, 3, 4, 5, 6)
    regions: int = 4
    warmup: int = 3

    def __post_init__(self) -> None:
        if not self.decisions or len(self.intervals) < 2:
            raise ValueError("need at least one decision setting and two fixed intervals (to interpolate)")
