"""Room for WebSocket connections that have not been admitted yet, bounded per source address and in
all.

A connection to ``/v1/edge`` is *unauthenticated* from its upgrade until its HELLO is accepted
(token checked). Such connections are bounded: at most ``per_source`` from one address and
``total`` from all. The sessions of admitted edges are not counted here (they have their own
limit, ``max_sessions``), so an edge that gets through its HELLO always finds a slot.

When a new connection finds its address (or the whole table) full, the oldest *idle* one of
that address (or of the address holding the most) is evicted to make room: idle means it has
sent no message yet. So a peer holding idle sockets open cannot keep an edge out: the edge's
connection takes the place of the oldest of them, and once its HELLO has arrived it is no
longer evictable. A connection is refused (``None``) only when every candidate is busy, i.e.
has a HELLO being checked.

Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

SOURCE_FULL, TABLE_FULL, EVICTED = "source_full", "unauthenticated_full", "evicted"


@dataclass(kw_only=True, eq=False)
class Ticket:
    """One unauthenticated connection's place; ``evict`` is called (once) if it must make room."""

    source: str
    evict: Callable[[], None] = field(repr=False)
    order: int = 0
    idle: bool = True

    def busy(self) -> None:
        """Its first message has arrived: it is not evicted any more."""
        self.idle = False


class Admission:
    """The unauthenticated connections by source; see the module's docstring for the rules."""

    def __init__(
        self,
        per_source: int,
        total: int,
        on_change: Callable[[int], None] = lambda n: None,
        *,
        on_refusal: Callable[[str], None] = lambda reason: None,
    ) -> None:
        if per_source < 1 or total < 1:
            raise ValueError(f"need per_source >= 1 and total >= 1, got {per_source} and {total}")
        self.per_source = per_source
        self.total = total
        self._on_change = on_change
        self._on_refusal = on_refusal
        self._by_source: dict[str, list[Ticket]] = {}
        self._count = 0
        self._order = itertools.count()

    def __len__(self) -> int:
        return self._count

    def held_by(self, source: str) -> int:
        return len(self._by_source.get(source, ()))

    def enter(self, source: str, evict: Callable[[], None]) -> Ticket | str:
        """A place for a new connection from ``source`` (evicting an idle one if need be), or why
        there is none."""
        if self.held_by(source) >= self.per_source:
            if not self._evict_oldest_idle(self._by_source[source]):
                self._on_refusal(SOURCE_FULL)
                return SOURCE_FULL
        elif self._count >= self.total:
            fullest = sorted(self._by_source.values(), key=len, reverse=True)
            if not any(self._evict_oldest_idle(tickets) for tickets in fullest):
                self._on_refusal(TABLE_FULL)
                return TABLE_FULL
        ticket = Ticket(source=source, evict=evict, order=next(self._order))
        self._by_source.setdefault(source, []).append(ticket)
        self._count += 1
        self._on_change(self._count)
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """The connection was admitted or ended; its place is free (again calling it is
        harmless)."""
        tickets = self._by_source.get(ticket.source)
        if tickets is None or ticket not in tickets:
            return
        tickets.remove(ticket)
        if not tickets:
            del self._by_source[ticket.source]
        self._count -= 1
        self._on_change(self._count)

    def _evict_oldest_idle(self, tickets: list[Ticket]) -> bool:
        idle = [t for t in tickets if t.idle]
        if not idle:
            return False
        victim = min(idle, key=lambda t: t.order)
        self.leave(victim)
        self._on_refusal(EVICTED)
        victim.evict()
        return True
