"""Where each frame's label map goes: PNG files (with retention), a callback, an overlay video.

Sinks run on a writer thread behind a bounded queue (:class:`ThreadedSink`), so disk
stalls do not slow inference (a full queue blocks, so a healthy disk gets every label map).
A write that fails with an ``OSError`` (disk full, I/O error) is dropped and reported to the
observer: inference goes on. Any other sink error ends the run.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

LABELS_DIR = "labels"
OVERLAY_FILE = "overlay.mp4"

# One BGR colour per class (cycled for more classes); the background class is left unpainted.
PALETTE_BGR = np.array(
    [
        (60, 20, 220),
        (0, 128, 255),
        (255, 128, 0),
        (0, 200, 255),
        (180, 0, 180),
        (0, 255, 128),
        (128, 128, 255),
        (255, 0, 128),
        (0, 160, 0),
        (200, 200, 0),
        (80, 80, 200),
        (255, 255, 255),
    ],
    dtype=np.uint8,
)


log = logging.getLogger(__name__)


class LabelSink(Protocol):
    """Where label maps go (files, video, a callback): the agent's writer thread calls ``write`` for
    every labelled frame, in order, and ``close`` once at the end; a sink may raise ``OSError``,
    which drops that frame's output only."""

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None: ...

    def close(self) -> None: ...


class OutputObserver(Protocol):
    """Told (on the writer thread) what the outputs dropped and what retention removed."""

    def output_dropped(self, output: str) -> None: ...

    def labels_removed(self, count: int) -> None: ...


def label_path(directory: Path, frame_index: int) -> Path:
    return directory / f"{frame_index:06d}.png"


class PngLabelSink:
    """``DIR/NNNNNN.png``: the label map as an 8-bit single-channel PNG (pixel value = class index).

    Retention: after each write, the oldest files (by write time; files already in ``DIR`` at
    start count too) are removed while the PNGs total more than ``max_bytes`` or are older than
    ``max_age`` seconds (``0`` = no bound). A write that fails removes its partial file.
    """

    name = "labels"

    def __init__(
        self,
        directory: str | Path,
        compression: int = 1,
        max_bytes: int = 0,
        *,
        max_age: float = 0.0,
        observer: OutputObserver | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # 1: fast, still lossless
        self._params = [cv2.IMWRITE_PNG_COMPRESSION, compression]
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.observer = observer
        self.clock = clock
        self.total_bytes = 0
        # path -> (size, written at), oldest first
        self._files: dict[Path, tuple[int, float]] = {}
        # a restarted agent keeps the bound
        for path in sorted(self.directory.glob("*.png"), key=_mtime):
            stat = path.stat()
            self._files[path] = (stat.st_size, stat.st_mtime)
            self.total_bytes += stat.st_size

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        path = label_path(self.directory, frame_index)
        ok, encoded = cv2.imencode(".png", labels, self._params)
        if not ok:
            raise ValueError(f"OpenCV cannot encode label map {frame_index} as PNG")
        # a restarted run writes the same names again
        self._forget(path)
        try:
            with open(path, "wb") as out:
                out.write(encoded.tobytes())
        except OSError:
            # no partial file left behind
            path.unlink(missing_ok=True)
            raise
        self._files[path] = (encoded.nbytes, self.clock())
        self.total_bytes += encoded.nbytes
        self._evict()

    def _forget(self, path: Path) -> None:
        entry = self._files.pop(path, None)
        if entry is not None:
            self.total_bytes -= entry[0]

    def _evict(self) -> None:
        oldest_kept = self.clock() - self.max_age
        removed = 0
        for path, (_size, written) in list(self._files.items()):
            over_size = self.max_bytes > 0 and self.total_bytes > self.max_bytes
            too_old = self.max_age > 0 and written < oldest_kept
            if not (over_size or too_old):
                break
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("retention cannot remove %s: %s", path, exc)
            self._forget(path)
            removed += 1
        if removed and self.observer is not None:
            self.observer.labels_removed(removed)

    def close(self) -> None:
        pass


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


class CallbackSink:
    """Calls ``callback(frame_index, frame, labels)`` for each frame (for library users)."""

    name = "callback"

    def __init__(self, callback: Callable[[int, np.ndarray, np.ndarray], None]) -> None:
        self.callback = callback

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        self.callback(frame_index, frame, labels)

    def close(self) -> None:
        pass


def overlay(
    frame: np.ndarray, labels: np.ndarray, background: int | None, alpha: float = 0.5
) -> np.ndarray:
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
    """An MP4 (``mp4v``) of the frames with their label maps blended over them; opened at the first
    frame.

    OpenCV's writer reports no error on a full disk: only a failure to open it is seen
    (``OSError``).
    """

    name = "overlay"

    def __init__(self, path: str | Path, fps: float, background: int | None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fps = fps
        self.background = background
        self._writer: cv2.VideoWriter | None = None

    def write(self, frame_index: int, frame: np.ndarray, labels: np.ndarray) -> None:
        if self._writer is None:
            height, width = frame.shape[:2]
            self._writer = cv2.VideoWriter(
                str(self.path), cv2.VideoWriter.fourcc(*"mp4v"), self.fps, (width, height)
            )
            if not self._writer.isOpened():
                raise OSError(f"OpenCV cannot write an mp4v video to {self.path}")
        self._writer.write(overlay(frame, labels, self.background))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None


_STOP = object()


class ThreadedSink:
    """Feeds several sinks from a writer thread; ``close`` flushes everything.

    A sink's ``OSError`` drops that one write (``dropped`` and the observer's ``output_dropped``
    count it, by the sink's ``name``); any other error is re-raised on the next ``write`` or at
    ``close``, and the remaining items are drained unwritten.
    """

    def __init__(
        self,
        sinks: Sequence[LabelSink],
        max_queue: int = 64,
        observer: OutputObserver | None = None,
    ) -> None:
        self.sinks = list(sinks)
        self.observer = observer
        # frames every sink took
        self.written = 0
        # writes dropped on an OSError, by sink name
        self.dropped: dict[str, int] = {}
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
                # drain so that writers never block after a failure
                continue
            try:
                if all([self._write(sink, item) for sink in self.sinks]):
                    self.written += 1
            except Exception as exc:
                # reported to the inference thread on its next write or at close
                self._error = exc

    def _write(self, sink: LabelSink, item: tuple[int, np.ndarray, np.ndarray]) -> bool:
        """Write to one sink; False when an ``OSError`` dropped the write."""
        try:
            sink.write(*item)
            return True
        except OSError as exc:
            name = getattr(sink, "name", type(sink).__name__)
            self.dropped[name] = self.dropped.get(name, 0) + 1
            # a full disk fails every frame
            if self.dropped[name] == 1 or self.dropped[name] % 1000 == 0:
                log.warning(
                    "dropped label map %d in output %s (%d dropped so far): %s",
                    item[0],
                    name,
                    self.dropped[name],
                    exc,
                )
            if self.observer is not None:
                self.observer.output_dropped(name)
            return False

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        for sink in self.sinks:
            sink.close()
        if self._error is not None:
            raise RuntimeError(f"a label sink failed: {self._error}") from self._error
