"""Key-frame rate limits: token buckets on a fake clock, drop then close, state kept per edge id."""

from __future__ import annotations

import pytest

from services.server.access.limits import KeyFrameLimiter, KeyFrameLimits, TokenBucket, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_bursts_then_refills_at_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, capacity=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.4  # 0.8 tokens: not yet one
    assert not bucket.take()
    clock.now += 0.1
    assert bucket.take() and not bucket.take()
    clock.now += 60  # refills to the capacity, never above
    assert bucket.full and sum(bucket.take() for _ in range(10)) == 3
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket(rate=0, capacity=1)


def test_over_the_rate_drops_and_over_twice_the_rate_closes() -> None:
    clock = Clock()
    limiter = KeyFrameLimiter(rate=10.0, burst=5, clock=clock)
    assert [limiter.admit() for _ in range(5)] == [Verdict.ACCEPT] * 5
    assert [limiter.admit() for _ in range(5)] == [Verdict.DROP] * 5  # a burst's worth of drops is tolerated
    assert limiter.admit() is Verdict.CLOSE
    # sending at 1.5 times the rate is throttled, never closed
    fresh = KeyFrameLimiter(rate=10.0, burst=5, clock=clock)
    verdicts = []
    for _ in range(300):  # 20 s at 15 frames/s
        clock.now += 1 / 15
        verdicts.append(fresh.admit())
    assert Verdict.CLOSE not in verdicts and 190 <= verdicts.count(Verdict.ACCEPT) <= 206


def test_limits_belong_to_the_edge_id_and_idle_ones_are_forgotten() -> None:
    clock = Clock()
    limits = KeyFrameLimits(rate=1.0, burst=2, clock=clock)
    assert [limits.admit("cam-1") for _ in range(3)] == [Verdict.ACCEPT, Verdict.ACCEPT, Verdict.DROP]
    assert limits.admit("cam-2") is Verdict.ACCEPT  # another edge has its own budget
    assert limits.admit("cam-1") is Verdict.DROP  # a reconnect of cam-1 gets no fresh budget either
    clock.now += 10  # both buckets full again: the limiters are idle
    limits.admit("cam-3")
    assert len(limits) == 1
    assert KeyFrameLimits(rate=0, burst=1).admit("cam") is Verdict.ACCEPT  # rate 0: no limit


def test_resyncs_have_their_own_budget_and_take_the_key_frames_too() -> None:
    from services.server.access.limits import ResyncLimits

    clock = Clock()
    key_frames = KeyFrameLimits(rate=1.0, burst=2, clock=clock)
    resyncs = ResyncLimits(rate=0.1, burst=2, key_frames=key_frames, clock=clock)
    assert [resyncs.admit("cam-1") for _ in range(3)] == [True, True, False]
    assert key_frames.admit("cam-1") is Verdict.DROP  # the two resyncs took the key-frame burst
    assert resyncs.admit("cam-2")  # another edge has its own
    clock.now += 10.0  # one resync's worth again
    assert resyncs.admit("cam-1") and not resyncs.admit("cam-1")
    unlimited = ResyncLimits(rate=0.1, burst=1, key_frames=KeyFrameLimits(rate=0, burst=1, clock=clock), clock=clock)
    assert unlimited.admit("cam") and not unlimited.admit("cam")  # no key-frame limit: its own still holds
