"""The WebSocket transport against a stand-in server that speaks protocol v1 (tests/support/stand_in_server.py).

The stand-in replaces the real server here so that each protocol rule can be provoked on
demand; tests/e2e/ runs the agent against the real server.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from edge_agent.backoff import Backoff
from edge_agent.errors import ServerRefusedError, TransportError
from edge_agent.handover import LabelsReply
from edge_agent.handshake import _student_size
from edge_agent.runtime import StudentRuntime
from edge_agent.transport import EdgeTransport
from edge_agent.versioning import VersionedStudent
from shadowtutor.algorithms.client_loop import ClientLoop
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.protocol.defaults import DEFAULT_FRAME_CODECS
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello, KeyFrame, ResyncRequest, Welcome
from tests.support.certs import CertAuthority
from tests.support.stand_in_server import StandInServer, naive_labels

WIDTH, HEIGHT = 48, 32


def make_hello(mode: str = "distill", frame_codecs=("raw",), weight_codecs=("f32",)) -> Hello:
    return Hello(
        edge_id="edge-test", class_names=list(LVS_CLASSES), frame_width=WIDTH, frame_height=HEIGHT,
        mode=mode, frame_codecs=list(frame_codecs), weight_codecs=list(weight_codecs),
    )


def frame(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)


class RecordingObserver:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_connected(self, connected: bool) -> None:
        self.events.append(("connected", connected))

    def on_bytes(self, sent: int, received: int) -> None:
        self.events.append(("bytes", sent, received))

    def on_roundtrip(self, seconds: float) -> None:
        self.events.append(("roundtrip", seconds))

    def on_reconnect(self, resumed: bool) -> None:
        self.events.append(("reconnect", resumed))

    def on_resync(self) -> None:
        self.events.append(("resync",))

    def on_key_frame_dropped(self) -> None:
        self.events.append(("dropped",))

    def total(self, index: int) -> int:
        return sum(e[index] for e in self.events if e[0] == "bytes")


class Edge:
    """A transport plus a versioned student, wired as the agent wires them."""

    def __init__(
        self, url: str, mode: str = "distill", backoff: Backoff | None = None,
        observer: RecordingObserver | None = None, weight_codecs: tuple[str, ...] = ("f32",), **options: float,
    ) -> None:
        self.observer = observer or RecordingObserver()
        self.student = VersionedStudent(
            StudentRuntime("reference"), LVS_CLASSES, lambda have, why: self.transport.request_resync(have, why)
        )
        hello = make_hello(mode, weight_codecs=weight_codecs)
        self.transport = EdgeTransport(url, hello, self.student if mode == "distill" else None,
                                       observer=self.observer, backoff=backoff or Backoff(0.05, 0.2), **options)
        self.transport.start()

    def client_loop(self, wait_timeout: float = 10) -> ClientLoop:
        """After the first WELCOME: the client loop over this transport and student."""
        info = self.transport.wait_first_welcome(10)
        self.student.sync()
        return ClientLoop(info.params, self.student, self.transport, wait_timeout=wait_timeout)

    def run_frames(self, loop: ClientLoop, count: int) -> None:
        """Process ``count`` frames as the agent does, then let the last answer land."""
        for i in range(count):
            self.student.sync()
            loop.process(frame(i))
        if loop.pending is not None:
            loop.pending.wait(10)

    def __enter__(self) -> Edge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.transport.close()


def edge_state(student: VersionedStudent) -> dict[str, torch.Tensor]:
    return student.runtime.labeller.require().student.state_dict()


def assert_same_weights(student: VersionedStudent, expected: dict[str, torch.Tensor]) -> None:
    actual = edge_state(student)
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(actual[key], value, rtol=0, atol=0, msg=key)


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_handshake_installs_the_welcome_weights(stand_in: StandInServer) -> None:
    with Edge(stand_in.url) as edge:
        info = edge.transport.wait_first_welcome(10)
        assert info.session_id == "s1" and info.frame_codec == "raw" and info.weight_codec == "f32"
        assert info.params == stand_in.params
        assert edge.student.sync().origin == "welcome"
        assert (edge.student.session_id, edge.student.version) == ("s1", 0)
        assert_same_weights(edge.student, stand_in.weights)
        assert ("connected", True) in edge.observer.events
        labels = edge.student.infer(frame(0))
        assert labels.shape == (HEIGHT, WIDTH) and labels.dtype == np.uint8


def test_client_loop_applies_updates_in_version_order(stand_in: StandInServer) -> None:
    with Edge(stand_in.url) as edge:
        edge.run_frames(edge.client_loop(), 20)
    versions = [(h.session_id, h.version, h.full) for h in edge.student.history]
    applied = len(versions) - 1
    assert applied >= 4  # key frames at 0, then every 2..4 frames, each answered before the next
    assert versions == [("s1", v, v == 0) for v in range(applied + 1)]
    session = stand_in.sessions[0]
    key_frames = [m for m in session.received if isinstance(m, KeyFrame)]
    assert [m.base_version for m in key_frames][:applied] == list(range(applied))
    if len(key_frames) == applied:  # the last update was applied too: the edge holds the server's student
        assert_same_weights(edge.student, session.state)
    assert [e for e in edge.observer.events if e[0] == "roundtrip"]


def test_delta_updates_leave_the_edge_holding_the_servers_weights_bit_for_bit(stand_in: StandInServer) -> None:
    with Edge(stand_in.url, weight_codecs=("q8delta+zstd", "f16+zstd")) as edge:
        info = edge.transport.wait_first_welcome(10)
        assert (info.weight_codec, info.delta_codec) == ("f16+zstd", "q8delta+zstd")
        loop = edge.client_loop()
        edge.run_frames(loop, 12)
        if loop.pending is not None:  # the last answer landed after the last frame: apply it as the next would
            edge.student.apply(loop.pending.result().payload)
    session = stand_in.sessions[0]
    assert edge.student.updates_applied >= 3 and edge.student.version == session.version
    assert_same_weights(edge.student, session.state)
    assert all(torch.equal(edge.student.held.state[k], v) for k, v in session.state.items())


def test_stale_update_is_not_applied_and_asks_for_a_resync(stand_in: StandInServer) -> None:
    with Edge(stand_in.url) as edge:
        edge.transport.wait_first_welcome(10)
        edge.student.sync()
        before = {k: v.clone() for k, v in edge_state(edge.student).items()}
        stand_in.stale_next = True
        pending = edge.transport.submit(0, frame(0))
        assert pending.wait(10)
        outcome = pending.result()
        assert not outcome.payload.full and outcome.payload.base_version == 7
        edge.student.apply(outcome.payload)
        assert edge.student.rejected == 1 and edge.student.version == 0
        assert_same_weights(edge.student, before)
        # the resync answer (full weights) arrives on its own and is installed at the next sync
        wait_until(lambda: edge.student._staged is not None)
        installed = edge.student.sync()
    assert installed.origin == "resync" and installed.full
    session = stand_in.sessions[0]
    resyncs = [m for m in session.received if isinstance(m, ResyncRequest)]
    assert [r.have_version for r in resyncs] == [0]
    assert edge.student.version == session.version == 2
    assert_same_weights(edge.student, session.state)
    assert ("resync",) in edge.observer.events and edge.transport.stats.resyncs_requested == 1


def test_server_gone_fails_pending_fast_and_inference_goes_on(stand_in: StandInServer) -> None:
    with Edge(stand_in.url, backoff=Backoff(5, 5)) as edge:
        loop = edge.client_loop(wait_timeout=30)
        stand_in.reply_delay = 30  # the key frame will not be answered before the server dies
        loop.process(frame(0))
        pending = loop.pending
        started = time.monotonic()
        stand_in.kill()
        assert pending.wait(5) and pending.result() is None
        assert time.monotonic() - started < 2
        wait_until(lambda: not edge.transport.connected)
        results = [loop.process(frame(i)) for i in range(1, 12)]
        assert sum(r.waited_seconds for r in results) < 0.5  # nothing waited on the dead server
        assert sum(r.is_key_frame for r in results) >= 2  # key frames still chosen, and they fail at once
        assert all(r.labels.shape == (HEIGHT, WIDTH) for r in results)
        assert edge.student.version == 0
        assert ("connected", False) in edge.observer.events
        dropped = sum(r.is_key_frame for r in results)  # no session: nothing queued, every one counted
        assert edge.transport.stats.key_frames_dropped == dropped == edge.observer.events.count(("dropped",))


def test_a_resumed_reconnect_is_counted_and_the_first_handshake_keeps_its_bytes(stand_in: StandInServer) -> None:
    stand_in.resume = True
    with Edge(stand_in.url, backoff=Backoff(0.05, 0.1)) as edge:
        edge.transport.wait_first_welcome(10)
        edge.student.sync()
        first_welcome = stand_in.bytes_sent
        pending = edge.transport.submit(0, frame(0))
        assert pending.wait(10)
        edge.student.apply(pending.result().payload)
        stand_in.drop()
        wait_until(lambda: edge.transport.stats.handshakes == 2 and edge.transport.connected)
        stats = edge.transport.stats
        assert (stats.reconnects, stats.resumed, stats.new_session_reconnects, stats.sessions) == (1, 1, 0, ["s1"])
        assert ("reconnect", True) in edge.observer.events
        assert stats.first_handshake_bytes_received == first_welcome > 100_000  # the model download
        resumed_welcome = stats.handshake_bytes_received_total - stats.first_handshake_bytes_received
        assert 0 < resumed_welcome < 2_000  # no weights
        assert stats.handshake_bytes_sent_total > stats.first_handshake_bytes_sent > 0
        assert (edge.student.session_id, edge.student.version) == ("s1", 1)


def test_reconnect_with_backoff_replaces_the_weights() -> None:
    first = StandInServer(seed=0).start()
    with Edge(first.url, backoff=Backoff(0.2, 0.4)) as edge:
        edge.transport.wait_first_welcome(10)
        edge.student.sync()
        pending = edge.transport.submit(0, frame(0))
        assert pending.wait(10)
        edge.student.apply(pending.result().payload)
        assert (edge.student.session_id, edge.student.version) == ("s1", 1)
        port = first.port
        first.kill()
        wait_until(lambda: not edge.transport.connected)
        second = StandInServer(seed=1)
        second.port = port
        time.sleep(0.5)  # at least one failed attempt while the server is away
        second.start()
        try:
            wait_until(lambda: edge.transport.connected)
            installed = edge.student.sync()
            assert installed.origin == "welcome" and installed.session_id == "s1"
            assert (edge.student.session_id, edge.student.version) == ("s1", 0)
            assert_same_weights(edge.student, second.weights)
            assert edge.transport.stats.reconnects == 1 and ("reconnect", False) in edge.observer.events
            assert edge.transport.backoff.attempts == 0  # reset by the WELCOME
        finally:
            edge.transport.close()
            second.kill()
    assert not torch.equal(second.weights["out_conv3.weight"], first.weights["out_conv3.weight"])


def test_byte_counters_equal_the_bytes_on_the_wire(stand_in: StandInServer) -> None:
    with Edge(stand_in.url) as edge:
        edge.run_frames(edge.client_loop(), 12)
    stats = edge.transport.stats
    assert stats.bytes_sent == stand_in.received_once_settled(stats.bytes_sent) > WIDTH * HEIGHT * 3
    assert stats.bytes_received == stand_in.bytes_sent > 4 * sum(v.numel() for v in stand_in.weights.values())
    assert edge.observer.total(1) == stats.bytes_sent and edge.observer.total(2) == stats.bytes_received


def test_naive_mode_gets_label_maps(stand_in: StandInServer) -> None:
    with Edge(stand_in.url, mode="naive") as edge:
        edge.transport.wait_first_welcome(10)
        pending = edge.transport.request_labels(3, frame(3))
        assert pending.wait(10)
        reply = pending.result()
    assert isinstance(reply, LabelsReply) and reply.frame_index == 3
    np.testing.assert_array_equal(reply.labels, naive_labels(frame(3), len(LVS_CLASSES)))


def test_non_fatal_error_fails_only_that_key_frame(stand_in: StandInServer) -> None:
    with Edge(stand_in.url) as edge:
        edge.transport.wait_first_welcome(10)
        edge.student.sync()
        stand_in.fail_next = True
        failed = edge.transport.submit(0, frame(0))
        assert failed.wait(10) and failed.result() is None
        answered = edge.transport.submit(1, frame(1))
        assert answered.wait(10) and answered.result() is not None
        assert edge.transport.connected and edge.transport.stats.errors == {"teacher_failed": 1}


@pytest.mark.parametrize("code", [ErrorCode.INCOMPATIBLE_MODEL, ErrorCode.UNAUTHORIZED, ErrorCode.SESSION_REPLACED])
def test_terminal_refusal_ends_the_run(stand_in: StandInServer, code: ErrorCode) -> None:
    stand_in.refuse = code
    with Edge(stand_in.url) as edge, pytest.raises(ServerRefusedError, match=code.value):
        edge.transport.wait_first_welcome(10)
    assert stand_in.hellos == 1  # no retry


def test_the_token_is_asked_for_at_every_connection(stand_in: StandInServer) -> None:
    stand_in.refuse = ErrorCode.SERVER_BUSY
    tokens = iter(f"token-{n}" for n in range(100))
    transport = EdgeTransport(stand_in.url, make_hello("naive"), backoff=Backoff(0.05, 0.1),
                              token=lambda: next(tokens))
    transport.start()
    try:
        wait_until(lambda: stand_in.hellos >= 2)
        stand_in.refuse = None
        transport.wait_first_welcome(10)
        (session,) = stand_in.sessions
        assert session.hello.token == f"token-{stand_in.hellos - 1}"  # a fresh token for each HELLO
    finally:
        transport.close()


def test_busy_server_is_retried_with_backoff(stand_in: StandInServer) -> None:
    stand_in.refuse = ErrorCode.SERVER_BUSY
    with Edge(stand_in.url, backoff=Backoff(0.05, 0.1)) as edge:
        wait_until(lambda: stand_in.hellos >= 3)
        stand_in.refuse = None
        assert edge.transport.wait_first_welcome(10).session_id == "s1"
    assert edge.transport.stats.errors["server_busy"] >= 3


def test_no_server_fails_startup_with_a_clear_error() -> None:
    with Edge("ws://127.0.0.1:9/v1/edge", backoff=Backoff(0.05, 0.1)) as edge:
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"no WELCOME from ws://127.0.0.1:9/v1/edge within 1 s"):
            edge.transport.wait_first_welcome(1)
        assert time.monotonic() - started < 3


def test_the_first_attempt_ends_at_once_without_a_server_and_waits_for_a_welcome_with_one(
    stand_in: StandInServer,
) -> None:
    with Edge("ws://127.0.0.1:9/v1/edge", backoff=Backoff(5, 5)) as edge:
        started = time.monotonic()
        assert edge.transport.wait_first_attempt(10) is None  # refused at once: no need to wait 10 s
        assert time.monotonic() - started < 2 and "ConnectionRefused" in edge.transport.last_error
    with Edge(stand_in.url) as edge:
        assert edge.transport.wait_first_attempt(10).session_id == "s1"
        assert edge.transport.stats.first_handshake_bytes_received == stand_in.bytes_sent > 100_000  # the WELCOME


def test_submit_does_not_block_on_a_slow_server(stand_in: StandInServer) -> None:
    with Edge(stand_in.url) as edge:
        edge.transport.wait_first_welcome(10)
        edge.student.sync()
        stand_in.reply_delay = 3
        started = time.monotonic()
        pending = edge.transport.submit(0, frame(0))
        assert time.monotonic() - started < 1 and not pending.done()
        assert pending.wait(10) and pending.result() is not None


def test_an_unexpected_error_in_a_session_does_not_end_the_network_thread(stand_in: StandInServer) -> None:
    class FaultyObserver(RecordingObserver):
        failures = [RuntimeError("observer defect")]

        def on_connected(self, connected: bool) -> None:  # a defect in the first session only
            if connected and self.failures:
                raise self.failures.pop()

    with Edge(stand_in.url, backoff=Backoff(0.05, 0.1), observer=FaultyObserver()) as edge:
        wait_until(lambda: len(stand_in.sessions) == 2 and edge.transport.connected)
        assert "observer defect" in edge.transport.last_error


def test_a_link_that_takes_no_more_bytes_is_dropped_and_reconnected(stand_in: StandInServer) -> None:
    # The stand-in stops reading after the first key frame, so the socket fills up as over a cut link.
    # Keepalive pings wait behind the blocked message, so only the send's own time limit can notice it.
    with Edge(stand_in.url, ping_interval=0.5, ping_timeout=1.0) as edge:
        edge.transport.wait_first_welcome(10)
        stand_in.reply_delay = 1000
        big = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)  # 0.9 MB raw
        started = time.monotonic()
        pendings = [edge.transport.submit(i, big) for i in range(40)]
        wait_until(lambda: edge.transport.stats.reconnects == 1, 20)
        assert time.monotonic() - started < 10
        assert all(p.done() and p.result() is None for p in pendings)  # lost with the connection, none hangs


def test_the_welcome_student_size_must_be_the_one_the_edge_announced() -> None:
    def welcome(size: list[int] | None) -> Welcome:
        return Welcome(
            session_id="s1", version=0, frame_codec="raw", weight_codec="f32", params={},
            class_names=list(LVS_CLASSES), student_size=size,
        )

    def hello(size: list[int] | None) -> Hello:
        announced = make_hello()
        announced.student_size = size
        return announced

    assert _student_size(hello(None), welcome([32, 18])) == (32, 18)  # the server's choice
    assert _student_size(hello(None), welcome(None)) is None
    assert _student_size(hello([32, 18]), welcome([32, 18])) == (32, 18)
    with pytest.raises(ServerRefusedError, match="student size"):
        _student_size(hello([32, 18]), welcome(None))
    with pytest.raises(ProtocolError, match="student_size"):
        _student_size(hello(None), welcome([0, 18]))


def test_ws_to_a_tls_port_says_to_use_wss(tmp_path: Path) -> None:
    """A real TLS listener on loopback (it closes plain connections after a failed handshake)."""
    authority = CertAuthority(tmp_path)
    server_files = authority.issue("server")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server_files.cert, server_files.key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with contextlib.suppress(OSError), conn:
                    context.wrap_socket(conn, server_side=True)  # fails on a plain HTTP request

    threading.Thread(target=serve, daemon=True).start()
    try:
        with Edge(f"ws://127.0.0.1:{port}/v1/edge", backoff=Backoff(5, 5)) as edge:
            assert edge.transport.wait_first_attempt(10) is None
            assert f"if the server serves TLS, use wss://127.0.0.1:{port}/v1/edge" in edge.transport.last_error
    finally:
        listener.close()


def test_an_edge_preferring_h264_falls_back_to_jpeg_with_an_older_server(stand_in: StandInServer) -> None:
    """The stand-in server knows the image codecs only, as servers before the stream codecs."""
    hello = make_hello("naive", frame_codecs=DEFAULT_FRAME_CODECS)
    assert hello.frame_codecs[0] == "h264"
    transport = EdgeTransport(stand_in.url, hello, backoff=Backoff(0.05, 0.1))
    transport.start()
    try:
        assert transport.wait_first_welcome(10).frame_codec == "jpeg"
        pending = transport.request_labels(3, frame(3))
        assert pending.wait(10) and isinstance(pending.result(), LabelsReply)
    finally:
        transport.close()
