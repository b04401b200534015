"""What the edge transport counts over the agent's life, and the events it reports as they come."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class TransportObserver(Protocol):
    """Events for the metrics exporter; called on the network thread."""

    def on_connected(self, connected: bool) -> None: ...

    def on_bytes(self, sent: int, received: int) -> None: ...

    def on_roundtrip(self, seconds: float) -> None: ...

    def on_reconnect(self, resumed: bool) -> None: ...

    def on_resync(self) -> None: ...

    def on_key_frame_dropped(self) -> None: ...


@dataclass(kw_only=True)
class TransportStats:
    """Counters over the agent's life; every WebSocket message counts with its length in bytes."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    # KEY_FRAME messages sent
    frames_sent: int = 0
    # frames submitted while no session was open (not sent, not queued)
    key_frames_dropped: int = 0
    # the HELLO and the WELCOME of the first handshake (the first session's model download)
    first_handshake_bytes_sent: int = 0
    first_handshake_bytes_received: int = 0
    # the HELLOs and WELCOMEs of every handshake, the first and each reconnect's
    handshake_bytes_sent_total: int = 0
    handshake_bytes_received_total: int = 0
    # WELCOMEs received: the first handshake's and each reconnect's
    handshakes: int = 0
    # session ids, in the order of their WELCOME (a resumed session is not a new one)
    sessions: list[str] = field(default_factory=list)
    # reconnects whose WELCOME resumed the session the edge held (no weights downloaded)
    resumed: int = 0
    resyncs_requested: int = 0
    # ERROR messages received, by code
    errors: dict[str, int] = field(default_factory=dict)
    # seconds from each key frame to its update
    update_roundtrips: list[float] = field(default_factory=list)

    @property
    def reconnects(self) -> int:
        """Handshakes after the first: the resumed ones and those that opened a new session."""
        return max(0, self.handshakes - 1)

    @property
    def new_session_reconnects(self) -> int:
        """Reconnects that opened a new session (a full model download), not resumed."""
        return self.reconnects - self.resumed

    def count_handshake(self, sent: int, received: int) -> None:
        """Count one handshake of ``sent`` and ``received`` bytes (HELLO, WELCOME)."""
        self.handshakes += 1
        if self.handshakes == 1:
            self.first_handshake_bytes_sent, self.first_handshake_bytes_received = sent, received
        self.handshake_bytes_sent_total += sent
        self.handshake_bytes_received_total += received
