"""Fixtures for the server tests: a tiny scene served by the real ``labels`` teacher, a
student checkpoint with the scene's classes, and a started app behind Starlette's TestClient."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from services.server.app import create_app
from services.server.settings import ServerSettings
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from tests.support.scene import TinyScene, write_scene


@pytest.fixture
def scene(tmp_path: Path) -> TinyScene:
    return write_scene(tmp_path / "scene")


@pytest.fixture
def student_path(tmp_path: Path, scene: TinyScene) -> Path:
    torch.manual_seed(0)
    return save_student(tmp_path / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)


@pytest.fixture
def settings(scene: TinyScene, student_path: Path) -> ServerSettings:
    return ServerSettings(
        teacher="labels",
        labels_dir=scene.directory,
        student=student_path,
        device="cpu",
        max_sessions=3,
        max_updates=2,
        threshold=0.99,
        distill_workers=2,
    )


def wait_ready(client: TestClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get("/readyz")
        if response.status_code == 200:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not become ready: {response.json()}")
        time.sleep(0.02)


@pytest.fixture
def client(settings: ServerSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        wait_ready(test_client)
        yield test_client
