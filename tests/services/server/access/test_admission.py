"""Admission: unauthenticated connections bounded per source and in all; the oldest idle one makes room."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

from services.server.access.admission import EVICTED, SOURCE_FULL, TABLE_FULL, Admission, Ticket
from services.server.access.tokens import issue_token
from services.server.metrics.server_metrics import REFUSAL_REASONS
from services.server.settings import ServerSettings
from shadowtutor.protocol.messages import Welcome, decode, encode
from shadowtutor_lab.stress.attack_client import IdleFlood
from tests.services.server.connections.test_ws_edge import hello
from tests.support.inprocess_server import serve_as_shadowtutor_serves
from tests.support.scene import TinyScene


class Connections:
    def __init__(self, per_source: int, total: int) -> None:
        self.evicted: list[str] = []
        self.refusals: list[str] = []
        self.sizes: list[int] = []
        self.admission = Admission(per_source, total, self.sizes.append, on_refusal=self.refusals.append)

    def open(self, source: str, name: str) -> Ticket | str:
        return self.admission.enter(source, lambda: self.evicted.append(name))


def test_a_full_source_evicts_its_oldest_idle_connection_and_no_other_source_s() -> None:
    c = Connections(per_source=2, total=10)
    a1, a2, b1 = c.open("a", "a1"), c.open("a", "a2"), c.open("b", "b1")
    assert all(isinstance(t, Ticket) for t in (a1, a2, b1))
    a3 = c.open("a", "a3")
    assert isinstance(a3, Ticket) and c.evicted == ["a1"] and c.refusals == [EVICTED]
    assert c.admission.held_by("a") == 2 and c.admission.held_by("b") == 1 and len(c.admission) == 3


def test_busy_connections_are_never_evicted_and_then_a_newcomer_is_refused() -> None:
    c = Connections(per_source=2, total=10)
    for name in ("a1", "a2"):
        ticket = c.open("a", name)
        assert isinstance(ticket, Ticket)
        ticket.busy()  # its HELLO is being checked
    assert c.open("a", "a3") == SOURCE_FULL and c.evicted == [] and c.refusals == [SOURCE_FULL]
    assert isinstance(c.open("b", "b1"), Ticket)


def test_a_full_table_evicts_from_the_source_holding_the_most() -> None:
    c = Connections(per_source=5, total=3)
    tickets = [c.open("a", "a1"), c.open("b", "b1"), c.open("b", "b2")]
    tickets.append(c.open("c", "c1"))
    assert isinstance(tickets[-1], Ticket) and c.evicted == ["b1"]
    for ticket in tickets:
        ticket.busy()
    assert c.open("d", "d1") == TABLE_FULL and c.evicted == ["b1"]


def test_leaving_frees_the_place_once() -> None:
    c = Connections(per_source=1, total=1)
    ticket = c.open("a", "a1")
    assert isinstance(ticket, Ticket)
    c.admission.leave(ticket)
    c.admission.leave(ticket)
    assert len(c.admission) == 0 and c.sizes == [1, 0]
    assert isinstance(c.open("a", "a2"), Ticket) and c.evicted == []


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="per_source >= 1"):
        Admission(0, 1)


@pytest.mark.parametrize("attacker", ["127.0.0.2", "127.0.0.1"], ids=["another address", "the edge's address"])
def test_idle_socket_loops_cannot_keep_a_real_edge_out(
    settings: ServerSettings, scene: TinyScene, tmp_path: Path, attacker: str
) -> None:
    """60 loops reopening idle /v1/edge sockets (from another loopback address, or the edge's own) under
    ``shadowtutor serve``'s uvicorn options; meanwhile an edge with its token gets its WELCOME within 5 s."""
    tokens = tmp_path / "tokens.json"
    token = issue_token(tokens, "edges", "cam-1")
    with serve_as_shadowtutor_serves(settings.model_copy(update={"tokens_file": tokens})) as (base, _app):
        url = urlsplit(base)
        flood = IdleFlood(url.hostname, url.port, loops=60, source=attacker).start()
        try:
            deadline = time.monotonic() + 10
            while flood.opened < 60 and flood.refused == 0:  # every loop holds a socket, or the server refuses
                assert time.monotonic() < deadline, f"the flood did not get going: {flood}"
                time.sleep(0.05)
            started = time.monotonic()
            welcome = None
            while welcome is None and time.monotonic() - started < 5:
                with contextlib.suppress(OSError, InvalidHandshake, ConnectionClosed):
                    with connect(base.replace("http", "ws") + "/v1/edge", max_size=None, open_timeout=5) as ws:
                        ws.send(encode(hello(scene, edge_id="cam-1", token=token)))
                        welcome = decode(ws.recv(5))
            assert isinstance(welcome, Welcome), f"no WELCOME within 5 s ({flood})"
        finally:
            flood.stop()


def test_the_refusal_reasons_are_the_metric_s_labels() -> None:
    assert set(REFUSAL_REASONS) == {SOURCE_FULL, TABLE_FULL, EVICTED}
