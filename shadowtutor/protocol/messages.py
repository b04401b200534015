"""ShadowTutor wire messages (protocol version 1); the layout is specified in docs/protocol.md.

Every WebSocket message is binary::

    magic "ST" (2 bytes) | version u8 | type u8 | header length u32 big-endian | header | payload

The header is a UTF-8 JSON object whose fields each message type below declares; the
payload is the rest of the message (a frame, a label map or a tensor blob) and may be empty.
"""

from __future__ import annotations

import json
import struct
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Literal, Union

from shadowtutor.protocol.errors import ErrorCode, ProtocolError

MAGIC = b"ST"
PROTOCOL_VERSION = 1
PREFIX = struct.Struct(">2sBBI")
MAX_HEADER_BYTES = 64 * 1024
# a HELLO is a header; the largest message before one
MAX_HELLO_BYTES = PREFIX.size + MAX_HEADER_BYTES
# what a session does with a key frame: "distill" (ShadowTutor: the edge's student is trained and
# sent as an UPDATE) or "naive" (the teacher's labels are sent as LABELS)
SessionMode = Literal["distill", "naive"]
SESSION_MODES: tuple[SessionMode, ...] = typing.get_args(SessionMode)


@dataclass(kw_only=True)
class Message:
    """A protocol message: a small header of typed fields and an opaque binary ``payload`` (weights,
    an image, a label map). Every message type has its ``TYPE`` number; :func:`encode` and
    :func:`decode` turn messages into frames and back."""

    TYPE: ClassVar[int]
    payload: bytes = field(default=b"", repr=False, kw_only=True)

    def header(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "payload"}


@dataclass(kw_only=True)
class Hello(Message):
    """Edge -> server, first message: who the edge is and what it can do."""

    TYPE: ClassVar[int] = 1
    edge_id: str
    class_names: list[str]
    frame_width: int
    frame_height: int
    mode: SessionMode = "distill"
    student_arch: str = "shadowtutor-student"
    frame_codecs: list[str] = field(default_factory=lambda: ["raw"])
    weight_codecs: list[str] = field(default_factory=lambda: ["f32"])
    token: str | None = None
    agent: str = ""
    # [W, H] the edge's student runs at; None: the server's choice
    student_size: list[int] | None = None
    # the session this edge held before its connection dropped, and the version of the weights it
    # holds: the server resumes it where it can (a WELCOME with ``resumed``), else opens a new one
    resume_session_id: str | None = None
    resume_version: int | None = None
    # the edge reads UPDATEs that hold the server's training back (``held_back``): the server may
    # answer a key frame without weights when they would not pay
    update_gating: bool = False
    # bits per second the edge's downlink may carry (None: the server's default for a camera)
    downlink_budget_bps: float | None = None


@dataclass(kw_only=True)
class Welcome(Message):
    """Server -> edge: the session, its parameters, and the full student weights (tensor blob).

    ``weight_codec`` (a float codec) carries full weights; ``delta_codec``, when not None,
    carries every partial UPDATE as quantised deltas against the weights the edge holds.
    """

    TYPE: ClassVar[int] = 2
    session_id: str
    version: int
    frame_codec: str
    weight_codec: str
    params: dict[str, Any]
    class_names: list[str]
    tensors: list[dict[str, Any]] = field(default_factory=list)
    delta_codec: str | None = None
    # seconds between TELEMETRY reports; None: send none
    telemetry_interval: float | None = None
    # [W, H] both student copies run at; None: the frame's size
    student_size: list[int] | None = None
    # the session the HELLO asked to resume goes on at ``version``: no weights (the edge keeps its
    # own)
    resumed: bool = False
    # this session's answers may hold the training back (UPDATE ``held_back``)
    update_gating: bool = False


@dataclass(kw_only=True)
class KeyFrame(Message):
    """Edge -> server: one key frame (or, in naive mode, any frame) as an encoded image.

    ``stream_position``: with a stream codec (h264), the frame's position in the session's
    stream (0: an intra frame that starts it; n: decodable only right after position n - 1);
    None with an image codec.
    """

    TYPE: ClassVar[int] = 3
    seq: int
    frame_index: int
    base_version: int
    codec: str
    width: int
    height: int
    stream_position: int | None = None


@dataclass(kw_only=True)
class Update(Message):
    """Server -> edge: the trained part of the student for the key frame ``seq``.

    Apply only when the edge holds ``base_version``; then the edge holds ``version``. With
    ``full`` true the blob holds every tensor and replaces the model whatever the edge holds.
    """

    TYPE: ClassVar[int] = 4
    seq: int
    base_version: int
    version: int
    metric: float
    initial_metric: float
    steps: int
    full: bool
    tensors: list[dict[str, Any]]
    teacher_ms: float = 0.0
    distill_ms: float = 0.0
    # the server trained on the key frame but keeps the training for a later update: no tensors,
    # and ``metric`` scores the weights the edge already holds
    held_back: bool = False


@dataclass(kw_only=True)
class ResyncRequest(Message):
    """Edge -> server: the edge holds another version than an update named; send full weights."""

    TYPE: ClassVar[int] = 5
    have_version: int
    reason: str = ""


