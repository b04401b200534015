"""Bad bearer tokens in bulk against a local server, and what an authenticated edge notices meanwhile;
and :class:`HelloFlood`, HELLOs with made-up tokens in bulk.

:func:`run_auth_flood` starts ``shadowtutor serve`` on loopback (tokens required, ``admins``
administrators in its tokens file, a generated 64x48 scene's labels as the teacher), opens one
naive-mode session, and measures in one run, quiet and under each flood: a new edge's time from
connecting to its WELCOME, and the open session's key-frame turnaround (KEY_FRAME sent to its
LABELS received). A flood is ``clients`` threads, each on a keep-alive HTTP connection bound to
one of the flood's source addresses (distinct 127.0.0.x on loopback), asking ``/v1/sessions``
and ``/metrics`` over and over with made-up bearer tokens. The verdict compares the flood's
figures with the quiet ones of the same run: WELCOME within ``welcome_limit_s`` every time and
the median key-frame turnaround within ``turnaround_ratio`` times the quiet median.
"""

from __future__ import annotations

import http.client
import platform
import secrets
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from websockets.sync.client import ClientConnection, connect

from shadowtutor.protocol.codecs import encode_frame
from shadowtutor.protocol.messages import Hello, KeyFrame, Labels, Welcome, decode, encode
from shadowtutor_lab.stress.attack_client import upgrade
from shadowtutor_lab.stress.fuzz_server import LOCAL_CANARY_ID, LOCAL_EDGE_ID, local_server, scene_frames

SIZE = (64, 48)


@dataclass(frozen=True)
class FloodPlan:
    """One flood: ``clients`` threads spread evenly over ``sources`` (local addresses to bind), asking
    ``paths`` in turn."""

    name: str
    clients: int
    sources: tuple[str, ...]
    paths: tuple[str, ...] = ("/v1/sessions", "/metrics")


