"""The region labeller's bookkeeping, with a simple real segmenter (a grey threshold) standing in for
the student: the student's own labels are covered by tests/edge_agent/test_runtime.py."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.acceleration.regions.decision import DecisionNetwork
from shadowtutor.acceleration.regions.flow import FlowEstimator, FlowResult
from shadowtutor.acceleration.regions.grid import RegionConfigError
from shadowtutor.acceleration.regions.labeller import (
    FLOW,
    SEGMENT,
    BudgetPolicy,
    DecisionPolicy,
    FixedIntervalPolicy,
    FlowPathConfig,
    RegionLabeller,
)
from tests.support.motion import panning, textured


class ThresholdSegmenter:
    """Labels 1 where the grey level is above 128; records the shape of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, image: np.ndarray) -> np.ndarray:
        self.calls.append(image.shape[:2])
        return (image.mean(axis=2) > 128).astype(np.uint8)


class ConstantNetwork(DecisionNetwork):
    """A decision network that gives every region the same score (to drive the threshold)."""

    def __init__(self, score: float) -> None:
        super().__init__()
        self.score = score

    def scores(self, features: np.ndarray) -> np.ndarray:
        return np.full(len(features), self.score, dtype=np.float32)


def test_fixed_interval_segments_every_k_frames_and_warps_between() -> None:
    segment = ThresholdSegmenter()
    labeller = RegionLabeller(segment, FixedIntervalPolicy(3))
    frames = panning(7)
    paths = []
    for frame in frames:
        labels = labeller.label(frame)
        paths.append(labeller.last.paths)
        assert labels.shape == frame.shape[:2]
        agreement = (labels == segment(frame)).mean()
        assert agreement == 1.0 if labeller.last.paths[0] == SEGMENT else agreement > 0.9
    assert [p[0] for p in paths] == [SEGMENT, FLOW, FLOW, SEGMENT, FLOW, FLOW, SEGMENT]
    assert all(len(set(p)) == 1 for p in paths)  # whole-frame context: the regions share a path
    assert labeller.last.key_ages == (0, 0, 0, 0)


def test_decision_threshold_picks_the_path_and_key_age_is_bounded() -> None:
    trusting = RegionLabeller(ThresholdSegmenter(), DecisionPolicy(ConstantNetwork(0.9), 0.8), max_key_age=2)
    doubting = RegionLabeller(ThresholdSegmenter(), DecisionPolicy(ConstantNetwork(0.7), 0.8), max_key_age=2)
    trusted, doubted = [], []
    for frame in panning(6):
        trusting.label(frame)
        doubting.label(frame)
        trusted.append(trusting.last.paths[0])
        doubted.append(doubting.last.paths[0])
        assert trusting.last.scores[0] in (None, pytest.approx(0.9))
    assert trusted == [SEGMENT, FLOW, FLOW, SEGMENT, FLOW, FLOW]  # a key older than 2 frames is segmented
    assert doubted == [SEGMENT] * 6


class AgeingNetwork(DecisionNetwork):
    """Scores that fall with the key age feature (the last one): a warp error growing at ``rate`` per frame."""

    def __init__(self, rate: float, max_age: int) -> None:
        super().__init__()
        self.rate, self.max_age = rate, max_age
        self.calls = 0

    def scores(self, features: np.ndarray) -> np.ndarray:
        self.calls += 1
        return (1.0 - self.rate * np.round(features[:, -1] * self.max_age)).astype(np.float32)


@pytest.mark.parametrize(("rate", "spacing"), [(0.005, 6), (0.03, 3), (0.08, 2)])
def test_budget_rule_spaces_keys_by_how_fast_the_predicted_error_grows(rate: float, spacing: int) -> None:
    # losses 1r, 2r, 3r, ... summed within a budget of 0.1: 5, 2 and 1 warped frames between keys
    network = AgeingNetwork(rate, max_age=15)
    labeller = RegionLabeller(ThresholdSegmenter(), BudgetPolicy(network, 0.1), max_key_age=15)
    paths = []
    for frame in panning(12):
        labeller.label(frame)
        paths.append(labeller.last.paths[0])
    keys = [t for t, path in enumerate(paths) if path == SEGMENT]
    assert keys == list(range(0, 12, spacing))


def test_budget_rule_looks_ahead_instead_of_computing_a_flow_it_would_not_use() -> None:
    network = AgeingNetwork(0.03, max_age=15)
    labeller = RegionLabeller(ThresholdSegmenter(), BudgetPolicy(network, 0.1), max_key_age=15)
    for frame in panning(9):  # keys at 0, 3, 6: frames 3 and 6 are due (0.03 + 0.06 spent, last loss 0.06)
        labeller.label(frame)
    assert network.calls == 6  # flow and a score on the 6 warped frames only
    surprised = RegionLabeller(ThresholdSegmenter(), BudgetPolicy(ConstantNetwork(0.5), 0.1), max_key_age=15)
    for frame in panning(3):  # a loss of 0.5 at once (a cut): segmented on the spot, never warped
        surprised.label(frame)
        assert surprised.last.paths == (SEGMENT,) * 4


def test_budget_rule_per_region_books_each_regions_own_loss() -> None:
    network = ConstantNetwork(0.95)
    policy = BudgetPolicy(network, 0.1)
    take, scores = policy.take_flow(np.zeros((2, 1)), np.array([1, 1]), np.array([0.0, 0.06]), together=False)
    assert take.tolist() == [True, False] and scores is not None
    take, _ = policy.take_flow(np.zeros((2, 1)), np.array([1, 1]), np.array([0.0, 0.06]), together=True)
    assert take.tolist() == [True, True]  # the mean: 0.03 + 0.05 <= 0.1


