"""The WebSocket client: the client loop's ``KeyFrameTransport`` over protocol v1
(docs/protocol.md).

An asyncio loop in a background thread owns the connection: it connects, says HELLO,
installs the WELCOME's weights, sends what the inference thread queued and resolves the
replies, and reconnects with jittered exponential backoff when the link drops. The
inference thread only ever encodes a frame and hands it over (:meth:`EdgeTransport.submit`
returns at once); while disconnected, submissions fail at once (their result is ``None``)
and are counted as dropped: nothing is queued while offline. When the WELCOME asks for
TELEMETRY, the network thread sends ``report()`` at that interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from edge_agent.backoff import Backoff
from edge_agent.errors import TERMINAL_CODES, ServerRefusedError, SessionLost, TransportError
from edge_agent.frame_encoder import FrameEncoder
from edge_agent.handover import Handover, LabelsReply, LiveSession, Outgoing
from edge_agent.handshake import SessionTerms, WeightSink, accept_welcome, resuming
from edge_agent.pending import Pending
from edge_agent.reconnect import Reconnector
from edge_agent.transport_stats import TransportObserver, TransportStats
from edge_agent.versioning import WeightUpdate
from shadowtutor.algorithms.client_loop import UpdateOutcome
from shadowtutor.protocol.codecs import TensorBlob, decode_labels, decode_tensors
from shadowtutor.protocol.errors import CloseCode, ErrorCode, ProtocolError
from shadowtutor.protocol.messages import (
    Error,
    Hello,
    KeyFrame,
    Labels,
    Message,
    ResyncRequest,
    Telemetry,
    Update,
    Welcome,
    decode,
    encode,
)
from shadowtutor.protocol.video_stream import DEFAULT_STREAM_FPS

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class EdgeTransport:
    """One edge's connection to the server, kept alive in a background thread.

    ``hello`` is sent on every (re)connect. In distill mode ``weights`` receives the full
    weights of each WELCOME and of each resync answer; its ``version`` is the base version
    of every key frame.
    """

    def __init__(
        self,
        url: str,
        hello: Hello,
        weights: WeightSink | None = None,
        *,
        observer: TransportObserver | None = None,
        backoff: Backoff | None = None,
        frame_quality: int | None = None,
        key_frame_scale: float = 1.0,
        fps: float = DEFAULT_STREAM_FPS,
        handshake_timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        token: Callable[[], str | None] | None = None,
        ping_interval: float = 20.0,
        ping_timeout: float = 20.0,
        report: Callable[[], Telemetry] | None = None,
    ) -> None:
        """``report`` makes the TELEMETRY sent when a WELCOME asks for it. ``key_frame_scale`` in
        (0, 1]: frames are sent at that share of their sides (the HELLO announces that size);
        ``fps``: the source's frame rate, the clock of an H.264 frame stream.
        ``ssl_context`` verifies
        a ``wss://`` server (default: the system's CA store); ``token`` gives the HELLO's token at
        each connection (so that a rotated token file is picked up). A connection whose keepalive
        ping gets no pong within ``ping_timeout``, or whose message cannot go out within
        ``ping_interval + ping_timeout``, is dropped and reconnected: a dead link is noticed within
        ``ping_interval + ping_timeout`` (plus the closing handshake's 3 s)."""
        if hello.mode == "distill" and weights is None:
            raise ValueError("distill mode needs a weight sink for the server's weights")
        self.url = url
        self.hello = hello
        self.weights = weights
        self.observer = observer
        self.backoff = backoff or Backoff(0.5, 15.0)
        # jpeg/webp quality; None: the codec's default
        self.frame_quality = frame_quality
        self._frames = FrameEncoder(frame_quality, key_frame_scale, fps=fps)
        self.handshake_timeout = handshake_timeout
        self.ssl_context = ssl_context
        self.token = token
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.report = report
        # longest a message may wait to go out
        self.send_timeout = ping_interval + ping_timeout
        self.stats = TransportStats()
        # the current session, None while disconnected
        self.session: SessionTerms | None = None
        # the last session's terms, kept across a reconnect (to resume it)
        self._last_terms: SessionTerms | None = None
        # WELCOMEs received: a new connection's key-frame stream starts from an intra frame
        self._welcomes = 0
        # a refusal or certificate error: the run cannot go on
        self.fatal: TransportError | None = None
        self._seq = itertools.count(1)
        self._welcomed = threading.Event()
        # the first connection attempt got a WELCOME or failed
        self._attempted = threading.Event()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        # bound to the network thread's loop at its first wait
        self._closing = asyncio.Event()
        self._handover = Handover(self.stats, observer, self._frames)
        self._reconnect = Reconnector(url, self.backoff, self._closing)
        self._closing_task: asyncio.Task | None = None

    # -- inference-thread API ---------------------------------------------------------------

    def start(self) -> None:
        """Start the network thread; it connects and keeps reconnecting until :meth:`close`."""
        if self._thread is not None:
            raise RuntimeError("the transport was started already")
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(),), name="edge-transport", daemon=True
        )
        self._thread.start()
        self._started.wait()

    @property
    def last_error(self) -> str:
        """Why the last connection attempt failed or dropped."""
        return self._reconnect.last_error

    @property
    def connected(self) -> bool:
        return self.session is not None

    def wait_first_welcome(
        self, timeout: float, stop: threading.Event | None = None
    ) -> SessionTerms:
        """Block until the first WELCOME (or a refusal, a ``stop``, or ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while not self._welcomed.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
            if self.fatal is not None:
                raise self.fatal
            if stop is not None and stop.is_set():
                raise TransportError("stopped before the server answered")
            if time.monotonic() >= deadline:
                raise TransportError(
                    f"no WELCOME from {self.url} within {timeout:g} s (last error: "
                    f"{self.last_error})"
                )
        if self.fatal is not None:
            raise self.fatal
        info = self.session
        # welcomed once but disconnected again since: report the last session's terms
        if info is None:
            raise TransportError(
                f"the server at {self.url} went away right after the handshake: {self.last_error}"
            )
        return info

    def wait_first_attempt(
        self, timeout: float, stop: threading.Event | None = None
    ) -> SessionTerms | None:
        """Block until the first connection attempt got a WELCOME or failed (at most ``timeout`` s,
        or a ``stop``).

        Returns the session, or None when there is none (the transport keeps reconnecting in the
        background); a refusal or certificate error raises.
        """
        deadline = time.monotonic() + timeout
        while not self._attempted.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
            if (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
                break
        if self.fatal is not None:
            raise self.fatal
        return self.session

    def submit(self, frame_index: int, frame: np.ndarray) -> Pending[UpdateOutcome[WeightUpdate]]:
        """Send a key frame (distill mode); the pending resolves with the server's update, or
        None."""
        base = self.weights.version if self.weights is not None else 0
        return self._send_frame("key_frame", frame_index, frame, base)

    def request_labels(self, frame_index: int, frame: np.ndarray) -> Pending[LabelsReply]:
        """Send a frame for the teacher's labels (naive mode); resolves with a :class:`LabelsReply`,
        or None."""
        return self._send_frame("labels", frame_index, frame, 0)

    def request_resync(self, have_version: int, reason: str) -> None:
        """Ask for full weights (the edge holds ``have_version``); nothing happens while
        disconnected."""
        resync = ResyncRequest(have_version=have_version, reason=reason[:500])
        self._handover.hand_over(Outgoing(kind="resync", data=encode(resync)))

    def close(self, timeout: float = 5.0) -> None:
        """Close the connection with 1000 and stop the thread; outstanding requests fail."""
        # set before start() returns
        loop = self._handover.loop
        if self._thread is None or loop is None or not self._thread.is_alive():
            return
        # the loop has just ended
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._begin_shutdown)
        self._thread.join(timeout)

    # -- hand-over between the threads -------------------------------------------------------

    def _send_frame(
        self, kind: str, frame_index: int, frame: np.ndarray, base_version: int
    ) -> Pending:
        info = self.session
        if info is None:
            self._handover.drop_key_frame()
            return Pending.failed()
        encoded = self._frames.encode(
            frame, info.frame_codec, f"{info.session_id}/{self._welcomes}", frame_index
        )
        seq = next(self._seq)
        message = KeyFrame(
            seq=seq,
            frame_index=frame_index,
            base_version=base_version,
            codec=info.frame_codec,
            width=encoded.width,
            height=encoded.height,
            stream_position=encoded.stream_position,
            payload=encoded.payload,
        )
        pending: Pending = Pending()
        self._handover.hand_over(
            Outgoing(
                kind=kind,
                data=encode(message),
                seq=seq,
                pending=pending,
                stream_epoch=encoded.epoch,
            )
        )
        return pending

    # -- network thread --------------------------------------------------------------------

    async def _main(self) -> None:
        self._handover.loop = asyncio.get_running_loop()
        self._started.set()
        fatal = await self._reconnect.run(self._connect_once, self._attempted.set)
        if fatal is not None:
            self.fatal = fatal
            # wake wait_first_welcome
            self._welcomed.set()
            self._attempted.set()

    def _begin_shutdown(self) -> None:
        self._closing.set()
        active = self._handover.active
        if active is not None:
            closing = active.ws.close(CloseCode.NORMAL, "edge agent done")
            self._closing_task = asyncio.create_task(closing)
        elif self._reconnect.attempt is not None:
            self._reconnect.attempt.cancel()

    async def _connect_once(self) -> None:
        tls: dict[str, Any] = {"ssl": self.ssl_context} if self.ssl_context is not None else {}
        hello = resuming(
            dataclasses.replace(self.hello, token=self.token())
            if self.token is not None
            else self.hello,
            self._last_terms,
            self.weights,
        )
        sent_before, received_before = self.stats.bytes_sent, self.stats.bytes_received
        resumed_before = self.stats.resumed
        async with connect(
            self.url,
            max_size=MAX_MESSAGE_BYTES,
            compression=None,
            open_timeout=self.handshake_timeout,
            close_timeout=3,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_timeout,
            **tls,
        ) as ws:
            await self._send(ws, encode(hello))
            info = await self._handshake(ws, hello)
            self.stats.count_handshake(
                self.stats.bytes_sent - sent_before, self.stats.bytes_received - received_before
            )
            session = LiveSession(ws=ws, terms=info)
            self._handover.active = session
            self.session = info
            self._welcomed.set()
            self._attempted.set()
            if self.observer:
                self.observer.on_connected(True)
                if self.stats.reconnects:
                    self.observer.on_reconnect(self.stats.resumed > resumed_before)
            helpers = [asyncio.create_task(self._send_queued(session))]
            if self.report is not None and info.telemetry_interval:
                helpers.append(
                    asyncio.create_task(
                        self._report_every(session, info.telemetry_interval, self.report)
                    )
                )
            try:
                async for data in ws:
                    self._count_received(data)
                    await self._handle(session, data)
            finally:
                self._handover.active = None
                self.session = None
                for helper in helpers:
                    helper.cancel()
                session.fail_all()
                if self.observer:
                    self.observer.on_connected(False)
            if not self._closing.is_set():
                raise SessionLost(
                    f"the server closed the connection ({ws.close_code} {ws.close_reason!r})"
                )

    async def _handshake(self, ws: ClientConnection, hello: Hello) -> SessionTerms:
        data = await asyncio.wait_for(ws.recv(), self.handshake_timeout)
        self._count_received(data)
        message = decode(data)
        if isinstance(message, Error):
            self._on_error(message)
            raise SessionLost(f"the server answered HELLO with {message.code}: {message.message}")
        if not isinstance(message, Welcome):
            raise ProtocolError(
                ErrorCode.UNEXPECTED_MESSAGE, f"expected WELCOME, got {type(message).__name__}"
            )
        info = accept_welcome(hello, message, self.weights)
        if message.resumed:
            self.stats.resumed += 1
        else:
            self.stats.sessions.append(info.session_id)
        self._last_terms = info
        self._welcomes += 1
        self.backoff.reset()
        log.info(
            "session %s%s: version %d, frames %s, weights %s, deltas %s",
            info.session_id,
            " resumed" if message.resumed else "",
            message.version,
            info.frame_codec,
            info.weight_codec,
            info.delta_codec,
        )
        return info

    @staticmethod
    async def _report_every(
        session: LiveSession, interval: float, report: Callable[[], Telemetry]
    ) -> None:
        """Queue a ``report()`` every ``interval`` seconds, behind what is already queued."""
        while True:
            await asyncio.sleep(interval)
            session.queue.put_nowait(Outgoing(kind="telemetry", data=encode(report())))

    async def _send_queued(self, session: LiveSession) -> None:
        while True:
            item = await session.queue.get()
            # register first: the reply may come before send() returns
            if item.seq is not None:
                session.outstanding[item.seq] = item
            try:
                await asyncio.wait_for(self._send(session.ws, item.data), self.send_timeout)
                self.stats.frames_sent += int(item.seq is not None)
            except (WebSocketException, asyncio.TimeoutError) as exc:
                # the receive loop tears down
                if item.pending is not None:
                    item.pending.resolve(None)
                if isinstance(exc, asyncio.TimeoutError):
                    # The link takes no more bytes (cut, or the server stopped reading). The
                    # keepalive cannot tell: its pings wait behind this message. Drop the
                    # connection; the agent reconnects.
                    log.warning(
                        "a message to the server could not go out in %g s; dropping the connection",
                        self.send_timeout,
                    )
                    session.ws.transport.abort()
                return

    async def _send(self, ws: ClientConnection, data: bytes) -> None:
        await ws.send(data)
        self.stats.bytes_sent += len(data)
        self.stats.messages_sent += 1
        if self.observer:
            self.observer.on_bytes(len(data), 0)

    def _count_received(self, data: bytes | str) -> None:
        size = len(data.encode()) if isinstance(data, str) else len(data)
        self.stats.bytes_received += size
        self.stats.messages_received += 1
        if self.observer:
            self.observer.on_bytes(0, size)

    async def _handle(self, session: LiveSession, data: bytes | str) -> None:
        try:
            message = decode(data)
            self._dispatch(session, message)
        except ProtocolError as exc:
            with contextlib.suppress(WebSocketException):
                await self._send(
                    session.ws,
                    encode(
                        Error(
                            code=exc.code.value,
                            message=exc.message,
                            fatal=True,
                        )
                    ),
                )
                await session.ws.close(exc.code.close, exc.code.value)
            raise

    def _dispatch(self, session: LiveSession, message: Message) -> None:
        if isinstance(message, Update):
            self._on_update(session, message)
        elif isinstance(message, Labels):
            pending = self._claim(session, message.seq, "labels")
            if pending is not None:
                labels = decode_labels(
                    message.payload, message.codec, message.width, message.height
                )
                pending.resolve(LabelsReply(message.frame_index, labels, message.teacher_ms))
        elif isinstance(message, Error):
            self._on_error(message)
            if message.seq is not None:
                item = session.outstanding.pop(message.seq, None)
                # a refused stream frame: the server's decoder takes only an intra frame next
                if item is not None and self._frames.restart(item.stream_epoch):
                    log.info(
                        "frame stream restarts from an intra frame after %s for seq %d",
                        message.code,
                        message.seq,
                    )
                if item is not None and item.pending is not None:
                    item.pending.resolve(None)
            if message.fatal:
                raise SessionLost(f"fatal server error {message.code}: {message.message}")
        else:
            raise ProtocolError(
                ErrorCode.UNEXPECTED_MESSAGE, f"the server sent {type(message).__name__}"
            )

    def _on_update(self, session: LiveSession, message: Update) -> None:
        if self.weights is None:
            raise ProtocolError(ErrorCode.UNEXPECTED_MESSAGE, "UPDATE in naive mode")
        codec = session.terms.update_codec(message.full)
        pending = self._claim(session, message.seq, "key_frame")
        tensors: dict[str, torch.Tensor] = {}
        blob = None
        if not message.full:
            blob = (codec, TensorBlob(message.tensors, message.payload))
        else:
            try:
                tensors = decode_tensors(
                    message.tensors,
                    message.payload,
                    codec,
                    self.weights.full_layout,
                    complete=True,
                )
            except ProtocolError as exc:
                self._refuse_update(message, pending, str(exc))
                return
        update = WeightUpdate(
            session_id=session.terms.session_id,
            version=message.version,
            base_version=message.base_version,
            full=message.full,
            tensors=tensors,
            origin=_origin(message, answered=pending is not None),
            seq=message.seq,
            metric=message.metric,
            blob=blob,
        )
        if pending is not None:
            roundtrip = time.monotonic() - pending.submitted_at
            self.stats.update_roundtrips.append(roundtrip)
            if self.observer:
                self.observer.on_roundtrip(roundtrip)
            pending.resolve(
                UpdateOutcome(
                    metric=message.metric,
                    payload=update,
                    steps=message.steps,
                    initial_metric=message.initial_metric,
                )
            )
        elif message.full:
            self.weights.stage(update)
        else:
            log.warning(
                "ignoring an incremental update for seq %d that answers no outstanding key frame",
                message.seq,
            )

    def _refuse_update(self, message: Update, pending: Pending | None, reason: str) -> None:
        """Drop full weights that do not fit this edge's student and ask for the server's again;
        the key frame they answer, if any, gets no update. The session goes on."""
        assert self.weights is not None
        reason = f"full weights of version {message.version} do not fit the student: {reason}"
        log.warning("not applying: %s; asking for a resync", reason)
        if pending is not None:
            pending.resolve(None)
        self.request_resync(self.weights.version, reason)

    @staticmethod
    def _claim(session: LiveSession, seq: int, kind: str) -> Pending | None:
        """The pending of the outstanding ``kind`` request ``seq``, now no longer outstanding; None:
        none such."""
        item = session.outstanding.get(seq)
        if item is None or item.kind != kind or item.pending is None:
            return None
        del session.outstanding[seq]
        return item.pending

    def _on_error(self, message: Error) -> None:
        """Count and log an ERROR; a terminal refusal raises :class:`ServerRefusedError`."""
        self.stats.errors[message.code] = self.stats.errors.get(message.code, 0) + 1
        log.warning(
            "server error %s (seq %s, fatal %s): %s",
            message.code,
            message.seq,
            message.fatal,
            message.message,
        )
        if message.fatal and message.code in {code.value for code in TERMINAL_CODES}:
            raise ServerRefusedError(ErrorCode(message.code), message.message)


def _origin(message: Update, *, answered: bool) -> str:
    """Where an UPDATE's weights come from: the answer to an outstanding key frame (``update``,
    or ``held_back`` where the server kept the training back), else a ``resync``."""
    if not answered:
        return "resync"
    return "held_back" if message.held_back else "update"
