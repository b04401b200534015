"""The teaching that a server without models hands its sessions' model work to.

A runtime made with a :class:`RemoteTeaching` (the Ray Serve ingress:
``services.ray_serve.client.ServeTeaching``) loads no teacher and no student: the WebSocket
connection (``services.server.ws_edge``) checks and decodes each message as always, then asks
the remote teaching for the WELCOME, the answer to a key frame and the full weights of a resync.
Its ``EdgeSession`` has no distiller; the remote teaching keeps the session's ``version`` and
statistics there up to date from its answers.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from services.server.session import EdgeSession
from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.messages import KeyFrame, Labels, Update, Welcome


class SessionEnded(ProtocolError):
    """The remote teaching cannot go on with this session (e.g. its checkpoint is refused): the edge
    gets a fatal ERROR saying why and the connection closes; the edge's next session starts
    fresh."""


class RemoteTeaching(Protocol):
    async def describe(self) -> dict[str, Any]:
        """``class_names`` (list), ``teacher`` and ``where``: what ``/readyz`` shows; raises while
        unavailable."""
        ...

    async def open(self, session: EdgeSession) -> Welcome:
        """The WELCOME of a new session (full weights in distill mode)."""
        ...

    async def key_frame(
        self, session: EdgeSession, key_frame: KeyFrame, frame: np.ndarray
    ) -> Update | Labels:
        """The answer to a checked, decoded key frame; raises ``ProtocolError`` or ``TeacherFailed``
        for an error that answers only this key frame, :class:`SessionEnded` for one that ends the
        session."""
        ...

    async def resync(self, session: EdgeSession, have_version: int) -> Update:
        """The full weights for an edge that holds ``have_version`` (:class:`SessionEnded` as
        above)."""
        ...
