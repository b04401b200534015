"""Make a scene once and reuse it: the demo and the benchmarks ask for scenes by their arguments."""

from __future__ import annotations

import os
from pathlib import Path

from shadowtutor.scene_store import Scene, SceneError, Size
from shadowtutor_lab.scenes.generator import GENERATOR_VERSION, check_size, make_scene

CACHE_ENV = "SHADOWTUTOR_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$SHADOWTUTOR_CACHE_DIR`` if set, else ``~/.cache/shadowtutor/scenes``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "shadowtutor" / "scenes"


def _matches(directory: Path, preset: str, frames: int, seed: int, size: Size, fps: float) -> bool:
    try:
        meta = Scene.open(directory).meta
    except SceneError:
        return False
    return (meta.preset, meta.frames, meta.seed, meta.size, meta.fps) == (preset, frames, seed, size, fps)


def cached_scene(preset: str, frames: int, seed: int, size: Size = (1280, 720), fps: float = 30,
                 cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """The directory of the scene with these arguments, made first if the cache lacks it."""
    size = check_size(size)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = root / f"v{GENERATOR_VERSION}" / f"{preset}_{frames}f_seed{seed}_{size[0]}x{size[1]}_{fps:g}fps"
    if _matches(directory, preset, frames, seed, size, float(fps)):
        return directory
    try:
        return make_scene(preset, frames, seed, directory, size, fps, progress=progress, force=True)
    except (OSError, SceneError):
        # Another process may have finished the same scene meanwhile; its copy is as good.
        if _matches(directory, preset, frames, seed, size, float(fps)):
            return directory
        raise
