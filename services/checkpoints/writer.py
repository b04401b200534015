"""Session checkpoints written behind the answers by a background thread, a session's newest first.

:meth:`CheckpointWriter.submit` returns at once: the caller's answer goes out while the checkpoint
is encoded and stored. Each session has at most one checkpoint waiting; a newer version submitted
before it was written replaces it (the newest wins: a store that falls behind skips versions rather
than queue them). The store links each checkpoint into place whole (``checkpoint_store``), so a
process that dies mid-write leaves the previous version as the session's latest. A failed write is
logged and leaves the previous version too.

With a ``ttl``, the same thread removes from the store, every ``sweep_seconds``, the checkpoints of
sessions idle longer than that (:meth:`~services.checkpoints.store.DirectoryStore.expire`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.checkpoints.store import CheckpointStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    """What became of one submitted checkpoint: ``stored`` False when that version was in the store
    already
    (another process stored it first); ``seconds`` to encode and store it; ``size`` in bytes."""

    stored: bool
    seconds: float
    size: int


@dataclass(kw_only=True)
class _Job:
    """One checkpoint waiting for the writer thread: whose version it is, how to encode it, and whom
    to tell once written."""

    edge_id: str
    session_id: str
    version: int
    encode: Callable[[], bytes]
    done: Callable[[Written], None] | None


class CheckpointWriter:
    """One thread writing ``store``'s checkpoints; :meth:`start` it, :meth:`close` it."""

    def __init__(
        self, store: CheckpointStore, ttl: float | None = None, sweep_seconds: float = 60.0
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.sweep_seconds = sweep_seconds
        self._next_sweep = time.monotonic()
        self._waiting: dict[tuple[str, str], _Job] = {}
        self._busy = False
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)

    def start(self) -> CheckpointWriter:
        self._thread.start()
        return self

    def retain(self, ttl: float | None, sweep_seconds: float) -> None:
        """From now on, remove the sessions idle past ``ttl`` (None: none) every ``sweep_seconds``,
        the next sweep no later than ``sweep_seconds`` from now."""
        with self._changed:
            self.ttl, self.sweep_seconds = ttl, sweep_seconds
            self._next_sweep = min(self._next_sweep, time.monotonic() + sweep_seconds)
            self._changed.notify_all()

    def submit(
        self,
        edge_id: str,
        session_id: str,
        version: int,
        encode: Callable[[], bytes],
        done: Callable[[Written], None] | None = None,
    ) -> None:
        """Store ``encode()`` as ``version`` of the session, soon, unless a newer version of it is
        submitted first; ``done`` is called in the writer's thread once it is stored (or found
        stored already)."""
        with self._changed:
            if self._closed:
                raise RuntimeError("the checkpoint writer is closed")
            key = (edge_id, session_id)
            waiting = self._waiting.pop(key, None)
            if waiting is not None and waiting.version > version:
                self._waiting[key] = waiting
                return
            self._waiting[key] = _Job(
                edge_id=edge_id, session_id=session_id, version=version, encode=encode, done=done
            )
            self._changed.notify()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every checkpoint submitted so far is written; False if ``timeout`` passed
        first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._waiting or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self, timeout: float | None = 30.0) -> bool:
        """Write what is waiting (for up to ``timeout`` seconds), then stop; False if some was
        left."""
        flushed = self.flush(timeout)
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return flushed

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._closed:
                    if self.ttl is not None and time.monotonic() >= self._next_sweep:
                        break
                    wait = (
                        None if self.ttl is None else max(0.0, self._next_sweep - time.monotonic())
                    )
                    self._changed.wait(wait)
                if self._closed and not self._waiting:
                    return
                job = None
                if self._waiting:
                    job = self._waiting.pop(next(iter(self._waiting)))
                    self._busy = True
            if job is not None:
                self._write(job)
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
            with self._changed:
                ttl = self.ttl
                due = ttl is not None and time.monotonic() >= self._next_sweep
                if due:
                    self._next_sweep = time.monotonic() + self.sweep_seconds
            if due and ttl is not None:
                self._sweep(ttl)

    def _write(self, job: _Job) -> None:
        start = time.perf_counter()
        try:
            data = job.encode()
            stored = self.store.create(job.edge_id, job.session_id, job.version, data)
        except Exception:
            log.exception(
                "checkpoint of version %d of session %s of edge %r not written; its previous one "
                "stays the latest",
                job.version,
                job.session_id,
                job.edge_id,
            )
            return
        if not stored:
            log.warning(
                "version %d of session %s was stored by another process first",
                job.version,
                job.session_id,
            )
        if job.done is not None:
            try:
                job.done(Written(stored, time.perf_counter() - start, len(data)))
            except Exception:
                log.exception("after the checkpoint of session %s", job.session_id)

    def _sweep(self, ttl: float) -> None:
        try:
            removed = self.store.expire(ttl)
        except OSError as exc:
            log.warning("the checkpoint store %s could not be swept: %s", self.store.location, exc)
            return
        if removed:
            log.info(
                "%d checkpoint file(s) of sessions idle for more than %g s removed from %s",
                removed,
                ttl,
                self.store.location,
            )
