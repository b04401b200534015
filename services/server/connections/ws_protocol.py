"""uvicorn's WebSocket protocol with a per-connection message limit that starts small.

Until the application raises it, a connection accepts messages of at most ``first_message_bytes``
(the largest HELLO the protocol allows): a frame that declares more is refused from its header
(close 1009) before its payload is read, so an unauthenticated peer never makes the server
buffer more than that. The application raises the limit to ``ws_max_size`` once it has
accepted the HELLO, through the scope extension :data:`MESSAGE_LIMIT_EXTENSION` (a dict whose
``"raise"`` entry takes no arguments). Other ASGI servers lack the extension; the application
then applies the same limit itself after each message has arrived.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from shadowtutor.protocol.messages import MAX_HELLO_BYTES

MESSAGE_LIMIT_EXTENSION = "shadowtutor.message_limit"


class HelloFirstProtocol(WebSocketsSansIOProtocol):
    """``WebSocketsSansIOProtocol`` whose messages are limited to ``first_message_bytes`` until
    raised."""

    first_message_bytes = MAX_HELLO_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn.max_message_size = min(self.first_message_bytes, self.config.ws_max_size)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        # absent when the handshake was refused
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][MESSAGE_LIMIT_EXTENSION] = {"raise": self.raise_message_limit}

    def raise_message_limit(self) -> None:
        """From now on accept messages up to uvicorn's ``ws_max_size``."""
        self.conn.max_message_size = self.config.ws_max_size
