"""Where each frame's label map goes: PNG files, a callback, an overlay video.

Sinks run on a writer thread behind a bounded queue (:class:`ThreadedSink`), so disk
stalls do not slow inference, and no label map is ever dropped (a full queue blocks).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

LABELS_DIR = "labels"
OVERLAY_FILE = "overlay.mp4"

# One BGR colour per class (cycled for more classes); the background class is left unpainted.
PALETTE_BGR = np.array(
    [(60, 20, 220), (0, 128, 255), (255, 128, 0), (0, 200, 255), (180, 0, 180), (0, 255, 128),
     (128, 128, 255), (255, 0, 128), (0, 160, 0), (200, 200, 0), (80, 80, 200), (255, 255, 255)],
    dtype=np.uint8,
)


class LabelSink(Protocol):
    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None: ...

    def close(self) -> None: ...


def label_path(directory: Path, frame_index: int) -> Path:
    return directory / f"{frame_index:06d}.png"


class PngLabelSink:
    """``DIR/NNNNNN.png``: the label map as an 8-bit single-channel PNG (pixel value = class index)."""

    def __init__(self, directory: str | Path, compression: int = 1) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._params = [cv2.IMWRITE_PNG_COMPRESSION, compression]  # 1: fast, still lossless

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        path = label_path(self.directory, frame_index)
        if not cv2.imwrite(str(path), labels, self._params):
            raise OSError(f"could not write label map {path}")

    def close(self) -> None:
        pass


class CallbackSink:
    """Calls ``callback(frame_index, frame, labels)`` for each frame (for library users)."""

    def __init__(self, callback: Callable[[int, np.ndarray, np.ndarray], None]) -> None:
        self.callback = callback

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        self.callback(frame_index, frame, labels)

    def close(self) -> None:
        pass


def overlay(frame: np.ndarray, labels: np.ndarray, background: int | None, alpha: float = 0.5) -> np.ndarray:
    """The frame with each non-background class painted in its palette colour at ``alpha``."""
    colours = PALETTE_BGR[labels % len(PALETTE_BGR)]
    blended = cv2.addWeighted(frame, 1.0 - alpha, colours, alpha, 0.0)
    if background is None:
        return blended
    mask = labels != background
    out = frame.copy()
    out[mask] = blended[mask]
    return out


class OverlayVideoSink:
    """An MP4 (``mp4v``) of the frames with their label maps blended over them; opened at the first frame."""

    def __init__(self, path: str | Path, fps: float, background: int | None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fps = fps
        self.background = background
        self._writer: cv2.VideoWriter | None = None

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        if self._writer is None:
            height, width = frame.shape[:2]
            self._writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (width, height))
            if not self._writer.isOpened():
                raise OSError(f"OpenCV cannot write an mp4v video to {self.path}")
        self._writer.write(overlay(frame, labels, self.background))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None


_STOP = object()


class ThreadedSink:
    """Feeds several sinks from a writer thread; ``close`` flushes everything and re-raises a write error."""

    def __init__(self, sinks: Sequence[LabelSink], max_queue: int = 64) -> None:
        self.sinks = list(sinks)
        self.written = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="edge-sinks", daemon=True)
        self._thread.start()

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        if self._error is not None:
            raise RuntimeError(f"a label sink failed: {self._error}") from self._error
        self._queue.put((frame_index, frame, labels))

    def _run(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            if self._error is not None:
                continue  # drain so that writers never block after a failure
            try:
                for sink in self.sinks:
                    sink.write(*item)
                self.written += 1
            except Exception as exc:  # reported to the inference thread on its next write or at close
                self._error = exc

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        for sink in self.sinks:
            sink.close()
        if self._error is not None:
            raise RuntimeError(f"a label sink failed: {self._error}") from self._error
