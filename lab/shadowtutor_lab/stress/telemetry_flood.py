"""TELEMETRY in bulk from one admitted edge, and what another edge notices meanwhile.

:func:`run_telemetry_flood` starts ``shadowtutor serve`` on loopback (tokens required, a generated 64x48
scene's labels as the teacher, TELEMETRY asked every 10 s), opens a distill-mode session that measures
its key-frame turnaround (KEY_FRAME sent to its UPDATE received) and ``/healthz``'s answer time, first
quiet and then while a second admitted session sends valid TELEMETRY reports at ``rate`` per second
(in batches every 10 ms). The verdict compares the flood's median turnaround with the quiet one of the
same run: within ``turnaround_ratio``.
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from shadowtutor.protocol.codecs import encode_frame
from shadowtutor.protocol.messages import Error, Hello, KeyFrame, Telemetry, Update, Welcome, decode, encode
from shadowtutor_lab.stress.auth_flood import SIZE
from shadowtutor_lab.stress.fuzz_server import LOCAL_CANARY_ID, LOCAL_EDGE_ID, local_server, scene_frames

BATCH_PERIOD_S = 0.01


@dataclass(frozen=True)
class TelemetryFloodConfig:
    out_dir: Path
    rate: float = 1000.0
    # key frames (and /healthz requests) measured per phase
    samples: int = 40
    # flood time before measuring starts
    warmup_s: float = 2.0
    turnaround_ratio: float = 1.2
    cache_dir: Path | None = None


class TelemetryFlood:
    """Sends valid TELEMETRY reports on ``ws`` at ``rate`` per second until :meth:`stop`; ``sent``
    counts them."""

    def __init__(self, ws: ClientConnection, rate: float) -> None:
        self.ws, self.rate = ws, rate
        self.sent = 0
        self.closed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TelemetryFlood:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        # encoded once: the flood's own CPU is not what is measured
        reports = [encode(_report(n)) for n in range(1, 101)]
        start = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            try:
                while self.sent < due:
                    self.ws.send(reports[self.sent % len(reports)])
                    self.sent += 1
            except ConnectionClosed as exc:
                self.closed = str(exc)
                return
            self._stop.wait(BATCH_PERIOD_S)


def _report(n: int) -> Telemetry:
    return Telemetry(frames=n, key_frames=1, updates_applied=0, resyncs=0, reconnects=0, bytes_sent=100 * n,
                     bytes_received=200, waited_seconds=0.0)


def _healthz_seconds(base_url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(f"{base_url}/healthz", timeout=10) as response:
        response.read()
    return time.perf_counter() - start


def _update_seconds(ws: ClientConnection, seq: int, index: int, payload: bytes, version: list[int]) -> float:
    """KEY_FRAME ``seq`` of frame ``index`` (based on ``version[0]``) sent to its UPDATE received;
    ``version[0]`` follows."""
    start = time.perf_counter()
    ws.send(encode(KeyFrame(seq=seq, frame_index=index, base_version=version[0], codec="raw", width=SIZE[0],
                            height=SIZE[1], payload=payload)))
    while True:
        answer = decode(ws.recv(60))
        if isinstance(answer, Error):
            raise RuntimeError(f"key frame {seq}: {answer.code}: {answer.message}")
        if isinstance(answer, Update) and answer.seq == seq:
            version[0] = answer.version
            return time.perf_counter() - start


def _measure(session: ClientConnection, base_url: str, payloads: list[bytes], samples: int,
             seq: list[int], version: list[int]) -> dict[str, list[float]]:
    turnaround, healthz = [], []
    for _ in range(samples):
        seq[0] += 1
        index = seq[0] % len(payloads)
        turnaround.append(_update_seconds(session, seq[0], index, payloads[index], version))
        healthz.append(_healthz_seconds(base_url))
        time.sleep(0.05)
    return {"turnaround_s": turnaround, "healthz_s": healthz}


def _open(ws_url: str, hello: Hello) -> ClientConnection:
    ws = connect(ws_url, max_size=None, open_timeout=30, close_timeout=1)
    ws.send(encode(hello))
    welcome = decode(ws.recv(30))
    if not isinstance(welcome, Welcome):
        raise RuntimeError(f"{hello.edge_id} got {welcome!r}, not WELCOME")
    return ws


def run_telemetry_flood(config: TelemetryFloodConfig) -> dict[str, Any]:
    """Measure quiet, then under the flood; the figures, their ratios and the verdict as a JSON-ready
    dict."""
    from shadowtutor_lab.scenes.cache import cached_scene

    config.out_dir.mkdir(parents=True, exist_ok=True)
    scene = cached_scene("fixed-people", 12, 1, SIZE, 30.0, config.cache_dir, progress=False)
    with local_server(scene, config.out_dir) as server:
        classes = list(server.readyz["class_names"])

        def hello(edge_id: str, mode: str) -> Hello:
            return Hello(edge_id=edge_id, class_names=classes, frame_width=SIZE[0], frame_height=SIZE[1],
                         token=server.tokens[edge_id], mode=mode, agent="telemetry-flood-bench")

        payloads = [encode_frame(frame, "raw") for frame in scene_frames(scene)]
        seq, version = [0], [0]
        watcher = _open(server.ws_url, hello(LOCAL_CANARY_ID, "distill"))
        flooder = _open(server.ws_url, hello(LOCAL_EDGE_ID, "naive"))
        try:
            _measure(watcher, server.base_url, payloads, 5, seq, version)
            quiet = _measure(watcher, server.base_url, payloads, config.samples, seq, version)
            flood = TelemetryFlood(flooder, config.rate).start()
            started = time.monotonic()
            try:
                time.sleep(config.warmup_s)
                loud = _measure(watcher, server.base_url, payloads, config.samples, seq, version)
            finally:
                flood.stop()
            seconds = time.monotonic() - started
        finally:
            watcher.close()
            flooder.close()
    return _verdict(config, quiet, loud, flood, seconds)


def _verdict(config: TelemetryFloodConfig, quiet: dict[str, list[float]], loud: dict[str, list[float]],
             flood: TelemetryFlood, seconds: float) -> dict[str, Any]:
    def medians(phase: dict[str, list[float]]) -> dict[str, float]:
        return {f"{name}_median": round(statistics.median(values), 5) for name, values in phase.items()}

    ratio = statistics.median(loud["turnaround_s"]) / statistics.median(quiet["turnaround_s"])
    result: dict[str, Any] = {
        "rate_asked": config.rate, "reports_sent": flood.sent, "rate_sent": round(flood.sent / seconds, 1),
        "flooder_closed": flood.closed, "quiet": medians(quiet), "flood": medians(loud),
        "turnaround_ratio": round(ratio, 3),
        "healthz_ratio": round(statistics.median(loud["healthz_s"]) / statistics.median(quiet["healthz_s"]), 3),
        "failures": [],
    }
    if ratio > config.turnaround_ratio:
        result["failures"].append(f"key-frame turnaround {ratio:.2f}x the quiet one")
    if flood.closed is not None:
        result["failures"].append(f"the flooding session was closed: {flood.closed}")
    result["passed"] = not result["failures"]
    return result