@dataclass(frozen=True)
class FloodConfig:
    out_dir: Path
    floods: tuple[FloodPlan, ...] = (
        FloodPlan("one_address", 40, ("127.0.0.1",)),
        FloodPlan("four_addresses", 40, ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")),
    )
    admins: int = 3
    # WELCOMEs and key frames measured per phase
    samples: int = 20
    # flood time before measuring starts
    warmup_s: float = 3.0
    welcome_limit_s: float = 0.5
    turnaround_ratio: float = 2.0
    cache_dir: Path | None = None


@dataclass
class Phase:
    name: str
    welcome_s: list[float] = field(default_factory=list)
    turnaround_s: list[float] = field(default_factory=list)
    # status code (or error) -> count
    flood_answers: dict[str, int] = field(default_factory=dict)
    flood_seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"welcome_max_s": round(max(self.welcome_s), 4), "welcome_median_s": round(
            statistics.median(self.welcome_s), 4), "turnaround_median_s": round(statistics.median(
                self.turnaround_s), 4), "turnaround_p90_s": round(_quantile(self.turnaround_s, 0.9), 4),
            "flood_requests_per_s": round(sum(self.flood_answers.values()) / self.flood_seconds, 1)
            if self.flood_seconds else 0.0, "flood_answers": self.flood_answers}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _ClientThreads:
    """Client threads, each running ``target(*args)`` with its own ``args`` until :meth:`stop`; ``answers``
    counts what they :meth:`_count`."""

    def __init__(self, target: Callable[..., None], args: list[tuple[Any, ...]]) -> None:
        self.answers: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=target, args=a, daemon=True) for a in args]

    def start(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.answers[outcome] += 1


class Flood(_ClientThreads):
    """``plan.clients`` threads asking with made-up bearer tokens until :meth:`stop`."""

    def __init__(self, host: str, port: int, plan: FloodPlan) -> None:
        self.host, self.port, self.plan = host, port, plan
        super().__init__(self._client, [(plan.sources[i % len(plan.sources)], i) for i in range(plan.clients)])

    def _client(self, source: str, index: int) -> None:
        paths = self.plan.paths
        connection: http.client.HTTPConnection | None = None
        n = 0
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = http.client.HTTPConnection(self.host, self.port, timeout=10,
                                                            source_address=(source, 0))
                connection.request("GET", paths[(index + n) % len(paths)],
                                   headers={"Authorization": f"Bearer {secrets.token_urlsafe(32)}"})
                response = connection.getresponse()
                response.read()
                outcome = str(response.status)
            except (OSError, http.client.HTTPException) as exc:
                outcome = type(exc).__name__
                if connection is not None:
                    connection.close()
                connection = None
                self._stop.wait(0.05)
            n += 1
            self._count(outcome)


class HelloFlood(_ClientThreads):
    """``per_source`` threads on each of ``sources`` (local addresses to bind), each opening ``/v1/edge``,
    sending ``hello`` with a made-up token in the same write as the upgrade request (so that it is read at
    once) and closing once the answer arrives, over and over, until :meth:`stop`: every HELLO is refused.
    ``answers`` counts ``answered`` and the failures by type (an upgrade refused with HTTP 403 is a
    ``ConnectionError``)."""

    def __init__(self, host: str, port: int, hello: Hello, sources: tuple[str, ...], per_source: int) -> None:
        self.host, self.port, self.hello = host, port, hello
        super().__init__(self._client, [(source,) for source in sources for _ in range(per_source)])

    def _client(self, source: str) -> None:
        while not self._stop.is_set():
            data = encode(replace(self.hello, token=secrets.token_urlsafe(32)))
            try:
                with upgrade(self.host, self.port, source=source, timeout=10.0, first=data) as sock:
                    # the answer (the refusal comes after the server's failure delay)
                    sock.recv(4096)
                outcome = "answered"
            except OSError as exc:
                outcome = type(exc).__name__
                self._stop.wait(0.01)
            self._count(outcome)


def _welcome_seconds(ws_url: str, hello: Hello) -> float:
    start = time.perf_counter()
    with connect(ws_url, max_size=None, open_timeout=30, close_timeout=1) as ws:
        ws.send(encode(hello))
        answer = decode(ws.recv(30))
        if not isinstance(answer, Welcome):
            raise RuntimeError(f"the edge got {answer!r}, not WELCOME")
        return time.perf_counter() - start


def turnaround_seconds(ws: ClientConnection, seq: int, frame_index: int, payload: bytes) -> float:
    start = time.perf_counter()
    ws.send(encode(KeyFrame(seq=seq, frame_index=frame_index, base_version=0, codec="raw", width=SIZE[0],
                            height=SIZE[1], payload=payload)))
    while True:
        answer = decode(ws.recv(30))
        if isinstance(answer, Labels) and answer.seq == seq:
            return time.perf_counter() - start


def _measure(phase: Phase, ws_url: str, hello: Hello, session: ClientConnection, payloads: list[bytes],
             samples: int, seq: list[int]) -> None:
    for _ in range(samples):
        phase.welcome_s.append(_welcome_seconds(ws_url, hello))
        seq[0] += 1
        index = seq[0] % len(payloads)
        phase.turnaround_s.append(turnaround_seconds(session, seq[0], index, payloads[index]))
        time.sleep(0.05)


def run_auth_flood(config: FloodConfig) -> dict[str, Any]:
    """Measure quiet, then under each flood; the result (figures, ratios, verdict) as a JSON-ready dict."""
    from services.server.access.tokens import issue_token
    from shadowtutor_lab.scenes.cache import cached_scene

    config.out_dir.mkdir(parents=True, exist_ok=True)
    scene = cached_scene("fixed-people", 12, 1, SIZE, 30.0, config.cache_dir, progress=False)
    with local_server(scene, config.out_dir, protect_metrics=True) as server:
        assert server.tokens_file is not None
        for n in range(config.admins):
            issue_token(server.tokens_file, "admins", f"ops-{n}")
        # the server's poll (every 2 s) takes the admins in
        time.sleep(3.0)
        classes = list(server.readyz["class_names"])
        edge = Hello(edge_id=LOCAL_EDGE_ID, class_names=classes, frame_width=SIZE[0], frame_height=SIZE[1],
                     token=server.tokens[LOCAL_EDGE_ID], agent="auth-flood-bench")
        watcher = Hello(edge_id=LOCAL_CANARY_ID, class_names=classes, frame_width=SIZE[0], frame_height=SIZE[1],
                        token=server.tokens[LOCAL_CANARY_ID], mode="naive", agent="auth-flood-bench")
        payloads = [encode_frame(frame, "raw") for frame in scene_frames(scene)]
        host, port = "127.0.0.1", int(server.base_url.rsplit(":", 1)[1])
        phases: list[Phase] = []
        seq = [0]
        with connect(server.ws_url, max_size=None, open_timeout=30, close_timeout=1) as session:
            session.send(encode(watcher))
            if not isinstance(decode(session.recv(30)), Welcome):
                raise RuntimeError("the measuring session got no WELCOME")
            _measure(Phase("warm-up"), server.ws_url, edge, session, payloads, 3, seq)
            quiet = Phase("quiet")
            _measure(quiet, server.ws_url, edge, session, payloads, config.samples, seq)
            phases.append(quiet)
            for plan in config.floods:
                phase = Phase(plan.name)
                flood = Flood(host, port, plan).start()
                start = time.monotonic()
                try:
                    time.sleep(config.warmup_s)
                    _measure(phase, server.ws_url, edge, session, payloads, config.samples, seq)
                finally:
                    phase.flood_seconds = time.monotonic() - start
                    flood.stop()
                phase.flood_answers = dict(flood.answers)
                phases.append(phase)
    return _verdict(config, phases)


def _verdict(config: FloodConfig, phases: list[Phase]) -> dict[str, Any]:
    quiet = phases[0]
    quiet_turnaround = statistics.median(quiet.turnaround_s)
    result: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "config": {key: value for key, value in asdict(config).items() if key not in ("out_dir", "cache_dir")},
        "phases": {phase.name: phase.summary() for phase in phases},
        "passed": True, "failures": [],
    }
    for phase in phases[1:]:
        ratio = statistics.median(phase.turnaround_s) / quiet_turnaround
        result["phases"][phase.name]["turnaround_ratio"] = round(ratio, 2)
        if max(phase.welcome_s) >= config.welcome_limit_s:
            result["failures"].append(f"{phase.name}: a WELCOME took {max(phase.welcome_s):.3f} s")
        if ratio >= config.turnaround_ratio:
            result["failures"].append(f"{phase.name}: key-frame turnaround {ratio:.2f}x the quiet one")
    result["passed"] = not result["failures"]
    return result
