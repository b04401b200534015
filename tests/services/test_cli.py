"""``shadowtutor serve``: flags over environment variables, and the real server process
(uvicorn on a loopback port) driven by the ``websockets`` client library."""

from __future__ import annotations

import json
import os
import signal
import ssl
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI, Request
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from services.cli import MAX_REQUEST_HEAD_BYTES, settings_from_args, tls_options, uvicorn_options
from services.server.settings import ServerSettings
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.config.settings_flags import env_var, flag, setting_name
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.codecs import encode_frame
from shadowtutor.protocol.messages import Hello, KeyFrame, Update, Welcome, decode, encode
from shadowtutor.teachers.registry import TEACHER_KINDS
from shadowtutor_cli import build_parser, main
from shadowtutor_lab.stress.attack_client import huge_header
from shadowtutor_lab.stress.load_memory import read_rss
from tests.support.certs import CertAuthority
from tests.support.inprocess_server import serve_as_shadowtutor_serves, serve_in_thread
from tests.support.processes import free_port, shadowtutor_command, start_process, wait_http_ok
from tests.support.prometheus import sample_value
from tests.support.scene import TinyScene

MIB = 1 << 20


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHADOWTUTOR_PORT", "9000")
    monkeypatch.setenv("SHADOWTUTOR_TEACHER", "labels")
    monkeypatch.setenv("SHADOWTUTOR_MAX_SESSIONS", "7")
    args = build_parser().parse_args(
        ["serve", "--port", "9100", "--labels-dir", str(tmp_path), "--frame-codecs", "jpeg,raw", "--log-level", "DEBUG"]
    )
    settings = settings_from_args(args)
    assert (settings.port, settings.teacher, settings.max_sessions) == (9100, "labels", 7)
    assert settings.labels_dir == tmp_path and settings.frame_codecs == ("jpeg", "raw")
    assert settings.log_level == "debug"


def _serve_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    return "".join(capsys.readouterr().out.split())  # argparse wraps lines, anywhere in long values


def test_every_algorithm_parameter_is_a_flag_and_a_variable_with_the_models_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _serve_help(capsys)
    for name, field in AlgorithmParams.model_fields.items():
        setting = setting_name(name, field)
        assert flag(setting) in text and f"[env{env_var(setting)};default{field.default}]" in text, name
    for old in ("threshold", "distill_mode", "max_updates", "learning_rate", "min_stride", "max_stride",
                "stride_metric", "restore", "weight_map"):  # the names deployments use
        assert f"{flag(old)}{old.upper()}" in text and env_var(old) in text
    monkeypatch.setattr(AlgorithmParams.model_fields["min_stride"], "default", 5)  # the model alone changes
    assert "[envSHADOWTUTOR_MIN_STRIDE;default5]" in _serve_help(capsys)


def test_algorithm_flags_win_over_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_MAX_UPDATES", "3")
    monkeypatch.setenv("SHADOWTUTOR_DISTILL_MODE", "full")
    args = build_parser().parse_args(["serve", "--max-updates", "5", "--threshold", "auto"])
    params = settings_from_args(args).algorithm_params()
    assert (params.max_updates, params.mode, params.threshold_policy) == (5, "full", "auto")


def test_security_flags_and_uvicorn_tls_options(tmp_path: Path) -> None:
    authority = CertAuthority(tmp_path)
    server = authority.issue("server")
    cert, key, ca = server.cert, server.key, authority.pem
    args = build_parser().parse_args(["serve", "--protect-metrics", "--tokens", "{}", "--tls-cert", str(cert),
                                      "--tls-key", str(key), "--tls-client-ca", str(ca)])
    settings = settings_from_args(args)
    assert settings.protect_metrics is True  # a boolean flag alone means true
    assert tls_options(settings) == {"ssl_certfile": str(cert), "ssl_keyfile": str(key), "ssl_ca_certs": str(ca),
                                     "ssl_cert_reqs": ssl.CERT_REQUIRED}
    plain = settings_from_args(build_parser().parse_args(["serve", "--protect-metrics", "false", "--tokens", "{}"]))
    assert plain.protect_metrics is False and tls_options(plain) == {}


def test_bad_flag_value_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "http"]) == 2
    err = capsys.readouterr().err
    assert "shadowtutor serve: error: bad server settings" in err and "port" in err


