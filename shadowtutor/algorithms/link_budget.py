"""A camera's byte budget: key frames only while the link's traffic stays within it.

A :class:`LinkBudget` names at most one rate per direction (bits per second, uplink = edge to
server, downlink = server to edge) and the window over which it is kept. A :class:`KeyFrameBudget`
is the client loop's gate (:class:`~shadowtutor.algorithms.client_loop.KeyFrameGate`): asked whether
a key frame may go out now, it says yes only when, in every budgeted direction, the bytes counted
over the last ``window_seconds`` plus what one more key frame is expected to cost fit ``rate / 8 *
window_seconds``. So the key-frame rate falls to what the budget carries, and a key frame the stride
asks for waits (the stride may then exceed MAX_STRIDE).

Time is stream time, the frame index over the source's frame rate: the budget of a camera at
30 FPS is kept per 30 frames labelled, the same on a fast and a slow edge and in the simulated
harness. The expected cost of a key frame, per direction, is the mean of the bytes counted from
one key frame to the next over the last :data:`COST_WINDOW` key frames (its update included,
since the client loop sends the next key frame only after the last update resolved); before the
first such span is known, a key frame is always admitted. The guarantee is therefore about the
measured traffic: bytes over any window exceed the budget only by how much one key frame cost
more than the recent ones.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# key frames whose spans give the expected cost of the next one
COST_WINDOW = 8
MIN_WINDOW_SECONDS = 1.0

# (bytes sent, bytes received) so far on the link; both only grow
ByteTotals = Callable[[], tuple[int, int]]


@dataclass(frozen=True)
class LinkBudget:
    """Rates a camera's link may carry, in bits per second (None: that direction is not
    budgeted)."""

    uplink_bps: float | None = None
    downlink_bps: float | None = None
    window_seconds: float = 30.0

    def __post_init__(self) -> None:
        for name, rate in (("uplink", self.uplink_bps), ("downlink", self.downlink_bps)):
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                raise ValueError(f"a {name} budget is a bit rate > 0, got {rate!r}")
        if not (math.isfinite(self.window_seconds) and self.window_seconds >= MIN_WINDOW_SECONDS):
            raise ValueError(
                f"a budget's window is at least {MIN_WINDOW_SECONDS:g} s, got "
                f"{self.window_seconds!r}"
            )

    @property
    def active(self) -> bool:
        """Whether any direction is budgeted."""
        return self.uplink_bps is not None or self.downlink_bps is not None


@dataclass(frozen=True)
class _Sample:
    """The link's cumulative bytes sent and received at one instant of stream time."""

    seconds: float
    sent: int
    received: int


class KeyFrameBudget:
    """Admits key frames so that each budgeted direction stays within its rate over the window.

    ``totals`` reads the link's cumulative bytes; ``fps`` converts frame indices to stream time;
    ``on_denied`` is called each time a key frame is held back.
    :meth:`allows` is asked at each frame the stride makes a key frame, :meth:`key_frame` is told
    each key frame that went out. Rates over the window are available for metrics through
    :meth:`rates`. Not thread-safe: the client loop's thread calls it.
    """

    def __init__(
        self,
        budget: LinkBudget,
        fps: float,
        totals: ByteTotals,
        *,
        on_denied: Callable[[], None] | None = None,
    ) -> None:
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"a frame rate > 0 is needed to keep a budget, got {fps!r}")
        self.budget = budget
        self.fps = fps
        self._totals = totals
        self._samples: deque[_Sample] = deque()
        self._last_key: _Sample | None = None
        self._spans: deque[tuple[int, int]] = deque(maxlen=COST_WINDOW)
        self._on_denied = on_denied
        self.denied = 0

    def allows(self, frame_index: int) -> bool:
        """Whether a key frame at ``frame_index`` keeps every budgeted direction within its rate."""
        now = self._sample(frame_index)
        if not self._spans:
            return True
        up_cost = sum(span[0] for span in self._spans) / len(self._spans)
        down_cost = sum(span[1] for span in self._spans) / len(self._spans)
        sent, received = self._window_bytes(now)
        fits = self._fits(self.budget.uplink_bps, sent + up_cost)
        fits = fits and self._fits(self.budget.downlink_bps, received + down_cost)
        if not fits:
            self.denied += 1
            if self._on_denied is not None:
                self._on_denied()
        return fits

    def key_frame(self, frame_index: int) -> None:
        """Record that a key frame went out at ``frame_index`` (before its bytes are counted)."""
        now = self._sample(frame_index)
        if self._last_key is not None:
            self._spans.append(
                (now.sent - self._last_key.sent, now.received - self._last_key.received)
            )
        self._last_key = now

    def rates(self, frame_index: int) -> tuple[float, float]:
        """Bits per second sent and received over the window ending at ``frame_index``."""
        now = self._sample(frame_index)
        sent, received = self._window_bytes(now)
        span = min(self.budget.window_seconds, max(now.seconds, 1.0 / self.fps))
        return 8 * sent / span, 8 * received / span

    def _fits(self, rate_bps: float | None, window_bytes: float) -> bool:
        return rate_bps is None or window_bytes <= rate_bps / 8 * self.budget.window_seconds

    def _sample(self, frame_index: int) -> _Sample:
        sent, received = self._totals()
        sample = _Sample(frame_index / self.fps, sent, received)
        if self._samples and self._samples[-1].seconds > sample.seconds:
            raise ValueError(f"frame {frame_index} comes before the last one sampled")
        self._samples.append(sample)
        start = sample.seconds - self.budget.window_seconds
        # keep one sample at or before the window's start: the base its bytes are counted from
        while len(self._samples) >= 2 and self._samples[1].seconds <= start:
            self._samples.popleft()
        return sample

    def _window_bytes(self, now: _Sample) -> tuple[int, int]:
        base = self._samples[0]
        return max(0, now.sent - base.sent), max(0, now.received - base.received)
