"""Short frame sequences for the change-based benchmark and calibration: generated scenes or video files.

A clip is named ``PRESET:SEED`` (a generated scene, made once into the scene cache, with ground
truth) or by the path of a video file (no truth), optionally ``@START`` (first frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from shadowtutor.scene_store import Scene
from shadowtutor_lab.scenes.cache import cached_scene
from shadowtutor_lab.scenes.presets import PRESETS

Size = tuple[int, int]


@dataclass
class Clip:
    name: str
    frames: list[np.ndarray]
    truth: list[np.ndarray] | None  # label maps, for generated scenes
    class_names: tuple[str, ...] | None = None


def _split_start(spec: str) -> tuple[str, int]:
    if "@" in spec:
        base, start = spec.rsplit("@", 1)
        if not start.isdigit():
            raise ValueError(f"clip {spec!r}: the part after @ must be a frame number")
        return base, int(start)
    return spec, 0


def load_clip(spec: str, frames: int, size: Size) -> Clip:
    """``frames`` consecutive frames of the clip ``spec``, resized to ``size`` (W, H)."""
    base, start = _split_start(spec)
    preset, _, seed = base.partition(":")
    if preset in PRESETS:
        if not seed.isdigit():
            raise ValueError(f"clip {spec!r}: a generated scene is PRESET:SEED, e.g. fixed-people:1")
        scene = Scene.open(cached_scene(preset, start + frames, int(seed), size, progress=False))
        images = list(scene.frames())[start:start + frames]
        truth = [scene.label(i) for i in range(start, start + frames)]
        return Clip(spec, images, truth, scene.meta.class_names)
    path = Path(base)
    if not path.is_file():
        raise ValueError(f"clip {spec!r} is neither PRESET:SEED (presets: {', '.join(PRESETS)}) nor a video file")
    return Clip(spec, read_video(path, start, frames, size), None)


def read_video(path: Path, start: int, frames: int, size: Size) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        raise ValueError(f"cannot open video {path}")
    images: list[np.ndarray] = []
    try:
        index = 0
        while len(images) < frames:
            ok, image = capture.read()
            if not ok:
                break
            if index >= start:
                if (image.shape[1], image.shape[0]) != size:
                    image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
                images.append(np.ascontiguousarray(image))
            index += 1
    finally:
        capture.release()
    if len(images) < frames:
        raise ValueError(f"video {path} has only {len(images)} frames from frame {start}, {frames} were asked")
    return images
