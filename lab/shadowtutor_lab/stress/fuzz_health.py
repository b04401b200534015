"""Is the server under fuzzing still well? ``GET /healthz``, and a canary edge that keeps working.

The canary is a well-behaved session held open for the whole run: every ``interval`` seconds
it sends a valid KEY_FRAME naming the version it holds and must get its UPDATE within
``timeout`` (a partial one: it holds exactly what the server sent). A server whose event loop
hangs, or that dropped the session, shows up here even when every fuzz case ended well.
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection

from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.messages import Error, Message, Update, Welcome, decode
from shadowtutor_lab.stress.fuzz_cases import Target
from shadowtutor_lab.stress.fuzz_client import message_name, open_connection


def check_health(base_url: str, timeout: float, ssl_context: ssl.SSLContext | None = None) -> str | None:
    """None when ``GET /healthz`` answers 200 within ``timeout``; else what went wrong."""
    try:
        with urllib.request.urlopen(f"{base_url}/healthz", timeout=timeout, context=ssl_context) as response:
            return None if response.status == 200 else f"/healthz answered HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"/healthz answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"/healthz did not answer within {timeout:g} s: {exc}"


@dataclass
class CanaryReport:
    round_trips: int = 0
    sessions: int = 0
    worst_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # each a violation


class Canary:
    """A background edge doing a key-frame round trip every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, url: str, target: Target, edge_id: str, *, interval: float, timeout: float,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.url, self.target, self.edge_id = url, target, edge_id
        self.interval, self.timeout, self.ssl_context = interval, timeout, ssl_context
        self.report = CanaryReport()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fuzz-canary", daemon=True)
        self._started = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> CanaryReport:
        """Do one last round trip, end the session and return the report."""
        self._stop.set()
        self._thread.join(self.timeout * 2 + self.interval + 10)
        return self.report

    def _fail(self, what: str) -> None:
        self.report.failures.append(f"canary at {time.monotonic() - self._started:.1f} s: {what}")

    def _run(self) -> None:
        while True:
            self._session()
            if self._stop.wait(self.interval):
                return

    def _session(self) -> None:
        """One session: round trips until stopped or until one fails (the next session starts afresh)."""
        with ExitStack() as stack:
            try:
                ws = stack.enter_context(open_connection(self.url, self.ssl_context, self.timeout))
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                self._fail(f"could not connect: {exc}")
                return
            self.report.sessions += 1
            try:
                self._round_trips(ws)
            except (ConnectionClosed, OSError) as exc:
                self._fail(f"the session was closed: {exc}")

    def _round_trips(self, ws: ClientConnection) -> None:
        ws.send(self.target.hello(self.edge_id, frame_codecs=["jpeg"]))
        welcome = self._receive(ws)
        if not isinstance(welcome, Welcome):
            self._fail(f"HELLO answered by {_describe(welcome)}")
            return
        version, seq = welcome.version, 0
        while True:
            last = self._stop.is_set()
            version = self._round_trip(ws, seq, version)
            if version is None or last:
                return
            self._stop.wait(self.interval)  # cut short by stop(): then one last round trip
            seq += 1

    def _round_trip(self, ws: ClientConnection, seq: int, version: int) -> int | None:
        """The version held after the UPDATE for key frame ``seq``; None (a failure) if it did not come."""
        start = time.monotonic()
        ws.send(self.target.key_frame(seq, "jpeg", frame=seq, base_version=version))
        answer = self._receive(ws)
        seconds = time.monotonic() - start
        self.report.worst_seconds = max(self.report.worst_seconds, round(seconds, 3))
        if isinstance(answer, Update) and answer.seq == seq:
            if answer.full:
                self._fail(f"key frame {seq} on version {version} was answered by a full update")
            self.report.round_trips += 1
            return answer.version
        if isinstance(answer, Error) and answer.code == "rate_limited" and not answer.fatal:
            return version
        self._fail(f"key frame {seq} answered by {_describe(answer)} after {seconds:.1f} s")
        return None

    def _receive(self, ws: ClientConnection) -> Message | str:
        """The next message, or what came instead (for the failure's text)."""
        try:
            return decode(ws.recv(timeout=self.timeout))
        except TimeoutError:
            return f"nothing within {self.timeout:g} s"
        except ProtocolError as exc:
            return f"an undecodable message ({exc})"


def _describe(answer: Message | str) -> str:
    return answer if isinstance(answer, str) else message_name(answer)
