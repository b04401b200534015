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

from services.server.access.source_slots import SourceSlots


class RefusalWaits:
    """The waits of refused connections, bounded per source address and in all."""

    def __init__(self, delay: float, per_source: int, total: int) -> None:
        if delay < 0:
            raise ValueError(f"need delay >= 0; got {delay}")
        self.delay = delay
        self._slots = SourceSlots(per_source, total)

    def __len__(self) -> int:
        """Refused connections waiting now."""
        return len(self._slots)

    def waiting_from(self, source: str) -> int:
        return self._slots.held_by(source)

    async def wait(self, source: str) -> bool:
        """Sleep ``delay`` before a refusal from ``source`` is answered; False (at once) when
        ``source`` or the whole table is at its bound."""
        if self._slots.full_for(source):
            return False
        with self._slots.held(source):
            await asyncio.sleep(self.delay)
        return True
