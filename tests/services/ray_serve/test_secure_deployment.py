"""The Ray Serve deployment with the one-process server's security, as docker-compose.ray.yml and the
KubeRay manifest configure it: Serve's proxy serves TLS with the certificate, the ingress admits
only edges with a token of the tokens file, and every teaching replica tags the session
checkpoints with the secret of the checkpoint secret file (the Serve config names the files only).
A real local Ray cluster (ray.cluster_utils.Cluster), CPU teaching replicas with the ``labels``
teacher, real WebSocket edges over wss://."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")
serve = pytest.importorskip("ray.serve", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from ray.cluster_utils import Cluster  # noqa: E402

from services.checkpoints.seal import MAGIC  # noqa: E402
from services.ray_serve.app import ServeOptions, deploy, serve_config  # noqa: E402
from services.server.access import tokens  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from shadowtutor.models.checkpoint import save_student  # noqa: E402
from shadowtutor.models.student import StudentNet  # noqa: E402
from shadowtutor_lab.demo.processes import free_port  # noqa: E402
from shadowtutor_lab.stress.load_edge import SimulatedCamera  # noqa: E402
from tests.support.certs import CertAuthority  # noqa: E402
from tests.support.scene import TinyScene, write_scene  # noqa: E402
from tests.support.serve_fleet import until  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SECRET = "the checkpoint secret of this fleet"


@dataclass(frozen=True)
class SecureDeployment:
    settings: ServerSettings
    scene: TinyScene
    store: Path
    url: str  # wss://127.0.0.1:PORT/v1/edge
    base: str  # https://127.0.0.1:PORT
    context: ssl.SSLContext  # trusts the test CA
    edge_token: str
    admin_token: str


def _get(deployment: SecureDeployment, path: str, token: str | None = None) -> int:
    request = urllib.request.Request(deployment.base + path)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=deployment.context, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureDeployment]:
    root = tmp_path_factory.mktemp("ray-secure")
    scene = write_scene(root / "scene", count=16)
    torch.manual_seed(0)
    student = save_student(root / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)
    authority = CertAuthority(root)
    server = authority.issue("server")
    tokens_file = root / "auth" / "tokens.json"
    tokens_file.parent.mkdir()
    edge_token = tokens.issue_token(tokens_file, "edges", "cam-0")
    admin_token = tokens.issue_token(tokens_file, "admins", "ops")
    secret_file = root / "checkpoint_secret"
    secret_file.write_text(SECRET + "\n")
    port = free_port()
    settings = ServerSettings(
        teacher="labels", labels_dir=scene.directory, student=student, device="cpu", max_sessions=4,
        max_updates=2, threshold=0.99, distill_workers=1, host="127.0.0.1", port=port, log_level="warning",
        tls_cert=server.cert, tls_key=server.key, tokens_file=tokens_file, checkpoint_secret_file=secret_file,
    )
    store = root / "sessions"
    context = ssl.create_default_context(cafile=str(authority.pem))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    try:
        deploy(cluster.address, settings, ServeOptions(replicas=1, store=str(store)))
        found = SecureDeployment(settings, scene, store, f"wss://127.0.0.1:{port}/v1/edge",
                                 f"https://127.0.0.1:{port}", context, edge_token, admin_token)
        until(lambda: _get(found, "/readyz") == 200, timeout=120)
        yield found
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


def _camera(deployment: SecureDeployment, edge_id: str, token: str | None) -> SimulatedCamera:
    scene = deployment.scene
    camera = SimulatedCamera(0, deployment.url, edge_id, scene.class_names, scene.frames, stride=1)
    camera.transport.ssl_context = deployment.context
    camera.transport.token = lambda: token
    return camera


def test_the_serve_config_names_the_files_never_the_secrets(deployment: SecureDeployment) -> None:
    config = json.dumps(serve_config(deployment.settings, ServeOptions(store=str(deployment.store))))
    assert SECRET not in config and deployment.edge_token not in config
    assert str(deployment.settings.checkpoint_secret_file) in config and '"ssl_certfile"' in config


def test_an_edge_with_its_token_is_taught_over_tls_and_its_checkpoints_are_tagged(
        deployment: SecureDeployment) -> None:
    camera = _camera(deployment, "cam-0", deployment.edge_token)
    camera.start()
    camera.wait_welcome(60.0)
    stop = threading.Event()
    until(lambda: bool(list(deployment.store.glob("*/*.ckpt"))), timeout=60)
    thread = threading.Thread(target=camera.run, args=(0.0, float("inf"), 2.0, 0.0, stop))
    thread.start()
    try:
        until(lambda: sum(r.turnaround is not None for r in camera.result.records) >= 2, timeout=90)
    finally:
        stop.set()
        thread.join(30)
    files = [p for p in deployment.store.glob("*/*") if p.suffix in (".ckpt", ".jrnl")]
    assert {p.suffix for p in files} == {".ckpt", ".jrnl"}
    assert all(p.read_bytes().startswith(MAGIC) for p in files)


def test_an_edge_without_a_token_and_metrics_without_an_admin_token_are_refused(
        deployment: SecureDeployment) -> None:
    camera = _camera(deployment, "cam-1", None)
    camera.start()
    with pytest.raises(Exception, match="(?i)token|auth|refused"):
        camera.wait_welcome(30.0)
    camera.close()
    assert _get(deployment, "/metrics") == 401
    assert _get(deployment, "/metrics", deployment.admin_token) == 200
