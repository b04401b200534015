"""The edge cluster on a real multi-node Ray cluster on this machine (ray.cluster_utils.Cluster: a head
without CPUs, the master's node, and worker nodes of one CPU each)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray", reason="the cluster extra is not installed (pip install 'shadowtutor[cluster]')")

from ray.cluster_utils import Cluster  # noqa: E402

from shadowtutor.acceleration.regions.cluster import ClusterError, ClusterMaster, connect, start_workers  # noqa: E402
from shadowtutor.acceleration.regions.grid import RegionGrid  # noqa: E402
from shadowtutor.acceleration.regions.labeller import FlowPathConfig  # noqa: E402
from shadowtutor.classes import LVS_CLASSES  # noqa: E402
from shadowtutor.models.student import StudentNet  # noqa: E402
from tests.support.motion import panning  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(3):
        c.add_node(num_cpus=1)
    connect(c.address)
    yield c
    ray.shutdown()
    c.shutdown()


def workers(config: FlowPathConfig) -> list:
    torch.manual_seed(0)
    state = StudentNet(len(LVS_CLASSES)).state_dict()
    return start_workers(state, LVS_CLASSES, config.load_network(), config, margin=8)


def test_frames_come_out_whole_in_order_and_keys_are_tracked(cluster: Cluster) -> None:
    # the decision network trusted whenever a key is young
    config = FlowPathConfig(threshold=0.0, regions=4, max_key_age=3, interval=None)
    master = ClusterMaster(workers(config), regions=4, key_lag=0)
    frames = panning(10, size=(96, 64))
    out = list(master.label_stream(frames))
    assert [t for t, _ in out] == list(range(10))
    assert all(labels.shape == (64, 96) and labels.dtype == np.uint8 for _, labels in out)
    assert sorted(master.global_keys) == [0, 1, 2, 3]  # the newest key of every region
    assert all(key.frame >= 6 for key in master.global_keys.values())  # keys are renewed (max key age 3)
    assert master.key_table and all(r in range(4) for _, r in master.key_table)
    assert master.reassigned == 0


def test_a_dead_worker_loses_no_frame(cluster: Cluster) -> None:
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    config = FlowPathConfig(threshold=1.0, regions=4, interval=None)  # always the segmentation path: the slow one
    master = ClusterMaster(workers(config), regions=4, in_flight=3)
    labelled = []
    for t, labels in master.label_stream(panning(12, size=(96, 64))):
        labelled.append(t)
        assert labels.shape == (64, 96)
        if t == 2:  # 3 frames x 4 regions are out to 4 workers: every worker is busy
            cluster.remove_node(node)  # the worker on it and the region it was labelling are gone
    assert labelled == list(range(12))  # every frame once, in order
    assert sum(w is None for w in master.workers) == 1 and master.live_workers == 3
    assert master.reassigned >= 1


def test_regions_reassemble_to_the_workers_labels() -> None:
    grid = RegionGrid(width=96, height=64, regions=6)
    master = ClusterMaster([object()], regions=6)
    parts = {r: np.full((b[3] - b[1], b[2] - b[0]), r, dtype=np.uint8) for r, b in enumerate(grid.boxes)}
    out = master._assemble((64, 96), parts)
    for r, (x0, y0, x1, y1) in enumerate(grid.boxes):
        assert (out[y0:y1, x0:x1] == r).all()


def test_unreachable_address_is_a_clear_error() -> None:
    with pytest.raises(ClusterError, match="no Ray cluster reachable at '127.0.0.1:1'.*ray start --head"):
        connect("127.0.0.1:1")


def test_no_workers_is_an_error() -> None:
    with pytest.raises(ClusterError, match="no workers"):
        ClusterMaster([])


def test_the_edge_runtime_labels_on_the_cluster_and_sends_it_every_update(cluster: Cluster) -> None:
    from edge_agent.runtime import StudentRuntime

    torch.manual_seed(0)
    runtime = StudentRuntime("torch", flow_path=FlowPathConfig(threshold=0.0, max_key_age=2, interval=None),
                             cluster=cluster.address)
    runtime.load(StudentNet(len(LVS_CLASSES)).state_dict(), LVS_CLASSES)
    frames = panning(4, size=(96, 64))
    paths = []
    for f in frames[:3]:  # one call a frame, as the client loop makes them
        assert runtime.infer(f).shape == (64, 96)
        paths += runtime.last_regions.paths
    # one frame counter across calls: the keys of frame 0 are warped at frames 1 and 2 (threshold 0: trusted)
    assert paths[:4] == ["segment"] * 4 and paths[4:] == ["flow"] * 8
    runtime.update({"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100})
    master = runtime.labeller.master
    assert master is not None and master.generation == 1
    assert (runtime.infer(frames[3]) == 8).all()  # every worker holds the new weights; no stale key is warped
    assert runtime.last_regions.paths == ("segment",) * 4
    workers, queued = runtime.cluster_state
    assert workers >= 3 and 0 <= queued < 4
    runtime.close()


def test_the_cluster_labeller_starts_frames_early_and_hands_back_those_it_drew(cluster: Cluster) -> None:
    from shadowtutor.acceleration.labellers.cluster import ClusterLabeller

    torch.manual_seed(0)
    labeller = ClusterLabeller(cluster.address, FlowPathConfig(), margin=8, in_flight=3)
    labeller.load(StudentNet(len(LVS_CLASSES)).state_dict(), LVS_CLASSES)
    frames = panning(8, size=(96, 64))
    drawn = labeller.pipeline(frames)
    first = next(drawn)
    assert first is frames[0] and labeller.label(first).shape == (64, 96)
    assert labeller.master is not None and labeller.master.next_t == 3  # two more frames already out
    ahead = labeller.release()
    assert len(ahead) == 2 and ahead[0] is frames[1] and ahead[1] is frames[2]
    paths = []
    for frame in labeller.pipeline(frames[1:]):  # their work dropped: labelled afresh, in order
        assert labeller.label(frame).shape == (64, 96)
        paths += labeller.stats().regions.paths
    assert len(paths) == 4 * 7 and "flow" in paths and labeller.stats().cluster is not None
    labeller.close()
    assert labeller.master is None
