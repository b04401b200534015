"""Helpers of the tests that run the Ray Serve server on a real local Ray cluster with simulated cameras
(the load benchmark's, real WebSocket edges): start them, drive them, and read where their sessions are."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from services.checkpoints.session import header
from services.checkpoints.store import DirectoryStore
from shadowtutor_lab.stress.load_edge import SimulatedCamera
from tests.support.scene import TinyScene


def wait_ready(base: str, timeout: float = 120.0) -> None:
    """Until ``base``/readyz answers 200; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{base}/readyz never answered 200")
        time.sleep(0.5)


def start_cameras(base: str, scene: TinyScene, prefix: str, count: int) -> list[SimulatedCamera]:
    """``count`` distill cameras ``PREFIX-i`` connected to ``base`` (http://HOST:PORT), each with its WELCOME."""
    url = base.replace("http://", "ws://") + "/v1/edge"
    cameras = [SimulatedCamera(i, url, f"{prefix}-{i}", scene.class_names, scene.frames, stride=1,
                               answer_timeout=60.0) for i in range(count)]
    for camera in cameras:
        camera.start()
    for camera in cameras:
        camera.wait_welcome(60.0)
    return cameras


def run_cameras(cameras: Sequence[SimulatedCamera], seconds: float, rate: float,
                stop: threading.Event | None = None) -> list[threading.Thread]:
    """The cameras send key frames at ``rate`` per second, phases spread, for ``seconds`` or until ``stop``
    is set, each in a thread (started; join them)."""
    start = time.monotonic()
    stop = stop or threading.Event()
    threads = [threading.Thread(target=c.run, args=(start, start + seconds, rate, i / (len(cameras) * rate), stop))
               for i, c in enumerate(cameras)]
    for thread in threads:
        thread.start()
    return threads


@contextmanager
def cameras_running(cameras: Sequence[SimulatedCamera], rate: float, seconds: float = 120.0) -> Iterator[None]:
    """The cameras send key frames (:func:`run_cameras`) while the block runs; stopped and joined after."""
    stop = threading.Event()
    threads = run_cameras(cameras, seconds, rate, stop)
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def writers(store: DirectoryStore, cameras: Sequence[SimulatedCamera]) -> dict[str, str]:
    """Edge id -> "HOST:PID" of the replica that wrote its session's latest checkpoint."""
    found = {}
    for camera in cameras:
        data = store.load(camera.result.edge_id, camera.session.session_id)
        if data is not None:
            found[camera.result.edge_id] = str(header(data)["writer"])
    return found


def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until ``condition()`` holds; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def check_no_key_frame_lost(store: DirectoryStore, cameras: Sequence[SimulatedCamera]) -> None:
    """Every key frame answered without error, on the WebSocket it started with, versions one after
    another and never a full download after the WELCOME (also for edges whose replica was killed: every
    UPDATE's journal entry is stored before it leaves), the edge's version the store's."""
    for camera in cameras:
        result = camera.result
        assert result.records, result.edge_id
        assert all(r.turnaround is not None for r in result.records), f"{result.edge_id}: a key frame unanswered"
        assert result.errors == {} and result.failure is None, (result.edge_id, result.errors, result.failure)
        assert (result.disconnects, result.sessions) == (0, 1), result.edge_id
        assert (result.rejected_updates, result.resyncs) == (0, 0), result.edge_id
        assert result.full_answers == 0, result.edge_id
        count = len(result.records)
        assert camera.student.version == count, result.edge_id

        def stored(camera: SimulatedCamera = camera) -> object:
            return header(store.load(camera.result.edge_id, camera.session.session_id))["version"]

        until(lambda stored=stored, count=count: stored() == count, timeout=10.0)
