"""A small protocol-v1 server that stands in for the real one (``services/``) in the edge agent's unit tests.

It follows /work/notes/protocol-semantics.md (HELLO/WELCOME, versioned UPDATEs, RESYNC,
naive-mode LABELS, ERRORs) with a real :class:`StudentNet` state, but its "distillation"
is a fixed nudge of the trainable tensors, so that tests can tell versions apart and
compare the edge's weights with the server's exactly. The end-to-end tests in tests/e2e/
run the real server. It runs on its own asyncio loop in a thread, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from shadowtutor.algorithms.coordinates import coordinates_to_send
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.codecs import (
    IMAGE_FRAME_CODECS,
    WEIGHT_CODECS,
    TensorBlob,
    choose_codec,
    choose_weight_codecs,
    decode_frame,
    encode_labels,
)
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
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
from shadowtutor.protocol.weight_sync import UpdateEncoder

NUDGE = 0.01


def initial_weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in StudentNet(len(LVS_CLASSES)).state_dict().items()}


def naive_labels(frame: np.ndarray, num_classes: int) -> np.ndarray:
    """The stand-in teacher: a label map the test can recompute from the frame."""
    return (frame[:, :, 0] % num_classes).astype(np.uint8)


@dataclass
class StandInSession:
    session_id: str
    hello: Hello
    state: dict[str, torch.Tensor]  # what the edge holds after the last blob sent (as in the real server)
    encoder: UpdateEncoder
    version: int = 0  # the version last sent to the edge
    last_seq: int = 0
    received: list[Message] = field(default_factory=list)
    sent: list[Message] = field(default_factory=list)
    close_code: int | None = None  # how the edge closed the connection
    full_next: bool = False  # resumed at a version before the last one sent: the next update is full


class StandInServer:
    """Knobs: ``refuse`` (answer HELLO with this fatal error), ``reply_delay`` (seconds before each
    answer), ``stale_next`` (the next update names a base the edge does not hold), ``fail_next``
    (the next key frame gets a non-fatal teacher_failed), ``metric`` (reported in updates),
    ``telemetry_interval`` (asked for in WELCOME; the TELEMETRY that comes is kept in ``received``),
    ``resume`` (a HELLO that names a session this server holds, at the version it last sent or an earlier
    one, resumes it at that version: a WELCOME with ``resumed`` and no weights, and the next update full,
    as the real server does when it no longer holds that version). :meth:`drop` cuts every
    connection and keeps listening."""

    def __init__(self, seed: int = 0, params: AlgorithmParams | None = None) -> None:
        self.weights = initial_weights(seed)
        # the paper's frame strides, short: many key frames in a short clip
        self.params = params or AlgorithmParams(min_stride=2, max_stride=4, key_frame_pacing="paper")
        self.trainable = StudentNet(len(LVS_CLASSES)).trainable_keys(self.params.mode)
        self.refuse: ErrorCode | None = None
        self.reply_delay = 0.0
        self.stale_next = False
        self.fail_next = False
        self.metric = 0.9
        self.telemetry_interval: float | None = None
        self.resume = False
        self.sessions: list[StandInSession] = []
        self.hellos = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/edge"

    # -- lifecycle (from the test thread) ----------------------------------------------------

    def start(self) -> StandInServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def open_server() -> Server:
            return await serve(self._handle, "127.0.0.1", self.port, max_size=64 * 1024 * 1024, compression=None)

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._server = self._loop.run_until_complete(open_server())
            except OSError as exc:
                failure.append(exc)
                ready.set()
                return
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(asyncio.sleep(0.05))  # let the cancelled handlers unwind
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(10) or failure:
            raise RuntimeError(f"the stand-in server did not start: {failure}")
        return self

    def received_once_settled(self, expected: int, timeout: float = 5.0) -> int:
        """``bytes_received`` once it reaches ``expected`` or ``timeout`` seconds pass: a peer that closed its
        connection has sent everything, but this server may not have read its last message yet."""
        deadline = time.monotonic() + timeout
        while self.bytes_received < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.bytes_received

    def kill(self) -> None:
        """Stop like a crashed process: stop listening and drop every connection without a close frame."""

        def abort() -> None:
            self._server.server.close()  # the listening socket, at once
            for connection in list(self._server.connections):
                connection.transport.abort()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.call_soon(self._loop.stop)

        self._loop.call_soon_threadsafe(abort)
        self._thread.join(10)

    def drop(self) -> None:
        """Cut every connection without a close frame (a lost link or ingress); keep listening."""

        def abort() -> None:
            for connection in list(self._server.connections):
                connection.transport.abort()

        self._loop.call_soon_threadsafe(abort)

    # -- one connection ----------------------------------------------------------------------

    async def _send(self, ws: ServerConnection, session: StandInSession | None, message: Message) -> None:
        data = encode(message)
        self.bytes_sent += len(data)  # counted before the peer can see it, so a reader never sees fewer
        await ws.send(data)
        if session is not None:
            session.sent.append(message)

    async def _handle(self, ws: ServerConnection) -> None:
        try:
            data = await ws.recv()
            self.bytes_received += len(data)
            hello = decode(data)
            self.hellos += 1
            if not isinstance(hello, Hello):
                raise ProtocolError(ErrorCode.UNEXPECTED_MESSAGE, "first message must be HELLO")
            if self.refuse is not None:
                await self._send(ws, None, Error(
                    code=self.refuse.value, message="refused by the test", fatal=True,
                ))
                await ws.close(self.refuse.close, self.refuse.value)
                return
            # image codecs only, as a server older than the stream codecs: the edge falls back to them
            frame_codec = choose_codec(hello.frame_codecs, IMAGE_FRAME_CODECS, tuple(hello.frame_codecs))
            weight_codec, delta_codec = choose_weight_codecs(hello.weight_codecs, WEIGHT_CODECS)
            resumed = self._resumable(hello)
            if resumed is not None:
                await self._send(ws, resumed, Welcome(
                    session_id=resumed.session_id, version=resumed.version, frame_codec=frame_codec,
                    weight_codec=weight_codec, params=self.params.to_dict(), class_names=list(LVS_CLASSES),
                    delta_codec=delta_codec, telemetry_interval=self.telemetry_interval,
                    student_size=hello.student_size, resumed=True,
                ))
                await self._serve(ws, resumed)
                return
            state = {k: v.clone() for k, v in self.weights.items()}
            encoder = UpdateEncoder(weight_codec, delta_codec)
            session = StandInSession(f"s{len(self.sessions) + 1}", hello, state, encoder)
            self.sessions.append(session)
            blob = self._blob(session, full=True) if hello.mode == "distill" else None
            await self._send(ws, session, Welcome(
                session_id=session.session_id, version=0, frame_codec=frame_codec,
                weight_codec=weight_codec, params=self.params.to_dict(),
                class_names=list(LVS_CLASSES), tensors=blob.tensors if blob else [],
                delta_codec=delta_codec, telemetry_interval=self.telemetry_interval,
                student_size=hello.student_size, payload=blob.payload if blob else b"",
            ))
            await self._serve(ws, session)
        except ConnectionClosed:
            pass

    def _resumable(self, hello: Hello) -> StandInSession | None:
        """The session ``hello`` asks to resume, if ``resume`` is on and it holds it at that version."""
        if not self.resume or hello.resume_session_id is None:
            return None
        for session in self.sessions:
            version = hello.resume_version
            if session.session_id == hello.resume_session_id and version is not None and version <= session.version:
                session.full_next = session.full_next or version < session.version
                session.version = version
                return session
        return None

    async def _serve(self, ws: ServerConnection, session: StandInSession) -> None:
        async for data in ws:
            self.bytes_received += len(data)
            message = decode(data)
            session.received.append(message)
            await asyncio.sleep(self.reply_delay)
            await self._answer(ws, session, message)
        session.close_code = ws.close_code

    async def _answer(self, ws: ServerConnection, session: StandInSession, message: Message) -> None:
        if isinstance(message, ResyncRequest):
            await self._send_update(ws, session, session.last_seq, base=message.have_version, full=True)
            return
        if isinstance(message, Telemetry) and self.telemetry_interval is not None:
            return
        if not isinstance(message, KeyFrame):
            raise AssertionError(f"the edge sent {message!r}")
        frame = decode_frame(message.payload, message.codec, message.width, message.height)
        session.last_seq = message.seq
        if self.fail_next:
            self.fail_next = False
            await self._send(ws, session, Error(
                code=ErrorCode.TEACHER_FAILED.value, message="test", seq=message.seq,
            ))
        elif session.hello.mode == "naive":
            labels = naive_labels(frame, len(LVS_CLASSES))
            await self._send(ws, session, Labels(
                seq=message.seq, frame_index=message.frame_index, codec="png", width=message.width,
                height=message.height, payload=encode_labels(labels),
            ))
        else:
            for key in self.trainable:
                session.state[key] += NUDGE
            if self.stale_next:
                self.stale_next = False
                await self._send_update(ws, session, message.seq, base=session.version + 7, full=False)
            elif message.base_version == session.version and not session.full_next:
                await self._send_update(ws, session, message.seq, base=session.version, full=False)
            else:
                await self._send_update(ws, session, message.seq, base=message.base_version, full=True)

    def _blob(self, session: StandInSession, full: bool) -> TensorBlob:
        """Encode as the real server does; the stand-in then holds exactly what the edge will hold."""
        encoder = session.encoder
        if full:
            blob = encoder.full(session.state)
        else:  # a sparse codec: the real server's default choice, every coordinate that differs
            coordinates = coordinates_to_send(encoder, None, SparseOptions(), session.state, self.trainable)
            blob = encoder.partial(session.state, self.trainable, coordinates)
        session.state = {k: v.clone() for k, v in encoder.held.state.items()}
        return blob

    async def _send_update(
        self, ws: ServerConnection, session: StandInSession, seq: int, base: int, full: bool
    ) -> None:
        session.version += 1
        session.full_next = session.full_next and not full
        blob = self._blob(session, full)
        await self._send(ws, session, Update(
            seq=seq, base_version=base, version=session.version, metric=self.metric,
            initial_metric=0.5, steps=1, full=full, tensors=blob.tensors, payload=blob.payload,
        ))
