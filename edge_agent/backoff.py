"""Capped exponential backoff with jitter, for reconnecting to the server and reopening sources."""

from __future__ import annotations

import random


class Backoff:
    """Delays ``minimum * 2**n`` capped at ``maximum``, each scaled by a random factor in [0.5, 1].

    The jitter keeps a fleet of edges from reconnecting in lockstep after a server restart.
    """

    def __init__(self, minimum: float, maximum: float, rng: random.Random | None = None) -> None:
        if not 0 < minimum <= maximum:
            raise ValueError(f"need 0 < minimum <= maximum, got {minimum}, {maximum}")
        self.minimum = minimum
        self.maximum = maximum
        self.attempts = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The delay before the next attempt (and count the attempt)."""
        ceiling = min(self.maximum, self.minimum * 2.0 ** min(self.attempts, 62))
        self.attempts += 1
        return ceiling * self._rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        """After a success: the next failure starts again from ``minimum``."""
        self.attempts = 0
