"""What applying a new Serve config does to a running deployment, and the settings a replica takes
in place.

Serve applies a config to a running application in three ways: a change of a deployment's
``num_replicas`` or ``user_config`` in place (replicas are added or removed; ``reconfigure`` is
called on the running ones), a change of a deployment's ``ray_actor_options`` by replacing that
deployment's replicas a few at a time, and a change of the application's ``args`` by rebuilding
the application: the ingress restarts with every teaching replica, and every edge's WebSocket
drops. The HTTP options (host, port, TLS) are read only when Serve starts: another port given to a
running Serve is ignored.

So the settings a replica can take while it runs (:data:`LIVE_SETTINGS`) travel as the deployments'
``user_config`` and every other setting as ``args``; :func:`plan` compares a new config with what
runs and :meth:`Plan.refusal` says what would restart (or be ignored) before anything is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.server.settings import ServerSettings

# settings a running replica takes in place, through Serve's user_config and reconfigure()
LIVE_SETTINGS = ("checkpoint_ttl", "checkpoint_every", "log_level")
# of those, the ones the ingress uses
INGRESS_LIVE_SETTINGS = ("log_level",)
# the application's own args (not server settings), by the flag that sets them
APP_ARG_FLAGS = {"store": "--checkpoint-store", "replica_sessions": "--ray-replica-sessions"}
# Serve's HTTP options, by the flag that sets them
HTTP_FLAGS = {
    "host": "--host",
    "port": "--port",
    "ssl_certfile": "--tls-cert",
    "ssl_keyfile": "--tls-key",
    "ssl_ca_certs": "--tls-client-ca",
}


def live_settings(settings: ServerSettings, config: Mapping[str, Any]) -> ServerSettings:
    """``settings`` with the :data:`LIVE_SETTINGS` of ``config`` (a deployment's ``user_config``),
    validated as settings are; ValueError for another key or a bad value."""
    unknown = sorted(set(config) - set(LIVE_SETTINGS))
    if unknown:
        raise ValueError(
            f"user_config takes only {', '.join(LIVE_SETTINGS)}; got {', '.join(unknown)}"
        )
    values = {name: getattr(settings, name) for name in type(settings).model_fields}
    return type(settings)(**{**values, **config})


def _flag(name: str) -> str:
    return APP_ARG_FLAGS.get(name) or "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Plan:
    """What a new config changes in the running application (flags, sorted)."""

    # settings (application args) whose change rebuilds the application: the ingress restarts
    restarting: tuple[str, ...] = ()
    # HTTP options a running Serve ignores
    http: tuple[str, ...] = ()
    # settings the replicas take in place (user_config)
    live: tuple[str, ...] = ()

    def refusal(self) -> str | None:
        """Why the config is not applied as it is (one line), or None when it drops no edge."""
        if self.http:
            return (
                f"Serve's HTTP proxies already run and take another {', '.join(self.http)} only "
                "when Serve starts again, which drops every edge's WebSocket; pass --ray-restart "
                "to restart Serve with it (the edges reconnect and resume their sessions)"
            )
        if self.restarting:
            return (
                f"changing {', '.join(self.restarting)} restarts the ingress and every teaching "
                "replica, which drops every edge's WebSocket; pass --ray-restart to apply it "
                "anyway (the edges reconnect and resume their sessions from their checkpoints); "
                f"{', '.join(_flag(n) for n in LIVE_SETTINGS)} and the replica counts change in "
                "place"
            )
        return None


def _differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ, a nested setting's (``algorithm``'s) by its own name."""
    changed = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if isinstance(before, Mapping) or isinstance(after, Mapping):
            changed += _differs(before or {}, after or {})
        elif before != after:
            changed.append(key)
    return changed


def plan(
    deployed: Mapping[str, Any] | None,
    http: Mapping[str, Any] | None,
    config: Mapping[str, Any],
) -> Plan:
    """What applying ``config`` (a :func:`~services.ray_serve.app.serve_config`) does where the
    application runs with the app config ``deployed`` (Serve's ``deployed_app_config``; None: not
    deployed) behind HTTP options ``http`` (None: Serve not started)."""
    wanted = config["http_options"]
    ignored = [] if http is None else [k for k in HTTP_FLAGS if http.get(k) != wanted.get(k)]
    if deployed is None:
        return Plan(http=tuple(HTTP_FLAGS[key] for key in ignored))
    (app,) = config["applications"]
    restarting = _differs(deployed.get("args") or {}, app["args"])
    if deployed.get("import_path") != app["import_path"]:
        restarting.append("import_path")

    def user_configs(source: Mapping[str, Any]) -> dict[str, Any]:
        return {d["name"]: d.get("user_config") or {} for d in source.get("deployments") or ()}

    before, after = user_configs(deployed), user_configs(app)
    live = {
        key
        for name in set(before) | set(after)
        for key in _differs(before.get(name, {}), after.get(name, {}))
    }
    return Plan(
        restarting=tuple(_flag(name) for name in restarting),
        http=tuple(HTTP_FLAGS[key] for key in ignored),
        live=tuple(_flag(name) for name in sorted(live)),
    )
