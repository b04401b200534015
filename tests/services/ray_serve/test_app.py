"""The server as a Ray Serve application on a real local Ray cluster (ray.cluster_utils.Cluster: real
Ray processes; CPU teaching replicas with the real ``labels`` teacher, real distillation and real
WebSocket edges, the load benchmark's simulated cameras). A teaching replica is killed with SIGKILL
(its process, not a mock), and the replica count changes while the edges run."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")
serve = pytest.importorskip("ray.serve", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from ray.cluster_utils import Cluster  # noqa: E402

from services.checkpoints.session import header  # noqa: E402
from services.checkpoints.store import DirectoryStore  # noqa: E402
from services.ray_serve.app import ServeOptions, deploy  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from shadowtutor.models.checkpoint import save_student  # noqa: E402
from shadowtutor.models.student import StudentNet  # noqa: E402
from shadowtutor_lab.demo.processes import free_port  # noqa: E402
from shadowtutor_lab.stress.load_edge import SimulatedCamera  # noqa: E402
from tests.support.prometheus import sample_value  # noqa: E402
from tests.support.scene import TinyScene, write_scene  # noqa: E402
from tests.support.serve_fleet import (  # noqa: E402
    check_no_key_frame_lost,
    run_cameras,
    start_cameras,
    until,
    wait_ready,
    writers,
)
from tests.support.sessions import distill  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
EDGES = 8


@dataclass(frozen=True)
class Deployment:
    settings: ServerSettings
    scene: TinyScene
    store: DirectoryStore
    base: str  # http://127.0.0.1:PORT
    address: str  # the Ray cluster's


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("ray-serve")
    scene = write_scene(root / "scene", count=16)
    torch.manual_seed(0)
    student = save_student(root / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)
    port = free_port()
    settings = ServerSettings(
        teacher="labels", labels_dir=scene.directory, student=student, device="cpu", max_sessions=EDGES,
        max_updates=2, threshold=0.99, distill_workers=1, host="127.0.0.1", port=port, log_level="warning",
    )
    store = DirectoryStore(root / "sessions")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False})
    try:
        deploy(cluster.address, settings, ServeOptions(replicas=2, store=store.location))
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        yield Deployment(settings, scene, store, base, cluster.address)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


def _cameras(deployment: Deployment, prefix: str) -> list[SimulatedCamera]:
    return start_cameras(deployment.base, deployment.scene, prefix, EDGES)


def _writers(deployment: Deployment, cameras: list[SimulatedCamera]) -> dict[str, str]:
    return writers(deployment.store, cameras)


def _metrics(deployment: Deployment) -> str:
    with urllib.request.urlopen(f"{deployment.base}/metrics", timeout=5) as response:
        return response.read().decode()


def _stored_version(deployment: Deployment, edge_id: str, session_id: str) -> object:
    return header(deployment.store.load(edge_id, session_id))["version"]


def test_a_killed_teaching_replica_loses_no_key_frame_and_no_session(deployment: Deployment) -> None:
    cameras = _cameras(deployment, "kill")
    stop = threading.Event()
    threads = run_cameras(cameras, seconds=9.0, rate=2.0, stop=stop)
    try:
        until(lambda: len(_writers(deployment, cameras)) == EDGES and all(c.result.records for c in cameras))
        before = _writers(deployment, cameras)
        replicas = set(before.values())
        # edges that arrive at once spread at once: a replica counts as empty until it reports
        assert len(replicas) == 2, f"sessions did not spread over the replicas: {before}"
        victim = sorted(replicas)[0]
        moved = {edge for edge, writer in before.items() if writer == victim}
        os.kill(int(victim.rpartition(":")[2]), signal.SIGKILL)  # the replica's process
    except BaseException:  # the next test must not find these sessions still open
        stop.set()
        raise
    finally:
        for thread in threads:
            thread.join()
    check_no_key_frame_lost(deployment.store, cameras)
    after = _writers(deployment, cameras)
    assert all(after[edge] != victim for edge in moved)  # taken over from their checkpoints
    metrics = _metrics(deployment)
    assert sample_value(metrics, "shadowtutor_server_session_moves_total") >= len(moved)
    survivor = next(iter(replicas - {victim}))
    # The survivor is still a series; the killed replica counts no session (it leaves the series at
    # once when a request to it failed, else once unheard for forget_after seconds).
    assert sample_value(metrics, "shadowtutor_server_teaching_replica_sessions", replica=survivor) >= 0
    try:
        assert sample_value(metrics, "shadowtutor_server_teaching_replica_sessions", replica=victim) == 0
    except KeyError:
        pass
    # a write is reported with the session's next answer: the last one of each session is not
    assert sample_value(metrics, "shadowtutor_server_checkpoint_seconds_count") >= sum(
        len(c.result.records) for c in cameras) - 2 * EDGES


def test_replica_count_changes_while_edges_run_lose_nothing(deployment: Deployment) -> None:
    cameras = _cameras(deployment, "scale")
    stop = threading.Event()
    threads = run_cameras(cameras, seconds=120.0, rate=1.0, stop=stop)
    time.sleep(1.0)
    for replicas in (3, 1):  # each returns once the deployment runs at that count
        options = ServeOptions(replicas=replicas, store=deployment.store.location)
        deploy(deployment.address, deployment.settings, options)
    assert all(thread.is_alive() for thread in threads)  # the edges ran all along
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    check_no_key_frame_lost(deployment.store, cameras)
    assert len(set(_writers(deployment, cameras).values())) == 1  # all on the one replica left


def test_resync_naive_mode_and_sessions_through_the_ingress(deployment: Deployment) -> None:
    from websockets.sync.client import connect

    from shadowtutor.protocol.codecs import encode_frame
    from shadowtutor.protocol.messages import Hello, KeyFrame, Labels, ResyncRequest, Update, Welcome, decode, encode

    url = deployment.base.replace("http://", "ws://") + "/v1/edge"
    classes = list(deployment.scene.class_names)

    def key_frame(seq: int, base_version: int) -> bytes:
        return encode(
            KeyFrame(
                seq=seq,
                frame_index=seq,
                base_version=base_version,
                codec="raw",
                width=64,
                height=48,
                payload=encode_frame(deployment.scene.frames[seq], "raw"),
            )
        )

    with connect(url, max_size=2**24) as distill, connect(url, max_size=2**24) as naive:
        distill.send(encode(Hello(edge_id="wire-distill", class_names=classes, frame_width=64, frame_height=48)))
        naive.send(
            encode(Hello(edge_id="wire-naive", class_names=classes, frame_width=64, frame_height=48, mode="naive"))
        )
        welcome = decode(distill.recv(timeout=30))
        assert isinstance(welcome, Welcome)
        assert not decode(naive.recv(timeout=30)).tensors  # naive: no student
        distill.send(encode(ResyncRequest(have_version=0, reason="test")))
        resync = decode(distill.recv(timeout=30))
        assert isinstance(resync, Update) and (resync.version, resync.full) == (1, True)
        distill.send(key_frame(0, base_version=1))
        update = decode(distill.recv(timeout=30))
        assert isinstance(update, Update) and (update.version, update.full) == (2, False)
        naive.send(key_frame(1, base_version=0))
        labels = decode(naive.recv(timeout=30))
        assert isinstance(labels, Labels) and (labels.seq, labels.width, labels.height) == (1, 64, 48)
        with urllib.request.urlopen(f"{deployment.base}/v1/sessions", timeout=5) as response:
            sessions = {s["edge_id"]: s for s in json.loads(response.read())["sessions"]}
        assert sessions["wire-distill"]["version"] == 2 and sessions["wire-naive"]["mode"] == "naive"
    # written behind the answer
    until(lambda: _stored_version(deployment, "wire-distill", welcome.session_id) == 2, timeout=10.0)


def test_a_key_frame_answered_by_two_replicas_keeps_the_first_stored_answer(deployment: Deployment) -> None:
    """Another replica stored this key frame's version first (as after a request sent again to a replica
    that still ran it): the edge gets that replica's answer, and the session goes on from it."""
    from websockets.sync.client import connect

    from services.checkpoints.session import restore, snapshot
    from shadowtutor.algorithms.distill import Distiller
    from shadowtutor.classes import background_index
    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.protocol.codecs import encode_frame
    from shadowtutor.protocol.messages import Hello, KeyFrame, Update, Welcome, decode, encode

    scene, settings = deployment.scene, deployment.settings
    params = settings.algorithm_params()

    def new_distiller(size: tuple[int, int] | None) -> Distiller:
        return Distiller(load_student(settings.student).model, params, background_index(scene.class_names), "cpu", size)

    def key_frame(seq: int, base_version: int) -> bytes:
        return encode(
            KeyFrame(
                seq=seq,
                frame_index=seq,
                base_version=base_version,
                codec="raw",
                width=64,
                height=48,
                payload=encode_frame(scene.frames[seq], "raw"),
            )
        )

    with connect(deployment.base.replace("http://", "ws://") + "/v1/edge", max_size=2**24) as ws:
        ws.send(encode(Hello(edge_id="race", class_names=list(scene.class_names), frame_width=64, frame_height=48)))
        welcome = decode(ws.recv(timeout=30))
        assert isinstance(welcome, Welcome)
        other = restore(
            deployment.store.load("race", welcome.session_id),
            params,
            new_distiller,
            edge_id="race",
            session_id=welcome.session_id,
            max_size=(1920, 1080),
        ).session
        first = distill(other, 0, scene.frames[0], scene.labels[0], base_version=0, teacher_ms=0.0)
        assert deployment.store.claim("race", welcome.session_id, 1)
        assert deployment.store.create("race", welcome.session_id, 1, snapshot(other, first, 0))
        ws.send(key_frame(0, base_version=0))
        answer = decode(ws.recv(timeout=30))
        assert isinstance(answer, Update) and encode(answer) == encode(first)  # the first stored, byte for byte
        ws.send(key_frame(1, base_version=1))
        after = decode(ws.recv(timeout=30))
        assert isinstance(after, Update) and (after.version, after.full) == (2, False)
    until(lambda: _stored_version(deployment, "race", welcome.session_id) == 2, timeout=10.0)


def test_a_bad_ray_address_is_one_clear_error(tmp_path: Path, deployment: Deployment) -> None:
    from shadowtutor.acceleration.regions.cluster import ClusterError

    with pytest.raises(ClusterError, match=r"^no Ray cluster reachable at '127.0.0.1:1' .*ray start --head"):
        deploy("127.0.0.1:1", deployment.settings, ServeOptions(store=str(tmp_path / "s")))
