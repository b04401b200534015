"""Real ``shadowtutor serve`` and ``shadowtutor edge`` processes for the end-to-end tests (tests/e2e).

A process runs in a :class:`Place`: the host's own network (loopback), or a network namespace
(``shadowtutor_lab.netbench.netns``), whose HTTP ports (the server's REST, the agent's ``/metrics``)
are then reached from inside that namespace. The teacher is the scene's ground truth (``labels``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from shadowtutor_lab.netbench.netns import exec_in
from shadowtutor_lab.netbench.probe import http_get
from tests.support.processes import ManagedProcess, ProcessFailed, free_port, shadowtutor_command, start_process
from tests.support.processes import wait_http_ok as _wait_http_ok
from tests.support.prometheus import promtool_check, sample_value

SIZE = "320x180"
SCENE_FRAMES = 200  # the shared scene (tests/e2e/conftest.py): 25 s of video at 8 frames/s
SERVER_FLAGS = ("--teacher", "labels", "--device", "cpu", "--max-updates", "2")
EDGE_ENV = {"OMP_NUM_THREADS": "1"}  # several processes share two cores


def make_scene(out: Path, frames: int, preset: str = "fixed-street", seed: int = 3, size: str = SIZE) -> Path:
    command = shadowtutor_command("scenes", "make", "--preset", preset, "--frames", str(frames),
                                  "--seed", str(seed), "--out", str(out), "--size", size, "--no-progress")
    subprocess.run(command, check=True, timeout=120, capture_output=True)
    return out


@dataclass(frozen=True)
class Place:
    """Where a process runs: the host's network (``namespace`` None) or a named network namespace."""

    namespace: str | None = None

    def command(self, args: Sequence[str]) -> list[str]:
        return list(args) if self.namespace is None else exec_in(self.namespace, args)

    def get(self, url: str, timeout: float = 10.0, process: ManagedProcess | None = None) -> bytes:
        """The body of ``url`` as seen from this place, polled until it answers 200."""
        if self.namespace is None:
            return _wait_http_ok(url, timeout=timeout, process=process)
        deadline = time.monotonic() + timeout
        while (body := http_get(self.namespace, url, timeout=2.0)) is None:
            if process is not None and not process.alive():
                raise ProcessFailed(f"{url} does not answer: {process.describe()}")
            if time.monotonic() > deadline:
                raise ProcessFailed(f"{url} did not answer in {self.namespace} within {timeout:g} s")
            time.sleep(0.1)
        return body


HOST = Place()


def loopback(port: int) -> str:
    return f"ws://127.0.0.1:{port}"


@dataclass
class ServerRun:
    process: ManagedProcess
    port: int
    place: Place = HOST

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def metrics(self) -> str:
        return self.place.get(self.url("/metrics"), process=self.process).decode()

    def sessions(self) -> list[dict[str, Any]]:
        """``GET /v1/sessions`` (the server runs without tokens)."""
        return json.loads(self.place.get(self.url("/v1/sessions"), process=self.process))["sessions"]


@dataclass
class EdgeRun:
    edge_id: str
    process: ManagedProcess
    out: Path
    metrics_url: str
    place: Place = HOST

    def metrics(self) -> str:
        return self.place.get(self.metrics_url, timeout=10, process=self.process).decode()

    def value(self, name: str) -> float:
        return sample_value(self.metrics(), name, edge_id=self.edge_id)

    def finish(self, timeout: float) -> tuple[dict[str, Any], str]:
        """Wait for the run's summary, take the last scrape (the agent lingers for it), then stop the agent."""
        summary_path = self.out / "summary.json"
        wait_until(summary_path.exists, timeout, self.process)
        text = self.metrics()
        self.process.signal(signal.SIGTERM)
        assert self.process.wait(20) == 0, self.process.describe()
        return json.loads(summary_path.read_text()), text


def wait_until(predicate: Callable[[], bool], timeout: float, *watched: ManagedProcess) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for process in watched:
            assert process.alive(), process.describe()
        assert time.monotonic() < deadline, "timed out; " + "\n".join(p.describe() for p in watched)
        time.sleep(0.1)


