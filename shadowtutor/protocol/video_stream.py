"""Frames as one inter-coded H.264 stream (docs/protocol.md, "Frames as a video stream").

An edge's frames of one kind (its key frames, or every frame of naive offloading) travel as one
H.264 stream: the first frame and every frame after a restart is an *intra* frame at stream
position 0; each later frame is an *inter* frame at position ``n`` that can only be decoded right
after the frame at position ``n - 1``. The receiver's :class:`StreamDecoder` refuses any inter frame
that does not follow the last frame it decoded (lost, refused or reordered frames, a new session)
with a BAD_FRAME ProtocolError, after which it accepts only an intra frame; the sender answers by
:meth:`StreamEncoder.restart` so that its next frame is intra.

The encoder runs on the source's clock (docs/design/clock.md): its time base and frame rate are
the source's (``1/fps``), so libx264's CRF means what it says at the source's rate, and each
frame's timestamp is its index in the source, so frames sent sparsely (key frames) sit at their
real spacing. The rate control is constant-rate: every frame, key frame or not, gets the quality a
frame of the source's stream would (variable-rate control would hold each frame back until the
next one comes). The timestamps stay with the sender: an access unit decodes the same whatever its
timestamp, so the protocol carries none.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.h264_sps import sequence_parameters

STREAM_FRAME_CODECS = ("h264",)
_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform.startswith("linux") else None


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; nothing elsewhere):
    a freed decoder's pictures otherwise stay in the process."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def streamable(width: int, height: int) -> bool:
    """Whether frames of this size can travel as an H.264 (yuv420p) stream: positive even sides."""
    return width > 0 and height > 0 and width % 2 == 0 and height % 2 == 0


def frame_codecs_for(codecs: tuple[str, ...] | list[str], width: int, height: int) -> list[str]:
    """``codecs`` less the stream codecs when frames of ``width`` x ``height`` cannot be
    streamed."""
    return [c for c in codecs if streamable(width, height) or c not in STREAM_FRAME_CODECS]


def scaled_frame_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """``width`` x ``height`` times ``scale`` in (0, 1], each side rounded to the nearest even
    number (at least 2); scale 1 keeps the size. ValueError for a scale outside (0, 1]."""
    if not 0.0 < scale <= 1.0:
        raise ValueError(f"a frame scale lies in (0, 1], got {scale}")
    if scale == 1.0:
        return width, height
    return max(2, 2 * round(width * scale / 2)), max(2, 2 * round(height * scale / 2))


# reference pictures a stream may ask a decoder to keep (its SPS's max_num_ref_frames); the
# encoder's streams ask for 1
MAX_REF_FRAMES = 4
H264_CRF = 23
H264_PRESET = "veryfast"
# the frame rate assumed for a source that does not state one (as the edge's video sources do)
DEFAULT_STREAM_FPS = 30.0


def stream_rate(fps: float) -> Fraction:
    """``fps`` as the exact rate a time base is made from: a fraction with a denominator of at
    most 1001 (29.97 -> 30000/1001). ValueError for a rate that is not finite and positive, or
    above 1000 frames per second."""
    if not 0.0 < fps <= 1000.0:
        raise ValueError(f"a stream's frame rate lies in (0, 1000], got {fps}")
    return Fraction(fps).limit_denominator(1001)


@dataclass(frozen=True)
class StreamFrame:
    """One encoded frame: its H.264 access unit and its stream position (0: the intra frame)."""

    payload: bytes
    position: int

    @property
    def intra(self) -> bool:
        return self.position == 0


def _check_frame(frame_bgr: np.ndarray) -> None:
    if frame_bgr.dtype != np.uint8 or frame_bgr.ndim != 3 or frame_bgr.shape[2] != 3:
        raise ValueError(f"frames are uint8 (H, W, 3) BGR, got {frame_bgr.dtype} {frame_bgr.shape}")
    if frame_bgr.shape[0] % 2 or frame_bgr.shape[1] % 2:
        raise ValueError(
            f"H.264 (yuv420p) frames have even sides, got {frame_bgr.shape[1]}x{frame_bgr.shape[0]}"
        )


class StreamEncoder:
    """libx264 (CRF ``crf``, preset ``preset``, zerolatency) on a source of ``fps`` frames per
    second: one access unit out per frame in.

    Every call of :meth:`encode` returns the frame's complete access unit at once (no B-frames, no
    look-ahead). The first frame, and the first after :meth:`restart`, is intra at position 0. The
    time base is one source frame; a frame's timestamp is its source index less that of the
    stream's first frame, so a stream of every n-th frame runs at the source's clock.
    """

    def __init__(
        self,
        width: int,
        height: int,
        crf: int = H264_CRF,
        *,
        preset: str = H264_PRESET,
        fps: float = DEFAULT_STREAM_FPS,
    ) -> None:
        if not streamable(width, height):
            raise ValueError(f"H.264 streams need positive even sides, got {width}x{height}")
        self.width, self.height, self.crf, self.preset = width, height, crf, preset
        self.rate = stream_rate(fps)
        self._context: av.VideoCodecContext | None = None
        self._position = 0
        # the source index of the stream's first frame, and of the last frame encoded
        self._first_index = 0
        self._last_index: int | None = None

    def _open(self) -> av.VideoCodecContext:
        context = av.CodecContext.create("libx264", "w")
        context.width, context.height, context.pix_fmt = self.width, self.height, "yuv420p"
        context.time_base = 1 / self.rate
        context.framerate = self.rate
        context.options = {"crf": str(self.crf), "preset": self.preset, "tune": "zerolatency"}
        return context

    def restart(self) -> None:
        """The next frame is intra at position 0 (after a refused or unacknowledged frame, a
        reconnect)."""
        self._context = None

    def follows(self, frame_index: int | None) -> bool:
        """Whether the source's frame ``frame_index`` may be encoded next in this stream: always
        at its start (or after :meth:`restart`) and for None, else only after the last index."""
        return (
            frame_index is None
            or self._context is None
            or self._last_index is None
            or frame_index > self._last_index
        )

    def encode(self, frame_bgr: np.ndarray, frame_index: int | None = None) -> StreamFrame:
        """Encode one BGR frame of the encoder's size, the source's frame ``frame_index`` (None:
        the frame after the last one encoded). ValueError for another size or type, or an index
        not after the last one's in the same stream."""
        _check_frame(frame_bgr)
        if frame_bgr.shape[:2] != (self.height, self.width):
            size = f"{frame_bgr.shape[1]}x{frame_bgr.shape[0]}"
            raise ValueError(f"frame is {size}, stream is {self.width}x{self.height}")
        if frame_index is None:
            frame_index = 0 if self._last_index is None else self._last_index + 1
        if self._context is None:
            self._context, self._position = self._open(), 0
            self._first_index = frame_index
        elif self._last_index is not None and frame_index <= self._last_index:
            raise ValueError(
                f"frame {frame_index} does not follow frame {self._last_index} of the stream"
            )
        frame = av.VideoFrame.from_ndarray(
            np.ascontiguousarray(frame_bgr), format="bgr24"
        ).reformat(format="yuv420p")
        frame.pts = frame_index - self._first_index
        frame.time_base = self._context.time_base
        packets = self._context.encode(frame)
        payload = b"".join(bytes(packet) for packet in packets)
        if not payload:
            raise RuntimeError(
                "libx264 returned no access unit for a frame (zerolatency should always return one)"
            )
        out = StreamFrame(payload, self._position)
        self._position += 1
        self._last_index = frame_index
        return out


