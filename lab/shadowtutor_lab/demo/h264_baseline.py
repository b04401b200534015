"""Naive offloading as a camera does it: every frame up as one H.264 stream, the labels down."""

from __future__ import annotations

from dataclasses import dataclass

from shadowtutor.protocol.video_stream import H264_CRF, H264_PRESET, StreamEncoder
from shadowtutor.scene_store import Scene


@dataclass(frozen=True)
class H264Offloading:
    """Bytes of H.264 offloading over ``frames`` frames: the stream up, the label maps down."""

    frames: int
    up_bytes: int
    down_bytes: int

    @property
    def bytes_per_frame(self) -> float:
        return (self.up_bytes + self.down_bytes) / self.frames if self.frames else 0.0


def h264_stream_bytes(scene: Scene, crf: int = H264_CRF, preset: str = H264_PRESET) -> int:
    """Bytes of the scene's frames as one libx264 stream (zerolatency, one intra frame first); an odd
    side loses its last pixel row or column (H.264 needs even sides)."""
    width, height = scene.meta.width & ~1, scene.meta.height & ~1
    encoder = StreamEncoder(width, height, crf=crf, preset=preset)
    return sum(len(encoder.encode(frame[:height, :width]).payload) for frame in scene.frames())


def h264_offloading(scene: Scene, labels_down_bytes: int) -> H264Offloading:
    """H.264 offloading of ``scene``, with the label bytes a naive run received for the same frames."""
    return H264Offloading(len(scene), h264_stream_bytes(scene), labels_down_bytes)
