"""summary_lines: what `serve --ray` prints once deployed, from the cluster's live actors: the edges'
and metrics' addresses Serve's proxies serve (not the settings'), the admission bound, one line per
ingress replica, teaching replica and proxy (node and pid; replica_lines, also `serve --ray --list`)
and the store. The actors are given as Ray's GCS table writes them (the
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
    # Serve's proxies kept the port they started with: the banner prints that one
    served = {"host": "127.0.0.1", "port": 8100, "ssl_certfile": None}
    text = "\n".join(summary_lines("10.0.0.1:6379", settings, options, actors, served))
    assert "ws://127.0.0.1:8100/v1/edge" in text and "http://127.0.0.1:8100/metrics" in text
    assert ":8000" not in text
    assert "at most 32 edges" in text and "ingress 1: 10.0.0.1 pid 30" in text
    assert "2 replica(s), 1 GPU and 2 CPU each, at most 20 students each" in text
    assert "teaching 1: 10.0.0.2 pid 40" in text and "teaching 2: 10.0.0.3 pid 41" in text
    assert "HTTP proxy 1: 10.0.0.1 pid 20" in text and "HTTP proxy 2: 10.0.0.2 pid 21" in text
    assert "/mnt/s" in text and "--ray 10.0.0.1:6379 --stop" in text
    assert "ServeController" not in text and "pid 10" not in text


def test_missing_actors_are_said() -> None:
    served = {"host": "0.0.0.0", "port": 8443, "ssl_certfile": "/tls/server.crt"}
    text = "\n".join(summary_lines("a:1", ServerSettings(), ServeOptions(), [], served))
    assert "ingress: not running" in text and "0 replica(s)" in text and "HTTP proxy: not running" in text
    assert "wss://0.0.0.0:8443/v1/edge" in text and "https://0.0.0.0:8443/metrics" in text
