"""GET /healthz, /readyz, /metrics and /v1/sessions on the real app."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.server.app import create_app
from services.server.settings import ServerSettings
from services.server.tokens import issue_token, revoke
from tests.services.conftest import wait_ready
from tests.support.prometheus import promtool_check, sample_value
from tests.support.scene import TinyScene


def test_health_and_readiness(client: TestClient, scene: TinyScene) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True, "teacher": "labels", "student": "checkpoint", "class_names": list(scene.class_names),
        "device": "cpu",
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
    protected = settings.model_copy(update={"tokens_file": path, "protect_metrics": protect_metrics})
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
