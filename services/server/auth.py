"""Who may connect: edge tokens in HELLO and administrators' bearer tokens, checked against the tokens file.

Authentication is on when a tokens file (or inline tokens) is configured; without one the
server admits any edge and logs a warning at start. The file is reread when it changes
(checked every ``tokens_poll_seconds`` and at each check) and on SIGHUP, so tokens rotate
and revoke without a restart. A file that turns unreadable or malformed (any content: not
UTF-8, not JSON, nested too deep, wrong fields) is rejected with one warning and
:attr:`Authenticator.problem` set; the last good table stays in force (unknown or revoked
tokens are still refused) until a good file is read. Neither a reload nor the watch ever
raises: SIGHUP reloads or warns, it never ends the process. Checks cost a scrypt hash
(about 50 ms): call them off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from services.server.settings import ServerSettings
from services.server.tokens import MAX_TOKEN_CHARS, Kind, ScryptHash, TokenFileError, TokenTable, burn_time, read_table
from shadowtutor.protocol.errors import ErrorCode, ProtocolError

log = logging.getLogger(__name__)


class Authenticator:
    """The current token table and the checks against it (thread-safe; checks run in worker threads)."""

    def __init__(self, path: Path | None = None, inline: str | None = None) -> None:
        if path is not None and inline is not None:
            raise ValueError("give a tokens file or inline tokens, not both")
        self.path = path
        self.enabled = path is not None or inline is not None
        self.generation = 1  # counts successful loads (the first is this one)
        self.problem: str | None = None  # why the file's last read was rejected (None while it is fine)
        self.rejected = 0  # reads rejected so far
        self._table: TokenTable = TokenTable.parse(inline, "SHADOWTUTOR_TOKENS") if inline else TokenTable()
        self._stamp: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        # (kind, name) -> (the stored hash, SHA-256 of the token that matched it): repeat checks skip scrypt
        self._verified: dict[tuple[Kind, str], tuple[ScryptHash, bytes]] = {}
        if path is not None:
            self._table = read_table(path)  # a missing or bad file at start is an error, not a warning
            self._stamp = _stamp(path)

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Authenticator:
        return cls(settings.tokens_file, settings.tokens)

    # -- reloading ----------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> None:
        """Reread the file if it changed (or always with ``force``); never raises (a bad file is only rejected)."""
        if self.path is None:
            return
        with self._lock:
            try:
                stamp = _stamp(self.path)
            except OSError as exc:
                self._reject(f"cannot read {self.path}: {exc.strerror or exc}", None)
                return
            if stamp == self._stamp and not force:
                return
            try:
                table = read_table(self.path)
            except TokenFileError as exc:
                self._reject(str(exc), stamp)
                return
            except Exception as exc:  # whatever else the content provokes: still only a rejected file
                self._reject(f"{self.path}: cannot be read as a tokens file ({type(exc).__name__}: {exc})", stamp)
                return
            self._table, self._stamp, self.problem = table, stamp, None
            self._verified.clear()
            self.generation += 1
            log.info("tokens reloaded from %s: %d edges, %d admins active", self.path,
                     sum(e.active for e in table.edges.values()), sum(e.active for e in table.admins.values()))

    def _reject(self, problem: str, stamp: tuple[int, int, int] | None) -> None:
        """Keep the last good table; warn once per distinct problem."""
        if problem != self.problem:
            log.warning("the tokens file is rejected, the last good tokens stay in force until it is fixed: %s",
                        problem[:500])
        self._stamp, self.problem = stamp, problem
        self.rejected += 1

    async def watch(self, on_reload: Callable[[], None], interval: float) -> None:
        """Poll the file every ``interval`` s and on SIGHUP; call ``on_reload`` after each successful reload
        (also after reloads made by checks in between). Runs until cancelled; SIGHUP is handled meanwhile."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # not the main thread
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
                except Exception:  # the watch outlives anything: a dead watch would end revocation for good
                    log.exception("the tokens watch failed once; it goes on")
        finally:
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.remove_signal_handler(signal.SIGHUP)

    # -- checks -------------------------------------------------------------------------------

    def check_edge(self, edge_id: str, token: str | None) -> None:
        """Raise UNAUTHORIZED unless ``token`` is the active token of ``edge_id`` (blocking: scrypt)."""
        if not self.enabled:
            return
        self.refresh()
        refusal = self._verify("edges", edge_id, token)
        if refusal is not None:
            shown = edge_id if len(edge_id) <= 128 else edge_id[:128] + "..."  # a HELLO may carry anything
            log.warning("refused edge %r: %s", shown, refusal)
            raise ProtocolError(ErrorCode.UNAUTHORIZED, f"edge {shown!r}: missing, wrong or revoked token")

    def admin_name(self, token: str | None) -> str | None:
        """The administrator whose active token ``token`` is, or None (blocking: scrypt)."""
        self.refresh()
        names = [name for name, entry in self._table.admins.items() if entry.active]
        for name in sorted(names, key=lambda n: not self._cached("admins", n, token)):  # cached hits first
            if self._verify("admins", name, token) is None:
                return name
        if not names and token:
            burn_time(token[:MAX_TOKEN_CHARS])
        return None

    def edge_admitted(self, edge_id: str) -> bool:
        """Whether ``edge_id`` has an active entry in the tokens in force (always True with authentication off)."""
        if not self.enabled:
            return True
        entry = self._table.edges.get(edge_id)
        return entry is not None and entry.active

    def _verify(self, kind: Kind, name: str, token: str | None) -> str | None:
        """None when ``token`` is ``name``'s active token; else why not (for the log, never for the peer)."""
        table = self._table
        if not token:
            return "no token in HELLO" if kind == "edges" else "no token"
        if len(token) > MAX_TOKEN_CHARS:
            return f"a token of {len(token)} characters (at most {MAX_TOKEN_CHARS})"
        if not token.isascii():  # issued tokens are URL-safe base64: anything else is refused unhashed
            return "a token with characters outside ASCII"
        entry = table.entries(kind).get(name)
        if entry is None or not entry.active:
            burn_time(token)
            return "not in the tokens file" if entry is None else "revoked"
        assert entry.hash is not None, "an active entry has a hash"
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
        return entry is not None and entry.hash == cached[0] and hmac.compare_digest(cached[1], _sha256(token))


def _sha256(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size
