"""Keeping a connection up: attempts one after another, with jittered exponential backoff between
them, until the transport closes or an attempt fails in a way a retry cannot fix."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from websockets.exceptions import WebSocketException

from edge_agent.backoff import Backoff
from edge_agent.errors import (
    CertificateError,
    ServerRefusedError,
    SessionLost,
    TransportError,
    describe_failure,
)
from shadowtutor.protocol.errors import ProtocolError

log = logging.getLogger(__name__)
# failures a reconnect may fix: the link, the server's answer, the session's end
RETRIED = (OSError, asyncio.TimeoutError, WebSocketException, ProtocolError, SessionLost)


class Reconnector:
    """Runs connection attempts to ``url`` on the network thread's loop. Owns the attempt in
    progress (``attempt``, cancelled to close) and the last failure's text (``last_error``)."""

    def __init__(self, url: str, backoff: Backoff, closing: asyncio.Event) -> None:
        self.url = url
        self.backoff = backoff
        self.closing = closing
        self.attempt: asyncio.Task[None] | None = None
        self.last_error = "no connection attempt yet"

    async def run(
        self,
        connect_once: Callable[[], Coroutine[Any, Any, None]],
        attempted: Callable[[], None],
    ) -> TransportError | None:
        """Run ``connect_once()`` again and again until ``closing`` is set (returns None) or an
        attempt fails for good (returns that error: a refusal or a certificate that did not verify).
        ``attempted()`` is called after each attempt that ended otherwise."""
        while not self.closing.is_set():
            self.attempt = asyncio.create_task(connect_once())
            try:
                await self.attempt
            except asyncio.CancelledError:
                return None
            except ssl.SSLCertVerificationError as exc:
                fatal = CertificateError(self.url, exc.verify_message or str(exc))
                log.error("%s", fatal)
                return fatal
            except ServerRefusedError as exc:
                log.error("%s", exc)
                return exc
            except RETRIED as exc:
                self.last_error = describe_failure(exc, self.url)
                log.warning("connection to %s failed or dropped: %s", self.url, self.last_error)
            except Exception as exc:
                # a defect here must not end the thread: inference relies on reconnects
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("unexpected error in the connection to %s; reconnecting", self.url)
            attempted()
            if self.closing.is_set():
                break
            delay = self.backoff.next_delay()
            log.info("reconnecting in %.2f s", delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closing.wait(), delay)
        return None
