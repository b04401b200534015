"""The edge's frame encoder: a session's frames in its negotiated frame codec, at the key-frame
scale.

Image codecs encode each frame alone. A stream codec (h264) encodes a session's frames as one
stream (docs/protocol.md, "Frames as a video stream"): the stream starts again from an intra frame
in a new session, at a new frame size, and after :meth:`FrameEncoder.restart` -- which the
transport calls when a frame of the current stream was refused or never acknowledged.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import cv2
import numpy as np

from shadowtutor.protocol.codecs import encode_frame
from shadowtutor.protocol.video_stream import (
    DEFAULT_STREAM_FPS,
    STREAM_FRAME_CODECS,
    StreamEncoder,
    scaled_frame_size,
)


@dataclass(kw_only=True, frozen=True)
class EncodedFrame:
    """A frame's payload at ``width`` x ``height`` (the sent size); ``stream_position`` and
    ``epoch`` are None with an image codec.

    ``epoch`` names the stream the frame belongs to (it grows at every restart).
    """

    payload: bytes
    width: int
    height: int
    stream_position: int | None = None
    epoch: int | None = None


def scale_frame(frame_bgr: np.ndarray, scale: float) -> np.ndarray:
    """``frame_bgr`` resized to :func:`scaled_frame_size` (area interpolation); scale 1 returns
    it."""
    height, width = frame_bgr.shape[:2]
    size = scaled_frame_size(width, height, scale)
    if size == (width, height):
        return frame_bgr
    return cv2.resize(frame_bgr, size, interpolation=cv2.INTER_AREA)


class FrameEncoder:
    """Encodes on the caller's thread; :meth:`restart` may be called from any thread."""

    def __init__(
        self, quality: int | None = None, scale: float = 1.0, *, fps: float = DEFAULT_STREAM_FPS
    ) -> None:
        """``quality``: jpeg/webp quality (None: the codec's default); stream codecs use their CRF.
        ``scale`` in (0, 1]: every frame is sent at :func:`scaled_frame_size` of its size
        (ValueError outside). ``fps``: the source's frame rate, the clock of a stream codec
        (:class:`~shadowtutor.protocol.video_stream.StreamEncoder`)."""
        scaled_frame_size(2, 2, scale)
        self.quality, self.scale, self.fps = quality, scale, fps
        self._lock = threading.Lock()
        self._stream: StreamEncoder | None = None
        self._session: str | None = None
        self._epoch = 0

    def encode(
        self, frame_bgr: np.ndarray, codec: str, stream_key: str, frame_index: int | None = None
    ) -> EncodedFrame:
        """``frame_bgr`` at the encoder's scale in ``codec``; a ``stream_key`` other than the last
        frame's (a new session, or a new connection of the same session) starts a new stream.
        ``frame_index``: the frame's index in the source, its time in a stream (None: the frame
        after the stream's last); an index not after the last one's (a source that starts over)
        starts a new stream too."""
        frame_bgr = scale_frame(frame_bgr, self.scale)
        height, width = frame_bgr.shape[:2]
        if codec not in STREAM_FRAME_CODECS:
            return EncodedFrame(
                payload=encode_frame(frame_bgr, codec, self.quality), width=width, height=height
            )
        with self._lock:
            stream = self._stream
            if (
                stream is None
                or self._session != stream_key
                or (stream.width, stream.height) != (width, height)
                or not stream.follows(frame_index)
            ):
                stream = StreamEncoder(width, height, fps=self.fps)
                self._stream, self._session = stream, stream_key
                self._epoch += 1
            epoch = self._epoch
            encoded = stream.encode(frame_bgr, frame_index)
        return EncodedFrame(
            payload=encoded.payload,
            width=width,
            height=height,
            stream_position=encoded.position,
            epoch=epoch,
        )

    def restart(self, epoch: int | None) -> bool:
        """Start a new stream (next frame intra) when ``epoch`` is the current stream's; True if so.

        A refusal of a frame from an older stream changes nothing: that stream has already been
        restarted.
        """
        with self._lock:
            if epoch is None or epoch != self._epoch or self._stream is None:
                return False
            self._stream = None
            return True
