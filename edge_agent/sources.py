"""Video sources: files, V4L2 cameras, network streams and GStreamer pipelines, as BGR uint8 frames.

The end of a file ends the stream; a file whose read fails before the frame count its container
announces (a corrupt middle) ends it too, with a warning naming the frame, and
:attr:`VideoSource.stopped_early` set to that frame's index. A live source (camera, stream,
pipeline) that stops delivering frames is reopened with backoff, and given up after ``retries``
failed attempts.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backoff import Backoff

log = logging.getLogger(__name__)

_V4L2_DEVICE = re.compile(r"^/dev/video\d+$")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class SourceError(RuntimeError):
    """A source cannot be opened or was lost; the message names the source."""


@dataclass(frozen=True)
class SourceSpec:
    """What a source string denotes: ``kind`` is file, camera, stream or gstreamer."""

    text: str
    kind: str
    target: str | int

    @property
    def live(self) -> bool:
        return self.kind != "file"


def parse_source(text: str) -> SourceSpec:
    """Classify a source string; a file that does not exist is an error here already."""
    text = text.strip()
    if not text:
        raise SourceError("the video source is empty")
    if "!" in text:
        return SourceSpec(text, "gstreamer", text)
    if text.isdigit():
        return SourceSpec(text, "camera", int(text))
    if _V4L2_DEVICE.match(text):
        return SourceSpec(text, "camera", text)
    if _URL.match(text):
        return SourceSpec(text, "stream", text)
    path = Path(text).expanduser()
    if not path.is_file():
        raise SourceError(f"video file not found: {text}")
    return SourceSpec(text, "file", str(path))


# a cv2.VideoCapture or anything with isOpened/read/get/release
Capture = Any
CaptureFactory = Callable[[SourceSpec], Capture]


def open_capture(spec: SourceSpec) -> Capture:
    """Open ``spec`` with OpenCV's backend for its kind (V4L2 for cameras, GStreamer for
    pipelines)."""
    import cv2

    if spec.kind == "gstreamer":
        return cv2.VideoCapture(spec.target, cv2.CAP_GSTREAMER)
    if spec.kind == "camera":
        return cv2.VideoCapture(spec.target, cv2.CAP_V4L2)
    return cv2.VideoCapture(spec.target)


class VideoSource:
    """Iterate over the frames of one source (``for frame in source``), optionally resized.

    ``stop`` (an event) interrupts the reopen backoff of a live source.
    """

    def __init__(
        self,
        text: str,
        resize: tuple[int, int] | None = None,
        retries: int = 10,
        *,
        backoff: Backoff | None = None,
        capture_factory: CaptureFactory = open_capture,
        stop: threading.Event | None = None,
    ) -> None:
        self.spec = parse_source(text)
        self.resize = resize
        self.retries = retries
        self.backoff = backoff or Backoff(0.5, 10.0)
        self._factory = capture_factory
        self._stop = stop or threading.Event()
        self._capture: Capture | None = None
        self.reopens = 0
        # a file's frame that could not be read, before its end
        self.stopped_early: int | None = None
        self._open()

    @property
    def fps(self) -> float:
        """The source's nominal frame rate (30 where it does not say)."""
        import cv2

        fps = float(self._capture.get(cv2.CAP_PROP_FPS)) if self._capture is not None else 0.0
        return fps if 0 < fps < 1000 else 30.0

    def _open(self) -> None:
        capture = self._factory(self.spec)
        if not capture.isOpened():
            capture.release()
            raise SourceError(f"cannot open {self.spec.kind} source {self.spec.text!r}")
        self._capture = capture

    def __iter__(self) -> Iterator[np.ndarray]:
        delivered = 0
        while True:
            ok, frame = self._capture.read() if self._capture is not None else (False, None)
            if ok and frame is not None:
                delivered += 1
                self.backoff.reset()
                yield self._prepare(frame)
                continue
            if not self.spec.live:
                if delivered == 0:
                    raise SourceError(f"video file {self.spec.text!r} has no decodable frames")
                self._check_end(delivered)
                return
            if not self._reopen():
                return

    def _check_end(self, delivered: int) -> None:
        """A file that stopped at frame ``delivered``: warn (and note it) when it announced more
        frames."""
        import cv2

        announced = (
            int(self._capture.get(cv2.CAP_PROP_FRAME_COUNT)) if self._capture is not None else 0
        )
        if announced > delivered:
            self.stopped_early = delivered
            log.warning(
                "video file %r: frame %d could not be read (the file announces %d frames); the "
                "stream ends there",
                self.spec.text,
                delivered,
                announced,
            )

    def _reopen(self) -> bool:
        """Reopen a live source that stopped; False when stopped meanwhile. Raises after
        ``retries``."""
        self.close()
        for attempt in range(1, self.retries + 1):
            delay = self.backoff.next_delay()
            log.warning(
                "source %r delivered no frame; reopening in %.1f s (attempt %d/%d)",
                self.spec.text,
                delay,
                attempt,
                self.retries,
            )
            if self._stop.wait(delay):
                return False
            try:
                self._open()
            except SourceError as exc:
                log.warning("%s", exc)
                continue
            self.reopens += 1
            return True
        raise SourceError(
            f"lost {self.spec.kind} source {self.spec.text!r}: {self.retries} reopen attempts "
            "failed"
        )

    def _prepare(self, frame: np.ndarray) -> np.ndarray:
        import cv2

        if frame.ndim == 2:
            frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
        elif frame.shape[2] == 4:
            frame = cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR)
        if self.resize is not None and (frame.shape[1], frame.shape[0]) != self.resize:
            frame = cv2.resize(frame, self.resize, interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(frame, dtype=np.uint8)

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None

    def __enter__(self) -> VideoSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
