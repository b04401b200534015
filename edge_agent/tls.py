"""The agent's TLS client context: the server verified against a CA bundle (or the system's
store)."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edge_agent.settings import EdgeSettings, SettingsError

log = logging.getLogger(__name__)
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def client_ssl_context(
    ca_file: Path | None = None, client_cert: Path | None = None, client_key: Path | None = None
) -> ssl.SSLContext:
    """Verifies the server's certificate chain and host name (Python's defaults: TLS 1.2 or
    newer)."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
        if client_cert is not None:
            context.load_cert_chain(
                str(client_cert), str(client_key) if client_key is not None else None
            )
    except (ssl.SSLError, OSError) as exc:
        raise SettingsError(
            f"cannot load the TLS files ({ca_file}, {client_cert}): {exc}"
        ) from None
    return context


def transport_security(settings: EdgeSettings) -> dict[str, Any]:
    """:class:`~edge_agent.transport.EdgeTransport`'s ``ssl_context`` and ``token`` keywords for
    ``settings``.

    Warns when a token would cross the network in clear (``ws://`` to a host other than loopback).
    """
    options: dict[str, Any] = {}
    if settings.server.startswith("wss://"):
        options["ssl_context"] = client_ssl_context(
            settings.ca_file, settings.client_cert, settings.client_key
        )
    if settings.token is not None or settings.token_file is not None:
        options["token"] = settings.read_token
        host = urlsplit(settings.server).hostname
        if "ssl_context" not in options and host not in LOOPBACK_HOSTS:
            log.warning(
                "sending this edge's token over %s without TLS: anyone on the path can read it; "
                "use a wss:// server",
                settings.server,
            )
    return options
