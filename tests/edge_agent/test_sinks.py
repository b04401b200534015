from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_agent.sinks import (
    PALETTE_BGR,
    CallbackSink,
    OverlayVideoSink,
    PngLabelSink,
    ThreadedSink,
    label_path,
    overlay,
)


def labels(i: int) -> np.ndarray:
    return (np.arange(48 * 64).reshape(48, 64) + i) % 9


def frame() -> np.ndarray:
    return np.full((48, 64, 3), 100, np.uint8)


def test_png_label_maps_round_trip_losslessly(tmp_path: Path) -> None:
    sink = PngLabelSink(tmp_path / "labels")
    for i in range(3):
        sink.write(i, frame(), labels(i).astype(np.uint8))
    assert sorted(p.name for p in (tmp_path / "labels").iterdir()) == ["000000.png", "000001.png", "000002.png"]
    read = cv2.imread(str(label_path(tmp_path / "labels", 2)), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(read, labels(2))


def test_overlay_paints_only_non_background_pixels() -> None:
    label_map = np.full((48, 64), 8, np.uint8)
    label_map[10:20, 10:20] = 0
    out = overlay(frame(), label_map, background=8, alpha=0.5)
    assert (out[:10] == 100).all()
    expected = (0.5 * 100 + 0.5 * PALETTE_BGR[0].astype(float)).round()
    np.testing.assert_allclose(out[15, 15], expected, atol=1)


def test_overlay_video_has_every_frame(tmp_path: Path) -> None:
    sink = OverlayVideoSink(tmp_path / "overlay.mp4", 25, background=8)
    for i in range(10):
        sink.write(i, frame(), labels(i).astype(np.uint8))
    sink.close()
    capture = cv2.VideoCapture(str(tmp_path / "overlay.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 10
    ok, first = capture.read()
    assert ok and first.shape == (48, 64, 3)


def test_threaded_sink_keeps_order_and_every_frame() -> None:
    seen: list[int] = []
    threads: set[str] = set()

    def record(index: int, _frame: np.ndarray, _labels: np.ndarray) -> None:
        seen.append(index)
        threads.add(threading.current_thread().name)

    sink = ThreadedSink([CallbackSink(record)], max_queue=2)
    for i in range(50):
        sink.write(i, frame(), labels(i))
    sink.close()
    assert seen == list(range(50)) and sink.written == 50
    assert threads == {"edge-sinks"}


def test_a_failing_sink_is_reported_not_swallowed() -> None:
    def fail(index: int, _frame: np.ndarray, _labels: np.ndarray) -> None:
        raise ValueError("a defect in the callback")

    sink = ThreadedSink([CallbackSink(fail)])
    sink.write(0, frame(), labels(0))
    with pytest.raises(RuntimeError, match="a defect in the callback"):
        sink.close()


class Recorder:
    """An OutputObserver that remembers what it was told."""

    def __init__(self) -> None:
        self.dropped: list[str] = []
        self.removed = 0

    def output_dropped(self, output: str) -> None:
        self.dropped.append(output)

    def labels_removed(self, count: int) -> None:
        self.removed += count


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def png_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.glob("*.png")}


def test_retention_by_size_keeps_the_newest_files_within_the_bound(tmp_path: Path) -> None:
    one = PngLabelSink(tmp_path / "probe")
    one.write(0, frame(), labels(0).astype(np.uint8))
    size = one.total_bytes  # every map below encodes to about this size
    recorder = Recorder()
    sink = PngLabelSink(tmp_path / "labels", max_bytes=int(size * 5.5), observer=recorder)
    for i in range(20):
        sink.write(i, frame(), labels(i).astype(np.uint8))
        on_disk = png_sizes(tmp_path / "labels")
        assert sum(on_disk.values()) == sink.total_bytes <= size * 5.5 + size // 2
    assert sorted(on_disk) == [f"{i:06d}.png" for i in range(15, 20)]  # the oldest went first
    assert recorder.removed == 15


def test_retention_by_age_removes_older_files_and_counts_files_found_at_start(tmp_path: Path) -> None:
    directory = tmp_path / "labels"
    PngLabelSink(directory).write(99, frame(), labels(0).astype(np.uint8))  # left by an earlier run
    clock, recorder = Clock(), Recorder()
    clock.now = (directory / "000099.png").stat().st_mtime + 30
    sink = PngLabelSink(directory, max_age=60, observer=recorder, clock=clock)
    assert sink.total_bytes > 0
    for i in range(6):
        sink.write(i, frame(), labels(i).astype(np.uint8))
        clock.now += 10
    # frames 0..5 written at t+30 .. t+80 (t: the earlier file's time); at t+90 the earlier file is > 60 s old
    sink.write(6, frame(), labels(6).astype(np.uint8))
    assert sorted(png_sizes(directory)) == [f"{i:06d}.png" for i in range(7)] and recorder.removed == 1
    clock.now += 1  # t+91: frame 0 (t+30) is now > 60 s old too
    sink.write(7, frame(), labels(7).astype(np.uint8))
    assert sorted(png_sizes(directory)) == [f"{i:06d}.png" for i in range(1, 8)]
    assert recorder.removed == 2 and sink.total_bytes == sum(png_sizes(directory).values())


def test_rewriting_a_name_is_not_counted_twice(tmp_path: Path) -> None:
    sink = PngLabelSink(tmp_path / "labels")
    for _ in range(3):
        sink.write(0, frame(), labels(0).astype(np.uint8))
    assert sink.total_bytes == sum(png_sizes(tmp_path / "labels").values())


def test_a_full_disk_drops_writes_and_says_so_without_stopping(full_disk: Path) -> None:
    recorder, seen = Recorder(), []
    sink = ThreadedSink([PngLabelSink(full_disk), CallbackSink(lambda i, _f, _l: seen.append(i))], observer=recorder)
    for i in range(10):
        sink.write(i, frame(), labels(i).astype(np.uint8))
    sink.close()  # no error: the writes were dropped, not fatal
    assert seen == list(range(10))  # the other outputs got every frame
    assert recorder.dropped == ["labels"] * 10 and sink.dropped == {"labels": 10} and sink.written == 0
    assert not [p for p in full_disk.glob("*.png") if p.is_file() and p.stat().st_size]  # no partial files
