"""REST endpoints: health, readiness, Prometheus metrics and the connected sessions.

With authentication on, ``/v1/sessions`` and ``/metrics`` (unless ``protect_metrics`` is false:
then without the per-edge series) need an administrator's token as ``Authorization: Bearer TOKEN``;
``/healthz`` and ``/readyz`` stay open. Bearer tokens are checked on the runtime's bearer
:class:`~services.server.access.credential_gate.CredentialGate`: a refusal waits its failure delay,
and a check over the gate's bounds is not run (429).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from services.server.access.credential_gate import BUSY
from services.server.runtime import ServerRuntime
from services.server.teaching.session import SessionInfo

router = APIRouter()


def get_runtime(request: Request) -> ServerRuntime:
    return request.app.state.runtime


Runtime = Annotated[ServerRuntime, Depends(get_runtime)]


async def require_admin(request: Request, runtime: Runtime) -> None:
    """401 unless authentication is off or the request carries an active administrator's bearer
    token; 429 when the bearer gate is at its bound for the request's address or in all."""
    if not runtime.auth.enabled:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    gate = runtime.bearer_gate
    source = request.client.host if request.client is not None else "unknown"
    name = (
        await gate.run(source, runtime.auth.admin_name, token.strip())
        if scheme.lower() == "bearer"
        else None
    )
    if isinstance(name, str):
        return
    await gate.after_failure()
    if name is BUSY:
        raise HTTPException(
            status_code=429,
            detail="too many credential checks at once; try again later",
            headers={"Retry-After": str(max(1, round(gate.failure_delay)))},
        )
    raise HTTPException(
        status_code=401,
        detail="an administrator's bearer token is required",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def require_admin_for_metrics(request: Request, runtime: Runtime) -> None:
    if runtime.settings.metrics_protected:
        await require_admin(request, runtime)


class SessionList(BaseModel):
    """The body of ``GET /v1/sessions``: the sessions open now."""

    sessions: list[SessionInfo]


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving HTTP."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(runtime: Runtime) -> Any:
    """200 once the teacher and the student are loaded; 503 with the reason until then."""
    body = runtime.readiness()
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/metrics", dependencies=[Depends(require_admin_for_metrics)])
async def metrics(runtime: Runtime) -> Response:
    """The Prometheus exposition; the per-edge series only where
    :attr:`ServerSettings.metrics_carry_edges`."""
    exposition = runtime.metrics.exposition(edges=runtime.settings.metrics_carry_edges)
    return Response(exposition, media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/sessions", response_model=SessionList, dependencies=[Depends(require_admin)])
async def sessions(runtime: Runtime) -> SessionList:
    return SessionList(sessions=[s.info() for s in runtime.sessions.all()])
