"""Protocol flows of ``WS /v1/edge`` against the real app, the real ``labels`` teacher on a tiny
scene, real distillation and the real codecs (Starlette's in-process WebSocket test client)."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from services.server.app import create_app
from services.server.connections.ws_edge import EdgeConnection
from services.server.settings import ServerSettings
from services.server.teaching import distillation
from shadowtutor.algorithms.batched_distill import KeyFrameJob
from shadowtutor.algorithms.distill import DistillResult
from shadowtutor.algorithms.engine_options import Convolution, Objective
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.codecs import decode_labels, decode_tensors, encode_frame
from shadowtutor.protocol.errors import CloseCode, ErrorCode
from shadowtutor.protocol.messages import Error, Hello, KeyFrame, Labels, ResyncRequest, Telemetry, Update, Welcome
from shadowtutor.teachers.base import TeacherBase
from tests.services.conftest import wait_ready
from tests.support.prometheus import sample_value
from tests.support.scene import TinyScene
from tests.support.wire import WireClient


def hello(scene: TinyScene, **overrides: Any) -> Hello:
    fields: dict[str, Any] = dict(
        edge_id="cam-1", class_names=list(scene.class_names), frame_width=64, frame_height=48, agent="pytest"
    )
    return Hello(**{**fields, **overrides})


def key_frame(scene: TinyScene, seq: int, base_version: int, *, index: int | None = None, codec: str = "raw",
              frame: np.ndarray | None = None) -> KeyFrame:
    frame = scene.frames[seq] if frame is None else frame
    return KeyFrame(
        seq=seq, frame_index=seq if index is None else index, base_version=base_version, codec=codec,
        width=frame.shape[1], height=frame.shape[0], payload=encode_frame(frame, codec),
    )


def open_session(ws: Any, scene: TinyScene, **overrides: Any) -> tuple[WireClient, Welcome]:
    wire = WireClient(ws)
    wire.send(hello(scene, **overrides))
    return wire, wire.expect(Welcome)


def expect_close(wire: WireClient, code: ErrorCode) -> Error:
    error = wire.expect(Error)
    assert (error.code, error.fatal) == (code.value, True)
    with pytest.raises(WebSocketDisconnect) as closed:
        wire.ws.receive_bytes()
    assert closed.value.code == code.close
    return error


def apply(model: StudentNet, message: Welcome | Update, codec: str) -> None:
    tensors = decode_tensors(message.tensors, message.payload, codec)
    model.load_state_dict(tensors, strict=isinstance(message, Welcome) or message.full)


def test_hello_gets_welcome_with_the_full_student(client: TestClient, scene: TinyScene, student_path) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        _, welcome = open_session(ws, scene, weight_codecs=["f16+zstd", "f32"])
    assert welcome.version == 0 and welcome.class_names == list(scene.class_names)
    assert welcome.weight_codec == "f16+zstd" and welcome.frame_codec == "raw"
    assert welcome.params["min_stride"] == 8 and welcome.params["max_updates"] == 2
    model = StudentNet(len(scene.class_names))
    apply(model, welcome, welcome.weight_codec)  # strict: every tensor present, shapes right
    expected = load_student(student_path).model.state_dict()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], atol=2e-3, rtol=1e-3)  # float16 on the wire


def test_a_one_process_server_answers_a_resume_with_a_new_session(client: TestClient, scene: TinyScene) -> None:
    """It keeps no session past its connection: the edge gets a new session id and full weights."""
    with client.websocket_connect("/v1/edge") as ws:
        _, first = open_session(ws, scene)
    with client.websocket_connect("/v1/edge") as ws:
        _, welcome = open_session(ws, scene, resume_session_id=first.session_id, resume_version=0)
    assert not welcome.resumed and welcome.session_id != first.session_id and welcome.tensors


def test_key_frame_gets_partial_update_then_resync_matches_edge(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, welcome = open_session(ws, scene)
        edge = StudentNet(len(scene.class_names))
        apply(edge, welcome, "f32")

        wire.send(key_frame(scene, seq=0, base_version=0))
        update = wire.expect(Update)
        assert (update.seq, update.base_version, update.version, update.full) == (0, 0, 1, False)
        assert [t["name"] for t in update.tensors] == edge.trainable_keys("partial")
        assert 1 <= update.steps <= 2 and 0.0 <= update.initial_metric <= update.metric <= 1.0
        assert update.teacher_ms > 0 and update.distill_ms > 0
        apply(edge, update, "f32")

        wire.send(key_frame(scene, seq=1, base_version=1, codec="jpeg"))
        second = wire.expect(Update)
        assert (second.base_version, second.version, second.full) == (1, 2, False)
        apply(edge, second, "f32")

        wire.send(ResyncRequest(have_version=2, reason="test: compare"))
        resync = wire.expect(Update)
        assert (resync.seq, resync.base_version, resync.version, resync.full, resync.steps) == (1, 2, 3, True, 0)
        assert resync.metric == second.metric
        full = decode_tensors(resync.tensors, resync.payload, "f32")
    # the partial updates carried every tensor that changed: the edge's model is the server's
    assert set(full) == set(edge.state_dict())
    for name, tensor in edge.state_dict().items():
        torch.testing.assert_close(tensor, full[name], atol=0, rtol=0)


def test_stale_base_version_gets_a_full_update(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        wire.send(key_frame(scene, seq=0, base_version=7))
        update = wire.expect(Update)
        assert (update.base_version, update.version, update.full) == (7, 1, True)
        assert len(update.tensors) == len(StudentNet(3).state_dict())


def test_queued_key_frames_are_answered_in_order(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        for seq in range(3):  # the edge holds version 0 for all of them
            wire.send(key_frame(scene, seq=seq, base_version=0))
        updates = [wire.expect(Update) for _ in range(3)]
    assert [(u.seq, u.version, u.full) for u in updates] == [(0, 1, False), (1, 2, True), (2, 3, True)]


def test_naive_mode_returns_the_teacher_labels(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, welcome = open_session(ws, scene, mode="naive", frame_codecs=["png"])
        assert welcome.tensors == [] and welcome.payload == b"" and welcome.frame_codec == "png"
        for seq in (0, 3):
            wire.send(key_frame(scene, seq=seq, base_version=0, codec="png"))
            labels = wire.expect(Labels)
            assert (labels.seq, labels.frame_index, labels.codec) == (seq, seq, "png")
            decoded = decode_labels(labels.payload, labels.codec, labels.width, labels.height)
            np.testing.assert_array_equal(decoded, scene.labels[seq])
        sessions = client.get("/v1/sessions").json()["sessions"]
    assert sessions[0]["mode"] == "naive" and sessions[0]["key_frames"] == 2


def test_malformed_message_closes_only_that_session(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as good_ws, client.websocket_connect("/v1/edge") as bad_ws:
        good, _ = open_session(good_ws, scene, edge_id="good")
        bad, _ = open_session(bad_ws, scene, edge_id="bad")
        bad.send_raw(b"ST\x01\x03\x00\x00\x00\x05{oops")
        expect_close(bad, ErrorCode.BAD_MESSAGE)
        good.send(key_frame(scene, seq=0, base_version=0))
        assert good.expect(Update).version == 1
        assert [s["edge_id"] for s in client.get("/v1/sessions").json()["sessions"]] == ["good"]


def test_first_message_must_be_hello(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire = WireClient(ws)
        wire.send(key_frame(scene, seq=0, base_version=0))
        expect_close(wire, ErrorCode.UNEXPECTED_MESSAGE)


def test_wrong_frame_size_is_not_fatal(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        wire.send(key_frame(scene, seq=0, base_version=0, frame=scene.frames[0][:40, :60]))
        error = wire.expect(Error)
        assert (error.code, error.fatal, error.seq) == ("bad_frame", False, 0)
        truncated = key_frame(scene, seq=1, base_version=0)
        truncated.payload = truncated.payload[:-10]
        wire.send(truncated)
        assert (wire.expect(Error).code, 1) == ("bad_frame", 1)
        wire.send(key_frame(scene, seq=2, base_version=0))
        assert wire.expect(Update).seq == 2


def test_teacher_failure_on_one_frame_is_not_fatal(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        wire.send(key_frame(scene, seq=0, base_version=0, index=999))  # the scene has no label for it
        error = wire.expect(Error)
        assert (error.code, error.fatal, error.seq) == ("teacher_failed", False, 0)
        assert "999" in error.message
        wire.send(key_frame(scene, seq=1, base_version=0))
        assert wire.expect(Update).version == 1
    metrics = client.get("/metrics").text
    assert sample_value(metrics, "shadowtutor_server_errors_total", code="teacher_failed") == 1


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"class_names": ["person", "background", "auto"]}, ErrorCode.INCOMPATIBLE_MODEL),
        ({"student_arch": "resnet"}, ErrorCode.INCOMPATIBLE_MODEL),
        ({"frame_width": 4000}, ErrorCode.BAD_FRAME),
        ({"weight_codecs": ["int4"]}, ErrorCode.UNSUPPORTED_CODEC),
    ],
)
def test_incompatible_hello_is_fatal(client: TestClient, scene: TinyScene, overrides: dict, code: ErrorCode) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire = WireClient(ws)
        wire.send(hello(scene, **overrides))
        expect_close(wire, code)
    assert client.get("/v1/sessions").json()["sessions"] == []


def test_session_limit_gives_server_busy(settings: ServerSettings, scene: TinyScene) -> None:
    with TestClient(create_app(settings.model_copy(update={"max_sessions": 1}))) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as first:
            open_session(first, scene, edge_id="first")
            with client.websocket_connect("/v1/edge") as second:
                wire = WireClient(second)
                wire.send(hello(scene, edge_id="second"))
                error = expect_close(wire, ErrorCode.SERVER_BUSY)
                assert error.code == "server_busy" and ErrorCode.SERVER_BUSY.close == CloseCode.TRY_AGAIN_LATER
        with client.websocket_connect("/v1/edge") as third:  # the slot is free again
            open_session(third, scene, edge_id="third")


def test_message_over_the_size_limit_is_fatal(settings: ServerSettings, scene: TinyScene) -> None:
    with TestClient(create_app(settings.model_copy(update={"max_message_bytes": 4096}))) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as ws:
            wire = WireClient(ws)
            wire.send(hello(scene, weight_codecs=["f16+zstd"]))
            wire.ws.receive_bytes()  # WELCOME: the limit is on what the edge sends
            wire.send(key_frame(scene, seq=0, base_version=0))  # raw 64x48: 9,216 bytes
            assert "exceeds the limit of 4096" in expect_close(wire, ErrorCode.TOO_LARGE).message


def test_metrics_count_the_exact_bytes(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        wire.send(key_frame(scene, seq=0, base_version=0, codec="jpeg"))
        wire.expect(Update)
        wire.send(key_frame(scene, seq=1, base_version=0, frame=scene.frames[1][:8]))
        wire.expect(Error)
        session = client.get("/v1/sessions").json()["sessions"][0]
        assert (session["bytes_in"], session["bytes_out"]) == (wire.bytes_sent, wire.bytes_received)
        assert session["key_frames"] == 2 and session["errors"] == 1 and session["version"] == 1
        assert "token" not in session
    text = client.get("/metrics").text
    assert sample_value(text, "shadowtutor_server_received_bytes_total") == wire.bytes_sent
    assert sample_value(text, "shadowtutor_server_sent_bytes_total") == wire.bytes_received
    assert sample_value(text, "shadowtutor_server_key_frames_total", mode="distill") == 2
    assert sample_value(text, "shadowtutor_server_errors_total", code="bad_frame") == 1
    assert sample_value(text, "shadowtutor_server_distill_latency_seconds_count") == 1
    assert sample_value(text, "shadowtutor_server_teacher_latency_seconds_count") == 1
    assert sample_value(text, "shadowtutor_server_distill_steps_total") >= 1
    assert sample_value(text, "shadowtutor_server_sessions") == 0


class GateTeacher(TeacherBase):
    """Stands in for a real backend whose inference takes long: labelling blocks until released."""

    name = "gate"
    device = "cpu"

    def __init__(self, class_names: tuple[str, ...], labels: list[np.ndarray]) -> None:
        self.class_names = class_names
        self.labels = labels
        self.entered = threading.Event()
        self.release = threading.Event()

    def _label_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[np.ndarray]:
        assert frame_indices is not None
        self.entered.set()
        if not self.release.wait(30):
            raise TimeoutError("the test never released the teacher")
        return [self.labels[index] for index in frame_indices]


def test_server_stays_responsive_while_the_teacher_works(settings: ServerSettings, scene: TinyScene) -> None:
    teacher = GateTeacher(scene.class_names, scene.labels)
    with TestClient(create_app(settings, teacher=teacher)) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as ws:
            wire, _ = open_session(ws, scene)
            wire.send(key_frame(scene, seq=0, base_version=0))
            try:
                assert teacher.entered.wait(10)
                start = time.monotonic()
                assert client.get("/healthz").json() == {"status": "ok"}
                assert client.get("/v1/sessions").json()["sessions"][0]["key_frames"] == 1
                with client.websocket_connect("/v1/edge") as other_ws:  # another edge can still connect
                    open_session(other_ws, scene, edge_id="other")
                assert time.monotonic() - start < 5
            finally:
                teacher.release.set()
            assert wire.expect(Update).version == 1


def test_a_task_failing_while_the_session_ends_is_not_logged_as_unretrieved(
    client: TestClient, scene: TinyScene, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # found by `shadowtutor fuzz` (an edge sending RESYNC_REQUEST and hanging up at once): the worker's send
    # failed as it was cancelled, asyncio.wait_for then raises the send's error instead of CancelledError,
    # and asyncio logged "Task exception was never retrieved" with a traceback. This worker does the same.
    failed = threading.Event()

    async def work(self: EdgeConnection, inbox: Any) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            failed.set()
            raise WebSocketDisconnect(1006) from None

    monkeypatch.setattr(EdgeConnection, "_work", work)
    with caplog.at_level(logging.ERROR), client.websocket_connect("/v1/edge") as ws:
        open_session(ws, scene)
    assert failed.wait(10)
    time.sleep(0.2)  # the connection's handler returns
    gc.collect()
    assert "never retrieved" not in caplog.text


def telemetry(frames: int, **fields: Any) -> Telemetry:
    return Telemetry(frames=frames, key_frames=1, updates_applied=1, resyncs=0, reconnects=0, bytes_sent=100,
                     bytes_received=200, waited_seconds=0.0, **fields)


def test_telemetry_becomes_the_edges_series_on_metrics(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, welcome = open_session(ws, scene, edge_id="cam-7")
        assert welcome.telemetry_interval == 10.0  # the default edge_report_interval
        wire.send(telemetry(5))
        wire.send(telemetry(9, stride=8, student_metric=0.5, weights_version=1, regions={"segment": 8, "flow": 28},
                            output_dropped={"labels": 3}))
        wire.send(key_frame(scene, seq=0, base_version=0))  # answered after both reports were read
        wire.expect(Update)
        text = client.get("/metrics").text
        assert sample_value(text, "shadowtutor_server_edge_frames_total", edge_id="cam-7") == 9
        assert sample_value(text, "shadowtutor_server_edge_student_metric", edge_id="cam-7") == 0.5
        assert sample_value(text, "shadowtutor_server_edge_connected", edge_id="cam-7") == 1
        assert sample_value(text, "shadowtutor_server_edge_regions_total", edge_id="cam-7", path="flow") == 28
        assert sample_value(text, "shadowtutor_server_edge_output_dropped_total", edge_id="cam-7", output="labels") == 3
    text = client.get("/metrics").text
    assert sample_value(text, "shadowtutor_server_edge_connected", edge_id="cam-7") == 0  # kept a while


@pytest.mark.parametrize("fields", [dict(frames=-3), dict(changed_fraction={"not_a_student_layer": 0.5}),
                                    dict(regions={"segment": 1, "teleport": 2})])
def test_telemetry_with_impossible_values_is_a_bad_message(
    client: TestClient, scene: TinyScene, fields: dict[str, Any]
) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        wire.send(telemetry(**{"frames": 1, **fields}))
        assert f"TELEMETRY.{next(iter(fields))}" in expect_close(wire, ErrorCode.BAD_MESSAGE).message


def test_telemetry_the_server_did_not_ask_for_is_unexpected(settings: ServerSettings, scene: TinyScene) -> None:
    with TestClient(create_app(settings.model_copy(update={"edge_report_interval": 0.0}))) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as ws:
            wire, welcome = open_session(ws, scene)
            assert welcome.telemetry_interval is None
            wire.send(telemetry(1))
            expect_close(wire, ErrorCode.UNEXPECTED_MESSAGE)


def test_a_student_size_reaches_the_welcome_and_the_server_trains_on_what_the_edge_sees(
    client: TestClient, scene: TinyScene
) -> None:
    from shadowtutor.algorithms.metrics import miou
    from shadowtutor.models.inference import ReferenceBackend
    from shadowtutor.models.scale import frame_to_student, labels_to_student

    size = (96, 64)  # the tiny scene's frames are 64x48: up-scaled here, the same code path as down
    with client.websocket_connect("/v1/edge") as ws:
        wire, welcome = open_session(ws, scene, student_size=list(size))
        assert welcome.student_size == list(size)
        edge = StudentNet(len(scene.class_names))
        apply(edge, welcome, "f32")
        wire.send(key_frame(scene, seq=0, base_version=0))
        update = wire.expect(Update)
    seen = ReferenceBackend(edge).infer(frame_to_student(scene.frames[0], size))
    truth = labels_to_student(scene.labels[0], size)
    assert update.initial_metric == pytest.approx(miou(seen, truth, len(scene.class_names)), abs=1e-6)


@pytest.mark.parametrize(("convolution", "precision", "graphs", "objective"),
                         [("grouped", "fp32", False, "eager"), ("matmul", "tf32", True, "compiled"),
                          ("grouped", "bf16", False, "eager")])
def test_the_batched_engine_serves_concurrent_sessions_and_the_edge_holds_the_servers_student(
    settings: ServerSettings, scene: TinyScene, convolution: Convolution, precision: str, graphs: bool,
    objective: Objective, monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, str, bool, str]] = []
    original = distillation.distill_batch

    def recording(jobs: list[KeyFrameJob], how: Convolution, replayed: bool, loss: Objective) -> list[DistillResult]:
        asked.extend((how, job.distiller.precision, replayed, loss) for job in jobs)
        # trained with the eager objective: compiling would add 10 s here, and the compiled objective's results
        # are tested against each session's own distiller in tests/shadowtutor/algorithms/test_batched_distill.py
        return original(jobs, how, replayed, "eager")

    monkeypatch.setattr(distillation, "distill_batch", recording)
    batched = settings.model_copy(update={
        "distill_engine": "batched", "distill_batch_size": 8, "distill_convolution": convolution,
        "distill_precision": precision, "distill_graphs": graphs, "distill_objective": objective,
    })
    with TestClient(create_app(batched)) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as ws_a, client.websocket_connect("/v1/edge") as ws_b:
            wires = [open_session(ws, scene, edge_id=f"cam-{i}") for i, ws in enumerate((ws_a, ws_b))]
            edges = []
            for _, welcome in wires:
                edge = StudentNet(len(scene.class_names))
                apply(edge, welcome, "f32")
                edges.append(edge)
            for seq in range(2):
                for wire, _ in wires:
                    wire.send(key_frame(scene, seq=seq, base_version=seq))
                for (wire, _), edge in zip(wires, edges, strict=True):
                    update = wire.expect(Update)
                    assert (update.seq, update.version, update.full) == (seq, seq + 1, False)
                    apply(edge, update, "f32")
            for (wire, _), edge in zip(wires, edges, strict=True):
                wire.send(ResyncRequest(have_version=2, reason="test: compare"))
                full = decode_tensors(*_tensors_of(wire.expect(Update)), "f32")
                for name, tensor in edge.state_dict().items():
                    torch.testing.assert_close(tensor, full[name], atol=0, rtol=0)
        text = client.get("/metrics").text
    assert sample_value(text, "shadowtutor_server_engine_batch_size_sum") == 4
    assert sample_value(text, "shadowtutor_server_engine_queue_wait_seconds_count") == 4
    assert sample_value(text, "shadowtutor_server_distill_latency_seconds_count") == 4
    assert set(asked) == {(convolution, precision, graphs, objective)}


def _tensors_of(update: Update) -> tuple[list, bytes]:
    return update.tensors, update.payload


def test_a_gating_server_holds_back_training_until_it_pays_and_shows_it_on_metrics(
    settings: ServerSettings, scene: TinyScene
) -> None:
    """Nothing pays by gain here (1.0); the interval (2) sends the training the first answer held back."""
    gated = settings.model_copy(update={"update_gating": True, "update_min_gain": 1.0, "update_max_interval": 2})
    with TestClient(create_app(gated)) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/edge") as ws:
            wire, welcome = open_session(ws, scene, update_gating=True, downlink_budget_bps=50_000.0,
                                         weight_codecs=["q8delta+zstd", "f32"])
            assert welcome.update_gating and welcome.params["update_policy"]["downlink_bps"] == 50_000.0
            wire.send(key_frame(scene, seq=0, base_version=0))
            held = wire.expect(Update)
            assert held.held_back and (held.tensors, held.payload, held.version) == ([], b"", 1) and held.steps >= 1
            wire.send(key_frame(scene, seq=1, base_version=1))
            sent = wire.expect(Update)
            assert not sent.held_back and sent.tensors and sent.version == 2
            session = client.get("/v1/sessions").json()["sessions"][0]
            assert session["updates_held_back"] == 1 and session["downlink_budget_bps"] == 50_000.0
            text = client.get("/metrics").text
        assert sample_value(text, "shadowtutor_server_edge_updates_held_back_total", edge_id="cam-1") == 1
        assert sample_value(text, "shadowtutor_server_edge_update_budget_bps", edge_id="cam-1") == 50_000.0
        assert sample_value(text, "shadowtutor_server_edge_answered_bps", edge_id="cam-1") > 0
        with client.websocket_connect("/v1/edge") as ws:  # an edge that does not read held-back answers
            wire, welcome = open_session(ws, scene, edge_id="cam-2")
            assert not welcome.update_gating
            wire.send(key_frame(scene, seq=0, base_version=0))
            assert not wire.expect(Update).held_back
