"""What one admitted edge can make the server spend with cheap messages: resyncs (full weights), log
lines and TELEMETRY reports are each bounded per edge, and the session goes on. The real app, teacher
and distillation (Starlette's test client)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from services.server.app import create_app
from services.server.settings import ServerSettings
from shadowtutor.protocol.messages import Error, ResyncRequest, Update
from tests.services.conftest import wait_ready
from tests.services.server.connections.test_ws_edge import key_frame, open_session, telemetry
from tests.support.prometheus import sample_value
from tests.support.scene import TinyScene

RESYNCS = 60


@contextmanager
def started(settings: ServerSettings, **changes: object) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update=changes))) as client:
        wait_ready(client)
        yield client


def test_resync_requests_are_charged_to_the_edges_budget(settings: ServerSettings, scene: TinyScene) -> None:
    """60 RESYNC_REQUESTs of 40 bytes under a key-frame rate of 1/s with bursts of 2: at most 5 are answered
    with full weights, the others get a non-fatal ``rate_limited``, and the session goes on."""
    with started(settings, key_frame_rate=1.0, key_frame_burst=2) as client:
        with client.websocket_connect("/v1/edge") as ws:
            wire, welcome = open_session(ws, scene)
            full_weight_bytes = len(welcome.payload)
            for _ in range(RESYNCS):
                wire.send(ResyncRequest(have_version=0, reason="flood"))
            before = wire.bytes_received
            answers = [wire.receive() for _ in range(RESYNCS)]
            fulls = [a for a in answers if isinstance(a, Update) and a.full]
            refusals = [a for a in answers if isinstance(a, Error)]
            assert 1 <= len(fulls) <= 5 and len(fulls) + len(refusals) == RESYNCS
            assert all((e.code, e.fatal) == ("rate_limited", False) for e in refusals)
            assert "resync refused: over the limit" in refusals[0].message
            # what the 60 requests drew: at most 5 students' weights and the refusals
            assert wire.bytes_received - before < 5 * full_weight_bytes + RESYNCS * 400
            time.sleep(1.1)  # a key frame's token again (the resyncs took the key-frame budget too)
            wire.send(key_frame(scene, seq=0, base_version=0))
            assert wire.expect(Update).seq == 0


FORGED = "\n2026-12-07 11:00:00,000 INFO services.server.access.auth: tokens reloaded from x: 0 edges"


def test_an_edge_cannot_flood_or_forge_the_servers_log(
    settings: ServerSettings, scene: TinyScene, caplog: pytest.LogCaptureFixture
) -> None:
    """500 ERROR reports, each with a forged log line after a newline and 60 kB of text: at most a minute's
    budget of lines (twice, with the summaries) reaches the log, each one line, cut short."""
    with caplog.at_level(logging.INFO), started(settings, edge_log_lines_per_minute=20) as client:
        with client.websocket_connect("/v1/edge") as ws:
            wire, _ = open_session(ws, scene)
            for n in range(500):
                wire.send(Error(code="internal\r\nforged", message=f"report {n}{FORGED}" + "x" * 60_000))
            wire.send(Error(code="internal", message="bye" + FORGED, fatal=True))
            with pytest.raises(WebSocketDisconnect):
                wire.receive()
        runtime = client.app.state.runtime
        dropped = runtime.metrics.registry.get_sample_value(
            "shadowtutor_server_edge_input_dropped_total", {"kind": "log_line"}
        )
    lines = [r.getMessage() for r in caplog.records if r.name == "services.server.connections.ws_edge"]
    reports = [line for line in lines if " reports " in line]
    assert 20 <= len(reports) <= 22 and dropped is not None and dropped >= 479
    assert any("suppressed" in line and "log lines (over 20 a minute)" in line for line in lines)
    assert not [line for line in lines if "\n" in line or "\r" in line or len(line) > 1000]
    assert "report 0\\n2026-12-07 11:00:00,000 INFO" in reports[0]


def test_telemetry_over_the_sessions_budget_is_dropped_unread(client: TestClient, scene: TinyScene) -> None:
    """With reports asked every 10 s, a session may send bursts of 3; a flood of 300 reports costs the
    server no parse past that (a malformed one among them is not even noticed) and the session goes on."""
    with client.websocket_connect("/v1/edge") as ws:
        wire, _ = open_session(ws, scene, edge_id="cam-7")
        for n in range(300):
            wire.send(telemetry(n + 1) if n != 150 else telemetry(-1))
        wire.send(key_frame(scene, seq=0, base_version=0))  # answered after every report was read
        assert wire.expect(Update).seq == 0
        registry = client.app.state.runtime.metrics.registry
        dropped = registry.get_sample_value("shadowtutor_server_edge_input_dropped_total", {"kind": "telemetry"})
        assert dropped == 300 - 3
        text = client.get("/metrics").text
        assert sample_value(text, "shadowtutor_server_edge_frames_total", edge_id="cam-7") == 3
