"""H.264 key-frame streams on ``WS /v1/edge``: the real app, the real ``labels`` teacher, the real
libx264 encoder and FFmpeg decoder on 64x48 frames (Starlette's in-process WebSocket test client)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.server.app import create_app
from services.server.settings import ServerSettings
from shadowtutor.protocol.messages import Error, KeyFrame, Labels, Update
from shadowtutor.protocol.video_stream import StreamDecoder, StreamEncoder, StreamFrame
from shadowtutor_lab.stress.decoder_memory import x264_units
from tests.services.conftest import wait_ready
from tests.services.server.connections.test_ws_edge import open_session
from tests.support.scene import TinyScene
from tests.support.wire import WireClient


def stream_frame(seq: int, encoded: StreamFrame, *, position: Any = "same") -> KeyFrame:
    # the labels teacher has labels for the tiny scene's first frames only
    return KeyFrame(seq=seq, frame_index=seq % 4, base_version=0, codec="h264", width=64, height=48,
                    stream_position=encoded.position if position == "same" else position, payload=encoded.payload)


def refused(wire: WireClient, seq: int, says: str) -> None:
    error = wire.expect(Error)
    assert (error.code, error.fatal, error.seq) == ("bad_frame", False, seq)
    assert says in error.message


def test_the_server_offers_h264_first_to_an_edge_that_prefers_it(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        _, welcome = open_session(ws, scene, frame_codecs=["h264", "jpeg", "raw"])
    assert welcome.frame_codec == "h264"


def test_an_older_edge_offering_images_only_gets_jpeg(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        _, welcome = open_session(ws, scene, frame_codecs=["jpeg", "raw"])
    assert welcome.frame_codec == "jpeg"


def test_a_server_allowing_images_only_gets_the_edge_to_jpeg(settings: ServerSettings, scene: TinyScene) -> None:
    with TestClient(create_app(settings.model_copy(update={"frame_codecs": ("jpeg", "raw")}))) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as ws:
            _, welcome = open_session(ws, scene, frame_codecs=["h264", "jpeg", "raw"])
    assert welcome.frame_codec == "jpeg"


def test_a_stream_survives_loss_and_reordering_by_restarting_from_an_intra_frame(
    client: TestClient, scene: TinyScene
) -> None:
    encoder = StreamEncoder(64, 48)
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene, mode="naive", frame_codecs=["h264"])
        for seq in range(2):
            wire.send(stream_frame(seq, encoder.encode(scene.frames[seq])))
            assert wire.expect(Labels).seq == seq
        encoder.encode(scene.frames[2])  # lost on the way
        wire.send(stream_frame(3, encoder.encode(scene.frames[3])))
        refused(wire, 3, "inter frame at stream position 3 does not follow position 1")
        # reordered: position 2 arrives after position 3; the decoder waits for an intra frame
        wire.send(stream_frame(4, StreamEncoder(64, 48).encode(scene.frames[2]), position=2))
        refused(wire, 4, "send an intra frame")
        encoder.restart()
        for seq in (5, 6):
            wire.send(stream_frame(seq, encoder.encode(scene.frames[seq - 3])))
            assert wire.expect(Labels).seq == seq


def test_a_reconnected_edge_starts_from_an_intra_frame(client: TestClient, scene: TinyScene) -> None:
    encoder = StreamEncoder(64, 48)
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene, frame_codecs=["h264"])
        wire.send(stream_frame(0, encoder.encode(scene.frames[0])))
        assert wire.expect(Update).seq == 0
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene, frame_codecs=["h264"])
        wire.send(stream_frame(1, encoder.encode(scene.frames[1])))
        refused(wire, 1, "does not follow no stream")
        encoder.restart()
        wire.send(stream_frame(2, encoder.encode(scene.frames[2])))
        assert wire.expect(Update).seq == 2


def test_bad_stream_frames_are_refused_and_the_session_goes_on(client: TestClient, scene: TinyScene) -> None:
    intra = StreamEncoder(64, 48).encode(scene.frames[0])
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene, mode="naive", frame_codecs=["h264"])
        wire.send(stream_frame(0, StreamFrame(b"\x00\x00\x00\x01garbage", 0)))
        refused(wire, 0, "send an intra frame")
        wire.send(stream_frame(1, intra, position=None))
        refused(wire, 1, "needs its stream_position")
        wire.send(stream_frame(2, StreamEncoder(128, 96).encode(scene.frames[0].repeat(2, 0).repeat(2, 1))))
        refused(wire, 2, "expected 64x48")
        wire.send(stream_frame(3, intra))
        assert wire.expect(Labels).seq == 3


def test_odd_frame_sides_are_not_streamed(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        _, welcome = open_session(ws, scene, frame_width=63, frame_codecs=["h264", "jpeg"])
    assert welcome.frame_codec == "jpeg"


def test_a_stream_asking_for_16_reference_frames_is_refused_and_decoders_close_with_their_session(
    client: TestClient, scene: TinyScene, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[StreamDecoder] = []
    close = StreamDecoder.close
    monkeypatch.setattr(StreamDecoder, "close", lambda self: (closed.append(self), close(self))[-1])
    many = x264_units([scene.frames[0]], refs=16)[0]
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene, mode="naive", frame_codecs=["h264"])
        wire.send(stream_frame(0, StreamFrame(many, 0)))
        refused(wire, 0, "asks for 16 reference frames, at most 4 are kept")
        wire.send(stream_frame(1, StreamEncoder(64, 48).encode(scene.frames[1])))
        assert wire.expect(Labels).seq == 1
    deadline = time.monotonic() + 10
    while not closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(closed) == 1 and closed[0].last_position is None
