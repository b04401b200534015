"""Turnaround percentiles and memory growth of the load report."""

from __future__ import annotations

import pytest

from shadowtutor_lab.stress.load_stats import memory_growth, turnaround


def test_turnaround_percentiles_interpolate_between_ranks_in_milliseconds() -> None:
    seconds = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms
    t = turnaround(seconds)
    assert t.count == 100
    assert t.mean_ms == pytest.approx(50.5)
    assert t.p50_ms == pytest.approx(50.5)
    assert t.p95_ms == pytest.approx(95.05)
    assert t.p99_ms == pytest.approx(99.01)
    assert t.max_ms == pytest.approx(100.0)


def test_turnaround_of_one_value_and_of_none() -> None:
    one = turnaround([0.25])
    assert (one.p50_ms, one.p99_ms, one.max_ms) == (250.0, 250.0, 250.0)
    empty = turnaround([])
    assert empty.count == 0 and empty.p95_ms is None and empty.to_dict()["max_ms"] is None


@pytest.mark.parametrize("bad", [[-0.1], [float("nan")], [float("inf")]])
def test_turnaround_refuses_impossible_values(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="finite and non-negative"):
        turnaround(bad)


def test_memory_growth_compares_the_means_of_the_first_and_last_quarters() -> None:
    times = list(range(0, 101))  # a window 0..100: quarters [0, 25] and [75, 100]
    values = [1000.0 if t <= 25 else 1100.0 if t < 75 else 1200.0 for t in times]
    growth = memory_growth(times, values, 0.0, 100.0)
    assert growth is not None
    assert (growth.first_samples, growth.last_samples) == (26, 26)
    assert growth.first_quarter_bytes == 1000.0 and growth.last_quarter_bytes == 1200.0
    assert growth.growth_bytes == 200.0 and growth.growth_fraction == pytest.approx(0.2)
    assert growth.to_dict()["growth_bytes"] == 200.0


def test_memory_growth_ignores_samples_outside_the_window() -> None:
    growth = memory_growth([-5, 0, 10, 30, 40, 45], [1e9, 10.0, 10.0, 20.0, 20.0, 9e9], 0.0, 40.0)
    assert growth is not None and growth.growth_bytes == 10.0


def test_memory_growth_needs_a_sample_in_each_quarter() -> None:
    assert memory_growth([0.0, 1.0], [1.0, 2.0], 0.0, 100.0) is None
    with pytest.raises(ValueError, match="2 times but 1 values"):
        memory_growth([0.0, 1.0], [1.0], 0.0, 1.0)
    with pytest.raises(ValueError, match="empty window"):
        memory_growth([0.0], [1.0], 1.0, 1.0)
