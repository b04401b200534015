"""Connections refused for bad credentials, waiting out the failure delay before their answer.

A connection whose HELLO token was refused can never be admitted, so it gives up its place among
the unauthenticated connections (``services.server.access.admission``) at once; its answer (the
``unauthorized`` ERROR and the close) still waits ``delay`` seconds, so that a client looping on
bad tokens gets at most one answer per delay and connection. Those waits have bounds of their own:
at most ``per_source`` from one address and ``total`` from all. A refusal over either bound is
answered at once: what an address holds stays bounded, and it cannot take the places of connections
that may still authenticate.

Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

import asyncio


class RefusalWaits:
    """The waits of refused connections, bounded per source address and in all."""

    def __init__(self, delay: float, per_source: int, total: int) -> None:
        if delay < 0 or per_source < 1 or total < per_source:
            raise ValueError(
                f"need delay >= 0 and 1 <= per_source <= total; got {delay}, {per_source}, {total}"
            )
        self.delay, self.per_source, self.total = delay, per_source, total
        self._by_source: dict[str, int] = {}
        self._count = 0

    def __len__(self) -> int:
        """Refused connections waiting now."""
        return self._count

    def waiting_from(self, source: str) -> int:
        return self._by_source.get(source, 0)

    async def wait(self, source: str) -> bool:
        """Sleep ``delay`` before a refusal from ``source`` is answered; False (at once) when
        ``source`` or the whole table is at its bound."""
        if self.waiting_from(source) >= self.per_source or self._count >= self.total:
            return False
        self._by_source[source] = self.waiting_from(source) + 1
        self._count += 1
        try:
            await asyncio.sleep(self.delay)
        finally:
            self._count -= 1
            left = self._by_source[source] - 1
            if left:
                self._by_source[source] = left
            else:
                del self._by_source[source]
        return True
