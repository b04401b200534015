"""End to end (issue 5): the real server (``shadowtutor serve``) over TLS with client certificates and
tokens, and real edge agents (``shadowtutor edge``): the right CA, token and client certificate get a
distilled run; a wrong CA, an expired server certificate, a wrong token or no client certificate end
the agent at once with a clear error, and the server goes on. Certificates are made by the test."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from services.server.access.tokens import issue_token
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from tests.support.certs import CertAuthority, CertFiles
from tests.support.processes import ManagedProcess, free_port, shadowtutor_command, start_process
from tests.support.scene import TinyScene, write_scene

pytestmark = pytest.mark.slow

FRAMES = 12
EDGE_ENV = {"OMP_NUM_THREADS": "1"}


@dataclass
class Deployment:
    """What an operator prepares: a CA, certificates, a tokens file, a scene and a student."""

    root: Path
    scene: TinyScene
    student: Path
    ca: CertAuthority
    server_cert: CertFiles
    client_cert: CertFiles
    tokens_file: Path
    token_file: Path  # cam-1's token, as on the device
    admin_token: str

    def client_context(self, with_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.pem))
        if with_cert:
            context.load_cert_chain(self.client_cert.cert, self.client_cert.key)
        return context


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    root = tmp_path_factory.mktemp("secure")
    scene = write_scene(root / "scene", count=FRAMES)
    torch.manual_seed(0)
    student = save_student(root / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)
    ca = CertAuthority(root / "pki")
    tokens_file = root / "tokens.json"
    token_file = root / "cam-1.token"
    token_file.write_text(issue_token(tokens_file, "edges", "cam-1") + "\n")
    return Deployment(root, scene, student, ca, ca.issue("server"), ca.issue("cam-1", ("cam-1",), client=True),
                      tokens_file, token_file, issue_token(tokens_file, "admins", "ops"))


def get(url: str, context: ssl.SSLContext, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def start_server(d: Deployment, name: str, cert: CertFiles, *flags: str) -> tuple[ManagedProcess, int]:
    port = free_port()
    server = start_process(
        shadowtutor_command(
            "serve", "--port", str(port), "--teacher", "labels", "--labels-dir", str(d.scene.directory),
            "--student", str(d.student), "--device", "cpu", "--max-updates", "1", "--tls-cert", str(cert.cert),
            "--tls-key", str(cert.key), "--tokens-file", str(d.tokens_file), *flags,
        ),
        name=name, log_dir=d.root / "logs",
    )
    return server, port


def wait_ready(server: ManagedProcess, url: str, context: ssl.SSLContext, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert server.alive(), server.describe()
        try:
            if get(url, context)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert time.monotonic() < deadline, f"{url} not ready: {server.describe()}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def mtls_server(deployment: Deployment) -> Iterator[int]:
    """TLS, client certificates signed by the CA required, tokens required."""
    server, port = start_server(deployment, "server-mtls", deployment.server_cert, "--tls-client-ca",
                                str(deployment.ca.pem))
    with server:
        wait_ready(server, f"https://127.0.0.1:{port}/readyz", deployment.client_context())
        yield port
    assert "AUTHENTICATION IS OFF" not in server.logs()


def run_edge(d: Deployment, port: int, name: str, *flags: str, timeout: float = 120) -> tuple[int, str, Path]:
    out = d.root / name
    args = shadowtutor_command(
        "edge", "--server", f"wss://127.0.0.1:{port}", "--source", str(d.scene.directory / "video.mp4"),
        "--edge-id", "cam-1", "--class-names", ",".join(d.scene.class_names), "--output-dir", str(out),
        "--backend", "torch", "--metrics-port", "0", "--startup-timeout", "8", "--reconnect-min", "0.2",
        "--reconnect-max", "1", *flags,
    )
    with start_process(args, name=name, log_dir=d.root / "logs", env=EDGE_ENV) as edge:
        code = edge.wait(timeout)
    return code, edge.logs(), out


def good_flags(d: Deployment) -> tuple[str, ...]:
    return ("--ca-file", str(d.ca.pem), "--token-file", str(d.token_file), "--client-cert",
            str(d.client_cert.cert), "--client-key", str(d.client_cert.key))


def test_an_authenticated_edge_runs_over_mutual_tls(deployment: Deployment, mtls_server: int) -> None:
    code, logs, out = run_edge(deployment, mtls_server, "edge-good", *good_flags(deployment))
    assert code == 0, logs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == summary["labelled_frames"] == FRAMES and summary["updates_applied"] >= 1, summary
    assert summary["reconnects"] == 0 and summary["server"].startswith("wss://")
    base, context = f"https://127.0.0.1:{mtls_server}", deployment.client_context()
    assert get(f"{base}/v1/sessions", context)[0] == 401
    status, body = get(f"{base}/v1/sessions", context, deployment.admin_token)
    assert status == 200 and json.loads(body) == {"sessions": []}  # the run has ended
    assert get(f"{base}/healthz", context)[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # no client certificate: refused by TLS
        get(f"{base}/healthz", deployment.client_context(with_cert=False))


@pytest.mark.parametrize("case", ["wrong CA", "wrong token", "no client certificate"])
def test_a_refused_edge_stops_at_once_with_a_clear_error(
    deployment: Deployment, mtls_server: int, tmp_path: Path, case: str
) -> None:
    flags = list(good_flags(deployment))
    if case == "wrong CA":
        flags[1] = str(CertAuthority(tmp_path / "other", "Other CA").pem)
        # (the server sends its CA along: it is the one that also signs client certificates)
        expected = "did not verify (self-signed certificate in certificate chain)"
    elif case == "wrong token":
        bad = tmp_path / "bad.token"
        bad.write_text("not-the-token")
        flags[3] = str(bad)
        expected = "the server refused this edge (unauthorized): edge 'cam-1': missing, wrong or revoked token"
    else:  # the server ends TLS before any HTTP: like an unreachable server, retried while labelling offline
        flags = [*flags[:4], "--startup-timeout", "3"]
        expected = "did not receive a valid HTTP response"
    started = time.monotonic()
    code, logs, out = run_edge(deployment, mtls_server, f"edge-{case.replace(' ', '-')}", *flags, timeout=60)
    assert time.monotonic() - started < 45 and expected in logs, logs
    if case == "no client certificate":  # every frame labelled by the edge's own student, no session ever
        summary = json.loads((out / "summary.json").read_text())
        assert code == 0 and summary["sessions"] == [] and summary["labelled_frames"] == FRAMES, logs
        assert summary["key_frames_dropped"] == summary["key_frames"] > 0 and summary["frames_sent"] == 0
    else:
        assert code == 2 and not (out / "summary.json").exists(), logs
    status, _ = get(f"https://127.0.0.1:{mtls_server}/readyz", deployment.client_context())
    assert status == 200  # the server goes on


def test_an_expired_server_certificate_is_refused(deployment: Deployment) -> None:
    expired = deployment.ca.issue("server-expired", expired=True)
    server, port = start_server(deployment, "server-expired", expired)
    with server:
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # to see when it is up, only
        wait_ready(server, f"https://127.0.0.1:{port}/readyz", insecure)
        code, logs, _ = run_edge(deployment, port, "edge-expired", *good_flags(deployment)[:4], timeout=60)
    assert code == 2 and "did not verify (certificate has expired)" in logs, logs
