"""What the named attacks on a local server share: the scale they run at, the local target they
attack and the result each one records (:mod:`shadowtutor_lab.stress.fuzz_attacks`,
:mod:`shadowtutor_lab.stress.fuzz_auth_attacks`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shadowtutor.protocol.messages import Hello


@dataclass(frozen=True)
class AttackScale:
    header_mib: int
    flood_connections: int
    flood_mib: int
    flood_rounds: int
    lockout_loops: int
    lockout_hold_s: float  # how long the loops run before the edge tries (past the server's hello_timeout)
    bearer_clients: int
    fifo_s: float


@dataclass
class AttackResult:
    name: str
    passed: bool = True
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.passed = False
        self.failures.append(what)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LocalTarget:
    """The local server: its URLs, process id, tokens file, and a HELLO that admits the cases' edge."""

    base_url: str
    ws_url: str
    pid: int
    tokens_file: Path
    hello: Hello  # with the edge's token

    @property
    def host_port(self) -> tuple[str, int]:
        url = urlsplit(self.base_url)
        return url.hostname or "127.0.0.1", url.port or 80
