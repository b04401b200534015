"""Running one fuzz case over a real WebSocket and recording what the server did.

The connection sends the case's HELLO (and waits for WELCOME), its steps, then a probe (see
:mod:`~shadowtutor_lab.stress.fuzz_cases`), and reads until the server closes, answers the probe,
or ``timeout`` passes. An abrupt disconnect shuts the TCP connection down with no close frame.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.messages import Error, Labels, Message, Update, Welcome, decode
from shadowtutor_lab.stress.fuzz_cases import PROBE_SEQ, PROBE_VERSION, Drop, FuzzCase, Target, probe_message

CLOSED, ANSWERED, TIMEOUT, DROPPED, CONNECT_FAILED = "closed", "answered", "timeout", "dropped", "connect failed"
NO_CLOSE_FRAME = 1006  # what a client reports when the connection ended without a close frame (RFC 6455)


@dataclass
class Observation:
    """What the server did in one case."""

    ended: str = TIMEOUT
    received: list[str] = field(default_factory=list)  # message names, e.g. "WELCOME", "ERROR bad_frame (fatal)"
    errors: list[tuple[str, bool]] = field(default_factory=list)  # (code, fatal) of every ERROR
    answers: int = 0  # UPDATE and LABELS messages, the probe's answer not counted
    close_code: int | None = None
    close_reason: str = ""
    undecodable: int = 0  # server messages that are not valid protocol messages
    send_failed: bool = False  # the server closed the connection while the case was still sending
    seconds: float = 0.0
    detail: str = ""


# The client library logs an error when the fuzzer cuts a connection under it: expected here, so not shown.
_QUIET = logging.getLogger(f"{__name__}.websockets")
_QUIET.setLevel(logging.CRITICAL)


def open_connection(url: str, ssl_context: ssl.SSLContext | None, timeout: float) -> connect:
    """A context manager giving the open connection (closed on exit)."""
    return connect(url, ssl=ssl_context, open_timeout=timeout, close_timeout=2, max_size=None,
                   ping_interval=None, compression=None, user_agent_header="shadowtutor-fuzz", logger=_QUIET)


def run_case(case: FuzzCase, target: Target, url: str, *, timeout: float,
             ssl_context: ssl.SSLContext | None = None) -> Observation:
    """Play ``case`` against the server at ``url``; never raises for what the server does."""
    seen = Observation()
    start = time.monotonic()
    with ExitStack() as stack:
        try:
            ws = stack.enter_context(open_connection(url, ssl_context, timeout))
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            seen.ended, seen.detail = CONNECT_FAILED, f"{type(exc).__name__}: {exc}"
            return seen
        _play(ws, case, target, seen, start + timeout)
    seen.seconds = round(time.monotonic() - start, 3)
    return seen


def _play(ws: ClientConnection, case: FuzzCase, target: Target, seen: Observation, deadline: float) -> None:
    if case.hello is not None:
        if not _send(ws, case.hello, seen):
            return _collect(ws, case, seen, deadline)
        if not _await_welcome(ws, case, seen, deadline):
            return None
    for step in case.steps:
        if isinstance(step, Drop):
            time.sleep(step.after)
            _drop(ws, step.partial)
            seen.ended = DROPPED
            return None
        if not _send(ws, step.data, seen):
            return _collect(ws, case, seen, deadline)
    if case.probe:
        _send(ws, probe_message(case.mode, target), seen)
    return _collect(ws, case, seen, deadline)


def _send(ws: ClientConnection, data: bytes | str, seen: Observation) -> bool:
    """False when the server has closed the connection already (its close is read next)."""
    try:
        ws.send(data)
        return True
    except (ConnectionClosed, OSError):
        seen.send_failed = True
        return False


def _await_welcome(ws: ClientConnection, case: FuzzCase, seen: Observation, deadline: float) -> bool:
    """True once WELCOME came; otherwise the case ends with what came instead."""
    message = _receive(ws, seen, deadline)
    if isinstance(message, Welcome):
        return True
    if message is not None:  # refused: read on to the close
        _collect(ws, case, seen, deadline)
    return False


def _collect(ws: ClientConnection, case: FuzzCase, seen: Observation, deadline: float) -> None:
    """Read until the close, the probe's answer, or the deadline."""
    while seen.ended == TIMEOUT:
        message = _receive(ws, seen, deadline)
        if message is None:
            return
        if _answers_probe(message, case.mode):
            seen.ended = ANSWERED
        elif isinstance(message, (Update, Labels)):
            seen.answers += 1


def _answers_probe(message: Message, mode: str) -> bool:
    if mode == "distill":
        return isinstance(message, Update) and message.full and message.base_version == PROBE_VERSION
    return isinstance(message, (Labels, Error)) and message.seq == PROBE_SEQ


def _receive(ws: ClientConnection, seen: Observation, deadline: float) -> Message | None:
    """The next decodable message (recorded), or None when the connection closed or the deadline passed."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            data = ws.recv(timeout=remaining)
        except TimeoutError:
            return None
        except ConnectionClosed as exc:
            seen.ended = CLOSED
            seen.close_code = exc.rcvd.code if exc.rcvd is not None else NO_CLOSE_FRAME
            seen.close_reason = exc.rcvd.reason if exc.rcvd is not None else ""
            return None
        try:
            message = decode(data)
        except ProtocolError:
            seen.undecodable += 1
            seen.received.append("UNDECODABLE")
            continue
        seen.received.append(message_name(message))
        if isinstance(message, Error):
            seen.errors.append((message.code, message.fatal))
        return message


def message_name(message: Message) -> str:
    if isinstance(message, Error):
        return f"ERROR {message.code}{' (fatal)' if message.fatal else ''}"
    if isinstance(message, Update):
        return "UPDATE (full)" if message.full else "UPDATE"
    return type(message).__name__.upper()


def _drop(ws: ClientConnection, partial: bytes) -> None:
    """Write ``partial`` raw to the socket, then cut the TCP connection with no close frame."""
    sock = ws.socket
    try:
        if partial:
            sock.sendall(partial)
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # the server hung up first
    sock.close()
