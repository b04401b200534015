"""HelloFirstProtocol under ``shadowtutor serve``'s uvicorn options: nothing over the largest HELLO is read
before a HELLO is accepted, so floods of big pre-HELLO messages leave the server's memory where it was."""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit
from urllib.request import urlopen

import numpy as np
from websockets.sync.client import connect

from services.server.settings import ServerSettings
from shadowtutor.protocol.messages import MAX_HELLO_BYTES, Error, Update, Welcome, decode, encode
from shadowtutor_lab.stress.attack_client import big_message_before_hello
from shadowtutor_lab.stress.load_memory import read_rss
from tests.services.server.connections.test_ws_edge import hello, key_frame
from tests.support.inprocess_server import serve_as_shadowtutor_serves
from tests.support.scene import TinyScene

MIB = 1 << 20


def test_pre_hello_floods_are_refused_from_the_frame_header_and_memory_stays(
    settings: ServerSettings, scene: TinyScene
) -> None:
    """40 connections each declaring 15 MiB before HELLO, two rounds: each is closed after at most a few MiB
    (socket buffers), and the process (server and this test) ends within 100 MB of where it started."""
    with serve_as_shadowtutor_serves(settings.model_copy(update={"hello_timeout": 2.0})) as (base, _app):
        url = urlsplit(base)
        idle = read_rss(os.getpid())
        for _ in range(2):
            sent: list[int] = []

            def flood(sent: list[int] = sent) -> None:
                sent.append(big_message_before_hello(url.hostname, url.port, 15 * MIB))

            threads = [threading.Thread(target=flood) for _ in range(40)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert len(sent) == 40 and max(sent) < 15 * MIB, f"a 15 MiB message was taken whole: {sorted(sent)}"
        grown = read_rss(os.getpid()) - idle
        assert grown < 100 * MIB, f"RSS grew by {grown / MIB:.0f} MiB"
        with connect(base.replace("http", "ws") + "/v1/edge", max_size=None) as ws:  # a real edge is served
            ws.send(encode(hello(scene)))
            assert isinstance(decode(ws.recv(10)), Welcome)
            big = key_frame(scene, seq=0, base_version=0, frame=np.zeros((300, 400, 3), np.uint8))
            assert len(encode(big)) > MAX_HELLO_BYTES  # after HELLO, messages up to max_message_bytes are read
            ws.send(encode(big))
            refusal = decode(ws.recv(10))
            assert isinstance(refusal, Error) and (refusal.code, refusal.fatal) == ("bad_frame", False)
            ws.send(encode(key_frame(scene, seq=1, base_version=0)))
            assert isinstance(decode(ws.recv(30)), Update)


class CountingSocket(socket.socket):
    """A TCP socket that counts the bytes it puts on the wire."""

    sent = 0

    def sendall(self, data: Any, flags: int = 0) -> None:
        super().sendall(data, flags)
        self.sent += len(data)


def test_permessage_deflate_is_not_granted_and_bytes_in_are_wire_bytes(settings: ServerSettings,
                                                                        scene: TinyScene) -> None:
    """A client offering permessage-deflate gets none, so three all-zero raw frames cost their whole size on
    the wire, and that is what the session counts."""
    with serve_as_shadowtutor_serves(settings) as (base, _app):
        url = urlsplit(base)
        sock = CountingSocket()
        sock.connect((url.hostname, url.port))
        with connect(base.replace("http", "ws") + "/v1/edge", sock=sock, compression="deflate", max_size=None) as ws:
            assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
            handshake = sock.sent
            messages = [encode(hello(scene, frame_width=640, frame_height=480))]
            ws.send(messages[0])
            assert isinstance(decode(ws.recv(60)), Welcome)
            for seq in range(3):
                zeros = np.zeros((480, 640, 3), np.uint8)
                messages.append(encode(key_frame(scene, seq=seq, base_version=0, frame=zeros)))
                ws.send(messages[-1])
                decode(ws.recv(60))
            with urlopen(f"{base}/v1/sessions", timeout=10) as response:
                counted = json.load(response)["sessions"][0]["bytes_in"]
            wire = sock.sent - handshake
    payload = sum(len(m) for m in messages)
    assert counted == payload > 3 * 640 * 480 * 3
    # frame headers and pongs add a little on the wire, nothing is taken away
    assert payload <= wire <= payload + 1024
