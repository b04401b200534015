"""The ShadowTutor server as a Ray Serve application: an ingress and a teaching deployment.

* ``ingress`` (no model, no GPU): the server's own FastAPI app (``services.server.app.create_app``)
  with the WebSocket protocol, authentication, limits, ``/metrics`` and ``/v1/sessions``, its
  sessions' model work handed to the teaching deployment (``services.ray_serve.client``).
* ``teaching`` (``replicas`` replicas of ``gpus`` GPUs each): the teacher, the distillation engine
  and the edges' students (``services.ray_serve.teaching``), sessions checkpointed to ``store``.

:func:`app_builder` builds it in a Serve config file (``import_path:
services.ray_serve.app:app_builder`` with the settings as ``args``); :func:`serve_config` writes
that config for settings and :func:`deploy` (``shadowtutor serve --ray ADDRESS``) applies it: to a
running application only what changes no edge's connection, unless told to restart
(``services.ray_serve.rollout``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle

from services.checkpoints.store import open_store
from services.ray_serve import logs
from services.ray_serve.client import ServeTeaching
from services.ray_serve.placement import SessionBalanceRouter
from services.ray_serve.rollout import (
    HTTP_FLAGS,
    INGRESS_LIVE_SETTINGS,
    LIVE_SETTINGS,
    live_settings,
    plan,
)
from services.ray_serve.teaching import TeachingReplica
from services.server.app import create_app
from services.server.settings import ServerSettings

APP_NAME = "shadowtutor"
TEACHING = "teaching"
INGRESS = "ingress"
# seconds between the teaching replicas' reports of the edges they hold (what placement counts)
ROUTING_STATS_PERIOD = 0.5


@dataclass(kw_only=True, frozen=True)
class ServeOptions:
    """How the application is spread over the Ray cluster."""

    # teaching replicas
    replicas: int = 1
    # GPUs per teaching replica (1: one replica per GPU)
    gpus: float = 0.0
    # CPUs per teaching replica
    cpus: float = 1.0
    # session checkpoints: a directory every teaching node can reach
    store: str = "shadowtutor-sessions"
    # students one teaching replica holds (None: the settings' max_sessions, the ingress's
    # admission)
    replica_sessions: int | None = None
    # ingress replicas: each holds the WebSockets Serve's proxy hands it; losing one loses only
    # those
    ingresses: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.ingresses < 1:
            raise ValueError(f"ingress replicas must be >= 1, got {self.ingresses}")
        if self.replica_sessions is not None and self.replica_sessions < 1:
            raise ValueError(f"students per replica must be >= 1, got {self.replica_sessions}")
        if self.gpus < 0 or self.cpus < 0:
            raise ValueError("gpus and cpus per replica must be >= 0")

    def students(self, settings: ServerSettings) -> int:
        """Students one teaching replica holds: ``replica_sessions``, else
        ``settings.max_sessions``."""
        return settings.max_sessions if self.replica_sessions is None else self.replica_sessions


@serve.ingress()
class Ingress:
    """Serves ``create_app(settings)`` with its model work on ``teaching``."""

    def __init__(self, settings: ServerSettings, teaching: DeploymentHandle) -> None:
        logs.configure(settings.log_level)
        self.settings = settings
        remote = ServeTeaching(teaching)
        self._app = create_app(settings, teaching=remote)
        runtime = self._app.state.runtime
        remote.export_to(runtime.metrics, lambda: {s.hello.edge_id for s in runtime.sessions.all()})

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve's in-place settings change (the deployment's ``user_config``): the log level."""
        self.settings = live_settings(self.settings, config)
        logs.configure(self.settings.log_level)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._app