def test_serve_process_end_to_end(tmp_path: Path, scene: TinyScene, student_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = shadowtutor_command(
        "serve", "--port", str(port), "--labels-dir", str(scene.directory), "--student", str(student_path),
        "--max-updates", "1", "--log-level", "debug",
    )
    env = {"SHADOWTUTOR_TEACHER": "labels", "SHADOWTUTOR_DEVICE": "cpu"}
    with start_process(command, name="server", log_dir=tmp_path / "logs", env=env) as server:
        ready = json.loads(wait_http_ok(f"{base}/readyz", process=server, timeout=90))
        assert ready["teacher"] == "labels" and ready["class_names"] == list(scene.class_names)
        with connect(f"ws://127.0.0.1:{port}/v1/edge", max_size=2**24) as ws:
            ws.send(encode(Hello(edge_id="proc-edge", class_names=list(scene.class_names), frame_width=64,
                                 frame_height=48, frame_codecs=["jpeg"], weight_codecs=["f16+zstd"])))
            welcome = decode(ws.recv())
            assert isinstance(welcome, Welcome) and welcome.weight_codec == "f16+zstd"
            frame = encode_frame(scene.frames[0], "jpeg")
            ws.send(encode(KeyFrame(seq=0, frame_index=0, base_version=0, codec="jpeg", width=64, height=48,
                                    payload=frame)))
            update = decode(ws.recv())
            assert isinstance(update, Update) and (update.version, update.full) == (1, False)
            with urllib.request.urlopen(f"{base}/v1/sessions", timeout=5) as response:
                (session,) = json.loads(response.read())["sessions"]
            assert (session["edge_id"], session["key_frames"], session["version"]) == ("proc-edge", 1, 1)
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                assert sample_value(response.read().decode(), "shadowtutor_server_sessions") == 1

            server.signal(signal.SIGTERM)  # a clean shutdown closes the open session
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=20)
        # uvicorn shuts down gracefully, then re-raises the signal: a clean stop ends with -SIGTERM
        assert server.wait(30) in (0, -signal.SIGTERM), server.describe()
    logs = server.logs()
    assert "ready: teacher 'labels'" in logs and "Application shutdown complete" in logs
    assert "of edge 'proc-edge' ended: 1 key frames" in logs
    assert "startup objects kept out of the garbage collector's full passes" in logs  # frozen before serving


def test_a_server_whose_teacher_cannot_load_exits_at_once_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    command = shadowtutor_command("serve", "--port", str(port), "--teacher", "foo", "--device", "cpu")
    with start_process(command, name="server", log_dir=tmp_path) as server:
        assert server.wait(60) == 2  # before it ever listened: nothing to probe, a supervisor sees the exit
    lines = [line for line in server.logs().splitlines() if line.strip()]
    assert lines == ["shadowtutor serve: error: cannot start: unknown teacher 'foo': choose one of "
                     + ", ".join(TEACHER_KINDS)], server.logs()


