from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.regions.training import DecisionTrainingConfig, train_decision_network
from tests.support.motion import panning


def threshold_segment(image: np.ndarray) -> np.ndarray:
    return (image.mean(axis=2) > 128).astype(np.uint8)


@pytest.mark.parametrize("target", ["student", "truth"])
def test_samples_targets_and_report_on_small_scenes(target: str) -> None:
    config = DecisionTrainingConfig(presets=("a", "b", "c"), seeds=(3000,), frames=6, ages=(1, 3), max_key_age=3,
                                    epochs=5, validation_preset="b", target=target,
                                    spliced=True)
    steps = {"a": 1, "b": 6, "c": 1}  # b moves faster: its warped labels agree less

    def scene(preset: str, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        frames = panning(config.frames, step=steps[preset])
        # c's truth is the student's labels inverted: segmenting is always wrong there, warping never worse
        return frames, [threshold_segment(f) ^ (preset == "c") for f in frames]

    logged: list[str] = []
    network, report = train_decision_network(scene, threshold_segment, config, logged.append)
    assert report["samples"] == 4 * (6 - 3) * 2 * 4  # (presets + spliced) x frames t x ages x regions
    assert {p: d["samples"] for p, d in report["per_preset"].items()} == {"a": 24, "b": 24, "c": 24, "spliced": 24}
    assert 0.9 < report["per_preset"]["a"]["target_mean"] <= 1.0
    assert report["per_preset"]["b"]["target_mean"] < report["per_preset"]["a"]["target_mean"]
    # against the student, c's warped labels agree as a's; against the truth, warping costs nothing there
    assert (report["per_preset"]["c"]["target_mean"] == 1.0) == (target == "truth")
    assert report["validation"]["held_out"]["samples"] == 24
    assert len(logged) == 4
    assert network.scores(np.zeros((2, network.feature_mean.numel()), dtype=np.float32)).shape == (2,)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"seeds": (7,)}, "seeds >= 3000"),
    ({"ages": (1, 20)}, "key ages"),
    ({"frames": 10}, "more than 15 frames"),
    ({"validation_preset": "nope"}, "validation preset"),
    ({"target": "teacher"}, "unknown target"),
])
def test_bad_training_config(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DecisionTrainingConfig(**kwargs)
