"""Fixtures for the edge agent's tests: the stand-in server (tests/support/stand_in_server.py), a full disk."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stand_in_server import StandInServer


@pytest.fixture
def stand_in() -> Iterator[StandInServer]:
    """A started stand-in for the real server (the end-to-end tests use the real one)."""
    server = StandInServer().start()
    yield server
    if server._thread.is_alive():
        server.kill()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a full file system: a 4 KiB tmpfs filled up (when this runs as root and may mount), else
    a directory whose label files are symlinks to /dev/full, which fails every write with ENOSPC."""
    directory = tmp_path / "labels"
    directory.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(directory)], capture_output=True
    ).returncode == 0
    if mounted:
        with contextlib.suppress(OSError), open(directory / "filler", "wb") as filler:
            filler.write(b"x" * 8192)
    else:
        for i in range(100):
            (directory / f"{i:06d}.png").symlink_to("/dev/full")
    try:
        yield directory
    finally:
        if mounted:
            subprocess.run(["umount", str(directory)], check=True)
