"""The server's faces: the WebSocket edge endpoint, its handshake and wire framing, REST, the access
log."""
