from __future__ import annotations

import random

import pytest

from edge_agent.backoff import Backoff


def test_delays_double_with_jitter_and_stop_at_the_cap() -> None:
    backoff = Backoff(0.5, 4.0, random.Random(1))
    delays = [backoff.next_delay() for _ in range(8)]
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # jittered, not lockstep


def test_reset_starts_again_from_the_minimum() -> None:
    backoff = Backoff(1.0, 60.0, random.Random(2))
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert 0.5 <= backoff.next_delay() <= 1.0


def test_many_failures_do_not_overflow() -> None:
    backoff = Backoff(0.1, 2.0)
    backoff.attempts = 10_000
    assert backoff.next_delay() <= 2.0


@pytest.mark.parametrize("minimum, maximum", [(0, 1), (2, 1), (-1, 1)])
def test_bad_bounds_are_rejected(minimum: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="minimum"):
        Backoff(minimum, maximum)