@dataclass(kw_only=True)
class Labels(Message):
    """Server -> edge (naive mode): the teacher's label map for the frame ``seq``."""

    TYPE: ClassVar[int] = 6
    seq: int
    frame_index: int
    codec: str
    width: int
    height: int
    teacher_ms: float = 0.0


@dataclass(kw_only=True)
class Error(Message):
    """Either direction: a typed error; ``fatal`` errors are followed by a WebSocket close."""

    TYPE: ClassVar[int] = 7
    code: str
    message: str
    fatal: bool = False
    seq: int | None = None


@dataclass(kw_only=True)
class Telemetry(Message):
    """Edge -> server, every WELCOME ``telemetry_interval`` seconds: the edge's own figures, for the
    server's ``/metrics``. Counters count since the agent started (over reconnects); ``None`` is
    "not known yet" (no update applied, naive mode). Histograms: see
    :mod:`shadowtutor.protocol.telemetry`."""

    TYPE: ClassVar[int] = 8
    frames: int
    key_frames: int
    updates_applied: int
    resyncs: int
    reconnects: int
    bytes_sent: int
    bytes_received: int
    waited_seconds: float
    stride: int | None = None
    student_metric: float | None = None
    weights_version: int | None = None
    seconds_since_update: float | None = None
    inference_seconds: dict[str, Any] | None = None
    blocked_seconds: dict[str, Any] | None = None
    roundtrip_seconds: dict[str, Any] | None = None
    # Added within version 1 (older edges leave them out); None: the feature is off or not known.
    key_frames_dropped: int | None = None
    # output -> writes dropped
    output_dropped: dict[str, Any] | None = None
    labels_removed: int | None = None
    # mode -> frames
    change_based_frames: dict[str, Any] | None = None
    # student layer -> fraction in [0, 1]
    changed_fraction: dict[str, Any] | None = None
    # path -> regions
    regions: dict[str, Any] | None = None
    region_key_age_frames: dict[str, Any] | None = None
    cluster_workers: int | None = None
    region_queue_depth: int | None = None
    # With a byte budget: key frames it held back (frames that asked), and the budgets in bit/s.
    key_frames_deferred: int | None = None
    uplink_budget_bps: int | None = None
    downlink_budget_bps: int | None = None


MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (Hello, Welcome, KeyFrame, Update, ResyncRequest, Labels, Error, Telemetry)
}


def encode(message: Message) -> bytes:
    header = json.dumps(message.header(), separators=(",", ":")).encode()
    return (
        PREFIX.pack(MAGIC, PROTOCOL_VERSION, message.TYPE, len(header)) + header + message.payload
    )


def message_type(data: bytes | bytearray | memoryview | str) -> int | None:
    """The type id that a message's prefix names, read without parsing anything else (None for
    text, or for fewer bytes than the prefix); :func:`decode` still checks the whole message."""
    if isinstance(data, str) or len(data) < PREFIX.size:
        return None
    return int(data[3])


def decode(data: bytes | bytearray | memoryview | str) -> Message:
    """Parse and validate one message; any defect raises :class:`ProtocolError`."""
    if isinstance(data, str):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, "text frames are not part of the protocol; send binary"
        )
    data = bytes(data)
    if len(data) < PREFIX.size:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"message of {len(data)} bytes is shorter than the prefix"
        )
    magic, version, type_id, header_len = PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "bad magic: not a ShadowTutor message")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"protocol version {version}; this side speaks {PROTOCOL_VERSION}",
        )
    cls = MESSAGE_TYPES.get(type_id)
    if cls is None:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown message type {type_id}")
    if header_len > MAX_HEADER_BYTES:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            f"header of {header_len} bytes is over the limit of {MAX_HEADER_BYTES} bytes",
        )
    if PREFIX.size + header_len > len(data):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"header length {header_len} does not fit the message"
        )
    try:
        header = json.loads(data[PREFIX.size : PREFIX.size + header_len].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"header is not JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "header is nested too deeply") from None
    if not isinstance(header, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "header must be a JSON object")
    _require_unicode_text(header)
    return _build(cls, header, data[PREFIX.size + header_len :])


def _require_unicode_text(header: dict[str, Any]) -> None:
    """Every string in the header (keys too) must be encodable Unicode: JSON's escapes can spell
    lone surrogates, which would fail later, far from here (in a log line, a hash, a JSON
    response)."""
    pending: list[Any] = [header]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                raise ProtocolError(
                    ErrorCode.BAD_MESSAGE, "header text holds a lone surrogate"
                ) from None


def _build(cls: type[Message], header: dict[str, Any], payload: bytes) -> Message:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name == "payload":
            continue
        if f.name not in header:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ProtocolError(ErrorCode.BAD_MESSAGE, f"{cls.__name__} lacks field {f.name!r}")
            continue
        value = header[f.name]
        if not _conforms(value, hints[f.name]):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"{cls.__name__}.{f.name} has a bad value: {_short(value)}"
            )
        values[f.name] = float(value) if hints[f.name] is float else value
    return cls(**values, payload=payload)


def _conforms(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    if origin is Literal:
        return isinstance(value, str) and value in typing.get_args(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
