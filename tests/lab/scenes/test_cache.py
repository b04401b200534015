"""The scene cache: made once, reused while scene.json matches, remade when broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowtutor.scene_store import META_NAME, Scene
from shadowtutor_lab.scenes.cache import CACHE_ENV, cached_scene, default_cache_dir

ARGS = dict(preset="fixed-people", frames=3, seed=4, size=(32, 32), fps=10, progress=False)


def test_a_scene_is_made_once_and_then_reused(tmp_path: Path) -> None:
    first = cached_scene(cache_dir=tmp_path, **ARGS)
    stamp = (first / META_NAME).stat().st_mtime_ns
    again = cached_scene(cache_dir=tmp_path, **ARGS)
    assert again == first and (again / META_NAME).stat().st_mtime_ns == stamp
    assert Scene.open(first).meta.seed == 4
    other = cached_scene(cache_dir=tmp_path, **(ARGS | {"seed": 5}))
    assert other != first and Scene.open(other).meta.seed == 5


def test_a_broken_or_mismatched_cached_scene_is_remade(tmp_path: Path) -> None:
    path = cached_scene(cache_dir=tmp_path, **ARGS)
    (path / "labels" / "000001.png").unlink()
    assert Scene.open(cached_scene(cache_dir=tmp_path, **ARGS)).meta.frames == 3
    meta = json.loads((path / META_NAME).read_text())
    (path / META_NAME).write_text(json.dumps(meta | {"seed": 99}))
    assert Scene.open(cached_scene(cache_dir=tmp_path, **ARGS)).meta.seed == 4


def test_the_cache_directory_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    assert cached_scene(**ARGS).is_relative_to(tmp_path / "elsewhere")
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_dir() == Path.home() / ".cache" / "shadowtutor" / "scenes"
