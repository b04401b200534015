"""Naive offloading as a camera does it: every frame up as one H.264 stream, the labels down.

The stream runs on the scene's clock (its frame rate is the encoder's, docs/design/clock.md), at the
edge agent's quality (CRF :data:`~shadowtutor.protocol.video_stream.H264_CRF`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from shadowtutor.protocol.video_stream import H264_CRF, H264_PRESET
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.frame_link import FrameLink


@dataclass(frozen=True)
class H264Offloading:
    """Bytes of H.264 offloading over ``frames`` frames: the stream up, the label maps down; the stream's
    frame rate and CRF; ``teacher_miou``: the teacher's mean mIoU (%) on the decoded frames against its
    labels of the frames as stored, where measured (None: not measured)."""

    frames: int
    up_bytes: int
    down_bytes: int
    fps: float
    crf: int = H264_CRF
    preset: str = H264_PRESET
    teacher_miou: float | None = None

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
    """Bytes of the scene's first ``frames`` (None: all) as one H.264 stream at the scene's frame rate, the
    edge agent's encoder (:class:`~shadowtutor_lab.evaluation.frame_link.FrameLink`, one intra frame first):
    the access units alone; an odd side loses its last pixel row or column (H.264 needs even sides)."""
    width, height = scene.meta.width & ~1, scene.meta.height & ~1
    link = FrameLink("h264", fps=scene.meta.fps)
    count = len(scene) if frames is None else min(frames, len(scene))
    return sum(link.send(index, frame[:height, :width], decode=False).payload_bytes
               for index, frame in enumerate(itertools.islice(scene.frames(), count)))


def h264_offloading(scene: Scene, labels_down_bytes: int, frames: int | None = None,
                    teacher_miou: float | None = None) -> H264Offloading:
    """H.264 offloading of the scene's first ``frames`` (None: all), with the label bytes a naive run
    received for the same frames and the teacher's mIoU on the decoded frames where measured."""
    count = len(scene) if frames is None else min(frames, len(scene))
    return H264Offloading(count, h264_stream_bytes(scene, count), labels_down_bytes, scene.meta.fps,
                          teacher_miou=teacher_miou)
