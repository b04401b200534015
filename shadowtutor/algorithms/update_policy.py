"""When the server sends an update, torch-free (settings and the lab's options import it).

Design and measurements: docs/design/update_gating.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# bits per second, kept over this many seconds
DEFAULT_BUDGET_WINDOW_SECONDS = 30.0


@dataclass(frozen=True)
class UpdatePolicy:
    """Which key frames' answers carry the server's training to the edge.

    ``gated`` False: every key frame is answered with an update (the paper's loop). True: the server
    trains on every key frame but sends an update only when the trained student scores at least
    ``min_gain`` (mIoU in [0, 1], mean over the last ``window`` key frames) above the weights the
    edge holds, or when ``max_interval`` key frames have been answered without one and the trained
    student scores higher at all; ``downlink_bps`` (None: none) holds updates back while the bytes
    answered over the last ``budget_seconds`` and the expected update would exceed it. ValueError
    for values out of range.
    """

    gated: bool = False
    min_gain: float = 0.01
    max_interval: int = 8
    window: int = 4
    downlink_bps: float | None = None
    budget_seconds: float = DEFAULT_BUDGET_WINDOW_SECONDS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_gain) and 0.0 <= self.min_gain <= 1.0):
            raise ValueError(f"the update gain is an mIoU in [0, 1], got {self.min_gain!r}")
        if self.max_interval < 1:
            raise ValueError(
                f"the update interval is at least 1 key frame, got {self.max_interval}"
            )
        if self.window < 1:
            raise ValueError(f"the update window is at least 1 key frame, got {self.window}")
        rate = self.downlink_bps
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"a downlink budget is a bit rate > 0, got {rate!r}")
        if not (math.isfinite(self.budget_seconds) and self.budget_seconds >= 1.0):
            raise ValueError(f"a budget's window is at least 1 s, got {self.budget_seconds!r}")

    def to_dict(self) -> dict[str, Any]:
        """The policy as WELCOME's ``params.update_policy`` shows it."""
        return {
            "gated": self.gated,
            "min_gain": self.min_gain,
            "max_interval": self.max_interval,
            "window": self.window,
            "downlink_bps": self.downlink_bps,
            "budget_seconds": self.budget_seconds,
        }
