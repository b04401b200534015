"""Fixtures for the edge agent's tests: the stand-in server (tests/support/stand_in_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stand_in_server import StandInServer


@pytest.fixture
def stand_in() -> Iterator[StandInServer]:
    """A started stand-in for the real server (the end-to-end tests use the real one)."""
    server = StandInServer().start()
    yield server
    if server._thread.is_alive():
        server.kill()
