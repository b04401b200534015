"""What ``serve --ray`` started, as lines for its terminal: the addresses edges use, the ingress,
each teaching replica (node address and pid), the HTTP proxies and the checkpoint store.

:func:`summary_lines` formats the actors :func:`alive_actors` reads from the cluster's GCS (no
dashboard needed), so the format is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from services.ray_serve.app import APP_NAME, TEACHING, ServeOptions
from services.server.settings import ServerSettings


def alive_actors() -> list[Mapping[str, Any]]:
    """The live actors of the connected Ray cluster, as Ray's GCS actor table gives them."""
    from ray._private import state  # the GCS actor table; ray.util.state needs the dashboard

    return list(state.actors(actor_state_name="ALIVE").values())


def _where(actor: Mapping[str, Any]) -> str:
    return f"{actor['Address']['IPAddress']} pid {actor['Pid']}"


def summary_lines(
    address: str,
    settings: ServerSettings,
    options: ServeOptions,
    actors: Iterable[Mapping[str, Any]],
) -> list[str]:
    """The lines describing the running application at the Ray cluster ``address``."""
    actors = list(actors)

    def of(deployment: str) -> list[Mapping[str, Any]]:
        name = f"ServeReplica:{APP_NAME}:{deployment}"
        return sorted((a for a in actors if a["ActorClassName"] == name), key=_where)

    scheme = "https" if settings.tls_enabled else "http"
    ws = "wss" if settings.tls_enabled else "ws"
    base = f"{settings.host}:{settings.port}"
    teaching = of(TEACHING)
    proxies = sorted(
        {a["Address"]["IPAddress"] for a in actors if a["ActorClassName"] == "ProxyActor"}
    )
    lines = [
        f"ShadowTutor on Ray Serve (Ray cluster {address})",
        f"  edges:       {ws}://{base}/v1/edge   metrics: {scheme}://{base}/metrics",
        f"  admission:   at most {settings.max_sessions} edges at once",
        "  ingress:     " + (", ".join(_where(a) for a in of("ingress")) or "not running"),
        f"  teaching:    {len(teaching)} replica(s), {options.gpus:g} GPU and {options.cpus:g} "
        "CPU each, "
        f"at most {options.students(settings)} students each",
        *(f"    replica {i}: {_where(a)}" for i, a in enumerate(teaching, 1)),
        f"  HTTP proxies on: {', '.join(proxies) or 'none yet'} (port {settings.port})",
        f"  checkpoints: {options.store}",
        "  the application stays deployed after this driver ends "
        '(docs/deploy/ray-serve.md, "Removing it")',
    ]
    return lines
