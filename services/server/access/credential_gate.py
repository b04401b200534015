"""Credential checks off the event loop, on a small thread pool of their own, bounded per address
and in all.

A check of a presented token (an administrator's bearer token, an edge's HELLO token) may cost
a scrypt hash; it runs here and never in asyncio's default pool, where frame decoding runs.
:class:`CredentialGate` admits at most ``per_source`` checks from one address and ``total`` in
all, queued or running; a check over either bound is not run (:data:`BUSY`). A failed check
(or one not run) is answered only after ``failure_delay`` seconds, spent asleep on the event
loop: a client that loops on bad credentials waits that long for each answer, so that no
volume of bad credentials from a bounded number of connections takes more than a bounded share
of the server. The delay holds no thread and no place in the bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from services.server.access.source_slots import SourceSlots

T = TypeVar("T")


class _Busy:
    """The marker of a check not run: its address or the gate was at its bound."""

    def __repr__(self) -> str:
        return "BUSY"


BUSY: Final = _Busy()


class CredentialGate:
    """Runs credential checks on ``workers`` threads, at most ``per_source`` per address and
    ``total`` in all."""

    def __init__(
        self,
        name: str,
        workers: int = 2,
        per_source: int = 4,
        total: int = 16,
        failure_delay: float = 1.0,
    ) -> None:
        if workers < 1 or per_source < 1 or total < per_source or failure_delay < 0:
            raise ValueError(
                f"need workers >= 1, 1 <= per_source <= total and failure_delay >= 0; got "
                f"{workers}, {per_source}, {total}, {failure_delay}"
            )
        self.per_source, self.total, self.failure_delay = per_source, total, failure_delay
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._slots = SourceSlots(per_source, total)
        # checks not run because of a bound, so far
        self.refused = 0

    @property
    def held(self) -> int:
        """Checks admitted and not finished (queued or running)."""
        return len(self._slots)

    async def run(self, source: str, check: Callable[..., T], *args: object) -> T | _Busy:
        """``check(*args)`` on the gate's pool, or :data:`BUSY` at once when ``source`` or the gate
        is full.

        Call it from the event loop's thread (the counts are not locked)."""
        if self._slots.full_for(source):
            self.refused += 1
            return BUSY
        with self._slots.held(source):
            return await asyncio.get_running_loop().run_in_executor(self._pool, check, *args)

    async def after_failure(self) -> None:
        """Wait ``failure_delay`` seconds before a refusal is answered."""
        await asyncio.sleep(self.failure_delay)

    def close(self) -> None:
        """Stop the pool (checks running finish; none start)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
