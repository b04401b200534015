from __future__ import annotations

import pytest

from shadowtutor.config.rates import parse_rate
from shadowtutor_lab.evaluation.operating_point import (
    Point,
    Target,
    pareto_front,
    parse_percent,
    recommend,
)


def point(threshold: float, min_stride: int, key_frames: float, miou: float, uplink: float = 1e5) -> Point:
    return Point(threshold, min_stride, key_frames, miou, uplink, mean_stride=10.0, mean_steps=4.0)


POINTS = [
    point(0.8, 8, 12.5, 66.0, 3e5),
    point(0.5, 8, 4.0, 63.0, 1e5),
    point(0.65, 8, 6.0, 65.0, 1.5e5),
    point(0.5, 16, 3.0, 58.0, 0.8e5),
    point(0.65, 16, 4.0, 62.0, 1e5),  # dominated by (0.5, 8)
    point(0.8, 4, 12.5, 64.0, 3e5),  # dominated by (0.8, 8)
]


def test_pareto_front_keeps_the_undominated_points_by_key_frames() -> None:
    front = [(p.threshold, p.min_stride) for p in pareto_front(POINTS)]
    assert front == [(0.5, 16), (0.5, 8), (0.65, 8), (0.8, 8)]


def test_target_key_frames_takes_the_best_miou_within_it() -> None:
    rec = recommend(POINTS, Target("key_frames", 5.0))
    assert rec.met and (rec.point.threshold, rec.point.min_stride) == (0.5, 8)


def test_target_miou_takes_the_fewest_key_frames_reaching_it() -> None:
    rec = recommend(POINTS, Target("miou", 65.0))
    assert rec.met and (rec.point.threshold, rec.point.min_stride) == (0.65, 8)


def test_uplink_budget_takes_the_best_miou_that_fits() -> None:
    rec = recommend(POINTS, Target("uplink", parse_rate("160kbps")))
    assert rec.met and (rec.point.threshold, rec.point.min_stride) == (0.65, 8)


@pytest.mark.parametrize(("target", "expected"), [
    (Target("key_frames", 1.0), (0.5, 16)),  # nearest: the fewest key frames
    (Target("miou", 90.0), (0.8, 8)),  # nearest: the best mIoU
    (Target("uplink", 1.0), (0.5, 16)),  # nearest: the least uplink
])
def test_an_unreachable_target_gives_the_nearest_point_and_says_so(target: Target, expected: tuple) -> None:
    rec = recommend(POINTS, target)
    assert not rec.met
    assert (rec.point.threshold, rec.point.min_stride) == expected
    assert rec.to_dict()["met"] is False


def test_ties_go_to_the_first_point_given() -> None:
    first, second = point(0.8, 8, 4.0, 60.0), point(0.5, 8, 4.0, 60.0)
    assert recommend([first, second], Target("key_frames", 5.0)).point is first
    assert recommend([second, first], Target("key_frames", 5.0)).point is second


def test_no_points_is_an_error() -> None:
    with pytest.raises(ValueError):
        recommend([], Target("miou", 50.0))


def test_parse_percent() -> None:
    assert parse_percent("5%") == 5.0 and parse_percent("70") == 70.0
    for bad in ("101", "five", "-1%"):
        with pytest.raises(ValueError):
            parse_percent(bad)
