"""A simulated camera against the stand-in server (tests/support/stand_in_server.py); the real server is in
tests/lab/cli/test_bench_load.py. The stand-in lets a test provoke errors, stale updates and a crash."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.protocol.messages import KeyFrame
from shadowtutor_lab.stress.load_edge import SimulatedCamera
from tests.support.stand_in_server import StandInServer

FRAMES = [np.full((24, 32, 3), i * 20, np.uint8) for i in range(5)]


@pytest.fixture
def server() -> Iterator[StandInServer]:
    stand_in = StandInServer().start()
    yield stand_in
    if stand_in._thread.is_alive():
        stand_in.kill()


def camera(server: StandInServer, mode: str = "distill") -> SimulatedCamera:
    cam = SimulatedCamera(0, server.url, "cam-0", LVS_CLASSES, FRAMES, mode, stride=2, answer_timeout=5)
    cam.start()
    cam.wait_welcome(10)
    return cam


def run(cam: SimulatedCamera, seconds: float, rate: float = 20.0, during: float | None = None,
        action: object = None) -> None:
    """Run the camera for ``seconds``; ``action()`` is called ``during`` seconds in."""
    start = time.monotonic()
    thread = threading.Thread(target=cam.run, args=(start, start + seconds, rate, 0.0, threading.Event()))
    thread.start()
    if action is not None:
        time.sleep(during)
        action()
    thread.join(30)
    assert not thread.is_alive()


def test_every_key_frame_names_the_version_the_camera_holds(server: StandInServer) -> None:
    cam = camera(server)
    run(cam, 0.6)
    result = cam.result
    assert len(result.records) >= 5
    assert all(r.turnaround is not None and r.turnaround >= 0 for r in result.records)
    assert (result.errors, result.disconnects, result.resyncs, result.full_answers, result.rejected_updates) == (
        {}, 0, 0, 0, 0)
    session = server.sessions[0]
    key_frames = [m for m in session.received if isinstance(m, KeyFrame)]
    assert [k.base_version for k in key_frames] == list(range(len(key_frames)))
    assert [k.frame_index for k in key_frames][:3] == [0, 2, 4]  # stepping through the scene by the stride
    assert cam.student.version == session.version == len(key_frames)
    for name, value in session.state.items():  # the held weights are the server's, bit for bit
        assert torch.equal(cam.student.held.state[name], value), name
    assert result.sessions == 1 and result.bytes_sent > 0 and result.bytes_received > 0


def test_rate_paces_the_key_frames(server: StandInServer) -> None:
    cam = camera(server)
    run(cam, 1.0, rate=5.0)
    sent = [r.sent_at for r in cam.result.records]
    assert len(sent) == 5
    assert np.diff(sent) == pytest.approx([0.2] * 4, abs=0.1)  # on schedule, not as fast as answers come


def test_server_errors_are_counted_by_code_and_leave_the_frame_unanswered(server: StandInServer) -> None:
    server.fail_next = True
    cam = camera(server)
    run(cam, 0.3)
    assert cam.result.errors == {"teacher_failed": 1}
    assert cam.result.records[0].turnaround is None
    assert all(r.turnaround is not None for r in cam.result.records[1:])


def test_an_update_on_another_base_is_refused_and_counted_as_a_resync(server: StandInServer) -> None:
    server.stale_next = True
    cam = camera(server)
    run(cam, 0.4)
    assert cam.result.rejected_updates == 1 and cam.result.resyncs == 1
    assert cam.student.version == server.sessions[0].version  # the resync's full update put them back in step


def test_naive_mode_gets_labels_for_every_key_frame(server: StandInServer) -> None:
    cam = camera(server, "naive")
    run(cam, 0.3)
    assert cam.student is None
    assert len(cam.result.records) >= 3 and all(r.turnaround is not None for r in cam.result.records)


def test_a_server_crash_counts_as_a_disconnect_with_unanswered_frames(server: StandInServer) -> None:
    cam = camera(server)
    run(cam, 0.8, during=0.3, action=server.kill)
    assert cam.result.disconnects == 1
    assert any(r.turnaround is None for r in cam.result.records)  # sent while the server was gone


def test_camera_refuses_a_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        SimulatedCamera(0, "ws://127.0.0.1:1/v1/edge", "cam", LVS_CLASSES, FRAMES, "both")
