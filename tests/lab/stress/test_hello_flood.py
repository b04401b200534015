"""HELLOs with made-up tokens in bulk (8 loopback addresses x 8 connections, each HELLO sent with the
upgrade request, each connection opened again once its answer came) against ``shadowtutor serve``: the
edge agent's own transport, with its default reconnect back-off, gets its session within 5 s, 10 times
out of 10, while the flood runs. (It passes on the code before refused HELLOs left their place too: on
this machine the server reads pipelined HELLOs late enough that idle places remain for the edge to
take; test_ws_edge_security.py has the deterministic case.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edge_agent.backoff import Backoff
from edge_agent.transport import EdgeTransport
from shadowtutor.protocol.messages import Hello
from shadowtutor_lab.scenes.cache import cached_scene
from shadowtutor_lab.stress.auth_flood import HelloFlood
from shadowtutor_lab.stress.fuzz_server import LOCAL_CANARY_ID, LOCAL_EDGE_ID, local_server

pytestmark = pytest.mark.slow

SOURCES = tuple(f"127.0.0.{n}" for n in range(2, 10))
RUNS = 10
WELCOME_WITHIN = 5.0


def test_an_edge_gets_its_session_under_a_bad_token_hello_flood(tmp_path: Path) -> None:
    scene = cached_scene("fixed-people", 4, 1, (64, 48), 30.0, tmp_path / "scenes", progress=False)
    with local_server(scene, tmp_path) as server:
        classes = list(server.readyz["class_names"])
        attacker = Hello(edge_id=LOCAL_EDGE_ID, class_names=classes, frame_width=64, frame_height=48,
                         mode="naive", agent="hello-flood")
        edge = Hello(edge_id=LOCAL_CANARY_ID, class_names=classes, frame_width=64, frame_height=48, mode="naive")
        port = int(server.base_url.rsplit(":", 1)[1])
        flood = HelloFlood("127.0.0.1", port, attacker, SOURCES, per_source=8).start()
        seconds: list[float | None] = []
        try:
            time.sleep(3.0)
            for _ in range(RUNS):
                transport = EdgeTransport(server.ws_url, edge, backoff=Backoff(0.5, 15.0),
                                          token=lambda: server.tokens[LOCAL_CANARY_ID])
                start = time.monotonic()
                transport.start()
                try:
                    transport.wait_first_welcome(WELCOME_WITHIN)
                    seconds.append(time.monotonic() - start)
                except Exception:
                    seconds.append(None)
                finally:
                    transport.close()
        finally:
            flood.stop()
    outcomes = dict(flood.answers)
    assert outcomes.get("answered", 0) >= 64, outcomes
    assert None not in seconds, (seconds, outcomes)
