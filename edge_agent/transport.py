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
import math
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidMessage, WebSocketException

from edge_agent.backoff import Backoff
from edge_agent.frame_encoder import FrameEncoder
from edge_agent.pending import Pending
from edge_agent.versioning import WeightUpdate
from shadowtutor.algorithms.client_loop import UpdateOutcome
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.protocol.codecs import TensorBlob, decode_labels, decode_tensors, is_delta_codec
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
from shadowtutor.protocol.sparse_delta import is_sparse_codec

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Refusals that a retry cannot fix: the run ends with an error instead of reconnecting forever.
# SESSION_REPLACED: another process runs with this edge id (an agent has one connection at a time).
TERMINAL_CODES = frozenset(
    {
        ErrorCode.INCOMPATIBLE_MODEL,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.UNSUPPORTED_CODEC,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.SESSION_REPLACED,
    }
)


class TransportError(RuntimeError):
    """The agent cannot talk to the server."""


class ServerRefusedError(TransportError):
    """The server refused this edge for a reason a reconnect cannot fix (see
    :data:`TERMINAL_CODES`)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"the server refused this edge ({code.value}): {message}")
        self.code = code


class CertificateError(TransportError):
    """The server's TLS certificate did not verify (wrong CA, wrong host name, expired): fatal for
    the run.

    Retrying cannot help until someone changes a certificate or the agent's ``ca_file``; the
    run ends with this error and the supervisor (compose, balena, systemd) restarts the agent.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"the TLS certificate of {url} did not verify ({reason}); check --ca-file, the "
            "server's "
            "certificate and the host name in --server"
        )


class _SessionLost(Exception):
    """The session ended in a way worth a reconnect (a fatal server error, a protocol violation)."""


class WeightSink(Protocol):
    """Where full weights that arrive on their own go (the :class:`VersionedStudent`)."""

    version: int

    def stage(self, update: WeightUpdate) -> None: ...


class TransportObserver(Protocol):
    """Events for the metrics exporter; called on the network thread."""

    def on_connected(self, connected: bool) -> None: ...

    def on_bytes(self, sent: int, received: int) -> None: ...

    def on_roundtrip(self, seconds: float) -> None: ...

    def on_reconnect(self) -> None: ...

    def on_resync(self) -> None: ...

    def on_key_frame_dropped(self) -> None: ...


@dataclass
class TransportStats:
    """Counters over the agent's life; every WebSocket message counts with its length in bytes."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    # KEY_FRAME messages sent
    frames_sent: int = 0
    # frames submitted while no session was open (not sent, not queued)
    key_frames_dropped: int = 0
    # HELLO of the first session
    handshake_bytes_sent: int = 0
    # WELCOME of the first session
    handshake_bytes_received: int = 0
    # session ids, in the order of their WELCOME
    sessions: list[str] = field(default_factory=list)
    resyncs_requested: int = 0
    # ERROR messages received, by code
    errors: dict[str, int] = field(default_factory=dict)
    # seconds from each key frame to its update
    update_roundtrips: list[float] = field(default_factory=list)

    @property
    def reconnects(self) -> int:
        return max(0, len(self.sessions) - 1)


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    params: AlgorithmParams
    frame_codec: str
    # full weights
    weight_codec: str
    # partial updates as quantised deltas, when agreed
    delta_codec: str | None = None
    # seconds between TELEMETRY reports the server asked for
    telemetry_interval: float | None = None
    # the student's input scale on both sides; None: the frame's
    student_size: tuple[int, int] | None = None

    def update_codec(self, full: bool) -> str:
        """The codec of an UPDATE's blob."""
        return self.weight_codec if full or self.delta_codec is None else self.delta_codec


@dataclass(frozen=True)
class LabelsReply:
    """The server's label map for one frame (naive mode)."""

    frame_index: int
    labels: np.ndarray
    teacher_ms: float


@dataclass
class _Outgoing:
    # "key_frame", "labels", "resync" or "telemetry"
    kind: str
    data: bytes
    seq: int | None = None
    pending: Pending | None = None
    # a stream codec's frame: the stream it belongs to
    stream_epoch: int | None = None


