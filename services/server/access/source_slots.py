"""Slots bounded per source address and in all: the counting shared by the bounds on what
unauthenticated peers may hold (credential checks, refused connections waiting out their delay).

Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class SourceSlots:
    """At most ``per_source`` slots held by one address and ``total`` by all."""

    def __init__(self, per_source: int, total: int) -> None:
        if per_source < 1 or total < per_source:
            raise ValueError(f"need 1 <= per_source <= total; got {per_source}, {total}")
        self.per_source, self.total = per_source, total
        self._by_source: dict[str, int] = {}
        self._held = 0

    def __len__(self) -> int:
        """Slots held now."""
        return self._held

    def held_by(self, source: str) -> int:
        return self._by_source.get(source, 0)

    def full_for(self, source: str) -> bool:
        """Whether ``source`` (or everyone together) holds as many slots as allowed."""
        return self.held_by(source) >= self.per_source or self._held >= self.total

    @contextmanager
    def held(self, source: str) -> Iterator[None]:
        """Hold one slot of ``source`` for the block (whatever the bounds: check
        :meth:`full_for` first)."""
        self._by_source[source] = self.held_by(source) + 1
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            left = self._by_source[source] - 1
            if left:
                self._by_source[source] = left
            else:
                del self._by_source[source]
