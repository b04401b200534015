"""``WS /v1/edge`` under attack or misuse (issue 5): tokens in HELLO, revocation, one session per edge
id, key-frame rate limits, decompression bombs, HELLO timeout and the connection cap; each time
other sessions and the server go on. The real app, teacher and distillation (Starlette's test client)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.server.access.tokens import issue_token, revoke
from services.server.app import create_app
from services.server.connections.ws_edge import EdgeConnection
from services.server.settings import ServerSettings
from shadowtutor.protocol.errors import CloseCode, ErrorCode, ProtocolError
from shadowtutor.protocol.messages import MAX_HELLO_BYTES, Error, Update, encode
from tests.services.conftest import wait_ready
from tests.services.server.connections.test_ws_edge import expect_close, hello, key_frame, open_session
from tests.support.images import png_bomb
from tests.support.scene import TinyScene
from tests.support.wire import WireClient


class Tokens:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.edges = {name: issue_token(path, "edges", name) for name in ("cam-1", "cam-2")}


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    return Tokens(tmp_path / "tokens.json")


@contextmanager
def started(settings: ServerSettings, **changes: object) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update=changes))) as client:
        wait_ready(client)
        yield client


@pytest.fixture
def auth_client(settings: ServerSettings, tokens: Tokens) -> Iterator[TestClient]:
    with started(settings, tokens_file=tokens.path, tokens_poll_seconds=0.05) as client:
        yield client


def test_edges_without_their_token_are_refused_before_any_model_data(
    auth_client: TestClient, scene: TinyScene, tokens: Tokens
) -> None:
    cam1, cam2 = tokens.edges["cam-1"], tokens.edges["cam-2"]
    for edge_id, token in [("cam-1", None), ("cam-1", "guess"), ("cam-1", cam2), ("cam-3", cam1)]:
        with auth_client.websocket_connect("/v1/edge") as ws:
            wire = WireClient(ws)
            wire.send(hello(scene, edge_id=edge_id, token=token))
            error = expect_close(wire, ErrorCode.UNAUTHORIZED)  # the ERROR is the first and only message
            assert error.message == f"edge {edge_id!r}: missing, wrong or revoked token"
            assert wire.bytes_received < 200 and ErrorCode.UNAUTHORIZED.close == CloseCode.POLICY_VIOLATION
    with auth_client.websocket_connect("/v1/edge") as ws:
        _, welcome = open_session(ws, scene, edge_id="cam-1", token=cam1)
        assert welcome.tensors


def test_revoking_a_token_ends_its_session_and_no_other(
    auth_client: TestClient, scene: TinyScene, tokens: Tokens
) -> None:
    with auth_client.websocket_connect("/v1/edge") as ws1, auth_client.websocket_connect("/v1/edge") as ws2:
        first, _ = open_session(ws1, scene, edge_id="cam-1", token=tokens.edges["cam-1"])
        second, _ = open_session(ws2, scene, edge_id="cam-2", token=tokens.edges["cam-2"])
        revoke(tokens.path, "edges", "cam-1")  # the server polls the file every 0.05 s here
        assert "revoked" in expect_close(first, ErrorCode.UNAUTHORIZED).message
        second.send(key_frame(scene, seq=0, base_version=0))
        assert second.expect(Update).version == 1
    with auth_client.websocket_connect("/v1/edge") as ws:
        wire = WireClient(ws)
        wire.send(hello(scene, edge_id="cam-1", token=tokens.edges["cam-1"]))
        expect_close(wire, ErrorCode.UNAUTHORIZED)


def test_a_token_revoked_while_the_student_is_copied_never_gets_a_session(
    auth_client: TestClient, scene: TinyScene, tokens: Tokens
) -> None:
    """HELLO passes its token check, then waits for the distillation pool (held here by holding the
    student's copy); the token is revoked and the file reloaded meanwhile: no WELCOME, ``unauthorized``."""
    runtime = auth_client.app.state.runtime
    copying, release = threading.Event(), threading.Event()
    copy_student = runtime.teaching.new_distiller

    def held_copy(*args: object) -> object:
        copying.set()
        assert release.wait(30)
        return copy_student(*args)

    runtime.teaching.new_distiller = held_copy
    with auth_client.websocket_connect("/v1/edge") as ws:
        wire = WireClient(ws)
        wire.send(hello(scene, edge_id="cam-1", token=tokens.edges["cam-1"]))
        assert copying.wait(30)  # the token was accepted; the session is not registered yet
        revoke(tokens.path, "edges", "cam-1")
        deadline = time.monotonic() + 10
        while runtime.auth.edge_admitted("cam-1"):  # the watch polls every 0.05 s
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)  # several polls: the sweep of registered sessions is over
        release.set()
        assert "revoked" in expect_close(wire, ErrorCode.UNAUTHORIZED).message
    assert auth_client.get("/healthz").status_code == 200 and len(runtime.sessions) == 0


