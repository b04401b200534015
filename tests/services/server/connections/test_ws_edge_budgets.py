"""What one admitted edge can make the server spend with cheap messages: resyncs (full weights), log
lines and TELEMETRY reports are each bounded per edge, and the session goes on. The real app, teacher
and distillation (Starlette's test client)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

from services.server.app import create_app
from services.server.settings import ServerSettings
from shadowtutor.protocol.messages import Error, ResyncRequest, Update
from tests.services.conftest import wait_ready
from tests.services.server.connections.test_ws_edge import key_frame, open_session
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
