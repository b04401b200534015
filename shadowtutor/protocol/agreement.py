"""What the handshake settles for one session: the codecs and the student's scale both sides use.

The server settles it from the edge's HELLO and its own settings (``check_hello`` in
``services.server.connections.handshake``) and tells the edge in its WELCOME; a session carries
the one value from then on, across every process that serves it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Agreement:
    """The codecs and student size of one session. Two agreements are the same session's terms
    exactly when they are equal."""

    frame_codec: str
    # full weights (a float codec)
    weight_codec: str
    # partial updates as quantised deltas, when agreed
    delta_codec: str | None = None
    # ``(W, H)`` the student runs at on both sides; None: the frame's size
    student_size: tuple[int, int] | None = None
