"""What ``serve --ray`` started, as lines for its terminal: the addresses edges use (those Serve's
proxies serve), the ingress, each teaching replica (node address and pid), the HTTP proxies and the
checkpoint store; and the replicas alone (``serve --ray ADDRESS --list``).

:func:`summary_lines` and :func:`replica_lines` format the actors :func:`alive_actors` reads from
the cluster's GCS (no dashboard needed), so the format is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from services.ray_serve.app import APP_NAME, INGRESS, TEACHING, ServeOptions
from services.server.settings import ServerSettings


def alive_actors() -> list[Mapping[str, Any]]:
    """The live actors of the connected Ray cluster, as Ray's GCS actor table gives them."""
    from ray._private import state  # the GCS actor table; ray.util.state needs the dashboard

    return list(state.actors(actor_state_name="ALIVE").values())


def _where(actor: Mapping[str, Any]) -> str:
    return f"{actor['Address']['IPAddress']} pid {actor['Pid']}"


def replica_lines(actors: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per ingress replica, teaching replica and HTTP proxy among ``actors`` (node address
    and pid), each kind numbered by node and pid; a kind with none says so."""
    actors = list(actors)
    kinds = (
        ("ingress", f"ServeReplica:{APP_NAME}:{INGRESS}"),
        ("teaching", f"ServeReplica:{APP_NAME}:{TEACHING}"),
        ("HTTP proxy", "ProxyActor"),
    )
    lines = []
    for kind, class_name in kinds:
        found = sorted(_where(a) for a in actors if a["ActorClassName"] == class_name)
        lines += [f"  {kind} {i}: {where}" for i, where in enumerate(found, 1)]
        if not found:
            lines.append(f"  {kind}: not running")
    return lines


def summary_lines(
    address: str,
    settings: ServerSettings,
    options: ServeOptions,
    actors: Iterable[Mapping[str, Any]],
    served: Mapping[str, Any],
) -> list[str]:
    """The lines describing the running application at the Ray cluster ``address``, whose HTTP
    proxies serve ``served`` (Serve's HTTP options: ``host``, ``port``, ``ssl_certfile``)."""
    actors = list(actors)
    tls = served.get("ssl_certfile") is not None
    scheme, ws = ("https", "wss") if tls else ("http", "ws")
    base = f"{served['host']}:{served['port']}"
    teaching = [a for a in actors if a["ActorClassName"] == f"ServeReplica:{APP_NAME}:{TEACHING}"]
    return [
        f"ShadowTutor on Ray Serve (Ray cluster {address})",
        f"  edges:       {ws}://{base}/v1/edge   metrics: {scheme}://{base}/metrics",
        f"  admission:   at most {settings.max_sessions} edges at once",
        f"  teaching:    {len(teaching)} replica(s), {options.gpus:g} GPU and {options.cpus:g} "
        f"CPU each, at most {options.students(settings)} students each",
        *replica_lines(actors),
        f"  checkpoints: {options.store}",
        "  the application stays deployed after this driver ends; "
        f"`shadowtutor serve --ray {address} --stop` removes it and stops this Ray cluster",
    ]
