"""Fixtures of the end-to-end tests: the shared generated scene, and the processes a test starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.e2e import SCENE_FRAMES, make_scene
from tests.support.processes import ManagedProcess


@pytest.fixture(scope="session")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated street scene (fixed camera, 320x180); its labels are the server's teacher."""
    return make_scene(tmp_path_factory.mktemp("scenes") / "fixed-street", SCENE_FRAMES)


@pytest.fixture
def processes() -> Iterator[list[ManagedProcess]]:
    """Processes a test starts; each is stopped at the end (SIGTERM, then SIGKILL), whatever happened."""
    started: list[ManagedProcess] = []
    yield started
    for process in started:
        process.stop()
