"""REST endpoints: health, readiness, Prometheus metrics and the connected sessions.

With authentication on, ``/v1/sessions`` (and ``/metrics`` under ``protect_metrics``) need an
administrator's token as ``Authorization: Bearer TOKEN``; ``/healthz`` and ``/readyz`` stay open.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from services.server.runtime import ServerRuntime
from services.server.session import SessionInfo

router = APIRouter()


def get_runtime(request: Request) -> ServerRuntime:
    return request.app.state.runtime


Runtime = Annotated[ServerRuntime, Depends(get_runtime)]


async def require_admin(request: Request, runtime: Runtime) -> None:
    """401 unless authentication is off or the request carries an active administrator's bearer token."""
    if not runtime.auth.enabled:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or await asyncio.to_thread(runtime.auth.admin_name, token.strip()) is None:
        raise HTTPException(
            status_code=401, detail="an administrator's bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def require_admin_for_metrics(request: Request, runtime: Runtime) -> None:
    if runtime.settings.protect_metrics:
        await require_admin(request, runtime)


class SessionList(BaseModel):
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
    return Response(runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/sessions", response_model=SessionList, dependencies=[Depends(require_admin)])
async def sessions(runtime: Runtime) -> SessionList:
    return SessionList(sessions=[s.info() for s in runtime.sessions.all()])
