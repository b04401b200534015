"""Per-edge key-frame rate limits (a token bucket for accepted frames and one for dropped
frames), and per-edge resync limits.

An edge may send ``rate`` key frames per second on average, with bursts of ``burst``. A key
frame without a token is dropped before it is decoded (a non-fatal ``rate_limited`` ERROR).
Dropped frames draw on a second bucket of the same size and rate; when that one is empty too
(the edge keeps sending at more than twice its rate), the session is closed (fatal
``rate_limited``, 1008). A RESYNC_REQUEST (answered with full weights) takes a token from a
bucket of its own and, when key frames are limited, one from the key-frame bucket too; a
refused one gets a non-fatal ``rate_limited`` ERROR and never closes the session. The buckets
belong to the edge id, not the connection, so that a reconnect does not refill them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum


class TokenBucket:
    """``capacity`` tokens, refilled continuously at ``rate`` per second; starts full."""

    def __init__(
        self, rate: float, capacity: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or capacity < 1:
            raise ValueError(f"need rate > 0 and capacity >= 1, got {rate} and {capacity}")
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = capacity
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self) -> bool:
        """Take one token if there is one."""
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    @property
    def full(self) -> bool:
        self._refill()
        return self._tokens >= self.capacity


class Verdict(Enum):
    """What the key-frame limiter says of one key frame: accept it, drop it with a non-fatal
    ``rate_limited`` error, or close the connection."""

    ACCEPT = "accept"
    # non-fatal rate_limited
    DROP = "drop"
    # fatal rate_limited
    CLOSE = "close"


class KeyFrameLimiter:
    """One edge's pair of buckets."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.accepted = TokenBucket(rate, burst, clock)
        self.dropped = TokenBucket(rate, burst, clock)

    def admit(self) -> Verdict:
        if self.accepted.take():
            return Verdict.ACCEPT
        return Verdict.DROP if self.dropped.take() else Verdict.CLOSE

    @property
    def idle(self) -> bool:
        """Both buckets full: indistinguishable from a new limiter, so it may be forgotten."""
        return self.accepted.full and self.dropped.full


class KeyFrameLimits:
    """The limiters by edge id; ``rate`` 0 turns limiting off. Idle limiters are forgotten
    (losslessly)."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._limiters: dict[str, KeyFrameLimiter] = {}

    def admit(self, edge_id: str) -> Verdict:
        """The verdict on one more key frame from ``edge_id``."""
        if self.rate <= 0:
            return Verdict.ACCEPT
        return self._limiter(edge_id).admit()

    def take(self, edge_id: str) -> bool:
        """Take one token of ``edge_id``'s accepted key frames for something as costly (True
        when there is one, or no limit); a refusal does not count as a dropped key frame."""
        if self.rate <= 0:
            return True
        return self._limiter(edge_id).accepted.take()

    def _limiter(self, edge_id: str) -> KeyFrameLimiter:
        limiter = self._limiters.get(edge_id)
        if limiter is None:
            self._forget_idle()
            limiter = self._limiters[edge_id] = KeyFrameLimiter(self.rate, self.burst, self._clock)
        return limiter

    def _forget_idle(self) -> None:
        for edge_id in [e for e, limiter in self._limiters.items() if limiter.idle]:
            del self._limiters[edge_id]

    def __len__(self) -> int:
        return len(self._limiters)


class ResyncLimits:
    """RESYNC_REQUESTs by edge id: ``burst`` at once, refilled at ``rate`` per second, each also
    charged to ``key_frames`` (see the module's docstring). Full buckets are forgotten
    (losslessly)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        key_frames: KeyFrameLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst = rate, burst
        self._key_frames = key_frames
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def admit(self, edge_id: str) -> bool:
        """Whether one more resync of ``edge_id`` is served now."""
        bucket = self._buckets.get(edge_id)
        if bucket is None:
            for idle in [e for e, b in self._buckets.items() if b.full]:
                del self._buckets[idle]
            bucket = self._buckets[edge_id] = TokenBucket(self.rate, self.burst, self._clock)
        return bucket.take() and self._key_frames.take(edge_id)

    def __len__(self) -> int:
        return len(self._buckets)
