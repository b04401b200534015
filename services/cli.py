"""``shadowtutor serve``: run the server under uvicorn.

Every :class:`~services.server.settings.ServerSettings` field is a flag (``--max-sessions``
for ``max_sessions``); a flag given wins over its ``SHADOWTUTOR_*`` environment variable.

The teacher and the student load before the server listens: one that cannot load (an unknown
teacher, missing weights, a missing or damaged checkpoint) ends the command with status 2 and
one line on stderr, so a supervisor sees the failure instead of a live process that is never ready.

``--ray ADDRESS`` runs the same server as a Ray Serve application on that Ray cluster instead
(``services.ray_serve.app``): the ingress here speaks to the edges, teaching replicas elsewhere
hold the teacher and the students (docs/deploy/ray-serve.md).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from services.server.settings import ServerSettings
from shadowtutor.config.settings_flags import add_settings_flags, build_settings, given_flags
from shadowtutor.heap import freeze_startup_heap

DEST_PREFIX = "serve_"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
# an HTTP request line and headers, the WebSocket upgrade's included
MAX_REQUEST_HEAD_BYTES = 64 * 1024


class ServerStartError(RuntimeError):
    """The server's models cannot load; the message is one line (the CLI prints it and exits 2)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the ShadowTutor server (WebSocket /v1/edge, REST, /metrics)",
        description="Run the ShadowTutor server under uvicorn. Every flag can also be given as the "
        "environment variable named in its help; a flag wins.",
    )
    add_settings_flags(p, ServerSettings, DEST_PREFIX)
    ray = p.add_argument_group("Ray Serve (instead of one process)")
    ray.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="deploy to the Ray cluster at HOST:PORT (or auto) as a Ray Serve application: this "
        "process stays the driver, HTTP is served by Ray's proxy on --host:--port",
    )
    ray.add_argument(
        "--ray-replicas", type=int, default=1, metavar="N", help="teaching replicas (default 1)"
    )
    ray.add_argument(
        "--ray-gpus",
        type=float,
        default=0.0,
        metavar="G",
        help="GPUs per teaching replica (default 0; 1: one replica per GPU)",
    )
    ray.add_argument(
        "--ray-cpus",
        type=float,
        default=1.0,
        metavar="C",
        help="CPUs per teaching replica (default 1)",
    )
    ray.add_argument(
        "--ray-ingresses",
        type=int,
        default=1,
        metavar="N",
        help="ingress replicas holding the edges' WebSockets (default 1); losing one costs only "
        "its edges a reconnect",
    )
    ray.add_argument(
        "--ray-replica-sessions",
        type=int,
        default=None,
        metavar="N",
        help="students one teaching replica holds, least recently used dropped past that (its "
        "checkpoint stays); default --max-sessions, which bounds the edges the ingress admits",
    )
    ray.add_argument(
        "--checkpoint-store",
        default="shadowtutor-sessions",
        metavar="DIR",
        help="where teaching replicas checkpoint sessions: a directory every replica's node "
        "reaches (shared storage across nodes; default ./shadowtutor-sessions)",
    )
    ray.add_argument(
        "--ray-restart",
        action="store_true",
        help="apply a change that restarts the ingress (any setting but the replica counts, "
        "--checkpoint-ttl, --checkpoint-every and --log-level) or Serve's HTTP proxies (another "
        "--host, --port or TLS files): every edge's WebSocket drops, and the edges reconnect and "
        "resume their sessions. Without it such a change is refused and nothing changes",
    )
    what = ray.add_mutually_exclusive_group()
    what.add_argument(
        "--list",
        action="store_true",
        help="with --ray: print the ingress and teaching replicas and the HTTP proxies running on "
        "that cluster (node address and pid), then exit",
    )
    what.add_argument(
        "--stop",
        action="store_true",
        help="with --ray: remove the application, then stop the Ray processes of that cluster on "
        "this machine (and no other cluster's, unlike `ray stop`), then exit",
    )
    p.set_defaults(handler=run_serve)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """Settings from the environment, overridden by the flags that were given."""
    try:
        return build_settings(ServerSettings, given_flags(args, DEST_PREFIX))
    except ValueError as exc:
        raise ValueError(f"bad server settings: {exc}") from None