@pytest.mark.parametrize("student", ["missing", "corrupt", "other classes", "teacher weights missing"])
def test_a_student_or_teacher_weights_that_cannot_load_end_serve_with_one_line(
    tmp_path: Path, scene: TinyScene, capsys: pytest.CaptureFixture[str], student: str
) -> None:
    flags = ["--teacher", "labels", "--labels-dir", str(scene.directory)]
    if student == "missing":
        flags += ["--student", str(tmp_path / "gone.pt")]
        expected = f"student checkpoint not found: {tmp_path / 'gone.pt'}"
    elif student == "corrupt":
        (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
        flags += ["--student", str(tmp_path / "bad.pt")]
        expected = "not a PyTorch checkpoint, or damaged"
    elif student == "other classes":
        flags += ["--student", str(save_student(tmp_path / "s.pt", StudentNet(3), ("a", "b", "c")))]
        expected = "they must be the same list in the same order"
    else:
        flags = ["--teacher", "maskrcnn", "--weights-path", str(tmp_path / "none.pth")]
        expected = f"Mask R-CNN weights not found: {tmp_path / 'none.pth'}"
    assert main(["serve", "--port", str(free_port()), "--device", "cpu", *flags]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("shadowtutor serve: error: cannot start: ") and expected in line, line


def test_a_100_mib_header_is_refused_early_and_healthz_stays_fast(settings) -> None:
    """Under ``shadowtutor serve``'s uvicorn options (h11, MAX_REQUEST_HEAD_BYTES): the server closes a
    request whose header keeps growing long before 100 MiB, its memory does not grow by it, and /healthz
    answers at once meanwhile."""
    with serve_as_shadowtutor_serves(settings) as (base, _app):
        url = urlsplit(base)
        idle = read_rss(os.getpid())
        sent = huge_header(url.hostname, url.port, 100 * MIB)
        assert sent < 16 * MIB, f"{sent / MIB:.0f} MiB of one header were taken"
        assert read_rss(os.getpid()) - idle < 50 * MIB
        started = time.monotonic()
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            assert response.status == 200 and time.monotonic() - started < 1
    assert MAX_REQUEST_HEAD_BYTES == 64 * 1024


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--threshold", "nan"], "threshold must be a finite number, got nan"),
        (["--learning-rate", "inf"], "learning_rate must be a finite number, got inf"),
        (["--distill-mode", "half"], "--distill-mode: Input should be 'partial' or 'full'"),
        (["--hello-timeout", "inf"], "--hello-timeout: Input should be a finite number"),
        (["--hello-timeout", "1e9"], "--hello-timeout: Input should be less than or equal to 86400"),
        (["--max-message-bytes", "100000000000000000000000"], "--max-message-bytes: Input should be less than"),
        (["--tokens-poll-seconds", "1e-9"], "--tokens-poll-seconds: Input should be greater than or equal to 0.1"),
        (["--ping-interval", "nan"], "--ping-interval: Input should be a finite number"),
    ],
)
def test_absurd_values_are_one_line_before_anything_loads(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--teacher", "labels", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shadowtutor serve: error: bad server settings") and message in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_tls_key_that_is_not_the_certificate_s_is_one_line_before_the_models_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    authority = CertAuthority(tmp_path)
    server, other = authority.issue("server"), authority.issue("other")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a key")
    for key in (other.key, not_pem):
        # --teacher labels without --labels-dir cannot load: the TLS error must come first
        assert main(["serve", "--teacher", "labels", "--tls-cert", str(server.cert), "--tls-key", str(key)]) == 2
        err = capsys.readouterr().err.strip()
        assert f"tls_cert {server.cert} and tls_key {key} are not a PEM certificate and its private key" in err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ray", "127.0.0.1:1"], "no Ray cluster reachable at '127.0.0.1:1'"),
        (["--ray", "127.0.0.1:1", "--checkpoint-store", "s3://bucket/x"], "no checkpoint store for s3://"),
        (["--ray", "127.0.0.1:1", "--ray-replicas", "0"], "replicas must be >= 1"),
        (["--ray", "127.0.0.1:1", "--tokens", "{}"], "give tokens as --tokens-file"),
    ],
)
def test_serve_on_ray_with_a_bad_address_or_store_is_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray.serve", reason="the serve extra is not installed")
    store = ["--checkpoint-store", str(tmp_path / "sessions")]
    assert main(["serve", "--teacher", "labels", *store, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def _peer_seen(forwarded_allow_ips: str | None) -> str:
    """The client address an app sees for a loopback request claiming ``X-Forwarded-For: 203.0.113.9``,
    under the uvicorn options ``shadowtutor serve`` uses."""
    app = FastAPI()

    @app.get("/readyz")
    async def peer(request: Request) -> str:
        return request.client.host if request.client else ""

    settings = ServerSettings(forwarded_allow_ips=forwarded_allow_ips)
    options = {k: v for k, v in uvicorn_options(settings).items() if k not in ("log_level", "log_config")}
    with serve_in_thread(app, **options) as base:
        request = urllib.request.Request(f"{base}/readyz", headers={"X-Forwarded-For": "203.0.113.9"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


def test_proxy_headers_are_trusted_only_from_the_addresses_named() -> None:
    # by default not even from loopback
    assert _peer_seen(None) == "127.0.0.1"
    assert _peer_seen("10.0.0.1") == "127.0.0.1"
    assert _peer_seen("127.0.0.1") == "203.0.113.9"
