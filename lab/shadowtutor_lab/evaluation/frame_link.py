"""Frames from edge to server as the protocol carries them, in-process: the edge's encoder, the server's decoder.

A :class:`FrameLink` is one session's frame channel: the edge agent's
:class:`~edge_agent.frame_encoder.FrameEncoder` (codec, quality, key-frame scale) on one side, on
the other the decoder the server uses (a :class:`~shadowtutor.protocol.video_stream.StreamDecoder`
for a stream codec, :func:`~shadowtutor.protocol.codecs.decode_frame` for an image codec). Frames
must be sent in order: with a stream codec they form one stream, as a session's frames do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_agent.frame_encoder import FrameEncoder
from shadowtutor.protocol.codecs import FRAME_CODECS, decode_frame
from shadowtutor.protocol.defaults import DEFAULT_FRAME_QUALITY
from shadowtutor.protocol.messages import KeyFrame, encode
from shadowtutor.protocol.video_stream import DEFAULT_STREAM_FPS, STREAM_FRAME_CODECS, StreamDecoder

SESSION = "simulated"


@dataclass(frozen=True)
class Delivered:
    """One frame across the link: the KEY_FRAME message's size and the frame the server decoded
    (writable, at the sent size)."""

    message_bytes: int
    payload_bytes: int
    frame: np.ndarray


class FrameLink:
    """``codec`` (a frame codec), ``quality`` (jpeg/webp; None: the default), ``scale`` in (0, 1]: the
    sent size (:func:`~shadowtutor.protocol.video_stream.scaled_frame_size`). ValueError for an unknown
    codec, a quality outside 1..100 or a scale outside (0, 1]. ``fps``: the source's frame rate, the clock of a
    stream codec (frames sent sparsely sit at their real spacing: their frame indices)."""

    def __init__(self, codec: str, quality: int | None = None, scale: float = 1.0, *,
                 fps: float = DEFAULT_STREAM_FPS) -> None:
        if codec not in FRAME_CODECS:
            raise ValueError(f"unknown frame codec {codec!r}: choose from {', '.join(FRAME_CODECS)}")
        if quality is not None and not 1 <= quality <= 100:
            raise ValueError(f"frame quality must lie in 1..100, got {quality}")
        self.codec = codec
        self.quality = DEFAULT_FRAME_QUALITY.get(codec) if quality is None else quality
        self._encoder = FrameEncoder(quality, scale, fps=fps)
        self._decoder: StreamDecoder | None = None
        self._sent = 0

    @property
    def label(self) -> str:
        """``codec[@quality]`` as the lab's settings write it."""
        return self.codec + (f"@{self.quality}" if self.quality is not None else "")

    def send(self, frame_index: int, frame_bgr: np.ndarray, decode: bool = True) -> Delivered:
        """The next frame of the session; ``decode`` False skips the server's decoding (bytes only; then
        ``Delivered.frame`` is the frame as sent, before encoding) and must not be mixed with True in a
        stream."""
        encoded = self._encoder.encode(frame_bgr, self.codec, SESSION, frame_index)
        message = KeyFrame(
            seq=self._sent, frame_index=frame_index, base_version=0, codec=self.codec,
            width=encoded.width, height=encoded.height, stream_position=encoded.stream_position,
            payload=encoded.payload,
        )
        self._sent += 1
        size = len(encode(message))
        if not decode:
            return Delivered(size, len(encoded.payload), frame_bgr)
        if self.codec in STREAM_FRAME_CODECS:
            assert encoded.stream_position is not None
            if self._decoder is None or (self._decoder.width, self._decoder.height) != (encoded.width,
                                                                                          encoded.height):
                self._decoder = StreamDecoder(encoded.width, encoded.height)
            seen = self._decoder.decode(encoded.payload, encoded.stream_position)
        else:
            seen = decode_frame(encoded.payload, self.codec, encoded.width, encoded.height)
        return Delivered(size, len(encoded.payload), seen if seen.flags.writeable else seen.copy())
