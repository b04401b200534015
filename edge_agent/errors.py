"""The edge transport's failures: which end the run, which a reconnect fixes, how to say them."""

from __future__ import annotations

from websockets.exceptions import InvalidMessage

from shadowtutor.protocol.errors import ErrorCode

# Refusals that a retry cannot fix: the run ends with an error instead of reconnecting forever.
# SESSION_REPLACED: another process runs with this edge id (an agent has one connection at a time).
TERMINAL_CODES = frozenset(
    {
        ErrorCode.INCOMPATIBLE_MODEL,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.UNSUPPORTED_CODEC,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.SESSION_REPLACED,
    }
)


class TransportError(RuntimeError):
    """The agent cannot talk to the server."""


class ServerRefusedError(TransportError):
    """The server refused this edge for a reason a reconnect cannot fix (:data:`TERMINAL_CODES`)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"the server refused this edge ({code.value}): {message}")
        self.code = code


class CertificateError(TransportError):
    """The server's TLS certificate did not verify (wrong CA, wrong host name, expired): fatal for
    the run.

    Retrying cannot help until someone changes a certificate or the agent's ``ca_file``; the
    run ends with this error and the supervisor (compose, balena, systemd) restarts the agent.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"the TLS certificate of {url} did not verify ({reason}); check --ca-file, the "
            "server's certificate and the host name in --server"
        )


class SessionLost(Exception):
    """The session ended in a way worth a reconnect (a fatal server error, a protocol violation)."""


def describe_failure(exc: BaseException, url: str = "") -> str:
    """The error and what caused it (e.g. the TLS alert behind "did not receive a valid HTTP
    response"), with a hint when a ``ws://`` URL got no valid HTTP answer: the server is most
    likely on TLS."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    text = f"{text} ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else text
    if isinstance(exc, InvalidMessage) and url.startswith("ws://"):
        text += f"; if the server serves TLS, use {'wss://' + url[len('ws://') :]}"
    return text
