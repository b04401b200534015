"""A small scene on disk, made once for the scene tests that read one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def small_scene_args() -> dict[str, Any]:
    return dict(preset="fixed-street", frames=12, seed=3, size=(160, 90), fps=10)


@pytest.fixture(scope="session")
def small_scene(tmp_path_factory: pytest.TempPathFactory, small_scene_args: dict[str, Any]) -> Path:
    from shadowtutor_lab.scenes.generator import make_scene

    return make_scene(out=tmp_path_factory.mktemp("scenes") / "small", progress=False, **small_scene_args)
