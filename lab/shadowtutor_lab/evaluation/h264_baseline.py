"""Naive offloading as a camera does it: every frame up as one H.264 stream, the labels down."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.frame_link import FrameLink


@dataclass(frozen=True)
class H264Offloading:
    """Bytes of H.264 offloading over ``frames`` frames: the stream up, the label maps down."""

    frames: int
    up_bytes: int
    down_bytes: int

    @property
    def bytes_per_frame(self) -> float:
        return (self.up_bytes + self.down_bytes) / self.frames if self.frames else 0.0

    @property
    def up_per_frame(self) -> float:
        return self.up_bytes / self.frames if self.frames else 0.0

    @property
    def down_per_frame(self) -> float:
        return self.down_bytes / self.frames if self.frames else 0.0


def h264_stream_bytes(scene: Scene, frames: int | None = None) -> int:
    """Bytes of the scene's first ``frames`` (None: all) as one H.264 stream, the edge agent's encoder
    (:class:`~shadowtutor_lab.evaluation.frame_link.FrameLink`, one intra frame first): the access units
    alone; an odd side loses its last pixel row or column (H.264 needs even sides)."""
    width, height = scene.meta.width & ~1, scene.meta.height & ~1
    link = FrameLink("h264")
    count = len(scene) if frames is None else min(frames, len(scene))
    return sum(link.send(index, frame[:height, :width], decode=False).payload_bytes
               for index, frame in enumerate(itertools.islice(scene.frames(), count)))


def h264_offloading(scene: Scene, labels_down_bytes: int, frames: int | None = None) -> H264Offloading:
    """H.264 offloading of the scene's first ``frames`` (None: all), with the label bytes a naive run
    received for the same frames."""
    count = len(scene) if frames is None else min(frames, len(scene))
    return H264Offloading(count, h264_stream_bytes(scene, count), labels_down_bytes)
