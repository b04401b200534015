"""A tiny scene on disk in the benchmark scene format, for tests that need a real teacher.

Format (as ``shadowtutor scenes make`` writes it): ``video.mp4``, ``labels/NNNNNN.png``
(single-channel class indices) and ``scene.json`` with ``class_names``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

CLASS_NAMES = ("person", "auto", "background")


@dataclass(frozen=True)
class TinyScene:
    directory: Path
    frames: list[np.ndarray]  # BGR uint8 (H, W, 3)
    labels: list[np.ndarray]  # uint8 (H, W)
    class_names: tuple[str, ...]


def make_frames(count: int, width: int = 64, height: int = 48, seed: int = 0) -> tuple[list, list]:
    """A textured background with a bright 'person' box and a dark 'auto' box moving across it."""
    rng = np.random.default_rng(seed)
    background = rng.integers(60, 160, size=(height, width, 3), dtype=np.uint8)
    frames, labels = [], []
    for i in range(count):
        frame = background.copy()
        label = np.full((height, width), CLASS_NAMES.index("background"), dtype=np.uint8)
        x = (4 + 3 * i) % (width - 20)
        frame[8:30, x : x + 14] = (230, 220, 250)
        label[8:30, x : x + 14] = CLASS_NAMES.index("person")
        frame[30:44, width - 24 - x // 2 : width - 4 - x // 2] = (20, 30, 10)
        label[30:44, width - 24 - x // 2 : width - 4 - x // 2] = CLASS_NAMES.index("auto")
        frames.append(frame)
        labels.append(label)
    return frames, labels


def write_scene(directory: Path, count: int = 6, width: int = 64, height: int = 48, fps: int = 10) -> TinyScene:
    frames, labels = make_frames(count, width, height)
    (directory / "labels").mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(directory / "video.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    try:
        for frame in frames:
            writer.write(frame)
    finally:
        writer.release()
    for index, label in enumerate(labels):
        if not cv2.imwrite(str(directory / "labels" / f"{index:06d}.png"), label):
            raise OSError(f"cannot write label {index} under {directory}")
    meta = {"class_names": list(CLASS_NAMES), "frames": count, "width": width, "height": height, "fps": fps}
    (directory / "scene.json").write_text(json.dumps(meta, indent=2) + "\n")
    return TinyScene(directory, frames, labels, CLASS_NAMES)
