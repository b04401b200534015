"""Shared fixtures: the authors' checkpoint (test data outside the repo) and small students."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests judge correctness, not speed: on a loaded 2-core machine one example can take
# longer than Hypothesis' default 200 ms deadline, which would fail a correct test.
settings.register_profile("shadowtutor", deadline=None)
settings.load_profile("shadowtutor")

REPO_ROOT = Path(__file__).resolve().parents[1]
PEER_STUDENT = Path(
    os.environ.get(
        "SHADOWTUTOR_PEER_STUDENT",
        REPO_ROOT.parent / "shared" / "peers" / "shadowtutor-student" / "Student_amended.pth",
    )
)


@pytest.fixture(scope="session", autouse=True)
def _edge_state_in_a_temporary_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Edge agents started by tests (in-process and child processes) keep their state in a temporary
    directory, never in the user's ~/.local/state (edge_agent/settings.py: state_dir's default)."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))


@pytest.fixture
def peer_student_path() -> Path:
    if not PEER_STUDENT.is_file():
        pytest.skip(f"the authors' checkpoint is absent ({PEER_STUDENT}); set SHADOWTUTOR_PEER_STUDENT")
    return PEER_STUDENT


def _installed(path: Path, what: str) -> Path:
    """``path`` if setup put it there; otherwise skip, except under CI, where bootstrap must have."""
    if not path.is_file():
        message = f"{what} is not installed ({path} is missing): run scripts/bootstrap.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def mediapipe_model() -> Path:
    """The real teacher's converted model, as `shadowtutor teacher install mediapipe` left it."""
    from shadowtutor.teachers.mediapipe import default_model_path

    return _installed(default_model_path(), "the mediapipe teacher")


@pytest.fixture
def real_clips() -> dict[str, Path]:
    """The real clips, as `shadowtutor scenes fetch-real` left them."""
    from shadowtutor_lab.scenes.real import REAL_CLIPS

    return {name: _installed(clip.path, f"the real clip {name}") for name, clip in REAL_CLIPS.items()}


@pytest.fixture
def held_out_photos() -> dict[str, Path]:
    """The held-out background photos, as `shadowtutor scenes fetch-photos` left them."""
    from shadowtutor_lab.scenes.photos import HELD_OUT_PHOTOS

    return {name: _installed(photo.path, f"the held-out photo {name}") for name, photo in HELD_OUT_PHOTOS.items()}
