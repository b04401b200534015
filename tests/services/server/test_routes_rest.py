"""GET /healthz, /readyz, /metrics and /v1/sessions on the real app."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from services.server.app import create_app
from services.server.settings import ServerSettings
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
