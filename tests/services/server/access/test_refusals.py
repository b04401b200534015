"""Refused connections waiting out the failure delay: bounded per address and in all."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.server.access.refusals import RefusalWaits


def test_refusals_wait_within_their_bounds_and_are_answered_at_once_beyond() -> None:
    waits = RefusalWaits(delay=0.3, per_source=2, total=3)

    async def scenario() -> tuple[list[bool], float]:
        held = [asyncio.create_task(waits.wait(s)) for s in ("a", "a", "b")]
        await asyncio.sleep(0.05)
        assert len(waits) == 3 and waits.waiting_from("a") == 2
        start = time.monotonic()
        over = [await waits.wait("a"), await waits.wait("c")]  # over the address's bound; over the total
        quick = time.monotonic() - start
        return [*await asyncio.gather(*held), *over], quick

    outcomes, quick = asyncio.run(scenario())
    assert outcomes == [True, True, True, False, False] and quick < 0.1 and len(waits) == 0
    with pytest.raises(ValueError, match="per_source <= total"):
        RefusalWaits(delay=1.0, per_source=4, total=2)
