"""Typed protocol errors: a stable code for the ERROR message and the WebSocket close code."""

from __future__ import annotations

from enum import Enum


class CloseCode:
    """WebSocket close codes (RFC 6455 section 7.4.1) used by ShadowTutor."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    UNSUPPORTED_DATA = 1003
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013


class ErrorCode(str, Enum):
    """Stable error codes; ``close`` is the WebSocket close code when the error is fatal."""

    # not a ShadowTutor message, bad header, wrong field types
    BAD_MESSAGE = "bad_message"
    UNSUPPORTED_VERSION = "unsupported_version"
    # a valid message at the wrong time (e.g. no HELLO first)
    UNEXPECTED_MESSAGE = "unexpected_message"
    UNSUPPORTED_CODEC = "unsupported_codec"
    # undecodable frame, or not the size announced in HELLO
    BAD_FRAME = "bad_frame"
    # classes or student architecture the server cannot serve
    INCOMPATIBLE_MODEL = "incompatible_model"
    TOO_LARGE = "too_large"
    # key frames over the edge's rate: dropped (not fatal), closed when sustained
    RATE_LIMITED = "rate_limited"
    # session limit reached
    SERVER_BUSY = "server_busy"
    # missing, wrong or revoked token for the HELLO's edge_id
    UNAUTHORIZED = "unauthorized"
    # a newer connection with the same edge_id took over
    SESSION_REPLACED = "session_replaced"
    # the teacher could not label this key frame; the session goes on
    TEACHER_FAILED = "teacher_failed"
    # the edge did not read the server's messages in time: the session is closed
    SEND_TIMEOUT = "send_timeout"
    INTERNAL = "internal"

    @property
    def close(self) -> int:
        return _CLOSE_CODES.get(self, CloseCode.PROTOCOL_ERROR)


_CLOSE_CODES = {
    ErrorCode.BAD_MESSAGE: CloseCode.PROTOCOL_ERROR,
    ErrorCode.UNSUPPORTED_VERSION: CloseCode.PROTOCOL_ERROR,
    ErrorCode.UNEXPECTED_MESSAGE: CloseCode.PROTOCOL_ERROR,
    ErrorCode.UNSUPPORTED_CODEC: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.BAD_FRAME: CloseCode.UNSUPPORTED_DATA,
    ErrorCode.INCOMPATIBLE_MODEL: CloseCode.POLICY_VIOLATION,
    ErrorCode.TOO_LARGE: CloseCode.MESSAGE_TOO_BIG,
    ErrorCode.RATE_LIMITED: CloseCode.POLICY_VIOLATION,
    ErrorCode.SERVER_BUSY: CloseCode.TRY_AGAIN_LATER,
    ErrorCode.UNAUTHORIZED: CloseCode.POLICY_VIOLATION,
    ErrorCode.SESSION_REPLACED: CloseCode.POLICY_VIOLATION,
    ErrorCode.TEACHER_FAILED: CloseCode.INTERNAL_ERROR,
    ErrorCode.SEND_TIMEOUT: CloseCode.TRY_AGAIN_LATER,
    ErrorCode.INTERNAL: CloseCode.INTERNAL_ERROR,
}


class ProtocolError(Exception):
    """Raised by decoders and handlers; carries the code to send back."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
