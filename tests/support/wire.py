"""A test-side protocol client over any WebSocket object with ``send_bytes``/``receive_bytes``
(Starlette's test session), counting every byte it sends and receives."""

from __future__ import annotations

from typing import Any, TypeVar

from shadowtutor.protocol.messages import Message, decode, encode

M = TypeVar("M", bound=Message)


class WireClient:
    def __init__(self, websocket: Any) -> None:
        self.ws = websocket
        self.bytes_sent = 0
        self.bytes_received = 0

    def send(self, message: Message) -> None:
        self.send_raw(encode(message))

    def send_raw(self, data: bytes) -> None:
        self.ws.send_bytes(data)
        self.bytes_sent += len(data)

    def receive(self) -> Message:
        data = self.ws.receive_bytes()
        self.bytes_received += len(data)
        return decode(data)

    def expect(self, kind: type[M]) -> M:
        message = self.receive()
        assert isinstance(message, kind), f"expected {kind.__name__}, got {message!r}"
        return message