def start_server(
    log_dir: Path, port: int, scene: Path, name: str = "server", *flags: str, place: Place = HOST
) -> ManagedProcess:
    host = "127.0.0.1" if place.namespace is None else "0.0.0.0"
    server = start_process(
        place.command(shadowtutor_command("serve", "--host", host, "--port", str(port), "--labels-dir", str(scene),
                                          *SERVER_FLAGS, *flags)),
        name=name, log_dir=log_dir,
    )
    place.get(f"http://127.0.0.1:{port}/readyz", timeout=60, process=server)
    return server


def start_edge(
    log_dir: Path, server_url: str, scene: Path, edge_id: str, *flags: str, place: Place = HOST
) -> EdgeRun:
    """An agent on ``scene``'s video that connects to ``server_url`` (``ws://HOST:PORT``)."""
    metrics_port = free_port()
    out = log_dir / edge_id
    process = start_process(
        place.command(shadowtutor_command(
            "edge", "--server", server_url, "--source", str(scene / "video.mp4"),
            "--edge-id", edge_id, "--output-dir", str(out), "--save-labels", "--backend", "torch",
            "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port), "--linger", "120",
            "--wait-timeout", "30", "--reconnect-min", "0.2", "--reconnect-max", "1", *flags,
        )),
        name=edge_id, log_dir=log_dir, env=EDGE_ENV,
    )
    return EdgeRun(edge_id, process, out, f"http://127.0.0.1:{metrics_port}/metrics", place)


def check_edge_run(summary: dict[str, Any], metrics: str, out: Path, frames: int) -> None:
    """Every frame labelled, key frames sent, versions in order, and the exporter agrees with the summary."""
    assert summary["frames"] == summary["labelled_frames"] == frames, summary
    labels = sorted(p.name for p in (out / "labels").glob("*.png"))
    assert labels == [f"{i:06d}.png" for i in range(frames)]
    assert summary["frames_sent"] >= 2 and summary["updates_applied"] >= 1, summary
    sessions: dict[str, list[dict[str, Any]]] = {}
    for entry in summary["versions_applied"]:
        sessions.setdefault(entry["session_id"], []).append(entry)
    assert list(sessions) == summary["sessions"]
    for entries in sessions.values():
        assert entries[0]["origin"] == "welcome" and entries[0]["version"] == 0
        assert [e["version"] for e in entries] == list(range(len(entries)))  # in order, none twice or skipped
    edge_id = summary["edge_id"]
    assert sample_value(metrics, "shadowtutor_edge_frames_total", edge_id=edge_id) == frames
    assert sample_value(metrics, "shadowtutor_edge_key_frames_total", edge_id=edge_id) == summary["key_frames"]
    assert sample_value(metrics, "shadowtutor_edge_sent_bytes_total", edge_id=edge_id) == summary["bytes_sent"]
    assert sample_value(metrics, "shadowtutor_edge_received_bytes_total", edge_id=edge_id) == summary["bytes_received"]
    assert (sample_value(metrics, "shadowtutor_edge_updates_applied_total", edge_id=edge_id)
            == summary["updates_applied"])
    assert sample_value(metrics, "shadowtutor_edge_reconnects_total", edge_id=edge_id) == summary["reconnects"]
    promtool_check(metrics)


def server_metric_samples(port: int, name: str, **labels: str) -> dict[str, float]:
    """The values of the samples ``name{labels, X}`` on the server's ``/metrics``, keyed by their other label X."""
    text = _wait_http_ok(f"http://127.0.0.1:{port}/metrics").decode()
    samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items()]
    return {value: sample.value for sample in samples for key, value in sample.labels.items() if key not in labels}


def server_totals(port: int, expected: dict[str, float] | None = None, timeout: float = 5.0) -> dict[str, float]:
    """The server's byte and key-frame totals; with ``expected``, read again (for at most ``timeout`` s) until they
    equal it: an edge that has closed its connection sent everything, but the server may not have read its last
    message yet."""
    deadline = time.monotonic() + timeout
    while True:
        text = _wait_http_ok(f"http://127.0.0.1:{port}/metrics").decode()
        totals = {
            "received": sample_value(text, "shadowtutor_server_received_bytes_total"),
            "sent": sample_value(text, "shadowtutor_server_sent_bytes_total"),
            "key_frames": sample_value(text, "shadowtutor_server_key_frames_total", mode="distill"),
        }
        if expected is None or all(totals[k] == v for k, v in expected.items()) or time.monotonic() > deadline:
            promtool_check(text)
            return totals
        time.sleep(0.1)
