"""Benchmark scenes with exact ground truth, generated from real photographs.

``make_scene`` writes a scene, ``cached_scene`` makes one once and reuses it, ``Scene.open``
reads one; the on-disk format is documented in :mod:`shadowtutor.scene_store`.
"""

from shadowtutor.scene_store import Scene, SceneError, SceneMeta
from shadowtutor_lab.scenes.cache import cached_scene
from shadowtutor_lab.scenes.generator import SceneRenderer, make_scene
from shadowtutor_lab.scenes.presets import PRESETS, ScenePreset

__all__ = ["PRESETS", "Scene", "SceneError", "SceneMeta", "ScenePreset", "SceneRenderer", "cached_scene",
           "make_scene"]
