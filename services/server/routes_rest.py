"""REST endpoints: health, readiness, Prometheus metrics and the connected sessions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from services.server.runtime import ServerRuntime
from services.server.session import SessionInfo

router = APIRouter()


def get_runtime(request: Request) -> ServerRuntime:
    return request.app.state.runtime


Runtime = Annotated[ServerRuntime, Depends(get_runtime)]


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


@router.get("/metrics")
async def metrics(runtime: Runtime) -> Response:
    return Response(runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/sessions", response_model=SessionList)
async def sessions(runtime: Runtime) -> SessionList:
    return SessionList(sessions=[s.info() for s in runtime.sessions.all()])
