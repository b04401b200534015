"""HelloFirstProtocol under ``shadowtutor serve``'s uvicorn options: nothing over the largest HELLO is read
before a HELLO is accepted, so floods of big pre-HELLO messages leave the server's memory where it was."""

from __future__ import annotations

import os
import threading
from urllib.parse import urlsplit

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
