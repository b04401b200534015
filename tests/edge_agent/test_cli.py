from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest

from shadowtutor.protocol.errors import ErrorCode
from shadowtutor_cli import main
from tests.edge_agent.test_sources import write_video
from tests.support.processes import shadowtutor_command, start_process
from tests.support.stand_in_server import StandInServer


def test_edge_command_runs_against_a_server(stand_in: StandInServer, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    video = write_video(tmp_path / "clip.mp4", 10)
    monkeypatch.setenv("SHADOWTUTOR_EDGE_ID", "cli-edge")
    monkeypatch.setenv("SHADOWTUTOR_METRICS_PORT", "0")
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    code = main(["edge", "--server", stand_in.url, "--source", str(video), "--output-dir", str(tmp_path / "out"),
                 "--backend", "torch", "--no-save-labels"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["edge_id"] == "cli-edge" and summary["frames"] == 10
    assert stand_in.sessions[0].hello.edge_id == "cli-edge"
    assert not (tmp_path / "out" / "labels").exists() and (tmp_path / "out" / "summary.json").exists()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # restored


def test_missing_source_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["edge", "--server", "ws://127.0.0.1:9", "--source", str(tmp_path / "gone.mp4")])
    assert code == 2
    assert f"shadowtutor edge: error: video file not found: {tmp_path / 'gone.mp4'}" in capsys.readouterr().err


def test_bad_flag_value_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["edge", "--server", "ws://h", "--source", "0", "--frame-quality", "200"]) == 2
    assert "--frame-quality: Input should be less than or equal to 100" in capsys.readouterr().err


def test_refused_edge_exits_non_zero(stand_in: StandInServer, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    stand_in.refuse = ErrorCode.UNAUTHORIZED
    video = write_video(tmp_path / "clip.mp4", 3)
    assert main(["edge", "--server", stand_in.url, "--source", str(video), "--metrics-port", "0"]) == 2
    assert "the server refused this edge (unauthorized)" in capsys.readouterr().err


def test_sigint_finishes_the_frame_closes_with_1000_and_writes_the_summary(
    stand_in: StandInServer, tmp_path: Path
) -> None:
    video = write_video(tmp_path / "clip.mp4", 200)
    out = tmp_path / "out"
    process = start_process(
        shadowtutor_command("edge", "--server", stand_in.url, "--source", str(video), "--output-dir", str(out),
                            "--save-labels", "--metrics-port", "0", "--max-fps", "20", "--backend", "torch"),
        name="edge", log_dir=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list((out / "labels").glob("*.png"))) < 10:
            assert process.alive() and time.monotonic() < deadline, process.describe()
            time.sleep(0.05)
        process.signal(signal.SIGINT)
        assert process.wait(30) == 0, process.describe()
    finally:
        process.stop()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_by"] == "stop" and 10 <= summary["frames"] < 200
    assert len(list((out / "labels").glob("*.png"))) == summary["frames"] == summary["labelled_frames"]
    deadline = time.monotonic() + 5
    while stand_in.sessions[0].close_code is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the stand-in's handler sees the close a moment after the process exits
    assert stand_in.sessions[0].close_code == 1000


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          stand_in: StandInServer) -> None:
    video = write_video(tmp_path / "clip.mp4", 3)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(["edge", "--server", stand_in.url, "--source", str(video), "--metrics-host", "127.0.0.1",
                     "--metrics-port", str(port), "--output-dir", str(tmp_path / "out")])
    assert code == 2
    assert (f"shadowtutor edge: error: cannot serve the metrics exporter on 127.0.0.1:{port}: Address already in use"
            in capsys.readouterr().err)


def test_an_absurd_resize_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["edge", "--server", "ws://h", "--source", "0", "--resize", "100000x100000"]) == 2
    assert "--resize: resize 100000x100000: each side is at most 8192 pixels" in capsys.readouterr().err