class StreamDecoder:
    """The receiving side of one stream of ``width`` x ``height`` frames; see the module's
    contract."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self._context: av.VideoCodecContext | None = None
        self._last: int | None = None

    def reset(self) -> None:
        """Forget the stream: only an intra frame decodes next."""
        self._context, self._last = None, None

    def close(self) -> None:
        """Free the decoder and hand the memory it took back to the system (at a session's end)."""
        self.reset()
        release_freed_memory()

    @property
    def last_position(self) -> int | None:
        """The position of the last frame decoded, None when the next frame must be intra."""
        return self._last

    def _refuse(self, message: str) -> ProtocolError:
        self.reset()
        return ProtocolError(
            ErrorCode.BAD_FRAME, f"{message}; send an intra frame (stream position 0)"
        )

    def decode(self, payload: bytes, position: int) -> np.ndarray:
        """The BGR frame of an access unit at stream ``position``; defects raise BAD_FRAME and
        reset."""
        intra = position == 0
        if position < 0:
            raise self._refuse(f"negative stream position {position}")
        if not intra and self._last != position - 1:
            held = "no stream" if self._last is None else f"position {self._last}"
            raise self._refuse(f"inter frame at stream position {position} does not follow {held}")
        if intra:
            self.reset()
            context = av.CodecContext.create("h264", "r")
            context.thread_count = 1
            # a stream that announces larger pictures is refused before any picture is allocated
            # (FFmpeg checks the size padded to its macroblocks and stride alignment)
            context.options = {"max_pixels": str((self.width + 128) * (self.height + 32))}
            self._context = context
        assert self._context is not None
        for sps in sequence_parameters(payload):
            if sps.max_num_ref_frames > MAX_REF_FRAMES:
                raise self._refuse(
                    f"the stream asks for {sps.max_num_ref_frames} reference frames, at most "
                    f"{MAX_REF_FRAMES} are kept"
                )
        try:
            frames = self._context.decode(av.Packet(payload))
        except (av.FFmpegError, ValueError) as exc:
            raise self._refuse(f"undecodable H.264 access unit ({exc})") from None
        if len(frames) != 1:
            raise self._refuse(f"the access unit gave {len(frames)} frames, expected 1")
        image = frames[0].to_ndarray(format="bgr24")
        if image.shape[:2] != (self.height, self.width):
            raise self._refuse(
                f"frame is {image.shape[1]}x{image.shape[0]}, expected {self.width}x{self.height}"
            )
        self._last = position
        return image
