"""The Ray Serve server on a simulated multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head
and worker nodes, each its own raylet, on this machine): two ingress replicas, one CPU teaching
replica per worker node (the head has no CPU for them), real WebSocket cameras (the load benchmark's),
the ``labels`` teacher and real distillation. Nodes are added and removed, and an ingress replica is
killed with SIGKILL, while the cameras send key frames."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")
serve = pytest.importorskip("ray.serve", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from ray.cluster_utils import Cluster  # noqa: E402

from services.checkpoints.store import DirectoryStore  # noqa: E402
from services.ray_serve.app import APP_NAME, INGRESS, TEACHING, ServeOptions, apply, serve_config  # noqa: E402
from services.ray_serve.summary import alive_actors  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from shadowtutor.acceleration.regions.cluster import connect  # noqa: E402
from shadowtutor.models.checkpoint import save_student  # noqa: E402
from shadowtutor.models.student import StudentNet  # noqa: E402
from shadowtutor_lab.demo.processes import free_port  # noqa: E402
from tests.support.scene import TinyScene, write_scene  # noqa: E402
from tests.support.serve_fleet import (  # noqa: E402
    cameras_running,
    check_no_key_frame_lost,
    start_cameras,
    until,
    wait_ready,
    writers,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
EDGES = 6
JOIN_SECONDS = 30.0  # a joining replica holds its share of the sessions within this


@dataclass
class Fleet:
    cluster: Cluster
    settings: ServerSettings
    scene: TinyScene
    store: DirectoryStore
    base: str
    workers: list[Any]  # the worker nodes, one teaching replica each

    def deploy(self, replicas: int) -> None:
        """Run ``replicas`` teaching replicas (and 2 ingress replicas), HTTP from the head's proxy only: every
        node's proxy would bind the same port on this one machine. The ingress replicas stay on the head
        (its resource ``ingress``), so removing a worker node removes teaching replicas only."""
        config = serve_config(self.settings, ServeOptions(replicas=replicas, store=self.store.location, ingresses=2))
        config["proxy_location"] = "HeadOnly"
        (ingress,) = (d for d in config["applications"][0]["deployments"] if d["name"] == INGRESS)
        ingress["ray_actor_options"] = {"num_cpus": 0, "resources": {"ingress": 0.01}}
        apply(config, replicas)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("ray-fleet")
    scene = write_scene(root / "scene", count=16)
    torch.manual_seed(0)
    student = save_student(root / "student.pt", StudentNet(len(scene.class_names)), scene.class_names)
    port = free_port()
    settings = ServerSettings(
        teacher="labels", labels_dir=scene.directory, student=student, device="cpu", max_sessions=2 * EDGES,
        max_updates=1, threshold=0.99, distill_workers=1, host="127.0.0.1", port=port, log_level="info",
    )
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "resources": {"ingress": 1},
                                                                  "include_dashboard": False})
    try:
        workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
        fleet = Fleet(cluster, settings, scene, DirectoryStore(root / "sessions"), f"http://127.0.0.1:{port}",
                      workers)
        connect(cluster.address)
        fleet.deploy(2)
        wait_ready(fleet.base)
        yield fleet
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


def _spread(counts: Counter[str], replicas: int) -> int:
    loads = [counts.get(r, 0) for r in counts] + [0] * (replicas - len(counts))
    return max(loads) - min(loads)


def _actors(deployment: str) -> list[dict[str, Any]]:
    name = f"ServeReplica:{APP_NAME}:{deployment}"
    return [dict(a) for a in alive_actors() if a["ActorClassName"] == name]


def test_new_edges_spread_within_one_of_even(fleet: Fleet) -> None:
    """Two ingress replicas may place edges arriving at once up to one over even each; the next key
    frames even them out."""
    cameras = start_cameras(fleet.base, fleet.scene, "spread", EDGES)

    def even() -> bool:
        # each edge's key frames answered (the WELCOME's checkpoint alone says where it opened)
        if not all(len(c.result.records) >= 2 for c in cameras):
            return False
        counts = Counter(writers(fleet.store, cameras).values())
        return sum(counts.values()) == EDGES and len(counts) == 2 and _spread(counts, 2) <= 1

    with cameras_running(cameras, rate=2.0):
        started = time.monotonic()
        until(even, timeout=20.0)
        print(f"new edges: within one of even {time.monotonic() - started:.1f} s after the first key frames")
    check_no_key_frame_lost(fleet.store, cameras)


def test_a_node_that_joins_under_load_takes_its_share_within_30_s(fleet: Fleet) -> None:
    cameras = start_cameras(fleet.base, fleet.scene, "join", EDGES)
    share = EDGES // 3
    with cameras_running(cameras, rate=2.0):
        until(lambda: len(writers(fleet.store, cameras)) == EDGES, timeout=30.0)
        before = set(writers(fleet.store, cameras).values())

        def balanced() -> bool:
            counts = Counter(writers(fleet.store, cameras).values())
            newcomer = sum(n for replica, n in counts.items() if replica not in before)
            return newcomer >= share and len(counts) == 3 and _spread(counts, 3) <= 1

        fleet.workers.append(fleet.cluster.add_node(num_cpus=1))
        fleet.deploy(3)
        joined = time.monotonic()
        until(balanced, timeout=JOIN_SECONDS)
        print(f"a joining replica: its share ({share} of {EDGES}) and every replica within one of even "
              f"{time.monotonic() - joined:.1f} s after it ran")
    check_no_key_frame_lost(fleet.store, cameras)


def test_a_node_removed_under_load_loses_no_key_frame(fleet: Fleet) -> None:
    cameras = start_cameras(fleet.base, fleet.scene, "remove", EDGES)
    with cameras_running(cameras, rate=2.0):
        until(lambda: len(writers(fleet.store, cameras)) == EDGES, timeout=30.0)
        before = writers(fleet.store, cameras)
        by_pid = {str(a["Pid"]): a["Address"]["NodeID"] for a in _actors(TEACHING)}
        victim = Counter(before.values()).most_common(1)[0][0]
        node = next(n for n in fleet.workers if n.node_id == by_pid[victim.rpartition(":")[2]])
        fleet.cluster.remove_node(node, allow_graceful=False)
        fleet.workers.remove(node)
        moved = {edge for edge, writer in before.items() if writer == victim}
        # its sessions taken over from their checkpoints
        until(lambda: victim not in {w for e, w in writers(fleet.store, cameras).items() if e in moved},
              timeout=60.0)
        time.sleep(1.0)
    check_no_key_frame_lost(fleet.store, cameras)


def test_killing_an_ingress_replica_costs_only_its_edges_a_reconnect(fleet: Fleet) -> None:
    cameras = start_cameras(fleet.base, fleet.scene, "ingress", EDGES)
    with cameras_running(cameras, rate=2.0):
        # every edge holds its session's weights (a key frame answered): each has a session to resume
        until(lambda: len(writers(fleet.store, cameras)) == EDGES and all(c.result.records for c in cameras),
              timeout=30.0)
        ingresses = _actors(INGRESS)
        assert len(ingresses) == 2
        os.kill(int(ingresses[0]["Pid"]), signal.SIGKILL)
        until(lambda: any(c.observer.disconnects for c in cameras), timeout=15.0)
        cut = [c for c in cameras if c.observer.disconnects]
        until(lambda: all(c.transport.stats.resumed == 1 for c in cut), timeout=60.0)
        versions = {c.result.edge_id: c.student.version for c in cut}
        time.sleep(2.0)
    kept = [c for c in cameras if not c.result.disconnects]
    assert kept, "every edge was on the killed ingress replica"
    check_no_key_frame_lost(fleet.store, kept)
    # reconnected through the other ingress replica, their sessions resumed there at the version
    # they held: no new session, no full download, versions going on, answered again
    for camera in cut:
        result = camera.result
        assert (result.sessions, camera.transport.stats.resumed, result.full_answers) == (1, 1, 0), result
        assert camera.student.version > versions[result.edge_id], result
        assert result.records[-1].turnaround is not None, result
