"""Requests handed from the inference thread to the network thread's current session, and the
replies that resolve them."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import numpy as np
from websockets.asyncio.client import ClientConnection

from edge_agent.frame_encoder import FrameEncoder
from edge_agent.handshake import SessionTerms
from edge_agent.pending import Pending
from edge_agent.transport_stats import TransportObserver, TransportStats


@dataclass(frozen=True)
class LabelsReply:
    """The server's label map for one frame (naive mode)."""

    frame_index: int
    labels: np.ndarray
    teacher_ms: float


@dataclass(kw_only=True)
class Outgoing:
    """One message waiting to go out; ``pending`` (for a request) resolves with its reply."""

    # "key_frame", "labels", "resync" or "telemetry"
    kind: str
    data: bytes
    seq: int | None = None
    pending: Pending | None = None
    # a stream codec's frame: the stream it belongs to
    stream_epoch: int | None = None


@dataclass(kw_only=True)
class LiveSession:
    """One open connection's session: what waits to go out, and the requests sent and not answered
    yet (by seq). Used on the network thread only."""

    ws: ClientConnection
    terms: SessionTerms
    queue: asyncio.Queue[Outgoing] = field(default_factory=asyncio.Queue)
    outstanding: dict[int, Outgoing] = field(default_factory=dict)

    def fail_all(self) -> None:
        """Resolve every queued and outstanding request with None (the session is gone)."""
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item.pending is not None:
                item.pending.resolve(None)
        for item in self.outstanding.values():
            if item.pending is not None:
                item.pending.resolve(None)
        self.outstanding.clear()


class Handover:
    """Hands requests from any thread to the network thread's ``active`` session. Nothing waits
    while no session is open: a request then fails at once (its pending resolves with None) and a
    key frame counts as dropped."""

    def __init__(
        self, stats: TransportStats, observer: TransportObserver | None, frames: FrameEncoder
    ) -> None:
        self.stats = stats
        self.observer = observer
        self.frames = frames
        # the network thread's loop, once it runs
        self.loop: asyncio.AbstractEventLoop | None = None
        # the session open now; set and read on the network thread
        self.active: LiveSession | None = None
        self._drop_lock = threading.Lock()

    def hand_over(self, item: Outgoing) -> None:
        """From any thread: queue ``item`` for the session open when the network thread takes it."""
        if self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(self._enqueue, item)
                return
            except RuntimeError:
                # the loop is closed
                pass
        # not started, or the loop is closed
        if item.pending is not None:
            item.pending.resolve(None)

    def _enqueue(self, item: Outgoing) -> None:
        """On the network thread: queue for the current session, or fail at once without one."""
        if self.active is None:
            if item.pending is not None:
                self.drop_key_frame()
                self.frames.restart(item.stream_epoch)
                item.pending.resolve(None)
            return
        if item.kind == "resync":
            self.stats.resyncs_requested += 1
            if self.observer:
                self.observer.on_resync()
        self.active.queue.put_nowait(item)

    def drop_key_frame(self) -> None:
        """Count a frame that found no session (called on either thread)."""
        with self._drop_lock:
            self.stats.key_frames_dropped += 1
        if self.observer:
            self.observer.on_key_frame_dropped()
