"""Who may connect: edge tokens in HELLO and administrators' bearer tokens, checked against the
tokens file.

Authentication is on when a tokens file (or inline tokens) is configured; without one the
server admits any edge and logs a warning at start. The file is reread when it changes
(checked every ``tokens_poll_seconds`` and at each check) and on SIGHUP, so tokens rotate
and revoke without a restart. A file that turns unreadable or malformed (any content: not
UTF-8, not JSON, nested too deep, wrong fields) is rejected with one warning and
:attr:`Authenticator.problem` set; the last good table stays in force (unknown or revoked
tokens are still refused) until a good file is read; only a regular file is read, never
waited for longer than :data:`READ_TIMEOUT` (a FIFO or a stalled file system is rejected, not
waited on). Neither a reload nor the watch ever raises: SIGHUP reloads or warns, it never ends
the process. A token is found by its id (:func:`~services.server.access.tokens.token_id`), so a
check costs at most one scrypt hash (about 50 ms) and a made-up token none: call checks off the
event loop (:mod:`services.server.access.credential_gate`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import hmac
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.server.access.tokens import (
    MAX_TOKEN_CHARS,
    Kind,
    ScryptHash,
    TokenFileError,
    TokenTable,
    burn_time,
    read_table,
    token_id,
)
from services.server.settings import ServerSettings
from shadowtutor.protocol.errors import ErrorCode, ProtocolError

log = logging.getLogger(__name__)
# seconds a check or the watch waits for the tokens file to be read
READ_TIMEOUT = 1.0


class Authenticator:
    """The current token table and the checks against it (thread-safe; checks run in worker
    threads)."""

    def __init__(self, path: Path | None = None, inline: str | None = None) -> None:
        if path is not None and inline is not None:
            raise ValueError("give a tokens file or inline tokens, not both")
        self.path = path
        self.enabled = path is not None or inline is not None
        # counts successful loads (the first is this one)
        self.generation = 1
        # why the file's last read was rejected (None while it is fine)
        self.problem: str | None = None
        # reads rejected so far
        self.rejected = 0
        self._table: TokenTable = (
            TokenTable.parse(inline, "SHADOWTUTOR_TOKENS") if inline else TokenTable()
        )
        self._stamp: tuple[int, int, int] | None = None
        # guards the table, the stamp and the pending read; never held in I/O
        self._lock = threading.Lock()
        self._pending: concurrent.futures.Future[_ReadOutcome] | None = None
        self._outcome: _ReadOutcome | None = None
        # (kind, name) -> (the stored hash, SHA-256 of the token that matched it): repeat checks
        # skip scrypt
        self._verified: dict[tuple[Kind, str], tuple[ScryptHash, bytes]] = {}
        if path is not None:
            # a missing or bad file at start is an error, not a warning
            self._table = read_table(path)
            self._stamp = _stamp(path)
            _warn_legacy(self._table)

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Authenticator:
        return cls(settings.tokens_file, settings.tokens)

    # -- reloading ----------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> None:
        """Reread the file if it changed (or always with ``force``); never raises (a bad file is
        only rejected).

        The file is examined and read in a thread of its own, outside any lock, and waited for at
        most :data:`READ_TIMEOUT` seconds: a read that takes longer is rejected (the last good table
        stays) and, while it still hangs, no other read starts; checks never wait longer than
        that."""
        if self.path is None:
            return
        deadline = time.monotonic() + READ_TIMEOUT
        # a read already under way may predate the caller's change: after it, one of the caller's
        # own
        for _ in range(2):
            with self._lock:
                running = self._pending
                own = running is None or running.done()
                pending = (
                    _start_read(self.path, self._stamp, force)
                    if own or running is None
                    else running
                )
                self._pending = pending
            try:
                outcome = pending.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                with self._lock:
                    self._reject(
                        f"reading {self.path} took over {READ_TIMEOUT:g} s (it may be a FIFO or a "
                        "stalled file system)",
                        self._stamp,
                    )
                return
            with self._lock:
                # another check may have waited on the same read and applied it
                if self._outcome is not outcome:
                    self._outcome = outcome
                    self._apply(outcome)
            if own:
                return

    def _apply(self, outcome: _ReadOutcome) -> None:
        """Install the table of ``outcome``, or reject its problem (under the lock)."""
        if outcome.problem is not None:
            self._reject(outcome.problem, outcome.stamp)
            return
        # unchanged
        if outcome.table is None:
            return
        table = outcome.table
        self._table, self._stamp, self.problem = table, outcome.stamp, None
        self._verified.clear()
        self.generation += 1
        log.info(
            "tokens reloaded from %s: %d edges, %d admins active",
            self.path,
            sum(e.active for e in table.edges.values()),
            sum(e.active for e in table.admins.values()),
        )
        _warn_legacy(table)

    def _reject(self, problem: str, stamp: tuple[int, int, int] | None) -> None:
        """Keep the last good table; warn once per distinct problem."""
        if problem != self.problem:
            log.warning(
                "the tokens file is rejected, the last good tokens stay in force until it is "
                "fixed: %s",
                problem[:500],
            )
        self._stamp, self.problem = stamp, problem
        self.rejected += 1

    async def watch(self, on_reload: Callable[[], None], interval: float) -> None:
        """Poll the file every ``interval`` s and on SIGHUP; call ``on_reload`` after each
        successful reload (also after reloads made by checks in between). Runs until cancelled;
        SIGHUP is handled meanwhile."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        # not the main thread
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, wake.set)
        try:
            seen = self.generation
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), interval)
                forced = wake.is_set()
                wake.clear()
                try:
                    await asyncio.to_thread(self.refresh, forced)
                    if self.generation != seen:
                        seen = self.generation
                        on_reload()
                except Exception:
                    # the watch outlives anything: a dead watch would end revocation for good
                    log.exception("the tokens watch failed once; it goes on")
        finally:
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.remove_signal_handler(signal.SIGHUP)

    # -- checks -------------------------------------------------------------------------------

    def check_edge(self, edge_id: str, token: str | None) -> None:
        """Raise UNAUTHORIZED unless ``token`` is the active token of ``edge_id`` (blocking:
        scrypt)."""
        if not self.enabled:
            return
        self.refresh()
        refusal = self._verify("edges", edge_id, token)
        if refusal is not None:
            # a HELLO may carry anything
            shown = edge_id if len(edge_id) <= 128 else edge_id[:128] + "..."
            log.warning("refused edge %r: %s", shown, refusal)
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED, f"edge {shown!r}: missing, wrong or revoked token"
            )

    def admin_name(self, token: str | None) -> str | None:
        """The administrator whose active token ``token`` is, or None (blocking: at most one scrypt
        hash per administrator without a token id, else at most one in all; a made-up token costs
        none)."""
        self.refresh()
        if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
            return None
        table = self._table
        for name in table.by_id("admins", token):
            if self._verify("admins", name, token) is None:
                return name
        return None

    def edge_admitted(self, edge_id: str) -> bool:
        """Whether ``edge_id`` has an active entry in the tokens in force (always True with
        authentication off)."""
        if not self.enabled:
            return True
        entry = self._table.edges.get(edge_id)
        return entry is not None and entry.active

    def _verify(self, kind: Kind, name: str, token: str | None) -> str | None:
        """None when ``token`` is ``name``'s active token; else why not (for the log, never for the
        peer)."""
        table = self._table
        if not token:
            return "no token in HELLO" if kind == "edges" else "no token"
        if len(token) > MAX_TOKEN_CHARS:
            return f"a token of {len(token)} characters (at most {MAX_TOKEN_CHARS})"
        # issued tokens are URL-safe base64: anything else is refused unhashed
        if not token.isascii():
            return "a token with characters outside ASCII"
        entry = table.entries(kind).get(name)
        if entry is None or not entry.active:
            # else every refusal before scrypt is equally quick
            if table.has_legacy(kind):
                burn_time(token)
            return "not in the tokens file" if entry is None else "revoked"
        assert entry.hash is not None, "an active entry has a hash"
        if entry.id is not None and not hmac.compare_digest(entry.id, token_id(token)):
            return "wrong token"
        if self._cached(kind, name, token):
            return None
        if not entry.hash.matches(token):
            return "wrong token"
        self._verified[(kind, name)] = (entry.hash, _sha256(token))
        return None

    def _cached(self, kind: Kind, name: str, token: str | None) -> bool:
        table, cached = self._table, self._verified.get((kind, name))
        if cached is None or not token:
            return False
        entry = table.entries(kind).get(name)
        return (
            entry is not None
            and entry.hash == cached[0]
            and hmac.compare_digest(cached[1], _sha256(token))
        )


