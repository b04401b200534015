"""The ShadowTutor server as a Ray Serve application: an ingress and a teaching deployment.

* ``ingress`` (no model, no GPU): the server's own FastAPI app (``services.server.app.create_app``)
  with the WebSocket protocol, authentication, limits, ``/metrics`` and ``/v1/sessions``, its
  sessions' model work handed to the teaching deployment (``services.ray_serve.client``).
* ``teaching`` (``replicas`` replicas of ``gpus`` GPUs each): the teacher, the distillation engine
  and the edges' students (``services.ray_serve.teaching``), sessions checkpointed to ``store``.

:func:`build_app` makes the application from settings; :func:`app_builder` is the same for
``serve run`` and Serve config files (``import_path: services.ray_serve.app:app_builder``, with
``args``); :func:`deploy` is ``shadowtutor serve --ray ADDRESS``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle

from services.ray_serve.client import ServeTeaching
from services.ray_serve.teaching import TeachingReplica
from services.server.app import create_app
from services.server.checkpoint_store import open_store
from services.server.settings import ServerSettings

log = logging.getLogger(__name__)
APP_NAME = "shadowtutor"


@dataclass(frozen=True)
class ServeOptions:
    """How the application is spread over the Ray cluster."""

    replicas: int = 1  # teaching replicas
    gpus: float = 0.0  # GPUs per teaching replica (1: one replica per GPU)
    cpus: float = 1.0  # CPUs per teaching replica
    store: str = "shadowtutor-sessions"  # session checkpoints: a directory every teaching node can reach

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.gpus < 0 or self.cpus < 0:
            raise ValueError("gpus and cpus per replica must be >= 0")


@serve.ingress()
class Ingress:
    """Serves ``create_app(settings)`` with its model work on ``teaching``."""

    def __init__(self, settings: ServerSettings, teaching: DeploymentHandle) -> None:
        remote = ServeTeaching(teaching)
        self._app = create_app(settings, remote=remote)
        remote.metrics = self._app.state.runtime.metrics

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._app


def build_app(settings: ServerSettings, options: ServeOptions) -> Application:
    """The application (not yet running); the store is checked here, so a bad one fails before deployment."""
    open_store(options.store)
    teaching = serve.deployment(
        TeachingReplica, name="teaching", num_replicas=options.replicas,
        ray_actor_options={"num_gpus": options.gpus, "num_cpus": options.cpus},
        max_ongoing_requests=max(8, 2 * settings.max_sessions),
        health_check_period_s=2, graceful_shutdown_timeout_s=5,
    ).bind(settings, options.store)
    ingress = serve.deployment(Ingress, name="ingress", num_replicas=1, ray_actor_options={"num_cpus": 0},
                               max_ongoing_requests=max(100, 4 * settings.max_sessions))
    return ingress.bind(settings, teaching)


def app_builder(args: dict[str, Any]) -> Application:
    """For Serve config files: ``args`` are ``replicas``, ``gpus``, ``cpus``, ``store`` and any server setting
    (``teacher``, ``student``, ``max_sessions``, ...); the environment's ``SHADOWTUTOR_*`` apply below them."""
    fields = {name: args[name] for name in ("replicas", "gpus", "cpus", "store") if name in args}
    settings = ServerSettings(**{key: value for key, value in args.items() if key not in fields})
    return build_app(settings, ServeOptions(**fields))


def deploy(address: str, settings: ServerSettings, options: ServeOptions, *, blocking: bool = True) -> None:
    """Run the application on the Ray cluster at ``address`` with HTTP on ``settings.host:port``; with
    ``blocking``, until interrupted (the application stays deployed until the cluster stops or
    ``serve shutdown``)."""
    from shadowtutor.acceleration.regions.cluster import connect

    application = build_app(settings, options)
    connect(address)
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(application, name=APP_NAME, route_prefix="/", blocking=False)
    log.info("ShadowTutor on Ray Serve at http://%s:%d: %d teaching replica(s), sessions checkpointed to %s",
             settings.host, settings.port, options.replicas, options.store)
    while blocking:
        time.sleep(3600)
