from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from shadowtutor.acceleration.regions.decision import (
    FEATURE_COUNT,
    DecisionNetwork,
    DecisionNetworkError,
    default_decision_network_path,
    load_decision_network,
    region_features,
    save_decision_network,
)
from shadowtutor.acceleration.regions.flow import FlowEstimator
from tests.support.motion import panning, textured


def features(current: np.ndarray, key: np.ndarray, age: int) -> np.ndarray:
    flow = FlowEstimator()
    return region_features(flow.estimate(flow.small_grey(current), flow.small_grey(key)).part(), age, 15)


def test_features_have_the_agreed_length_and_see_motion() -> None:
    frames = panning(6, step=4)
    still = features(frames[0], frames[0], 1)
    moved = features(frames[5], frames[0], 5)
    assert still.shape == moved.shape == (FEATURE_COUNT,)
    assert still.dtype == np.float32
    magnitude = FEATURE_COUNT - 22  # flow_magnitude_mean follows the 2 x 16 pooled flow values
    assert still[magnitude] < 0.01 < moved[magnitude]


def test_packaged_network_trusts_a_still_region_more_than_an_unrelated_one() -> None:
    network, meta = load_decision_network(default_decision_network_path())
    assert "command" in meta and meta["samples"] > 1000
    frame = textured()
    scores = network.scores(np.stack([features(frame, frame, 1), features(frame, textured(seed=7), 15)]))
    assert ((0 <= scores) & (scores <= 1)).all()
    assert scores[0] > scores[1] + 0.1


def test_save_load_round_trip_and_bad_files(tmp_path: Path) -> None:
    torch.manual_seed(0)
    network = DecisionNetwork()
    path = tmp_path / "dn.pt"
    save_decision_network(network, path, {"note": "test"})
    loaded, meta = load_decision_network(path)
    x = np.random.default_rng(0).random((3, FEATURE_COUNT), dtype=np.float32)
    assert np.allclose(loaded.scores(x), network.scores(x))
    assert meta == {"note": "test"}
    with pytest.raises(DecisionNetworkError, match="train-decision"):
        load_decision_network(tmp_path / "missing.pt")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(DecisionNetworkError, match="not a decision network"):
        load_decision_network(tmp_path / "other.pt")
    saved = torch.load(path, weights_only=True)
    del saved["feature_step"]  # a network of the versions that read every pixel
    torch.save(saved, tmp_path / "every-pixel.pt")
    with pytest.raises(DecisionNetworkError, match="other features than this version computes; make it again"):
        load_decision_network(tmp_path / "every-pixel.pt")


def test_numpy_scores_equal_the_torch_forward() -> None:
    torch.manual_seed(1)
    network = DecisionNetwork()
    network.set_standardisation(torch.randn(50, FEATURE_COUNT) * 3 + 1)
    x = np.random.default_rng(1).normal(size=(5, FEATURE_COUNT)).astype(np.float32)
    with torch.no_grad():
        expected = network(torch.from_numpy(x)).numpy()
    assert np.allclose(network.scores(x), expected, atol=1e-6)


def test_a_corrupt_or_mismatched_file_is_a_decision_network_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(np.random.default_rng(0).bytes(1000))
    with pytest.raises(DecisionNetworkError, match=f"{corrupt} cannot be read as a decision network"):
        load_decision_network(corrupt)
    path = tmp_path / "dn.pt"
    save_decision_network(DecisionNetwork(), path, {})
    saved = torch.load(path, weights_only=True)
    saved["state_dict"] = {"weight": torch.zeros(1)}
    torch.save(saved, path)
    with pytest.raises(DecisionNetworkError, match="holds no weights of this decision network"):
        load_decision_network(path)
