from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.acceleration.regions.training import DecisionTrainingConfig, train_decision_network
from tests.support.motion import panning


def threshold_segment(image: np.ndarray) -> np.ndarray:
    return (image.mean(axis=2) > 128).astype(np.uint8)


def test_samples_targets_and_report_on_small_scenes() -> None:
    config = DecisionTrainingConfig(presets=("a", "b"), seeds=(3000,), frames=6, ages=(1, 3), max_key_age=3,
                                    epochs=5, validation_preset="b")
    steps = {"a": 1, "b": 6}  # b moves faster: its warped labels agree less

    def scene_frames(preset: str, seed: int) -> list[np.ndarray]:
        return panning(config.frames, step=steps[preset])

    logged: list[str] = []
    network, report = train_decision_network(scene_frames, threshold_segment, config, logged.append)
    assert report["samples"] == 2 * (6 - 3) * 2 * 4  # presets x frames t x ages x regions
    assert report["per_preset"]["a"]["samples"] == report["per_preset"]["b"]["samples"] == 24
    assert 0.9 < report["per_preset"]["a"]["target_mean"] <= 1.0
    assert report["validation"]["held_out"]["samples"] == 24
    assert len(logged) == 2
    assert network.scores(np.zeros((2, network.feature_mean.numel()), dtype=np.float32)).shape == (2,)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"seeds": (7,)}, "seeds >= 3000"),
    ({"ages": (1, 20)}, "key ages"),
    ({"frames": 10}, "more than 15 frames"),
    ({"validation_preset": "nope"}, "validation preset"),
])
def test_bad_training_config(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DecisionTrainingConfig(**kwargs)
