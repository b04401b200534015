"""What one running server holds at its door: settings, metrics, authentication, admission, limits,
the sessions by edge id, and the :class:`~services.server.teaching.local.Teaching` it was given.

The teaching says when it is ready and what it is (``/readyz``); the runtime starts and stops it
with the app, wherever its models run.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from services.server.access.admission import Admission
from services.server.access.auth import Authenticator
from services.server.access.credential_gate import CredentialGate
from services.server.access.limits import KeyFrameLimits, ResyncLimits
from services.server.access.refusals import RefusalWaits
from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching.local import Teaching
from services.server.teaching.session import SessionRegistry
from shadowtutor.protocol.errors import ErrorCode, ProtocolError

log = logging.getLogger(__name__)


class ServerRuntime:
    """What one server process holds for every connection: its settings and metrics, its
    ``teaching``, the sessions by edge id, authentication and admission. Built by the app at start;
    every ``EdgeConnection`` reads it; it starts and stops the teaching with the app."""

    def __init__(
        self, settings: ServerSettings, metrics: ServerMetrics, teaching: Teaching
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.teaching = teaching
        metrics.teacher_ready.set_function(lambda: 1.0 if self.ready else 0.0)
        self.params = settings.algorithm_params()
        self.sessions = SessionRegistry(settings.max_sessions, metrics)
        # raises TokenFileError on a bad tokens file
        self.auth = Authenticator.from_settings(settings)
        self.key_frame_limits = KeyFrameLimits(settings.key_frame_rate, settings.key_frame_burst)
        self.resync_limits = ResyncLimits(
            settings.resync_rate, settings.resync_burst, self.key_frame_limits
        )
        # WebSocket connections open on /v1/edge, HELLO or not
        self.connections = 0
        # room for the connections whose HELLO is not accepted yet
        self.admission = Admission(
            settings.max_unauthenticated_per_source,
            settings.unauthenticated_limit(),
            on_change=metrics.unauthenticated_connections.set,
            on_refusal=lambda reason: metrics.connections_refused.labels(reason=reason).inc(),
        )
        # credential checks: pools of their own, apart from frame decoding and from each other
        self.bearer_gate = CredentialGate(
            "shadowtutor-bearer",
            2,
            settings.auth_checks_per_source,
            settings.auth_checks_total,
            settings.auth_failure_delay,
        )
        # admission bounds these connections already
        self.hello_gate = CredentialGate(
            "shadowtutor-hello",
            2,
            settings.max_unauthenticated_per_source,
            max(settings.max_unauthenticated_per_source, settings.unauthenticated_limit()),
            settings.auth_failure_delay,
        )
        # refused HELLOs wait out the failure delay here, apart from the unauthenticated room
        self.refusals = RefusalWaits(
            settings.auth_failure_delay,
            settings.max_refused_waiting_per_source,
            settings.max_refused_waiting,
        )
        self._token_watch: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.teaching.description is not None

    @property
    def not_ready_reason(self) -> str:
        return self.teaching.not_ready_reason

    @property
    def class_names(self) -> tuple[str, ...]:
        """The classes of the ready teaching; RuntimeError before it is ready."""
        description = self.teaching.description
        if description is None:
            raise RuntimeError(f"the teaching is not ready ({self.not_ready_reason})")
        return description.class_names

    def start(self) -> None:
        self.teaching.start()
        if not self.auth.enabled:
            log.warning(
                "AUTHENTICATION IS OFF: any client can connect as any edge and read /v1/sessions; "
                "configure --tokens-file (shadowtutor token new) for anything beyond a trusted "
                "network"
            )
        elif self.auth.path is not None:
            watch = self.auth.watch(self.evict_revoked, self.settings.tokens_poll_seconds)
            self._token_watch = asyncio.get_running_loop().create_task(watch, name="watch-tokens")

    async def stop(self) -> None:
        if self._token_watch is not None:
            self._token_watch.cancel()
            await asyncio.wait({self._token_watch})
        await self.teaching.stop()
        self.bearer_gate.close()
        self.hello_gate.close()

    def evict_revoked(self) -> None:
        """End the sessions of edges that the (reloaded) tokens file no longer admits."""
        for session in self.sessions.all():
            if not self.auth.edge_admitted(session.hello.edge_id):
                log.warning(
                    "edge %r is no longer admitted by the tokens file: ending its session",
                    session.hello.edge_id,
                )
                session.evict(
                    ProtocolError(ErrorCode.UNAUTHORIZED, "this edge's token was revoked")
                )

    def readiness(self) -> dict[str, Any]:
        """The ``/readyz`` body: ``ready`` with the teaching's description, or why not."""
        description = self.teaching.description
        if description is None:
            return {"ready": False, "reason": self.not_ready_reason}
        return {"ready": True, **description.shown()}
