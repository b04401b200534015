"""Shared fixtures: the authors' checkpoint (test data outside the repo) and small students."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PEER_STUDENT = Path(
    os.environ.get(
        "SHADOWTUTOR_PEER_STUDENT",
        REPO_ROOT.parent / "shared" / "peers" / "shadowtutor-student" / "Student_amended.pth",
    )
)


@pytest.fixture
def peer_student_path() -> Path:
    if not PEER_STUDENT.is_file():
        pytest.skip(f"the authors' checkpoint is absent ({PEER_STUDENT}); set SHADOWTUTOR_PEER_STUDENT")
    return PEER_STUDENT
