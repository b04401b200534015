from __future__ import annotations

from pathlib import Path

from shadowtutor_lab.stress.fuzz_server import LOG_PROBLEM, server_version, synthetic_frames
from shadowtutor_lab.stress.load_run import log_problems


def test_the_log_pattern_finds_tracebacks_and_unhandled_exceptions(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join([
        "INFO: session opened",
        "WARNING services.server.connections.ws_edge: edge 'x': bad_message: header is not JSON",
        "WARNING services.server.connections.ws_edge: edge (before HELLO): the first message must be HELLO, not ERROR",
        "ERROR asyncio: Task exception was never retrieved",
        "Traceback (most recent call last):",
        "ERROR services.server.connections.ws_edge: edge 'y': internal error",
        "ERROR:    Exception in ASGI application",
        "INFO: fine",
    ]))
    assert log_problems(log, pattern=LOG_PROBLEM) == [
        "ERROR asyncio: Task exception was never retrieved", "Traceback (most recent call last):",
        "ERROR services.server.connections.ws_edge: edge 'y': internal error",
        "ERROR:    Exception in ASGI application",
    ]
    assert log_problems(log, limit=1, pattern=LOG_PROBLEM)[1] == "... and 3 more"


def test_synthetic_frames_repeat_by_seed() -> None:
    frames = synthetic_frames(32, 24, 3, seed=1)
    assert len(frames) == 3 and frames[0].shape == (24, 32, 3) and (frames[0] != frames[1]).any()
    assert all((a == b).all() for a, b in zip(frames, synthetic_frames(32, 24, 3, seed=1), strict=True))


def test_the_version_of_a_server_with_tokens_comes_from_its_build_info(tmp_path: Path) -> None:
    """A server with tokens serves no OpenAPI schema; its /metrics (opened with protect_metrics false, as
    the fuzzer's local server is) names the version."""
    from services.server.app import create_app
    from services.server.settings import ServerSettings
    from shadowtutor.models.checkpoint import save_student
    from shadowtutor.models.student import StudentNet
    from shadowtutor.version import package_version
    from tests.support.inprocess_server import serve_in_thread
    from tests.support.scene import write_scene

    scene = write_scene(tmp_path / "scene")
    student = save_student(tmp_path / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)
    settings = ServerSettings(teacher="labels", labels_dir=scene.directory, student=student, device="cpu",
                              tokens='{"edges": {}}', protect_metrics=False)
    with serve_in_thread(create_app(settings)) as base:
        assert server_version(base, None) == package_version()
