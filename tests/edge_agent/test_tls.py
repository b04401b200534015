"""The agent's TLS: a wrong certificate (unknown CA, other host name, expired) ends the run at once with a
clear error, no reconnect loop; tokens over ``ws://`` are warned about. Certificates are made by the
test (tests/support/certs.py); the TLS listener is a bare ``websockets`` server, since the handshake
fails before any protocol message (tests/e2e/test_security.py runs the real server over TLS)."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.sync.server import ServerConnection, serve

from edge_agent.backoff import Backoff
from edge_agent.errors import CertificateError
from edge_agent.settings import EdgeSettings, SettingsError
from edge_agent.tls import client_ssl_context, transport_security
from edge_agent.transport import EdgeTransport
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.protocol.messages import Hello
from tests.support.certs import CertAuthority, CertFiles


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    return CertAuthority(tmp_path_factory.mktemp("pki"))


@contextmanager
def tls_listener(cert: CertFiles) -> Iterator[tuple[str, list[int]]]:
    """A wss:// listener on loopback serving ``cert``; yields its URL and the handshakes it saw."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    attempts: list[int] = []

    def handler(ws: ServerConnection) -> None:
        ws.close()

    def process_request(connection: ServerConnection, request: object) -> None:
        attempts.append(1)

    with serve(handler, "127.0.0.1", 0, ssl=context, process_request=process_request) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"wss://127.0.0.1:{server.socket.getsockname()[1]}/v1/edge", attempts


def hello() -> Hello:
    return Hello(edge_id="edge-tls", class_names=list(LVS_CLASSES), frame_width=48, frame_height=32, mode="naive")


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("unknown CA", "unable to get local issuer certificate"),
        ("other host", "mismatch, certificate is not valid for .127.0.0.1."),
        ("expired", "certificate has expired"),
    ],
)
def test_a_wrong_server_certificate_ends_the_run_without_retrying(
    ca: CertAuthority, tmp_path: Path, case: str, reason: str
) -> None:
    if case == "unknown CA":
        cert = CertAuthority(tmp_path / "other-ca", "Some other CA").issue("server")
    else:
        cert = ca.issue(f"server-{case.replace(' ', '-')}", ("other.example",) if case == "other host" else
                        ("127.0.0.1",), expired=case == "expired")
    with tls_listener(cert) as (url, attempts):
        transport = EdgeTransport(url, hello(), backoff=Backoff(0.01, 0.02), ssl_context=client_ssl_context(ca.pem))
        transport.start()
        try:
            with pytest.raises(CertificateError, match=reason) as failed:
                transport.wait_first_welcome(10)
            assert "--ca-file" in str(failed.value) and url in str(failed.value)
            transport._thread.join(5)
            assert not transport._thread.is_alive()  # the network thread gave up: no silent loop
            assert attempts == [] and transport.stats.sessions == []  # no HTTP request went out in clear
        finally:
            transport.close()


def test_the_right_ca_gets_through_the_handshake(ca: CertAuthority) -> None:
    """With the right CA the TLS handshake succeeds (the bare listener then closes: a reconnect, not a fatal)."""
    with tls_listener(ca.issue("server-ok")) as (url, attempts):
        transport = EdgeTransport(url, hello(), backoff=Backoff(0.01, 0.02), ssl_context=client_ssl_context(ca.pem))
        transport.start()
        try:
            deadline = time.monotonic() + 10
            while not attempts and time.monotonic() < deadline:
                time.sleep(0.05)
            assert attempts and transport.fatal is None
        finally:
            transport.close()


def test_transport_security_options(ca: CertAuthority, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-1\n")
    client = ca.issue("edge-client", ("cam-1",), client=True)
    secure = EdgeSettings(server="wss://127.0.0.1:8443", source="0", ca_file=ca.pem, token_file=token_file,
                          client_cert=client.cert, client_key=client.key)
    options = transport_security(secure)
    assert isinstance(options["ssl_context"], ssl.SSLContext) and options["token"]() == "tok-1"
    token_file.write_text("tok-2")  # reread at every connection: a rotated token needs no restart
    assert options["token"]() == "tok-2"
    with caplog.at_level(logging.WARNING, "edge_agent.tls"):
        assert transport_security(EdgeSettings(server="ws://127.0.0.1:8000", source="0", token="t"))["token"]() == "t"
        assert "without TLS" not in caplog.text  # loopback
        transport_security(EdgeSettings(server="ws://gpu.example:8000", source="0", token="t"))
    assert "sending this edge's token over ws://gpu.example:8000/v1/edge without TLS" in caplog.text
    assert transport_security(EdgeSettings(server="ws://gpu.example:8000", source="0")) == {}
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(SettingsError, match="cannot load the TLS files"):
        client_ssl_context(bad)
