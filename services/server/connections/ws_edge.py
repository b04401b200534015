"""``WS /v1/edge``: one edge session (protocol: docs/protocol.md).

A connection reads messages in one task and serves key frames and resync requests in
another, in arrival order, so that a malformed message or a disconnect is seen even while
distillation runs. The model work (the student, the WELCOME, the answer to a key frame, a resync)
goes through the runtime's :class:`~services.server.teaching.local.Teaching`, wherever that runs.

Before any model data is sent, the HELLO must come within ``hello_timeout`` and carry the
edge's token (when authentication is on). Until it is accepted, a connection takes a place among
the unauthenticated ones (``services.server.access.admission``: bounded per address, the oldest idle
one evicted to make room) and no message over the largest HELLO is read
(``services.server.connections.ws_protocol``). A session is registered only if its edge is still
admitted at that moment; later revocations end it (``ServerRuntime.evict_revoked``). Key frames over
the edge's rate are dropped before decoding (``services.server.access.limits``), and an encoded
frame must declare the HELLO's size in its header before it is decoded (no decompression
bombs). TELEMETRY reports, when WELCOME asked
for them, go to the per-edge series of ``/metrics`` (``services.server.metrics.fleet``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

import numpy as np
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from services.server.access.admission import Ticket
from services.server.access.credential_gate import BUSY
from services.server.access.limits import TokenBucket, Verdict
from services.server.connections.edge_log import EdgeLog, edge_text
from services.server.connections.handshake import check_hello
from services.server.connections.ws_protocol import MESSAGE_LIMIT_EXTENSION
from services.server.runtime import ServerRuntime
from services.server.teaching.local import SessionEnded
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import decode_frame
from shadowtutor.protocol.errors import CloseCode, ErrorCode, ProtocolError
from shadowtutor.protocol.image_header import check_declared_size
from shadowtutor.protocol.messages import (
    MAX_HELLO_BYTES,
    Error,
    Hello,
    KeyFrame,
    Message,
    ResyncRequest,
    Telemetry,
    Welcome,
    decode,
    encode,
    message_type,
)
from shadowtutor.protocol.telemetry import check_telemetry
from shadowtutor.protocol.video_stream import STREAM_FRAME_CODECS, StreamDecoder

log = logging.getLogger(__name__)
router = APIRouter()
# RFC 6455: a close frame's reason fits in 123 bytes
MAX_CLOSE_REASON_BYTES = 123
# TELEMETRY a session may send: bursts of this many, on average twice the rate WELCOME asks for
TELEMETRY_BURST = 3
TELEMETRY_SLACK = 2.0


@router.websocket("/v1/edge")
async def edge_endpoint(websocket: WebSocket) -> None:
    await EdgeConnection(websocket, websocket.app.state.runtime).serve()


def _decode_writable(key_frame: KeyFrame, stream: StreamDecoder) -> np.ndarray:
    """The key frame as a writable BGR array (raw frames decode to a read-only view); a stream
    codec's frame goes through ``stream``, the connection's decoder, which refuses it unless it is
    intra or follows the last frame decoded."""
    if key_frame.codec in STREAM_FRAME_CODECS:
        if key_frame.stream_position is None:
            raise ProtocolError(
                ErrorCode.BAD_FRAME, f"a {key_frame.codec} key frame needs its stream_position"
            )
        return stream.decode(key_frame.payload, key_frame.stream_position)
    if key_frame.codec != "raw":
        # the header's size first: a small payload may declare a huge image
        check_declared_size(key_frame.payload, key_frame.codec, key_frame.width, key_frame.height)
    frame = decode_frame(key_frame.payload, key_frame.codec, key_frame.width, key_frame.height)
    return frame if frame.flags.writeable else frame.copy()


def _mark_retrieved(task: asyncio.Task[object]) -> None:
    """Read a finished task's exception so that asyncio never logs it as unretrieved, even when the
    connection is cancelled before it looks at its tasks (:meth:`EdgeConnection._run` re-raises what
    matters)."""
    if not task.cancelled():
        task.exception()


class EdgeConnection:
    """One edge's WebSocket on ``/v1/edge``: checks the HELLO, opens the session through the
    runtime's teaching, then answers each message in order (key frames, resync requests, TELEMETRY)
    and sends what the teaching answers. Any protocol error is answered with an ERROR; a fatal one
    closes only this connection."""

    def __init__(self, websocket: WebSocket, runtime: ServerRuntime) -> None:
        self.ws = websocket
        self.runtime = runtime
        self.metrics = runtime.metrics
        self.traffic = Traffic()
        self.session: EdgeSession | None = None
        self._send_lock = asyncio.Lock()
        self._evicted = asyncio.Event()
        self._eviction: ProtocolError | None = None
        # its place among the unauthenticated connections until admitted
        self._ticket: Ticket | None = None
        # until the HELLO is accepted
        self._message_limit = MAX_HELLO_BYTES
        self._source = websocket.client.host if websocket.client is not None else "unknown"
        # a stream frame codec's decoder, made at the first frame
        self._stream: StreamDecoder | None = None
        # the log lines this edge's messages cause
        self._edge_log = EdgeLog(
            log,
            runtime.settings.edge_log_lines_per_minute,
            self._who,
            runtime.metrics.edge_input_dropped.labels(kind="log_line").inc,
        )
        # the session's TELEMETRY reports, once WELCOME asked for them
        self._telemetry_budget: TokenBucket | None = None

    async def serve(self) -> None:
        runtime = self.runtime
        source = self._source
        ticket = runtime.admission.enter(source, self._make_room)
        # refused before the upgrade: HTTP 403, no WebSocket at all
        if isinstance(ticket, str):
            log.warning(
                "refused a WebSocket connection from %s (%s): %d from it and %d in all wait for "
                "their HELLO",
                source,
                ticket,
                runtime.admission.held_by(source),
                len(runtime.admission),
            )
            await self.ws.close(CloseCode.TRY_AGAIN_LATER)
            return
        self._ticket = ticket
        runtime.connections += 1
        try:
            await self._serve()
        finally:
            runtime.connections -= 1
            runtime.admission.leave(ticket)

    def _make_room(self) -> None:
        """Admission evicts this idle connection (no HELLO yet) to make room for a newer one."""
        self.evict(
            ProtocolError(
                ErrorCode.SERVER_BUSY,
                "too many connections without a HELLO from this address: the oldest idle one was "
                "closed to make room",
            )
        )

    async def _serve(self) -> None:
        await self.ws.accept()
        try:
            await self._run()
        except WebSocketDisconnect:
            pass
        except ProtocolError as exc:
            # the text, not the error (a kept record must not keep the session), escaped: it may
            # quote the edge
            log.warning("%s: %s", self._who(), edge_text(str(exc)))
            await self._fail(exc.code, exc.message)
        except Exception:
            log.exception("%s: internal error", self._who())
            await self._fail(ErrorCode.INTERNAL, "internal server error")
        finally:
            if self._stream is not None:
                self._stream.close()
                self._stream = None
            self._edge_log.close()
            if self.session is not None:
                self.runtime.sessions.remove(self.session)
                self.metrics.fleet.session_ended(
                    self.session.hello.edge_id, self.session.session_id
                )
                log.info(
                    "session %s of edge %r ended: %d key frames, %d bytes in, %d bytes out",
                    self.session.session_id,
                    self.session.hello.edge_id,
                    self.session.stats.key_frames,
                    self.traffic.bytes_in,
                    self.traffic.bytes_out,
                )

    async def _run(self) -> None:
        hello = await self._receive_hello()
        await self._check_token(hello)
        self._admitted()
        self.session, welcome = await self._open_session(hello, self.runtime.auth.generation)
        if welcome is None:
            welcome = await self.runtime.teaching.open(self.session)
        else:
            log.info(
                "session %s of edge %r resumed at version %d",
                self.session.session_id,
                hello.edge_id,
                self.session.version,
            )
        await self._send(welcome)
        log.info(
            "session %s opened for edge %r (%s, %dx%d, frames %s, weights %s)",
            self.session.session_id,
            hello.edge_id,
            hello.mode,
            hello.frame_width,
            hello.frame_height,
            self.session.agreement.frame_codec,
            self.session.agreement.weight_codec,
        )
        inbox: asyncio.Queue[KeyFrame | ResyncRequest] = asyncio.Queue(
            self.runtime.settings.max_pending_key_frames
        )
        reader = asyncio.create_task(self._read(inbox), name=f"read-{self.session.session_id}")
        worker = asyncio.create_task(self._work(inbox), name=f"work-{self.session.session_id}")
        evicted = asyncio.create_task(
            self._evicted.wait(), name=f"evicted-{self.session.session_id}"
        )
        tasks = {reader, worker, evicted}
        # a task may fail instead of stopping when cancelled (a send the edge's disconnect
        # broke): no news, but asyncio would log it as an error
        for task in tasks:
            task.add_done_callback(_mark_retrieved)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # no await here: a cancelled connection must not wait again
            for task in tasks:
                task.cancel()
        # (not gather: its cancellation escapes anyio's cancel scopes)
        await asyncio.wait(tasks)
        for task in done - {evicted}:
            # re-raises the reason the session ended
            task.result()
        if self._eviction is not None:
            raise self._eviction
        await self._close(CloseCode.NORMAL, "the edge ended the session")

    async def _receive_hello(self) -> Hello:
        """The first message, which must be a HELLO within ``hello_timeout``; an eviction by
        admission ends the wait (raising its error)."""
        timeout = self.runtime.settings.hello_timeout
        receiving = asyncio.ensure_future(self._receive())
        evicted = asyncio.ensure_future(self._evicted.wait())
        try:
            done, _ = await asyncio.wait(
                {receiving, evicted}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (receiving, evicted):
                task.cancel()
        if receiving not in done:
            if self._eviction is not None:
                raise self._eviction
            raise ProtocolError(ErrorCode.UNEXPECTED_MESSAGE, f"no HELLO within {timeout:g} s")
        hello = receiving.result()
        if self._ticket is not None:
            # its HELLO is being checked: no longer evicted to make room
            self._ticket.busy()
        # admission took its place just as the message arrived: the message wins
        if self._evicted.is_set():
            self._eviction = None
            self._evicted.clear()
        if not isinstance(hello, Hello):
            raise ProtocolError(
                ErrorCode.UNEXPECTED_MESSAGE,
                f"the first message must be HELLO, not {type(hello).__name__.upper()}",
            )
        return hello

    def evict(self, error: ProtocolError) -> None:
        """End this session from outside: ``error`` goes to the edge as a fatal ERROR, then the
        close."""
        if self._eviction is None:
            self._eviction = error
            self._evicted.set()

    async def _check_token(self, hello: Hello) -> None:
        """Check the HELLO's token on the runtime's HELLO gate. A refused connection gives up its
        place among the unauthenticated ones at once; the refusal is raised after the failure
        delay, waited out among the runtime's bounded refusals."""
        try:
            outcome = await self.runtime.hello_gate.run(
                self._source, self.runtime.auth.check_edge, hello.edge_id, hello.token
            )
        except ProtocolError:
            await self._refused()
            raise
        if outcome is BUSY:
            await self._refused()
            raise ProtocolError(
                ErrorCode.SERVER_BUSY, "too many HELLOs being checked; try again later"
            )

    async def _refused(self) -> None:
        """Leave the unauthenticated connections, then wait out the failure delay (when the
        refusals' bounds allow)."""
        self._leave_admission()
        await self.runtime.refusals.wait(self._source)

    def _leave_admission(self) -> None:
        if self._ticket is not None:
            self.runtime.admission.leave(self._ticket)
            self._ticket = None

    def _admitted(self) -> None:
        """The HELLO's token is accepted: leave the unauthenticated connections, accept full-size
        messages."""
        self._leave_admission()
        self._message_limit = self.runtime.settings.max_message_bytes
        raise_limit = (
            (self.ws.scope.get("extensions") or {}).get(MESSAGE_LIMIT_EXTENSION, {}).get("raise")
        )
        if raise_limit is not None:
            raise_limit()

    async def _open_session(
        self, hello: Hello, checked_generation: int
    ) -> tuple[EdgeSession, Welcome | None]:
        """The session for an admitted ``hello`` whose token was checked against the tokens of
        ``checked_generation``, registered only if its edge is still admitted at that moment; with
        the resumed WELCOME where the HELLO asked to resume a session the teaching still holds at
        the edge's version (else None: a new session, whose WELCOME is still to be sent)."""
        runtime = self.runtime
        if not runtime.ready:
            raise ProtocolError(
                ErrorCode.SERVER_BUSY, f"the server is not ready ({runtime.not_ready_reason})"
            )
        agreement = check_hello(hello, runtime.settings, runtime.class_names)
        runtime.sessions.reserve(hello.edge_id)
        welcome: Welcome | None = None
        if hello.resume_session_id is not None and hello.resume_version is not None:
            session = self._new_session(hello, agreement, None, hello.resume_session_id)
            session.version = hello.resume_version
            welcome = await runtime.teaching.resume(session)
        if welcome is None:
            distiller = await runtime.teaching.new_student(hello, agreement.student_size)
            session = self._new_session(hello, agreement, distiller)
        # the tokens changed while the student was copied
        if runtime.auth.generation != checked_generation:
            await self._check_token(hello)
        # no await from here to add: a reload cannot slip in
        if not runtime.auth.edge_admitted(hello.edge_id):
            raise ProtocolError(ErrorCode.UNAUTHORIZED, "this edge's token was revoked")
        runtime.sessions.add(session)
        self.metrics.fleet.session_opened(
            hello.edge_id, session.session_id, hello.mode, hello.agent
        )
        return session, welcome

    def _new_session(
        self,
        hello: Hello,
        agreement: Agreement,
        distiller: Distiller | None,
        session_id: str | None = None,
    ) -> EdgeSession:
        """This connection's session of ``hello`` under ``agreement`` (a new id unless
        ``session_id``)."""
        settings = self.runtime.settings
        session = EdgeSession(
            hello=hello,
            agreement=agreement,
            params=self.runtime.params,
            traffic=self.traffic,
            distiller=distiller,
            telemetry_interval=settings.edge_report_interval or None,
            sparse=settings.sparse_options(),
            updates=settings.update_policy(),
            evict=self.evict,
        )
        if session_id is not None:
            session.session_id = session_id
        return session

    async def _read(self, inbox: asyncio.Queue[KeyFrame | ResyncRequest]) -> None:
        """Returns when the edge ends the session with a fatal ERROR; raises on anything wrong."""
        session = self._session()
        if session.telemetry_interval is not None:
            self._telemetry_budget = TokenBucket(
                TELEMETRY_SLACK / session.telemetry_interval, TELEMETRY_BURST
            )
        while True:
            data = await self._receive_data()
            if self._over_telemetry_budget(data):
                continue
            message = decode(data)
            if isinstance(message, KeyFrame):
                session.accept_seq(message.seq)
                self.metrics.key_frames.labels(mode=session.mode).inc()
                if await self._admit(message):
                    await inbox.put(message)
            elif isinstance(message, ResyncRequest) and session.mode == "distill":
                if await self._admit_resync():
                    await inbox.put(message)
            elif isinstance(message, Telemetry) and session.telemetry_interval is not None:
                self.metrics.fleet.report(session.hello.edge_id, check_telemetry(message))
            elif isinstance(message, Error):
                self._edge_log.warning(
                    "%s reports %s: %s", self._who(), message.code, message.message
                )
                if message.fatal:
                    return
            else:
                raise ProtocolError(
                    ErrorCode.UNEXPECTED_MESSAGE,
                    f"{type(message).__name__.upper()} is not expected from an edge in a "
                    f"{session.mode} session",
                )

    def _over_telemetry_budget(self, data: bytes | str) -> bool:
        """Whether ``data`` is a TELEMETRY report over the session's budget: then it is dropped
        unread (counted), before its header is parsed."""
        if self._telemetry_budget is None or message_type(data) != Telemetry.TYPE:
            return False
        if self._telemetry_budget.take():
            return False
        self.metrics.edge_input_dropped.labels(kind="telemetry").inc()
        return True

    async def _admit(self, key_frame: KeyFrame) -> bool:
        """The key-frame rate limit: True to serve the frame; False when it was dropped (ERROR
        sent)."""
        verdict = self.runtime.key_frame_limits.admit(self._session().hello.edge_id)
        if verdict is Verdict.ACCEPT:
            return True
        rate, burst = self.runtime.settings.key_frame_rate, self.runtime.settings.key_frame_burst
        if verdict is Verdict.CLOSE:
            raise ProtocolError(
                ErrorCode.RATE_LIMITED,
                f"key frames far over the limit of {rate:g}/s for too long; closing",
            )
        await self._send_error(
            ErrorCode.RATE_LIMITED,
            f"key frame dropped: over the limit of {rate:g}/s (bursts of {burst})",
            seq=key_frame.seq,
        )
        return False

    async def _admit_resync(self) -> bool:
        """The resync limit: True to serve the request; False when it was refused (a non-fatal
        ERROR sent)."""
        if self.runtime.resync_limits.admit(self._session().hello.edge_id):
            return True
        settings = self.runtime.settings
        await self._send_error(
            ErrorCode.RATE_LIMITED,
            f"resync refused: over the limit of {settings.resync_rate:g}/s (bursts of "
            f"{settings.resync_burst}); the session goes on",
        )
        return False

    async def _work(self, inbox: asyncio.Queue[KeyFrame | ResyncRequest]) -> None:
        session = self._session()
        while True:
            item = await inbox.get()
            if isinstance(item, ResyncRequest):
                self._edge_log.info(
                    "%s asks for a resync (holds version %d: %s)",
                    self._who(),
                    item.have_version,
                    item.reason,
                )
                await self._send(await self.runtime.teaching.resync(session, item.have_version))
            else:
                await self._key_frame(item)

    async def _key_frame(self, key_frame: KeyFrame) -> None:
        """Check and decode ``key_frame``, then send the teaching's answer; an error that concerns
        only this key frame is sent as a non-fatal ERROR, one that ends the session is raised."""
        session = self._session()
        try:
            frame = await self._decoded(key_frame)
            answer = await self.runtime.teaching.key_frame(session, key_frame, frame)
        except SessionEnded:
            raise
        except ProtocolError as exc:
            await self._send_error(exc.code, exc.message, seq=key_frame.seq)
            return
        await self._send(answer)

    async def _decoded(self, key_frame: KeyFrame) -> np.ndarray:
        """The key frame as a writable BGR array, once its size and codec are checked against the
        HELLO and the settings (ProtocolError otherwise)."""
        hello = self._session().hello
        if (key_frame.width, key_frame.height) != (hello.frame_width, hello.frame_height):
            raise ProtocolError(
                ErrorCode.BAD_FRAME,
                f"key frame is {key_frame.width}x{key_frame.height}; HELLO announced "
                f"{hello.frame_width}x{hello.frame_height}",
            )
        if key_frame.codec not in self.runtime.settings.allowed_frame_codecs():
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_CODEC, f"frame codec {key_frame.codec!r} is not allowed"
            )
        if self._stream is None:
            self._stream = StreamDecoder(hello.frame_width, hello.frame_height)
        return await asyncio.to_thread(_decode_writable, key_frame, self._stream)

    # -- I/O with byte accounting ------------------------------------------------------------

    async def _receive(self) -> Message:
        return decode(await self._receive_data())

    async def _receive_data(self) -> bytes | str:
        """The next message's bytes (or text), counted, and refused when over the message limit."""
        message = await self.ws.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", CloseCode.NORMAL))
        data: bytes | str | None = message.get("bytes")
        if data is None:
            data = message.get("text") or ""
        size = len(data) if isinstance(data, bytes) else len(data.encode())
        self.traffic.bytes_in += size
        self.metrics.received_bytes.inc(size)
        limit = self._message_limit
        # uvicorn enforces it too (ws_protocol); this covers any other ASGI server
        if size > limit:
            before = (
                " before an accepted HELLO"
                if limit < self.runtime.settings.max_message_bytes
                else ""
            )
            raise ProtocolError(
                ErrorCode.TOO_LARGE, f"message of {size} bytes exceeds the limit of {limit}{before}"
            )
        return data

    async def _send(self, message: Message) -> None:
        data = encode(message)
        async with self._send_lock:
            await self._within_send_timeout(self.ws.send_bytes(data))
        self.traffic.bytes_out += len(data)
        self.metrics.sent_bytes.inc(len(data))

    async def _within_send_timeout(self, sending: Awaitable[None]) -> None:
        """A send or close that waits longer than ``send_timeout`` for the edge to read:
        SEND_TIMEOUT.

        (The WebSocket layer stops accepting data while its buffer is full; an edge that stopped
        reading would otherwise hold its session, and the messages queued for it, forever.)
        """
        timeout = self.runtime.settings.send_timeout
        try:
            await asyncio.wait_for(sending, timeout)
        except asyncio.TimeoutError:
            raise ProtocolError(
                ErrorCode.SEND_TIMEOUT,
                f"the edge has not read the server's messages for {timeout:g} s",
            ) from None

    async def _send_error(
        self, code: ErrorCode, text: str, *, seq: int | None = None, fatal: bool = False
    ) -> None:
        self.metrics.errors.labels(code=code.value).inc()
        if self.session is not None:
            self.session.stats.count_error()
        await self._send(Error(code=code.value, message=text, fatal=fatal, seq=seq))

    async def _fail(self, code: ErrorCode, text: str) -> None:
        """Send a fatal ERROR and close with the code's close code (if the edge is still there)."""
        if self.ws.application_state != WebSocketState.CONNECTED:
            return
        try:
            await self._send_error(code, text, fatal=True)
            await self._close(code.close, text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            # the edge went away first
            pass
        except ProtocolError:
            # SEND_TIMEOUT: the edge does not read, so it gets neither the ERROR nor the close
            pass

    async def _close(self, close_code: int, reason: str) -> None:
        if self.ws.application_state == WebSocketState.CONNECTED:
            reason_bytes = reason.encode()[:MAX_CLOSE_REASON_BYTES]
            await self._within_send_timeout(
                self.ws.close(close_code, reason_bytes.decode(errors="ignore"))
            )

    def _session(self) -> EdgeSession:
        if self.session is None:
            raise RuntimeError("no session yet")
        return self.session

    def _who(self) -> str:
        if self.session is None:
            return "edge (before HELLO)"
        return f"edge {self.session.hello.edge_id!r} (session {self.session.session_id})"
