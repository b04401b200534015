"""Checking an edge's HELLO against what this server can serve."""

from __future__ import annotations

import re

from services.server.settings import ServerSettings
from shadowtutor.models.scale import Size, format_size
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import choose_codec, choose_weight_codecs
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import SESSION_MODES, Hello
from shadowtutor.protocol.video_stream import frame_codecs_for

STUDENT_ARCH = "shadowtutor-student"
MAX_EDGE_ID_CHARS = 128
# a server's session id: 32 lowercase hex digits
SESSION_ID = re.compile(r"[0-9a-f]{32}")


def check_hello(hello: Hello, settings: ServerSettings, class_names: tuple[str, ...]) -> Agreement:
    """The terms of this session; raises :class:`ProtocolError` (every failure here is fatal)."""
    if (
        not hello.edge_id
        or len(hello.edge_id) > MAX_EDGE_ID_CHARS
        or not hello.edge_id.isprintable()
    ):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"edge_id must be 1 to {MAX_EDGE_ID_CHARS} printable characters"
        )
    if hello.mode not in SESSION_MODES:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"mode {hello.mode!r} is not one of {list(SESSION_MODES)}"
        )
    if hello.student_arch != STUDENT_ARCH:
        raise ProtocolError(
            ErrorCode.INCOMPATIBLE_MODEL,
            f"student_arch {hello.student_arch!r} is unknown; this server serves {STUDENT_ARCH!r}",
        )
    if tuple(hello.class_names) != class_names:
        raise ProtocolError(
            ErrorCode.INCOMPATIBLE_MODEL,
            f"class_names {hello.class_names} differ from the server's {list(class_names)} (same "
            "names, same order)",
        )
    max_w, max_h = settings.max_frame_width, settings.max_frame_height
    if not (0 < hello.frame_width <= max_w and 0 < hello.frame_height <= max_h):
        raise ProtocolError(
            ErrorCode.BAD_FRAME,
            f"frame size {hello.frame_width}x{hello.frame_height} is outside 1x1 .. "
            f"{max_w}x{max_h}",
        )
    allowed = tuple(
        frame_codecs_for(settings.allowed_frame_codecs(), hello.frame_width, hello.frame_height)
    )
    frame_codec = choose_codec(hello.frame_codecs, allowed, tuple(hello.frame_codecs))
    weight_codec, delta_codec = choose_weight_codecs(
        hello.weight_codecs, settings.allowed_weight_codecs()
    )
    _check_resume(hello)
    return Agreement(
        frame_codec=frame_codec,
        weight_codec=weight_codec,
        delta_codec=delta_codec,
        student_size=_student_size(hello, settings),
    )


def _check_resume(hello: Hello) -> None:
    """A resume names a session id of this server's form and a version >= 0, both or neither, in
    distill mode."""
    session_id, version = hello.resume_session_id, hello.resume_version
    if session_id is None and version is None:
        return
    if (
        hello.mode != "distill"
        or session_id is None
        or version is None
        or not SESSION_ID.fullmatch(session_id)
        or version < 0
    ):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            "resume_session_id (32 hex digits) and resume_version (>= 0) go together, in distill "
            "mode",
        )


def _student_size(hello: Hello, settings: ServerSettings) -> Size | None:
    """The edge's announced student size, else the server's setting (WELCOME tells the edge which).

    A server with a student size refuses an edge that announces another one."""
    if hello.student_size is None:
        return settings.student_size
    max_w, max_h = settings.max_frame_width, settings.max_frame_height
    if len(hello.student_size) != 2 or not (
        0 < hello.student_size[0] <= max_w and 0 < hello.student_size[1] <= max_h
    ):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            f"student_size {hello.student_size} is not [W, H] within 1x1 .. {max_w}x{max_h}",
        )
    size = (hello.student_size[0], hello.student_size[1])
    if settings.student_size is not None and size != settings.student_size:
        raise ProtocolError(
            ErrorCode.INCOMPATIBLE_MODEL,
            f"this edge runs its student at {format_size(size)}, this server distils at "
            f"{format_size(settings.student_size)}",
        )
    return size
