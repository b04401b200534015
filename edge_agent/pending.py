"""A thread-safe one-shot reply slot: the network thread resolves it, the inference thread polls
it."""

from __future__ import annotations

import threading
import time
from typing import Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """The answer to one request; ``None`` means it was lost (link down, server error).

    Satisfies the client loop's ``PendingUpdate`` protocol. Only the first ``resolve`` counts.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._value: T | None = None
        self.submitted_at = time.monotonic()
        self.resolved_at: float | None = None

    @classmethod
    def failed(cls) -> Pending[T]:
        pending: Pending[T] = cls()
        pending.resolve(None)
        return pending

    def resolve(self, value: T | None) -> bool:
        """Set the answer; False when it was already set."""
        with self._lock:
            if self._event.is_set():
                return False
            self._value = value
            self.resolved_at = time.monotonic()
            self._event.set()
            return True

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)

    def result(self) -> T | None:
        if not self._event.is_set():
            raise RuntimeError(
                "result() called before the reply arrived; poll done() or wait() first"
            )
        return self._value