def build_app(settings: ServerSettings, options: ServeOptions) -> Application:
    """The application (not yet running); the store is checked here, so a bad one fails before
    deployment."""
    open_store(options.store)
    students = options.students(settings)
    teaching = serve.deployment(
        name=TEACHING,
        num_replicas=options.replicas,
        ray_actor_options={"num_gpus": options.gpus, "num_cpus": options.cpus},
        max_ongoing_requests=max(8, 2 * students),
        health_check_period_s=2,
        graceful_shutdown_timeout_s=5,
        request_router_config={
            "request_router_class": SessionBalanceRouter,
            "request_routing_stats_period_s": ROUTING_STATS_PERIOD,
        },
    )(TeachingReplica).bind(settings, options.store, students)
    ingress = serve.deployment(
        name=INGRESS,
        num_replicas=options.ingresses,
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=max(100, 4 * settings.max_sessions),
    )(Ingress)
    return ingress.bind(settings, teaching)


def app_builder(args: dict[str, Any]) -> Application:
    """For Serve config files (``import_path: services.ray_serve.app:app_builder``): ``args`` are
    ``store``, ``replica_sessions`` (students per teaching replica; default ``max_sessions``) and
    any server setting (``teacher``, ``student``, ``max_sessions``: the edges the ingress admits,
    ...), over the environment's ``SHADOWTUTOR_*``. The replica count and resources come from the
    config's ``deployments``."""
    args = dict(args)
    store = args.pop("store", ServeOptions.store)
    replica_sessions = args.pop("replica_sessions", None)
    return build_app(
        ServerSettings(**args), ServeOptions(store=store, replica_sessions=replica_sessions)
    )


def serve_config(settings: ServerSettings, options: ServeOptions) -> dict[str, Any]:
    """The Serve config (``serve deploy`` / ``serve run`` file, KubeRay's ``serveConfigV2``) of this
    deployment.

    The settings of :data:`~services.ray_serve.rollout.LIVE_SETTINGS` are the deployments'
    ``user_config``, the others the application's ``args``. A later config that changes only the
    replica counts or the live settings is applied in place: replicas are added or removed and the
    running ones reconfigured; the ingress keeps running (and the edges their connections).
    ValueError for inline tokens or an inline checkpoint secret (the config is no place for
    secrets: files name them).
    """
    if settings.tokens is not None:
        raise ValueError(
            "on Ray, give tokens as --tokens-file: inline --tokens would be readable in the Serve "
            "config (the Ray dashboard shows it)"
        )
    if settings.checkpoint_secret is not None:
        raise ValueError(
            "on Ray, give the checkpoint secret as --checkpoint-secret-file: an inline "
            "--checkpoint-secret would be readable in the Serve config (the Ray dashboard shows it)"
        )
    given = settings.model_dump(mode="json", exclude_defaults=True)
    args = {"store": options.store, **{k: v for k, v in given.items() if k not in LIVE_SETTINGS}}
    live = {name: settings.model_dump(mode="json")[name] for name in LIVE_SETTINGS}
    if options.replica_sessions is not None:
        args["replica_sessions"] = options.replica_sessions
    http: dict[str, Any] = {"host": settings.host, "port": settings.port}
    # Serve's proxy serves https:// and wss:// itself
    if settings.tls_enabled:
        http.update(ssl_certfile=str(settings.tls_cert), ssl_keyfile=str(settings.tls_key))
        if settings.tls_client_ca is not None:
            http["ssl_ca_certs"] = str(settings.tls_client_ca)
    return {
        "http_options": http,
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": f"{__name__}:app_builder",
                "args": args,
                "deployments": [
                    {
                        "name": TEACHING,
                        "num_replicas": options.replicas,
                        "ray_actor_options": {"num_cpus": options.cpus, "num_gpus": options.gpus},
                        "user_config": live,
                    },
                    {
                        "name": INGRESS,
                        "num_replicas": options.ingresses,
                        "user_config": {name: live[name] for name in INGRESS_LIVE_SETTINGS},
                    },
                ],
            }
        ],
    }


