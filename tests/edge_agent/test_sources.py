from __future__ import annotations

import logging
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_agent.backoff import Backoff
from edge_agent.sources import SourceError, SourceSpec, VideoSource, parse_source
from tests.support.videos import DAMAGED_FRAMES, damaged_video


def write_video(path: Path, frames: int, size: tuple[int, int] = (64, 48)) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 25, size)
    for i in range(frames):
        writer.write(np.full((size[1], size[0], 3), (10 * i) % 256, np.uint8))
    writer.release()
    return path


def test_a_video_file_yields_every_frame_then_ends(tmp_path: Path) -> None:
    with VideoSource(str(write_video(tmp_path / "clip.mp4", 12))) as source:
        frames = list(source)
        assert source.fps == pytest.approx(25)
    assert len(frames) == 12
    assert all(f.shape == (48, 64, 3) and f.dtype == np.uint8 for f in frames)
    means = [f.mean() for f in frames]
    assert means == sorted(means) and means[-1] - means[0] > 80  # in order (the codec is lossy)


def test_frames_are_resized(tmp_path: Path) -> None:
    with VideoSource(str(write_video(tmp_path / "clip.mp4", 3)), resize=(32, 20)) as source:
        assert {f.shape for f in source} == {(20, 32, 3)}


def test_missing_file_names_the_source(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="video file not found: .*nope.mp4"):
        VideoSource(str(tmp_path / "nope.mp4"))


def test_a_file_that_is_no_video_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all")
    with pytest.raises(SourceError, match="junk.mp4"):
        list(VideoSource(str(junk)))


@pytest.mark.parametrize(
    "text, kind, target",
    [
        ("nvarguscamerasrc ! video/x-raw(memory:NVMM),width=1280,height=720 ! nvvidconv ! appsink",
         "gstreamer", None),
        ("videotestsrc ! videoconvert ! appsink", "gstreamer", None),
        ("0", "camera", 0),
        ("/dev/video2", "camera", "/dev/video2"),
        ("rtsp://cam.local:554/stream1", "stream", "rtsp://cam.local:554/stream1"),
        ("http://cam.local/mjpg", "stream", "http://cam.local/mjpg"),
    ],
)
def test_source_kinds(text: str, kind: str, target: object) -> None:
    spec = parse_source(text)
    assert spec.kind == kind and spec.live
    assert spec.target == (text if target is None else target)


def test_a_gstreamer_pipeline_opens_with_the_gstreamer_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple] = []

    class Capture:  # records how OpenCV was asked; this machine has no GStreamer camera
        def __init__(self, *args: object) -> None:
            opened.append(args)

        def isOpened(self) -> bool:
            return False

        def release(self) -> None:
            pass

    monkeypatch.setattr(cv2, "VideoCapture", Capture)
    with pytest.raises(SourceError, match="cannot open gstreamer source 'videotestsrc ! appsink'"):
        VideoSource("videotestsrc ! appsink")
    assert opened == [("videotestsrc ! appsink", cv2.CAP_GSTREAMER)]


class FlakyCamera:
    """A fake live capture (no camera here): ``script`` lists per open how many frames it delivers,
    or None for an open that fails."""

    def __init__(self, script: list[int | None]) -> None:
        self.script = list(script)
        self.opens = 0

    def __call__(self, spec: SourceSpec) -> FlakyCamera.Capture:
        self.opens += 1
        return self.Capture(self.script.pop(0) if self.script else None)

    class Capture:
        def __init__(self, frames: int | None) -> None:
            self.frames = frames

        def isOpened(self) -> bool:
            return self.frames is not None

        def read(self) -> tuple[bool, np.ndarray | None]:
            if not self.frames:
                return False, None
            self.frames -= 1
            return True, np.zeros((4, 6, 3), np.uint8)

        def get(self, prop: int) -> float:
            return 0.0

        def release(self) -> None:
            pass


def test_a_live_source_that_drops_is_reopened_with_backoff() -> None:
    camera = FlakyCamera([3, None, 2, 4])
    source = VideoSource("0", retries=3, backoff=Backoff(0.001, 0.002), capture_factory=camera)
    frames = []
    with pytest.raises(SourceError, match="lost camera source '0': 3 reopen attempts failed"):
        for frame in source:
            frames.append(frame)
    assert len(frames) == 3 + 2 + 4
    assert source.reopens == 2 and camera.opens == 1 + 1 + 1 + 1 + 3


def test_a_stop_interrupts_the_reopen_backoff() -> None:
    stop = threading.Event()
    source = VideoSource("rtsp://cam/x", backoff=Backoff(30, 30), capture_factory=FlakyCamera([1]), stop=stop)
    threading.Timer(0.1, stop.set).start()
    assert len(list(source)) == 1  # ended by the stop, not after 30 s


def test_an_unopenable_live_source_fails_at_once() -> None:
    with pytest.raises(SourceError, match="cannot open stream source 'rtsp://cam/x'"):
        VideoSource("rtsp://cam/x", capture_factory=FlakyCamera([None]))


def test_a_file_damaged_midway_says_at_which_frame_it_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = damaged_video(tmp_path / "damaged.mp4")
    with caplog.at_level(logging.WARNING, "edge_agent.sources"), VideoSource(str(path)) as source:
        count = sum(1 for _ in source)
    assert 0 < count < DAMAGED_FRAMES and source.stopped_early == count
    assert f"frame {count} could not be read (the file announces {DAMAGED_FRAMES} frames)" in caplog.text


def test_a_whole_file_is_not_reported_as_damaged(tmp_path: Path) -> None:
    path = write_video(tmp_path / "whole.mp4", 5)
    with VideoSource(str(path)) as source:
        assert sum(1 for _ in source) == 5 and source.stopped_early is None