def tls_options(settings: ServerSettings) -> dict[str, Any]:
    """uvicorn's TLS keywords: https:// and wss:// with the certificate, client certificates under
    mutual TLS."""
    if not settings.tls_enabled:
        return {}
    import ssl

    options: dict[str, Any] = {
        "ssl_certfile": str(settings.tls_cert),
        "ssl_keyfile": str(settings.tls_key),
    }
    if settings.tls_client_ca is not None:
        options.update(ssl_ca_certs=str(settings.tls_client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


def load_or_fail(settings: ServerSettings) -> Any:
    """The server's models (:func:`~services.server.teaching.loading.load_models`), or
    :class:`ServerStartError`."""
    from services.server.teaching.loading import load_models

    try:
        return load_models(settings)
    except Exception as exc:
        # whatever a teacher backend raises: one line, no traceback
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ServerStartError(f"cannot start: {detail[:500]}") from None


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.server.app import create_app

    if (getattr(args, "list", False) or getattr(args, "stop", False)) and not args.ray:
        raise ValueError("--list and --stop need --ray ADDRESS (the Ray cluster)")
    if getattr(args, "list", False):
        return list_on_ray(args.ray)
    if getattr(args, "stop", False):
        return stop_on_ray(args.ray)
    settings = settings_from_args(args)
    logging.getLogger().setLevel(settings.log_level.upper())
    if getattr(args, "ray", None):
        return run_on_ray(args, settings)
    log = logging.getLogger("services.server")
    if settings.tls_enabled:
        log.info(
            "TLS on: https:// and wss:// with %s%s",
            settings.tls_cert,
            " (client certificates required)" if settings.tls_client_ca else "",
        )
    elif settings.host not in LOOPBACK_HOSTS:
        log.warning(
            "no TLS: tokens, frames and weights cross the network in clear; pass --tls-cert and "
            "--tls-key, or terminate TLS at a reverse proxy (docs/security.md)"
        )
    app = create_app(settings, models=load_or_fail(settings))
    log.debug(
        "%d startup objects kept out of the garbage collector's full passes", freeze_startup_heap()
    )
    uvicorn.run(app, host=settings.host, port=settings.port, **uvicorn_options(settings))
    return 0


def run_on_ray(args: argparse.Namespace, settings: ServerSettings) -> int:
    """``--ray``: deploy to the Ray cluster and stay until interrupted (the Serve application stays
    deployed)."""
    try:
        from services.ray_serve.app import ServeOptions, deploy
    except ImportError as exc:
        raise ServerStartError(
            f"--ray needs Ray Serve: pip install 'shadowtutor[serve]' ({exc})"
        ) from None
    # a directory: absolute, for replicas that run elsewhere
    store = args.checkpoint_store
    options = ServeOptions(
        replicas=args.ray_replicas,
        gpus=args.ray_gpus,
        cpus=args.ray_cpus,
        store=store if "://" in store else str(Path(store).resolve()),
        replica_sessions=args.ray_replica_sessions,
        ingresses=args.ray_ingresses,
    )
    served = deploy(args.ray, settings, options, restart=args.ray_restart)
    from services.ray_serve.summary import alive_actors, summary_lines

    print("\n".join(summary_lines(args.ray, settings, options, alive_actors(), served)), flush=True)
    while True:
        time.sleep(3600)


def list_on_ray(address: str) -> int:
    """``--ray ADDRESS --list``: print the application's replicas and proxies with their pids."""
    from services.ray_serve.app import join
    from services.ray_serve.summary import alive_actors, replica_lines

    join(address)
    print(f"ShadowTutor on the Ray cluster {address}", *replica_lines(alive_actors()), sep="\n")
    return 0


def stop_on_ray(address: str) -> int:
    """``--ray ADDRESS --stop``: remove the application and stop that cluster on this machine."""
    from services.ray_serve.teardown import stop_cluster

    stopped = stop_cluster(address)
    print(
        f"the Ray cluster at {address} ({stopped.session_dir}) is stopped on this machine: "
        f"{stopped.terminated} process(es) ended, {stopped.killed} killed after the grace period"
    )
    return 0


def uvicorn_options(settings: ServerSettings) -> dict[str, Any]:
    """uvicorn's keywords for ``settings`` (all but the app, host and port).

    HTTP is parsed by h11 with a request line and headers of at most :data:`MAX_REQUEST_HEAD_BYTES`
    (more: 400 and the connection closed; httptools has no such limit); WebSockets by
    :class:`~services.server.connections.ws_protocol.HelloFirstProtocol` (nothing over the largest
    HELLO is read before one is accepted) and never compressed (no permessage-deflate: a message's
    size is its size on the wire); the access log leaves out query strings. ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` are honoured only from the addresses in ``forwarded_allow_ips`` (none by
    default, whatever uvicorn's own default or ``FORWARDED_ALLOW_IPS`` say).
    """
    from services.server.connections.access_log import logging_config
    from services.server.connections.ws_protocol import HelloFirstProtocol

    return dict(
        log_level=settings.log_level,
        log_config=logging_config(),
        http="h11",
        h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES,
        ws=HelloFirstProtocol,
        ws_max_size=settings.max_message_bytes,
        ws_per_message_deflate=False,
        ws_ping_interval=settings.ping_interval,
        ws_ping_timeout=settings.ping_timeout,
        timeout_graceful_shutdown=10,
        proxy_headers=settings.forwarded_allow_ips is not None,
        forwarded_allow_ips=",".join(settings.forwarded_allow_ips or ()) or None,
        **tls_options(settings),
    )
