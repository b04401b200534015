"""Unauthenticated attacks on a server's HTTP and WebSocket layers, over raw sockets.

What a peer without a token can do before any HELLO: send a huge HTTP header, declare a huge
WebSocket message before HELLO, and hold idle ``/v1/edge`` sockets open in loops. Each helper
streams from one reused buffer (the attacker's memory stays flat), stops at the first sign that
the server closed the connection, and returns how much it got to send, so that callers can judge
what the server bounded. Plain ``ws://`` only, to an address the caller chooses.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

CHUNK = memoryview(bytes(1 << 20))  # 1 MiB of zeros, sent over and over
HEADER_CHUNK = memoryview(b"a" * (1 << 20))  # 1 MiB of a valid header value
BINARY = 0x2


def _connect(host: str, port: int, source: str | None, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    if source is not None:
        sock.bind((source, 0))
    sock.connect((host, port))
    return sock


def upgrade(host: str, port: int, path: str = "/v1/edge", *, source: str | None = None,
            timeout: float = 10.0, headers: dict[str, str] | None = None, first: bytes = b"") -> socket.socket:
    """A WebSocket opened by hand (``source``: the local address to connect from; ``headers``: more request
    headers; ``first``: a message sent in the same write as the upgrade request, before any answer); raises
    :class:`ConnectionError` with the status line unless the server answers 101."""
    sock = _connect(host, port, source, timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    message = frame_header(len(first)) + first if first else b""
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n".encode() + message
    )
    head = b""
    try:
        while b"\r\n\r\n" not in head:
            data = sock.recv(4096)
            if not data:
                break
            head += data
    except OSError:
        pass
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 101 " not in status + " ":
        sock.close()
        raise ConnectionError(f"no upgrade: {status or 'connection closed'}")
    return sock


def frame_header(length: int, opcode: int = BINARY) -> bytes:
    """A final client frame's header declaring ``length`` bytes, masked with the all-zero key (so
    zeros go on the wire as zeros)."""
    if length < 126:
        size = struct.pack("!B", 0x80 | length)
    elif length < 1 << 16:
        size = struct.pack("!BH", 0x80 | 126, length)
    else:
        size = struct.pack("!BQ", 0x80 | 127, length)
    return bytes([0x80 | opcode]) + size + b"\0\0\0\0"


def stream_zeros(sock: socket.socket, total: int, chunk: memoryview = CHUNK) -> int:
    """Send up to ``total`` bytes (``chunk`` again and again: zeros); returns how many went out before the
    peer closed or reset."""
    sent = 0
    try:
        while sent < total:
            sent += sock.send(chunk[: min(len(chunk), total - sent)])
    except OSError:
        pass
    return sent


def huge_header(host: str, port: int, size: int, *, timeout: float = 10.0) -> int:
    """``GET /healthz`` with one header of ``size`` bytes (``a`` repeated); the bytes sent before the server
    closed."""
    sock = _connect(host, port, None, timeout)
    with sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Padding: ".encode())
        return stream_zeros(sock, size, HEADER_CHUNK)


def big_message_before_hello(host: str, port: int, size: int, *, source: str | None = None,
                             timeout: float = 10.0) -> int:
    """Declare a ``size``-byte message as the first one on ``/v1/edge`` and stream it; the bytes of it sent
    before the server closed (``size``: the server took it all)."""
    sock = upgrade(host, port, source=source, timeout=timeout)
    with sock:
        sock.sendall(frame_header(size))
        return stream_zeros(sock, size)


@dataclass
class IdleFlood:
    """``loops`` threads each holding an idle ``/v1/edge`` socket from ``source`` and reopening it as soon as
    the server closes it (or refuses the upgrade), until :meth:`stop`."""

    host: str
    port: int
    loops: int
    source: str | None = None
    opened: int = 0  # upgrades that succeeded
    refused: int = 0  # upgrades refused (e.g. HTTP 403) or failed
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> IdleFlood:
        for index in range(self.loops):
            thread = threading.Thread(target=self._loop, name=f"idle-flood-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock = upgrade(self.host, self.port, source=self.source, timeout=5.0)
            except OSError:
                with self._lock:
                    self.refused += 1
                time.sleep(0.01)
                continue
            with self._lock:
                self.opened += 1
            with sock:
                sock.settimeout(0.2)
                while not self._stop.is_set():  # idle until the server closes it
                    try:
                        if not sock.recv(4096):
                            break
                    except TimeoutError:
                        continue
                    except OSError:
                        break
