"""Changing a running Ray Serve deployment on a real local Ray cluster (ray.cluster_utils.Cluster: real Ray
processes, CPU teaching replicas with the real ``labels`` teacher, real WebSocket edges, the load benchmark's
simulated cameras). In file order: the replicas are listed with their pids (``serve --ray --list``); the
checkpoints' time to live changes under load in place (no edge drops, no replica restarts, the new TTL
sweeps); with a TTL shorter than the gap between snapshots a killed replica's sessions survive (no full
download); a change that would restart the ingress, or another port, is refused and changes nothing; another
port with ``restart`` is served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
import torch

ray = pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")
serve = pytest.importorskip("ray.serve", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from ray.cluster_utils import Cluster  # noqa: E402

from services.checkpoints.store import DirectoryStore, _name  # noqa: E402
from services.ray_serve.app import APP_NAME, INGRESS, TEACHING, ChangeRefused, ServeOptions, deploy  # noqa: E402
from services.ray_serve.summary import alive_actors  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from shadowtutor.models.checkpoint import save_student  # noqa: E402
from shadowtutor.models.student import StudentNet  # noqa: E402
from shadowtutor_lab.demo.processes import free_port  # noqa: E402
from tests.support.scene import TinyScene, write_scene  # noqa: E402
from tests.support.serve_fleet import (  # noqa: E402
    check_no_key_frame_lost,
    run_cameras,
    start_cameras,
    until,
    wait_ready,
    writers,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
EDGES = 4


@dataclass
class Deployment:
    settings: ServerSettings
    options: ServeOptions
    scene: TinyScene
    store: DirectoryStore
    address: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("ray-rollout")
    scene = write_scene(root / "scene", count=16)
    torch.manual_seed(0)
    student = save_student(root / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)
    settings = ServerSettings(
        teacher="labels", labels_dir=scene.directory, student=student, device="cpu", max_sessions=EDGES,
        max_updates=2, threshold=0.99, distill_workers=1, host="127.0.0.1", port=free_port(), log_level="info",
        checkpoint_ttl=3600,
    )
    store = DirectoryStore(root / "sessions")
    options = ServeOptions(replicas=2, store=store.location)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False})
    try:
        deploy(cluster.address, settings, options)
        wait_ready(f"http://127.0.0.1:{settings.port}")
        yield Deployment(settings, options, scene, store, cluster.address)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


def _pids(*deployments: str) -> set[int]:
    names = {f"ServeReplica:{APP_NAME}:{name}" for name in deployments}
    return {int(a["Pid"]) for a in alive_actors() if a["ActorClassName"] in names}


def _settle(deployment: Deployment, **changes: object) -> dict:
    """Deploy the fixture's settings with ``changes`` (they stay for the next tests)."""
    deployment.settings = deployment.settings.model_copy(update=changes)
    return deploy(deployment.address, deployment.settings, deployment.options)


def test_the_replicas_are_listed_with_their_pids(deployment: Deployment) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    listed = subprocess.run([sys.executable, "-m", "shadowtutor", "serve", "--ray", deployment.address, "--list"],
                            capture_output=True, text=True, timeout=120, env=env, check=False)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    for kind, name in (("teaching", TEACHING), ("ingress", INGRESS)):
        shown = {int(line.rpartition(" pid ")[2]) for line in lines if line.startswith(f"  {kind} ")}
        assert shown == _pids(name) and len(shown) == (2 if kind == "teaching" else 1), listed.stdout
    assert any(line.startswith("  HTTP proxy 1: ") for line in lines), listed.stdout


def test_a_ttl_change_rolls_in_place_under_load_and_drops_no_edge(deployment: Deployment) -> None:
    store = deployment.store
    assert store.create("planted", "idle", 0, b"an idle session")  # idle for 100 s: past 30 s, not 3600 s
    for path in (store.directory / _name("planted")).iterdir():
        os.utime(path, (time.time() - 100, time.time() - 100))
    before = _pids(TEACHING, INGRESS)
    cameras = start_cameras(deployment.base, deployment.scene, "ttl", EDGES)
    stop = threading.Event()
    threads = run_cameras(cameras, seconds=120.0, rate=2.0, stop=stop)
    try:
        time.sleep(2.0)
        _settle(deployment, checkpoint_ttl=30.0)
        assert all(thread.is_alive() for thread in threads)  # the edges ran all along
        until(lambda: store.load("planted", "idle") is None, timeout=30.0)  # swept at the new TTL
        time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    check_no_key_frame_lost(store, cameras)  # no WebSocket dropped, no new session, no full download
    assert _pids(TEACHING, INGRESS) == before  # reconfigured, not restarted


def test_a_ttl_shorter_than_the_snapshot_gap_keeps_a_killed_replicas_sessions(deployment: Deployment) -> None:
    """Key frames every 0.5 s, a snapshot every 32 versions (16 s), a TTL of 6 s: the sessions' first
    snapshots are older than the TTL when a replica is killed, their journal entries younger."""
    _settle(deployment, checkpoint_ttl=6.0, checkpoint_every=32)
    cameras = start_cameras(deployment.base, deployment.scene, "short", EDGES)
    stop = threading.Event()
    threads = run_cameras(cameras, seconds=120.0, rate=2.0, stop=stop)
    try:
        until(lambda: len(writers(deployment.store, cameras)) == EDGES, timeout=30.0)
        time.sleep(9.0)  # the WELCOME's snapshot is 9 s old, swept at least once since it passed 6 s
        assert all(len(c.result.records) < 32 for c in cameras)  # no second snapshot yet
        victim = sorted(set(writers(deployment.store, cameras).values()))[0]
        os.kill(int(victim.rpartition(":")[2]), signal.SIGKILL)
        time.sleep(6.0)  # taken over from the checkpoints
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    check_no_key_frame_lost(deployment.store, cameras)  # one session each, zero full downloads
    until(lambda: len(_pids(TEACHING)) == 2, timeout=120.0)  # Serve replaced the killed replica


def test_a_change_that_would_restart_the_ingress_or_another_port_is_refused(deployment: Deployment) -> None:
    before = _pids(TEACHING, INGRESS)
    changed = deployment.settings.model_copy(update={"distill_workers": 2})
    with pytest.raises(ChangeRefused, match=r"^changing --distill-workers restarts the ingress .*--ray-restart"):
        deploy(deployment.address, changed, deployment.options)
    other_port = deployment.settings.model_copy(update={"port": free_port()})
    with pytest.raises(ChangeRefused, match=r"another --port only when Serve starts again.*--ray-restart"):
        deploy(deployment.address, other_port, deployment.options)
    other_store = replace(deployment.options, store=str(deployment.store.directory.parent / "other-sessions"))
    with pytest.raises(ChangeRefused, match=r"^changing --checkpoint-store restarts"):
        deploy(deployment.address, deployment.settings, other_store)
    assert _pids(TEACHING, INGRESS) == before
    wait_ready(deployment.base, timeout=5.0)  # still served where it was


def test_another_port_with_restart_is_served(deployment: Deployment) -> None:
    old = deployment.base
    port = free_port()
    deployment.settings = deployment.settings.model_copy(update={"port": port})
    served = deploy(deployment.address, deployment.settings, deployment.options, restart=True)
    assert served["port"] == port
    wait_ready(deployment.base)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{old}/readyz", timeout=2)