def _running(app: Any, name: str, replicas: int) -> bool:
    """Whether deployment ``name`` of the application status ``app`` runs exactly ``replicas``
    replicas."""
    from ray.serve.schema import ReplicaState

    deployment = app.deployments.get(name)
    states = deployment.replica_states if deployment is not None else {}
    return states.get(ReplicaState.RUNNING, 0) == replicas and sum(states.values()) == replicas


class ChangeRefused(RuntimeError):
    """A config not applied, as it would drop the edges' connections; the message (one line) says
    what would restart and how to apply it anyway."""


def served_http(client: Any) -> dict[str, Any]:
    """The HTTP options Serve's proxies run with (``host``, ``port``, TLS files)."""
    running = client.http_config
    return {key: getattr(running, key, None) for key in HTTP_FLAGS}


def _deployed(client: Any) -> dict[str, Any] | None:
    """The config the application was last deployed with, or None when it is not deployed."""
    app = client.get_serve_details().get("applications", {}).get(APP_NAME)
    return None if app is None else app.get("deployed_app_config")


def apply(
    config: dict[str, Any], replicas: int, timeout: float = 300.0, restart: bool = False
) -> dict[str, Any]:
    """Deploy ``config`` to the connected Ray cluster as ``serve run CONFIG`` does, and wait until
    the application runs with ``replicas`` teaching replicas and the config's ingress replicas;
    returns the HTTP options served (:func:`served_http`). To a running application, a config that
    would restart the ingress or that names other HTTP options is :class:`ChangeRefused` unless
    ``restart`` (then Serve starts again for other HTTP options, which drops every connection);
    RuntimeError (one line) when it fails to deploy."""
    # what `serve run CONFIG` calls: there is no public form
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(config)
    ingresses = next(
        d["num_replicas"] for d in config["applications"][0]["deployments"] if d["name"] == INGRESS
    )

    def start() -> Any:
        # the proxies start with Serve: where they run is a start option, not only the config's
        return serve_start(
            http_options=config["http_options"], proxy_location=config.get("proxy_location")
        )

    client = start()
    change = plan(_deployed(client), served_http(client), config)
    refusal = change.refusal()
    if refusal is not None and not restart:
        raise ChangeRefused(refusal)
    if change.http:
        serve.shutdown()
        client = start()
    client.deploy_apps(schema)
    deadline = time.monotonic() + timeout
    while True:
        app = serve.status().applications.get(APP_NAME)
        if app is not None and app.status == "DEPLOY_FAILED":
            raise RuntimeError(
                f"the Serve application failed to deploy: {' '.join(app.message.split())[:500]}"
            )
        if (
            app is not None
            and app.status == "RUNNING"
            and _running(app, TEACHING, replicas)
            and _running(app, INGRESS, ingresses)
        ):
            return served_http(client)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the Serve application is not running {replicas} teaching replicas after "
                f"{timeout:g} s ({app.status if app else 'not deployed'})"
            )
        time.sleep(0.5)


def deploy(
    address: str, settings: ServerSettings, options: ServeOptions, restart: bool = False
) -> dict[str, Any]:
    """Deploy to the Ray cluster at ``address`` with HTTP on ``settings.host:port`` and wait until
    it runs; returns the HTTP options served. Again with other replica counts or live settings:
    applied in place; with other settings: :class:`ChangeRefused` unless ``restart``
    (:func:`apply`). The application stays deployed after this process ends, until the cluster
    stops or it is removed (``shadowtutor serve --ray ADDRESS --stop``)."""
    config = serve_config(settings, options)
    open_store(options.store)
    join(address)
    return apply(config, options.replicas, restart=restart)


def join(address: str) -> None:
    """Connect this process to the Ray cluster at ``address``; ClusterError (one line) when it
    cannot."""
    from shadowtutor.acceleration.regions.cluster import ClusterError, connect

    try:
        connect(address)
    except ClusterError:
        raise
    except Exception as exc:
        # ray.init's own refusals (a version mismatch, an auth token): one line too
        raise ClusterError(
            f"cannot join the Ray cluster at {address!r}: {' '.join(str(exc).split())[:300]}"
        ) from None
