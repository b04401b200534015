"""What a pre-training run uses: presets, seeds, size, epochs (no heavy imports: the CLI reads it).

Scene seeds are split once for the whole project:

* **0 .. 999** are reserved for *evaluation* scenes (the committed accuracy results use
  seeds below 100); a pre-training configuration with a lower seed is refused;
* **1000 and up** are for *pre-training*: scene ``k`` of a run gets seed ``seed + k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EVAL_SEED_LIMIT = 1000  # seeds below this are reserved for evaluation scenes
DEFAULT_PRESETS = (
    "fixed-animals", "fixed-people", "fixed-street", "moving-animals",
    "moving-people", "moving-street", "egocentric-people",
)


@dataclass(frozen=True)
class PretrainConfig:
    presets: tuple[str, ...] = DEFAULT_PRESETS
    scenes_per_preset: int = 3  # short scenes: many backgrounds and casts rather than long shots
    frames: int = 50  # per scene
    sizes: tuple[tuple[int, int], ...] = ((320, 180),)  # every scene rendered at each: multi-scale training
    epochs: int = 3
    seed: int = EVAL_SEED_LIMIT
    learning_rate: float = 1e-3
    init: Path | None = None  # start from this checkpoint instead of random weights

    def __post_init__(self) -> None:
        if not self.presets:
            raise ValueError("pretraining needs at least one preset")
        if not self.sizes or len(set(self.sizes)) != len(self.sizes):
            raise ValueError(f"pretraining needs one or more distinct frame sizes, got {self.sizes}")
        if self.seed < EVAL_SEED_LIMIT:
            raise ValueError(
                f"pretraining seeds start at {EVAL_SEED_LIMIT}: seeds 0..{EVAL_SEED_LIMIT - 1} are "
                f"reserved for evaluation scenes, got --seed {self.seed}"
            )
        for name in ("scenes_per_preset", "frames", "epochs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")


@dataclass(frozen=True)
class PretrainScene:
    preset: str
    seed: int


def pretrain_scenes(config: PretrainConfig) -> list[PretrainScene]:
    """The (preset, seed) of every pre-training scene, seeds counting up from ``config.seed``."""
    return [
        PretrainScene(preset, config.seed + i * config.scenes_per_preset + j)
        for i, preset in enumerate(config.presets)
        for j in range(config.scenes_per_preset)
    ]