@dataclass
class _Session:
    ws: ClientConnection
    info: SessionInfo
    queue: asyncio.Queue[_Outgoing] = field(default_factory=asyncio.Queue)
    outstanding: dict[int, _Outgoing] = field(default_factory=dict)

    def fail_all(self) -> None:
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item.pending is not None:
                item.pending.resolve(None)
        for item in self.outstanding.values():
            if item.pending is not None:
                item.pending.resolve(None)
        self.outstanding.clear()


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
        observer: TransportObserver | None = None,
        backoff: Backoff | None = None,
        frame_quality: int | None = None,
        handshake_timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        token: Callable[[], str | None] | None = None,
        ping_interval: float = 20.0,
        ping_timeout: float = 20.0,
        report: Callable[[], Telemetry] | None = None,
        key_frame_scale: float = 1.0,
    ) -> None:
        """``report`` makes the TELEMETRY sent when a WELCOME asks for it. ``key_frame_scale`` in
        (0, 1]: frames are sent at that share of their sides
        (:class:`~edge_agent.frame_encoder.FrameEncoder`); the HELLO announces the size they arrive
        at. ``ssl_context`` verifies a ``wss://`` server (default: the system's CA store); ``token``
        gives the HELLO's token at each connection (so that a rotated token file is picked up). A
        connection whose keepalive ping gets no pong within ``ping_timeout``, or whose message
        cannot go out within ``ping_interval + ping_timeout``, is dropped and reconnected: a dead
        link is noticed within ``ping_interval + ping_timeout`` (plus the closing handshake's 3
        s)."""
        if hello.mode == "distill" and weights is None:
            raise ValueError("distill mode needs a weight sink for the server's weights")
        self.url = url
        self.hello = hello
        self.weights = weights
        self.observer = observer
        self.backoff = backoff or Backoff(0.5, 15.0)
        # jpeg/webp quality; None: the codec's default
        self.frame_quality = frame_quality
        self._frames = FrameEncoder(frame_quality, key_frame_scale)
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
        self.session: SessionInfo | None = None
        # a refusal or certificate error: the run cannot go on
        self.fatal: TransportError | None = None
        self.last_error = "no connection attempt yet"
        self._seq = itertools.count(1)
        self._welcomed = threading.Event()
        # the first connection attempt got a WELCOME or failed
        self._attempted = threading.Event()
        self._drop_lock = threading.Lock()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # bound to the network thread's loop at its first wait
        self._closing = asyncio.Event()
        self._active: _Session | None = None
        self._attempt: asyncio.Task | None = None
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
    def connected(self) -> bool:
        return self.session is not None

    def wait_first_welcome(
        self, timeout: float, stop: threading.Event | None = None
    ) -> SessionInfo:
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
    ) -> SessionInfo | None:
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
        self._hand_over(_Outgoing("resync", encode(ResyncRequest(have_version, reason[:500]))))

    def close(self, timeout: float = 5.0) -> None:
        """Close the connection with 1000 and stop the thread; outstanding requests fail."""
        # set before start() returns
        loop = self._loop
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
            self._drop_key_frame()
            return Pending.failed()
        encoded = self._frames.encode(frame, info.frame_codec, info.session_id)
        seq = next(self._seq)
        message = KeyFrame(
            seq,
            frame_index,
            base_version,
            info.frame_codec,
            encoded.width,
            encoded.height,
            stream_position=encoded.stream_position,
            payload=encoded.payload,
        )
        pending: Pending = Pending()
        self._hand_over(_Outgoing(kind, encode(message), seq, pending, encoded.epoch))
        return pending

    def _hand_over(self, item: _Outgoing) -> None:
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._enqueue, item)
                return
            # the loop is closed
            except RuntimeError:
                pass
        # not started, or the loop is closed
        if item.pending is not None:
            item.pending.resolve(None)

    def _enqueue(self, item: _Outgoing) -> None:
        """On the network thread: queue for the current session, or fail at once when there is
        none."""
        if self._active is None:
            if item.pending is not None:
                self._drop_key_frame()
                self._frames.restart(item.stream_epoch)
                item.pending.resolve(None)
            return
        if item.kind == "resync":
            self.stats.resyncs_requested += 1
            if self.observer:
                self.observer.on_resync()
        self._active.queue.put_nowait(item)

    def _drop_key_frame(self) -> None:
        """Count a frame that found no session (called on either thread)."""
        with self._drop_lock:
            self.stats.key_frames_dropped += 1
        if self.observer:
            self.observer.on_key_frame_dropped()

    # -- network thread --------------------------------------------------------------------

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._started.set()
        while not self._closing.is_set():
            self._attempt = asyncio.create_task(self._connect_once())
            try:
                await self._attempt
            except asyncio.CancelledError:
                break
            except ssl.SSLCertVerificationError as exc:
                self.fatal = CertificateError(self.url, exc.verify_message or str(exc))
                log.error("%s", self.fatal)
                # wake wait_first_welcome
                self._welcomed.set()
                self._attempted.set()
                break
            except ServerRefusedError as exc:
                log.error("%s", exc)
                self.fatal = exc
                # wake wait_first_welcome
                self._welcomed.set()
                self._attempted.set()
                break
            except (
                OSError,
                asyncio.TimeoutError,
                WebSocketException,
                ProtocolError,
                _SessionLost,
            ) as exc:
                self.last_error = _describe(exc, self.url)
                log.warning("connection to %s failed or dropped: %s", self.url, self.last_error)
            # a defect here must not end the thread: inference relies on reconnects
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("unexpected error in the connection to %s; reconnecting", self.url)
            self._attempted.set()
            if self._closing.is_set():
                break
            delay = self.backoff.next_delay()
            log.info("reconnecting in %.2f s", delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)

    def _begin_shutdown(self) -> None:
        self._closing.set()
        if self._active is not None:
            self._closing_task = asyncio.create_task(
                self._active.ws.close(CloseCode.NORMAL, "edge agent done")
            )
        elif self._attempt is not None:
            self._attempt.cancel()

    async def _connect_once(self) -> None:
        tls: dict[str, Any] = {"ssl": self.ssl_context} if self.ssl_context is not None else {}
        hello = (
            dataclasses.replace(self.hello, token=self.token())
            if self.token is not None
            else self.hello
        )
        sent_before, received_before = self.stats.bytes_sent, self.stats.bytes_received
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
            info = await self._handshake(ws)
            if len(self.stats.sessions) == 1:
                self.stats.handshake_bytes_sent = self.stats.bytes_sent - sent_before
                self.stats.handshake_bytes_received = self.stats.bytes_received - received_before
            session = _Session(ws, info)
            self._active = session
            self.session = info
            self._welcomed.set()
            self._attempted.set()
            if self.observer:
                self.observer.on_connected(True)
                if self.stats.reconnects:
                    self.observer.on_reconnect()
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
                self._active = None
                self.session = None
                for helper in helpers:
                    helper.cancel()
                session.fail_all()
                if self.observer:
                    self.observer.on_connected(False)
            if not self._closing.is_set():
                raise _SessionLost(
                    f"the server closed the connection ({ws.close_code} {ws.close_reason!r})"
                )

    async def _handshake(self, ws: ClientConnection) -> SessionInfo:
        data = await asyncio.wait_for(ws.recv(), self.handshake_timeout)
        self._count_received(data)
        message = decode(data)
        if isinstance(message, Error):
            self._on_error(message)
            raise _SessionLost(f"the server answered HELLO with {message.code}: {message.message}")
        if not isinstance(message, Welcome):
            raise ProtocolError(
                ErrorCode.UNEXPECTED_MESSAGE, f"expected WELCOME, got {type(message).__name__}"
            )
        info = self._accept_welcome(message)
        self.stats.sessions.append(info.session_id)
        self.backoff.reset()
        log.info(
            "session %s: version %d, frames %s, weights %s, deltas %s",
            info.session_id,
            message.version,
            info.frame_codec,
            info.weight_codec,
            info.delta_codec,
        )
        return info

    def _accept_welcome(self, welcome: Welcome) -> SessionInfo:
        if list(welcome.class_names) != list(self.hello.class_names):
            raise ServerRefusedError(
                ErrorCode.INCOMPATIBLE_MODEL,
                f"the server's classes {welcome.class_names} differ from this edge's "
                f"{list(self.hello.class_names)}",
            )
        if not self._offered(welcome):
            raise ServerRefusedError(
                ErrorCode.UNSUPPORTED_CODEC,
                f"the server chose codecs {welcome.frame_codec}/{welcome.weight_codec} (deltas "
                f"{welcome.delta_codec}),"
                " which this edge did not offer in those roles",
            )
        try:
            params = AlgorithmParams.from_dict(welcome.params)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"WELCOME params: {exc}") from None
        if self.weights is not None:
            if not welcome.tensors:
                raise ProtocolError(
                    ErrorCode.BAD_MESSAGE, "WELCOME carries no weights in distill mode"
                )
            tensors = decode_tensors(welcome.tensors, welcome.payload, welcome.weight_codec)
            self.weights.stage(
                WeightUpdate(
                    welcome.session_id, welcome.version, welcome.version, True, tensors, "welcome"
                )
            )
        interval = welcome.telemetry_interval
        if interval is not None and not (math.isfinite(interval) and interval >= 1.0):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"WELCOME telemetry_interval {interval!r}: at least 1 s or null",
            )
        return SessionInfo(
            welcome.session_id,
            params,
            welcome.frame_codec,
            welcome.weight_codec,
            welcome.delta_codec,
            interval,
            self._student_size(welcome),
        )

    def _student_size(self, welcome: Welcome) -> tuple[int, int] | None:
        """The WELCOME's student size: [W, H] of positive ints, the one this edge announced if it
        did."""
        size = welcome.student_size
        if size is not None and (len(size) != 2 or min(size) <= 0):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"WELCOME student_size {size!r}: [W, H] positive or null"
            )
        if self.hello.student_size is not None and size != self.hello.student_size:
            raise ServerRefusedError(
                ErrorCode.INCOMPATIBLE_MODEL,
                f"the server distils at student size {size}, this edge's student runs at "
                f"{self.hello.student_size}",
            )
        return (size[0], size[1]) if size is not None else None

    def _offered(self, welcome: Welcome) -> bool:
        """The WELCOME's codecs were offered: a float codec for full weights, a delta codec (if any)
        for deltas."""
        hello, delta = self.hello, welcome.delta_codec
        return (
            welcome.frame_codec in hello.frame_codecs
            and welcome.weight_codec in hello.weight_codecs
            and not is_delta_codec(welcome.weight_codec)
            and (delta is None or (delta in hello.weight_codecs and is_delta_codec(delta)))
        )

    @staticmethod
    async def _report_every(
        session: _Session, interval: float, report: Callable[[], Telemetry]
    ) -> None:
        """Queue a ``report()`` every ``interval`` seconds, behind what is already queued."""
        while True:
            await asyncio.sleep(interval)
            session.queue.put_nowait(_Outgoing("telemetry", encode(report())))

    async def _send_queued(self, session: _Session) -> None:
        while True:
            item = await session.queue.get()
            # register first: the reply may come before send() returns
            if item.seq is not None:
                session.outstanding[item.seq] = item
            try:
                await asyncio.wait_for(self._send(session.ws, item.data), self.send_timeout)
                self.stats.frames_sent += int(item.seq is not None)
            # the receive loop tears down
            except (WebSocketException, asyncio.TimeoutError) as exc:
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

    async def _handle(self, session: _Session, data: bytes | str) -> None:
        try:
            message = decode(data)
            self._dispatch(session, message)
        except ProtocolError as exc:
            with contextlib.suppress(WebSocketException):
                await self._send(session.ws, encode(Error(exc.code.value, exc.message, fatal=True)))
                await session.ws.close(exc.code.close, exc.code.value)
            raise

    def _dispatch(self, session: _Session, message: Message) -> None:
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
                raise _SessionLost(f"fatal server error {message.code}: {message.message}")
        else:
            raise ProtocolError(
                ErrorCode.UNEXPECTED_MESSAGE, f"the server sent {type(message).__name__}"
            )

    def _on_update(self, session: _Session, message: Update) -> None:
        if self.weights is None:
            raise ProtocolError(ErrorCode.UNEXPECTED_MESSAGE, "UPDATE in naive mode")
        codec = session.info.update_codec(message.full)
        sparse = (
            (codec, TensorBlob(message.tensors, message.payload))
            if is_sparse_codec(codec)
            else None
        )
        tensors = (
            {} if sparse is not None else decode_tensors(message.tensors, message.payload, codec)
        )
        pending = self._claim(session, message.seq, "key_frame")
        update = WeightUpdate(
            session.info.session_id,
            message.version,
            message.base_version,
            message.full,
            tensors,
            "update" if pending is not None else "resync",
            message.seq,
            message.metric,
            is_delta_codec(codec),
            sparse,
        )
        if pending is not None:
            roundtrip = time.monotonic() - pending.submitted_at
            self.stats.update_roundtrips.append(roundtrip)
            if self.observer:
                self.observer.on_roundtrip(roundtrip)
            pending.resolve(
                UpdateOutcome(message.metric, update, message.steps, message.initial_metric)
            )
        elif message.full:
            self.weights.stage(update)
        else:
            log.warning(
                "ignoring an incremental update for seq %d that answers no outstanding key frame",
                message.seq,
            )

    @staticmethod
    def _claim(session: _Session, seq: int, kind: str) -> Pending | None:
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


def _describe(exc: BaseException, url: str = "") -> str:
    """The error and what caused it (e.g. the TLS alert behind "did not receive a valid HTTP
    response"), with a hint when a ``ws://`` URL got no valid HTTP answer: the server is most likely
    on TLS."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    text = f"{text} ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else text
    if isinstance(exc, InvalidMessage) and url.startswith("ws://"):
        text += f"; if the server serves TLS, use {'wss://' + url[len('ws://') :]}"
    return text
