"""Frames across the in-process link with the real encoders and decoders (libx264, OpenCV)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor.scene_store import Scene
from shadowtutor.teachers.labels import LabelsTeacher
from shadowtutor_lab.evaluation.evaluate import naive_offloading
from shadowtutor_lab.evaluation.frame_link import FrameLink
from shadowtutor_lab.evaluation.h264_baseline import h264_stream_bytes


def test_an_h264_link_delivers_a_stream_at_the_scale_and_counts_whole_messages(tiny_scene: Path) -> None:
    frames = list(Scene.open(tiny_scene).frames())[:4]
    link = FrameLink("h264", scale=0.5)
    delivered = [link.send(i, f) for i, f in enumerate(frames)]
    assert all(d.frame.shape == (32, 48, 3) and d.frame.flags.writeable for d in delivered)
    assert all(d.payload_bytes < d.message_bytes < d.payload_bytes + 200 for d in delivered)
    assert delivered[0].payload_bytes > max(d.payload_bytes for d in delivered[1:])  # intra, then inter frames
    # bytes alone: the same encoder, the same bytes
    sizes = [FrameLink("h264", scale=0.5).send(0, frames[0], decode=False).message_bytes]
    assert sizes == [delivered[0].message_bytes]


def test_bad_links_are_refused() -> None:
    with pytest.raises(ValueError, match="frame codec"):
        FrameLink("gif")
    with pytest.raises(ValueError, match="quality"):
        FrameLink("jpeg", 101)
    with pytest.raises(ValueError, match="scale"):
        FrameLink("h264", scale=2.0)


def test_naive_offloading_as_an_h264_stream_sends_fewer_bytes_than_jpeg_per_frame(tiny_scene: Path) -> None:
    scene = Scene.open(tiny_scene)
    teacher = LabelsTeacher(tiny_scene)
    runs = naive_offloading(scene, 10, teacher, {"h264": FrameLink("h264"), "jpeg": FrameLink("jpeg", 80)}, False)
    assert runs["h264"].up < runs["jpeg"].up
    assert all(len(run.miou) == 10 for run in runs.values())
    # the stored labels teacher answers the same whatever the frame looks like: full marks, equal labels down
    assert runs["h264"].miou == pytest.approx([1.0] * 10) and runs["h264"].down == runs["jpeg"].down
    # the demo's baseline counts the same stream's access units: the messages less their headers
    headers = runs["h264"].up * 10 - h264_stream_bytes(scene, 10)
    assert 10 * 50 < headers < 10 * 200