def test_a_1_mib_token_is_too_large_before_hello_not_a_bad_message(
    auth_client: TestClient, scene: TinyScene
) -> None:
    """(Under ``shadowtutor serve`` the WebSocket layer closes it with 1009 before reading it:
    test_ws_protocol.py; here, without that layer, the app's own check answers.)"""
    with auth_client.websocket_connect("/v1/edge") as ws:
        wire = WireClient(ws)
        wire.send(hello(scene, edge_id="cam-1", token="x" * (1 << 20)))
        error = expect_close(wire, ErrorCode.TOO_LARGE)
        assert error.message.endswith(f"exceeds the limit of {MAX_HELLO_BYTES} before an accepted HELLO")


def test_a_second_connection_of_an_edge_replaces_the_first(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as old_ws, client.websocket_connect("/v1/edge") as new_ws:
        old, _ = open_session(old_ws, scene, edge_id="cam-1")
        new, welcome = open_session(new_ws, scene, edge_id="cam-1")
        error = expect_close(old, ErrorCode.SESSION_REPLACED)
        assert welcome.session_id in error.message
        new.send(key_frame(scene, seq=0, base_version=0))
        assert new.expect(Update).version == 1
        (session,) = client.get("/v1/sessions").json()["sessions"]
        assert session["session_id"] == welcome.session_id


def test_key_frames_over_the_rate_are_dropped_then_the_flood_is_closed(
    settings: ServerSettings, scene: TinyScene
) -> None:
    with started(settings, key_frame_rate=0.1, key_frame_burst=2) as client:
        with client.websocket_connect("/v1/edge") as flood_ws, client.websocket_connect("/v1/edge") as calm_ws:
            flood, _ = open_session(flood_ws, scene, edge_id="flood")
            calm, _ = open_session(calm_ws, scene, edge_id="calm")
            for seq in range(2):  # the burst is served
                flood.send(key_frame(scene, seq=seq, base_version=seq))
                assert flood.expect(Update).seq == seq
            for seq in range(2, 5):  # then two frames are dropped (a burst's worth), and the third closes
                flood.send(key_frame(scene, seq=seq, base_version=2))
            replies = [flood.expect(Error), flood.expect(Error)]
            assert [(e.code, e.seq, e.fatal) for e in replies] == [("rate_limited", s, False) for s in (2, 3)]
            assert "over the limit of 0.1/s" in replies[0].message
            expect_close(flood, ErrorCode.RATE_LIMITED)
            for seq in range(2):  # the other edge has its own budget
                calm.send(key_frame(scene, seq=seq, base_version=seq))
                assert calm.expect(Update).seq == seq
            assert client.get("/healthz").status_code == 200


def test_a_decompression_bomb_is_refused_before_decoding(client: TestClient, scene: TinyScene) -> None:
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene)
        bomb = key_frame(scene, seq=0, base_version=0, codec="png")
        bomb.payload = png_bomb(60_000, 60_000)
        wire.send(bomb)
        error = wire.expect(Error)
        assert (error.code, error.fatal, error.seq) == ("bad_frame", False, 0)
        assert error.message == "the png image declares 60000x60000, expected 64x48"
        wire.send(key_frame(scene, seq=1, base_version=0, codec="png"))
        assert wire.expect(Update).version == 1


