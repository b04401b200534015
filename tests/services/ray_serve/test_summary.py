"""summary_lines: what `serve --ray` prints once deployed, from the cluster's live actors: the edges'
and metrics' addresses, the admission bound, the ingress, one line per teaching replica (node and
pid), the proxies' nodes and the store. The actors are given as Ray's GCS table writes them (the
real table needs a cluster; tests/services/ray_serve/test_app.py runs one)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.serve", reason="the serve extra is not installed")

from services.ray_serve.app import ServeOptions  # noqa: E402
from services.ray_serve.summary import summary_lines  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402


def _actor(cls: str, ip: str, pid: int) -> dict:
    return {"ActorClassName": cls, "Address": {"IPAddress": ip, "Port": 1}, "Pid": pid}


def test_it_names_every_replica_and_the_addresses() -> None:
    actors = [
        _actor("ServeReplica:shadowtutor:teaching", "10.0.0.3", 41),
        _actor("ServeReplica:shadowtutor:teaching", "10.0.0.2", 40),
        _actor("ServeReplica:shadowtutor:ingress", "10.0.0.1", 30),
        _actor("ProxyActor", "10.0.0.1", 20), _actor("ProxyActor", "10.0.0.2", 21),
        _actor("ServeController", "10.0.0.1", 10),
    ]
    settings = ServerSettings(host="127.0.0.1", port=8000, max_sessions=32)
    options = ServeOptions(replicas=2, gpus=1, cpus=2, store="/mnt/s", replica_sessions=20)
    text = "\n".join(summary_lines("10.0.0.1:6379", settings, options, actors))
    assert "ws://127.0.0.1:8000/v1/edge" in text and "http://127.0.0.1:8000/metrics" in text
    assert "at most 32 edges" in text and "ingress:     10.0.0.1 pid 30" in text
    assert "2 replica(s), 1 GPU and 2 CPU each, at most 20 students each" in text
    assert "replica 1: 10.0.0.2 pid 40" in text and "replica 2: 10.0.0.3 pid 41" in text
    assert "HTTP proxies on: 10.0.0.1, 10.0.0.2 (port 8000)" in text and "/mnt/s" in text


def test_missing_actors_are_said() -> None:
    text = "\n".join(summary_lines("a:1", ServerSettings(), ServeOptions(), []))
    assert "ingress:     not running" in text and "0 replica(s)" in text and "none yet" in text