def test_a_weight_update_makes_every_key_stale() -> None:
    labeller = RegionLabeller(ThresholdSegmenter(), FixedIntervalPolicy(10))
    frames = panning(4)
    labeller.label(frames[0])
    labeller.label(frames[1])
    assert labeller.last.paths == (FLOW,) * 4
    labeller.invalidate_keys()
    labeller.label(frames[2])
    assert labeller.last.paths == (SEGMENT,) * 4
    labeller.label(frames[3])
    assert labeller.last.paths == (FLOW,) * 4


def test_with_a_margin_only_the_needed_regions_are_segmented() -> None:
    segment = ThresholdSegmenter()
    network = ConstantNetwork(0.9)
    labeller = RegionLabeller(segment, DecisionPolicy(network, 0.5), regions=4, margin=16)
    frames = panning(3)
    labeller.label(frames[0])
    assert segment.calls == [(180, 320)]  # no keys yet: the whole frame
    labeller.keys[3] = None  # region 3 (bottom right) lost its key
    labels = labeller.label(frames[1])
    assert labeller.last.paths == (FLOW, FLOW, FLOW, SEGMENT)
    assert segment.calls[-1] == (90 + 16, 160 + 16)  # region 3 and its margin, nothing else
    assert (labels[90:, 160:] == ThresholdSegmenter()(frames[1])[90:, 160:]).mean() > 0.95


def test_a_new_frame_size_starts_over() -> None:
    labeller = RegionLabeller(ThresholdSegmenter(), FixedIntervalPolicy(5))
    labeller.label(panning(1)[0])
    labeller.label(textured(120, 160))
    assert labeller.last.paths == (SEGMENT,) * 4


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"regions": 0}, "regions must be a positive integer"),
    ({"threshold": 1.5}, "threshold"),
    ({"max_key_age": 0}, "max key age"),
    ({"budget": 0.0}, "budget must be > 0"),
])
def test_bad_flow_path_config_is_a_clear_error(kwargs: dict, match: str) -> None:
    with pytest.raises(RegionConfigError, match=match):
        FlowPathConfig(**kwargs)


def test_config_names_the_decision_rule() -> None:
    network = ConstantNetwork(0.9)
    assert FlowPathConfig().load_network() is None  # the default: a fixed key interval, no network
    fixed = FlowPathConfig().policy(None)
    assert isinstance(fixed, FixedIntervalPolicy) and fixed.interval == 3
    assert "fixed key interval of 3" in FlowPathConfig().rule
    assert isinstance(FlowPathConfig(interval=None).policy(network), DecisionPolicy)
    with pytest.raises(RegionConfigError, match="need a decision network"):
        FlowPathConfig(interval=None).policy(None)
    budget = FlowPathConfig(budget=0.2, interval=None).policy(network)
    assert isinstance(budget, BudgetPolicy) and budget.budget == 0.2
    with pytest.raises(RegionConfigError, match="budget must be > 0"):
        BudgetPolicy(network, -1.0)


def test_config_builds_a_labeller_with_the_packaged_network() -> None:
    labeller = FlowPathConfig(threshold=0.0, regions=6, max_key_age=4, interval=None).build(ThresholdSegmenter())
    for frame in panning(3):
        labeller.label(frame)
    assert labeller.last.paths == (FLOW,) * 6
    assert all(0 <= s <= 1 for s in labeller.last.scores)


class CountingFlow(FlowEstimator):
    """The real DIS flow, counting its estimates."""

    def __init__(self) -> None:
        super().__init__()
        self.estimates = 0

    def estimate(self, current: np.ndarray, key: np.ndarray) -> FlowResult:
        self.estimates += 1
        return super().estimate(current, key)


def _border_strip_agreement(labeller: RegionLabeller, frames: list[np.ndarray]) -> float:
    """Agreement with the segmenter, on the frame's second frame, in the 12 pixels left of the vertical region
    border of the top row: what the camera's pan brought into region 0 from region 1."""
    labeller.label(frames[0])
    labels = labeller.label(frames[1])
    assert labeller.last.paths == (FLOW,) * 4
    strip = (slice(0, 90), slice(160 - 12, 160))
    return float((labels[strip] == ThresholdSegmenter()(frames[1])[strip]).mean())


def test_content_entering_a_region_is_warped_from_its_neighbour() -> None:
    frames = panning(2, step=12)  # content moves 12 px left per frame, across the regions' borders
    whole_frame = _border_strip_agreement(RegionLabeller(ThresholdSegmenter(), FixedIntervalPolicy(2)), frames)
    region_alone = _border_strip_agreement(
        RegionLabeller(ThresholdSegmenter(), DecisionPolicy(ConstantNetwork(0.9), 0.5), margin=0), frames)
    assert whole_frame > 0.97
    assert region_alone < whole_frame - 0.05  # a flow over the region alone has nothing to match there


def test_regions_sharing_a_path_share_one_flow_estimate() -> None:
    shared, apart = CountingFlow(), CountingFlow()
    together = RegionLabeller(ThresholdSegmenter(), DecisionPolicy(ConstantNetwork(0.9), 0.5), flow=shared)
    per_region = RegionLabeller(ThresholdSegmenter(), DecisionPolicy(ConstantNetwork(0.9), 0.5), margin=16,
                                flow=apart)
    for frame in panning(3):
        together.label(frame)
        per_region.label(frame)
    assert together.last.paths == per_region.last.paths == (FLOW,) * 4
    assert shared.estimates == 2  # one per warped frame, over the whole frame
    assert apart.estimates == 8  # one per region and frame, each over its region and margin
    key = per_region.keys[3]
    assert key is not None and key.context == (160 - 16, 90 - 16, 320, 180) and key.region == (160, 90, 320, 180)
