"""The app factory: independent apps in one process, start-up and shutdown."""

from __future__ import annotations

from fastapi.testclient import TestClient

from services.server.app import create_app
from services.server.settings import ServerSettings
from tests.services.conftest import wait_ready
from tests.support.prometheus import sample_value


def test_two_apps_have_their_own_state(settings: ServerSettings) -> None:
    first, second = create_app(settings), create_app(settings.model_copy(update={"max_sessions": 1}))
    with TestClient(first) as a, TestClient(second) as b:
        wait_ready(a)
        wait_ready(b)
        first.state.runtime.metrics.received_bytes.inc(5)
        assert sample_value(a.get("/metrics").text, "shadowtutor_server_received_bytes_total") == 5
        assert sample_value(b.get("/metrics").text, "shadowtutor_server_received_bytes_total") == 0
        assert second.state.runtime.sessions.max_sessions == 1
    runtime = first.state.runtime
    assert not runtime.ready and runtime.not_ready_reason == "the server is shutting down"
    assert sample_value(runtime.metrics.exposition().decode(), "shadowtutor_server_teacher_ready") == 0


def test_with_authentication_only_healthz_and_readyz_are_open(settings: ServerSettings) -> None:
    with TestClient(create_app(settings.model_copy(update={"tokens": '{"edges": {}}'}))) as client:
        wait_ready(client)
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert client.get(path).status_code == 404, path
        assert client.get("/v1/sessions").status_code == 401
        assert client.get("/healthz").status_code == 200
    with TestClient(create_app(settings)) as client:  # without tokens (loopback demos) the API pages stay
        assert client.get("/openapi.json").status_code == 200