def test_a_silent_connection_is_closed_and_makes_room_for_a_newer_one(
    settings: ServerSettings, scene: TinyScene
) -> None:
    with started(settings, hello_timeout=0.3) as client:
        with client.websocket_connect("/v1/edge") as silent:
            started_at = time.monotonic()
            error = expect_close(WireClient(silent), ErrorCode.UNEXPECTED_MESSAGE)
            assert error.message == "no HELLO within 0.3 s" and time.monotonic() - started_at < 5
    with started(settings, max_connections=1) as client:  # room for one unauthenticated connection
        with client.websocket_connect("/v1/edge") as idle, client.websocket_connect("/v1/edge") as ws:
            assert "oldest idle one was closed" in expect_close(WireClient(idle), ErrorCode.SERVER_BUSY).message
            open_session(ws, scene)
            with client.websocket_connect("/v1/edge") as other:  # admitted sessions do not take that room
                open_session(other, scene, edge_id="cam-2")
        registry = client.app.state.runtime.metrics.registry
        assert registry.get_sample_value("shadowtutor_server_connections_refused_total", {"reason": "evicted"}) == 1
        assert registry.get_sample_value("shadowtutor_server_unauthenticated_connections") == 0


def test_a_hello_that_arrives_as_admission_takes_its_place_wins(settings: ServerSettings, scene: TinyScene) -> None:
    """The eviction and the HELLO land in the same turn of the event loop: the connection keeps its HELLO and
    carries no eviction into its session. (A stand-in WebSocket: the real race cannot be timed from outside.)"""

    class ArrivedHello:
        client = None
        scope: dict[str, object] = {}

        async def receive(self) -> dict[str, object]:
            return {"type": "websocket.receive", "bytes": encode(hello(scene))}

    connection = EdgeConnection(ArrivedHello(), create_app(settings).state.runtime)
    connection.evict(ProtocolError(ErrorCode.SERVER_BUSY, "made room"))
    assert asyncio.run(connection._receive_hello()).edge_id == "cam-1"
    assert connection._eviction is None and not connection._evicted.is_set()


def test_a_refused_hello_gives_up_its_place_at_once(settings: ServerSettings, scene: TinyScene, tokens: Tokens) -> None:
    """Room for one connection before its HELLO is accepted: a connection whose token was refused waits out
    the failure delay outside that room, so an edge gets in meanwhile; a second refusal from the same address,
    over its bound of waiting refusals, is answered at once."""
    with started(settings, tokens_file=tokens.path, max_connections=settings.max_sessions + 1,
                 auth_failure_delay=5.0, max_refused_waiting_per_source=1) as client:
        runtime = client.app.state.runtime
        with client.websocket_connect("/v1/edge") as refused_ws:
            refused = WireClient(refused_ws)
            refused.send(hello(scene, edge_id="cam-1", token="guess"))
            time.sleep(0.5)  # its token is checked and refused; its answer waits 5 s
            assert len(runtime.refusals) == 1 and len(runtime.admission) == 0
            started_at = time.monotonic()
            with client.websocket_connect("/v1/edge") as over_ws:
                over = WireClient(over_ws)
                over.send(hello(scene, edge_id="cam-1", token="guess again"))
                expect_close(over, ErrorCode.UNAUTHORIZED)
            assert time.monotonic() - started_at < 2.0
            with client.websocket_connect("/v1/edge") as ws:
                open_session(ws, scene, edge_id="cam-2", token=tokens.edges["cam-2"])
            expect_close(refused, ErrorCode.UNAUTHORIZED)
        assert client.get("/healthz").status_code == 200 and len(runtime.refusals) == 0
