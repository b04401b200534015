"""GET /healthz, /readyz, /metrics and /v1/sessions on the real app."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.server.access.tokens import issue_token, revoke
from services.server.app import create_app
from services.server.settings import ServerSettings
from tests.services.conftest import wait_ready
from tests.support.prometheus import promtool_check, sample_value
from tests.support.scene import TinyScene


def test_health_and_readiness(client: TestClient, scene: TinyScene) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True, "teacher": "labels", "student": "checkpoint", "class_names": list(scene.class_names),
        "device": "cpu", "where": "this process (cpu)",
    }
    assert sample_value(client.get("/metrics").text, "shadowtutor_server_teacher_ready") == 1


def test_not_ready_says_why(tmp_path: Path, student_path: Path) -> None:
    settings = ServerSettings(teacher="labels", labels_dir=tmp_path / "missing", student=student_path, device="cpu")
    with TestClient(create_app(settings)) as client:
        for _ in range(200):  # loading fails at once; wait for the loader to record why
            body = client.get("/readyz").json()
            if body["reason"].startswith("loading failed"):
                break
        response = client.get("/readyz")
        assert response.status_code == 503
        assert "labels directory not found" in response.json()["reason"]
        assert client.get("/healthz").status_code == 200
        assert sample_value(client.get("/metrics").text, "shadowtutor_server_teacher_ready") == 0


def test_metrics_exposition_passes_promtool(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=")
    promtool_check(response.text)


def test_sessions_empty_and_openapi(client: TestClient) -> None:
    assert client.get("/v1/sessions").json() == {"sessions": []}
    schema = client.get("/openapi.json").json()
    assert "SessionInfo" in schema["components"]["schemas"]
    assert "token" not in schema["components"]["schemas"]["SessionInfo"]["properties"]


@pytest.mark.parametrize("protect_metrics", [False, True])
def test_with_tokens_sessions_need_an_admin_bearer_token(
    settings: ServerSettings, tmp_path: Path, protect_metrics: bool
) -> None:
    path = tmp_path / "tokens.json"
    admin, edge = issue_token(path, "admins", "ops"), issue_token(path, "edges", "cam-1")
    protected = settings.model_copy(update={"tokens_file": path, "protect_metrics": protect_metrics,
                                            "auth_failure_delay": 0.0})
    with TestClient(create_app(protected)) as client:
        wait_ready(client)
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
        for headers in ({}, {"Authorization": f"Bearer {edge}"}, {"Authorization": f"Basic {admin}"},
                        {"Authorization": "Bearer"}):
            refused = client.get("/v1/sessions", headers=headers)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        bearer = {"Authorization": f"Bearer {admin}"}
        assert client.get("/v1/sessions", headers=bearer).json() == {"sessions": []}
        assert client.get("/metrics").status_code == (401 if protect_metrics else 200)
        assert client.get("/metrics", headers=bearer).status_code == 200
        revoke(path, "admins", "ops")
        assert client.get("/v1/sessions", headers=bearer).status_code == 401


def _tokens(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "tokens.json"
    return path, issue_token(path, "admins", "ops")


def test_under_tokens_metrics_are_protected_by_default(settings: ServerSettings, tmp_path: Path) -> None:
    path, admin = _tokens(tmp_path)
    with TestClient(create_app(settings.model_copy(update={"tokens_file": path, "auth_failure_delay": 0.0}))) as c:
        c.app.state.runtime.metrics.fleet.session_opened("cam-secret", "s-1", "distill", "agent/1")
        assert c.get("/metrics").status_code == 401
        shown = c.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
        assert shown.status_code == 200 and 'edge_id="cam-secret"' in shown.text


def test_unprotected_metrics_under_tokens_carry_no_edge_identities(settings: ServerSettings, tmp_path: Path) -> None:
    path, _ = _tokens(tmp_path)
    opened = settings.model_copy(update={"tokens_file": path, "protect_metrics": False})
    with TestClient(create_app(opened)) as client:
        client.app.state.runtime.metrics.fleet.session_opened("cam-secret", "s-1", "distill", "agent/1")
        text = client.get("/metrics").text
        assert "cam-secret" not in text and "agent/1" not in text and "shadowtutor_server_sessions" in text
    # no tokens at all: everything is open anyway
    with TestClient(create_app(settings)) as client:
        client.app.state.runtime.metrics.fleet.session_opened("cam-open", "s-1", "distill", "agent/1")
        assert 'edge_id="cam-open"' in client.get("/metrics").text


def test_bearer_checks_run_on_their_own_pool_and_refusals_wait(
    settings: ServerSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not in asyncio's default pool, where key frames are decoded; a refusal waits the failure delay."""
    path, admin = _tokens(tmp_path)
    app = create_app(settings.model_copy(update={"tokens_file": path, "auth_failure_delay": 0.3}))
    auth = app.state.runtime.auth
    threads: list[str] = []
    admin_name = auth.admin_name
    monkeypatch.setattr(auth, "admin_name", lambda token: threads.append(threading.current_thread().name)
                        or admin_name(token))
    with TestClient(app) as client:
        start = time.monotonic()
        assert client.get("/v1/sessions", headers={"Authorization": "Bearer made-up"}).status_code == 401
        assert time.monotonic() - start >= 0.3
        assert client.get("/v1/sessions", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
    assert len(threads) == 2 and all(name.startswith("shadowtutor-bearer") for name in threads)


def test_bearer_checks_over_the_bound_are_answered_429(settings: ServerSettings, tmp_path: Path) -> None:
    path, admin = _tokens(tmp_path)
    app = create_app(settings.model_copy(update={"tokens_file": path, "auth_failure_delay": 0.0,
                                                 "auth_checks_per_source": 1, "auth_checks_total": 1}))
    gate = app.state.runtime.bearer_gate
    with TestClient(app) as client:
        # the gate is full (as while a flood's check is queued)
        with gate._slots.held("198.51.100.7"):
            busy = client.get("/v1/sessions", headers={"Authorization": f"Bearer {admin}"})
        assert busy.status_code == 429 and "retry-after" in busy.headers
        assert client.get("/v1/sessions", headers={"Authorization": f"Bearer {admin}"}).status_code == 200


def test_a_fifo_swap_of_the_tokens_file_does_not_wedge_the_server(settings: ServerSettings, tmp_path: Path) -> None:
    """The tokens file replaced by a FIFO for a while, then the good file put back: the admin is answered
    throughout, within 2 s of the good file's return, and a revocation after it takes effect."""
    path, admin = _tokens(tmp_path)
    good = path.read_text()
    bearer = {"Authorization": f"Bearer {admin}"}
    app = create_app(settings.model_copy(update={"tokens_file": path, "tokens_poll_seconds": 0.1,
                                                 "auth_failure_delay": 0.0}))
    with TestClient(app) as client:
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        fifo.replace(path)
        try:
            # the watch meets the FIFO
            time.sleep(0.5)
            answered: list[int] = []
            asking = threading.Thread(
                target=lambda: answered.append(client.get("/v1/sessions", headers=bearer).status_code), daemon=True,
            )
            asking.start()
            asking.join(3.0)
            assert answered == [200], "the admin is not answered while the tokens file is a FIFO"
        finally:
            # lets go of a reader blocked in open() (the old behaviour)
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        path.unlink()
        path.write_text(good)
        start = time.monotonic()
        assert client.get("/v1/sessions", headers=bearer).status_code == 200
        assert time.monotonic() - start < 2.0
        revoke(path, "admins", "ops")
        assert client.get("/v1/sessions", headers=bearer).status_code == 401
