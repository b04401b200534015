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
        raise OSError("disk full")

    sink = ThreadedSink([CallbackSink(fail)])
    sink.write(0, frame(), labels(0))
    with pytest.raises(RuntimeError, match="disk full"):
        sink.close()