def _sha256(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


@dataclass(frozen=True)
class _ReadOutcome:
    """One look at the tokens file: a new table, a problem, or neither (unchanged)."""

    stamp: tuple[int, int, int] | None
    table: TokenTable | None = None
    problem: str | None = None


def _read(path: Path, seen: tuple[int, int, int] | None, force: bool) -> _ReadOutcome:
    try:
        stamp = _stamp(path)
    except OSError as exc:
        return _ReadOutcome(None, problem=f"cannot read {path}: {exc.strerror or exc}")
    if stamp == seen and not force:
        return _ReadOutcome(stamp)
    try:
        return _ReadOutcome(stamp, table=read_table(path))
    except TokenFileError as exc:
        return _ReadOutcome(stamp, problem=str(exc))
    except Exception as exc:
        # whatever else the content provokes: still only a rejected file
        return _ReadOutcome(
            stamp, problem=f"{path}: cannot be read as a tokens file ({type(exc).__name__}: {exc})"
        )


def _start_read(
    path: Path, seen: tuple[int, int, int] | None, force: bool
) -> concurrent.futures.Future[_ReadOutcome]:
    """:func:`_read` in a daemon thread of its own (one that hangs never holds up the process's
    exit)."""
    future: concurrent.futures.Future[_ReadOutcome] = concurrent.futures.Future()

    def run() -> None:
        future.set_result(_read(path, seen, force))

    threading.Thread(target=run, name="tokens-file-read", daemon=True).start()
    return future


def _warn_legacy(table: TokenTable) -> None:
    if table.has_legacy("admins"):
        log.warning(
            "administrators without a token id in the tokens file: each bearer check costs one "
            "scrypt hash per such administrator; reissue their tokens (shadowtutor token new) to "
            "add ids"
        )
