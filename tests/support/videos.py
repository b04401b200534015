"""Video files for tests: a small clip damaged in the middle (as a disk or transfer error leaves one)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

# the frames the damaged clip's container announces
DAMAGED_FRAMES = 30


def damaged_video(path: Path) -> Path:
    """An MPEG-4 clip of :data:`DAMAGED_FRAMES` random 64x48 frames whose bytes from 60 % on are zeroed for
    3,000 bytes: OpenCV reads its first frames, then fails (11 frames with OpenCV 4 and FFmpeg 6)."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (64, 48))
    rng = np.random.default_rng(0)
    for _ in range(DAMAGED_FRAMES):
        writer.write(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    writer.release()
    data = bytearray(path.read_bytes())
    start = int(len(data) * 0.6)
    data[start:start + 3000] = bytes(3000)
    path.write_bytes(bytes(data))
    return path
