"""An edge that stops reading: a raw WebSocket client that sends HELLO and key frames and never reads.

Built on the sans-I/O protocol of ``websockets`` over a plain socket with a small receive
buffer, so that nothing reads on its behalf: the server's messages pile up in the kernel and
then in the server's own send buffer, as with a device whose process hangs.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import numpy as np
from websockets.client import ClientProtocol
from websockets.http11 import Response
from websockets.uri import parse_uri

from shadowtutor.protocol.messages import Hello, KeyFrame, Message, encode

RECEIVE_BUFFER = 4096


class StuckEdge:
    def __init__(self, url: str) -> None:
        """Connect to ``url`` (``ws://HOST:PORT/v1/edge``) and finish the WebSocket handshake."""
        parts = urlsplit(url)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)  # before connect: the window
        self.sock.settimeout(10)
        self.sock.connect((parts.hostname, parts.port))
        self.protocol = ClientProtocol(parse_uri(url), max_size=None)
        self.protocol.send_request(self.protocol.connect())
        self._flush()
        while not any(isinstance(event, Response) for event in self.protocol.events_received()):
            data = self.sock.recv(RECEIVE_BUFFER)
            assert data, "the server closed the connection during the handshake"
            self.protocol.receive_data(data)
        assert self.protocol.handshake_exc is None, self.protocol.handshake_exc

    def send(self, message: Message) -> None:
        self.protocol.send_binary(encode(message))
        self._flush()

    def hello(self, edge_id: str, class_names: list[str], width: int, height: int) -> None:
        """A distill session with full weights as plain float32: the WELCOME alone is about 2 MB."""
        self.send(Hello(
            edge_id=edge_id, class_names=class_names, frame_width=width, frame_height=height,
            frame_codecs=["raw"], weight_codecs=["f32"],
        ))

    def key_frames(self, count: int, width: int, height: int) -> None:
        """``count`` raw key frames, frame indices 0.. (the labels teacher has a label for each)."""
        frame = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
        for seq in range(count):
            self.send(KeyFrame(
                seq=seq, frame_index=seq, base_version=0, codec="raw", width=width, height=height,
                payload=frame.tobytes(),
            ))

    def close(self) -> None:
        self.sock.close()

    def _flush(self) -> None:
        self.sock.sendall(b"".join(self.protocol.data_to_send()))
