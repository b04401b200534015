"""The FastAPI app factory: settings in, a ready-to-serve ASGI app out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from services.server.connections import routes_rest, ws_edge
from services.server.metrics.server_metrics import ServerMetrics
from services.server.runtime import ServerRuntime
from services.server.settings import ServerSettings
from services.server.teaching.loading import LoadedModels
from services.server.teaching.local import LocalTeaching, Teaching
from shadowtutor.teachers.base import Teacher
from shadowtutor.version import package_version


def create_app(
    settings: ServerSettings | None = None,
    *,
    teacher: Teacher | None = None,
    models: LoadedModels | None = None,
    teaching: Teaching | None = None,
) -> FastAPI:
    """Build the server app; without ``models`` they load in the background once the app starts
    (``/readyz``).

    ``settings`` defaults to ``ServerSettings()`` (the environment). ``teacher``, when given,
    is used instead of building ``settings.teacher``: any object with ``name``,
    ``class_names`` and ``label(frame_bgr, frame_index)`` (and optionally ``label_batch``).
    ``models``, from :func:`~services.server.teaching.loading.load_models`, makes the app ready at
    start. Together they make the app's :class:`LocalTeaching`; ``teaching``, when given, is the
    sessions' model work instead (e.g. a Ray Serve deployment: no models here at all).
    """
    settings = settings or ServerSettings()
    metrics = ServerMetrics(settings.max_edge_series, settings.edge_series_retention)
    if teaching is None:
        teaching = LocalTeaching(settings, metrics, teacher=teacher, loaded=models)
    runtime = ServerRuntime(settings, metrics, teaching)
    metrics.tokens_file_valid.set_function(lambda: 0.0 if runtime.auth.problem else 1.0)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    # with authentication on, only /healthz and /readyz are open: no schema or API pages either
    no_pages: dict[str, Any] = {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(
        title="ShadowTutor server",
        version=package_version(),
        summary="Key frames in, distilled student weights out (protocol: docs/protocol.md)",
        lifespan=lifespan,
        **(no_pages if settings.auth_enabled else {}),
    )
    app.state.runtime = runtime
    app.include_router(routes_rest.router)
    app.include_router(ws_edge.router)
    return app
