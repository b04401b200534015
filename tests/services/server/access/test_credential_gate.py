"""The credential gate: checks on a pool of their own, bounded per address and in all, refusals delayed."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from services.server.access.credential_gate import BUSY, CredentialGate


def test_checks_run_on_the_gates_own_threads() -> None:
    gate = CredentialGate("gate-test", workers=1)

    async def scenario() -> str:
        return await gate.run("10.0.0.1", lambda: threading.current_thread().name)

    try:
        assert asyncio.run(scenario()).startswith("gate-test")
    finally:
        gate.close()


def test_checks_over_the_bounds_are_not_run() -> None:
    gate = CredentialGate("gate-test", workers=1, per_source=2, total=3)
    release = threading.Event()
    ran: list[str] = []

    def check(source: str) -> str:
        ran.append(source)
        release.wait(5)
        return source

    async def scenario() -> list[object]:
        held = [asyncio.create_task(gate.run(s, check, s)) for s in ("a", "a", "b")]
        await asyncio.sleep(0.05)
        # per address; in all
        over = [await gate.run("a", check, "a"), await gate.run("c", check, "c")]
        assert gate.held == 3 and gate.refused == 2
        release.set()
        return [*await asyncio.gather(*held), *over]

    try:
        assert asyncio.run(scenario()) == ["a", "a", "b", BUSY, BUSY]
        assert sorted(ran) == ["a", "a", "b"] and gate.held == 0
    finally:
        gate.close()


def test_a_failure_is_answered_after_the_delay() -> None:
    gate = CredentialGate("gate-test", failure_delay=0.2)
    start = time.monotonic()
    asyncio.run(gate.after_failure())
    assert time.monotonic() - start >= 0.2
    gate.close()


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="per_source <= total"):
        CredentialGate("gate-test", per_source=5, total=4)
