"""End to end (issue 3): the real server (``shadowtutor serve``, uvicorn) and real edge agent processes
(``shadowtutor edge``) on loopback over a generated scene, with the scene's labels as the teacher.

Checked: key frames flowed, updates were applied in version order, every frame got a label
map, and the bytes in the agents' summaries, the agents' ``/metrics`` and the server's
``/metrics`` agree; with one, two and four edges at once; and across a server crash.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import ManagedProcess, free_port, shadowtutor_command, start_process, wait_http_ok
from tests.support.prometheus import promtool_check, sample_value

pytestmark = pytest.mark.slow

SCENE_FRAMES = 200
SIZE = "320x180"
SERVER_FLAGS = ("--teacher", "labels", "--device", "cpu", "--max-updates", "2")
EDGE_ENV = {"OMP_NUM_THREADS": "1"}  # several processes share two cores


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scenes") / "fixed-street"
    command = shadowtutor_command("scenes", "make", "--preset", "fixed-street", "--frames", str(SCENE_FRAMES),
                                  "--seed", "3", "--out", str(out), "--size", SIZE, "--no-progress")
    subprocess.run(command, check=True, timeout=120, capture_output=True)
    return out


@dataclass
class EdgeRun:
    edge_id: str
    process: ManagedProcess
    out: Path
    metrics_url: str

    def metrics(self) -> str:
        return wait_http_ok(self.metrics_url, timeout=10, process=self.process).decode()

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


def start_server(log_dir: Path, port: int, scene: Path, name: str = "server") -> ManagedProcess:
    server = start_process(
        shadowtutor_command("serve", "--port", str(port), "--labels-dir", str(scene), *SERVER_FLAGS),
        name=name, log_dir=log_dir,
    )
    wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=60, process=server)
    return server


def start_edge(log_dir: Path, port: int, scene: Path, edge_id: str, *flags: str) -> EdgeRun:
    metrics_port = free_port()
    out = log_dir / edge_id
    process = start_process(
        shadowtutor_command(
            "edge", "--server", f"ws://127.0.0.1:{port}", "--source", str(scene / "video.mp4"),
            "--edge-id", edge_id, "--output-dir", str(out), "--backend", "torch",
            "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port), "--linger", "120",
            "--wait-timeout", "30", "--reconnect-min", "0.2", "--reconnect-max", "1", *flags,
        ),
        name=edge_id, log_dir=log_dir, env=EDGE_ENV,
    )
    return EdgeRun(edge_id, process, out, f"http://127.0.0.1:{metrics_port}/metrics")


@pytest.fixture
def processes() -> Iterator[list[ManagedProcess]]:
    """Processes a test starts; each is stopped at the end (SIGTERM, then SIGKILL), whatever happened."""
    started: list[ManagedProcess] = []
    yield started
    for process in started:
        process.stop()


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


def server_totals(port: int) -> dict[str, float]:
    text = wait_http_ok(f"http://127.0.0.1:{port}/metrics").decode()
    promtool_check(text)
    return {
        "received": sample_value(text, "shadowtutor_server_received_bytes_total"),
        "sent": sample_value(text, "shadowtutor_server_sent_bytes_total"),
        "key_frames": sample_value(text, "shadowtutor_server_key_frames_total", mode="distill"),
    }


@pytest.mark.parametrize("edges, frames", [(1, 120), (2, 80), (4, 48)], ids=["one-edge", "two-edges", "four-edges"])
def test_edges_and_server_agree_on_every_frame_and_byte(
    scene: Path, tmp_path: Path, processes: list[ManagedProcess], edges: int, frames: int
) -> None:
    port = free_port()
    processes.append(start_server(tmp_path, port, scene))
    runs = [start_edge(tmp_path, port, scene, f"edge-{i}", "--max-frames", str(frames)) for i in range(edges)]
    processes.extend(run.process for run in runs)
    results = [run.finish(timeout=90) for run in runs]
    for run, (summary, metrics) in zip(runs, results, strict=True):
        check_edge_run(summary, metrics, run.out, frames)
        assert summary["reconnects"] == 0 and summary["stopped_by"] == "max_frames"
    summaries = [summary for summary, _ in results]
    totals = server_totals(port)
    assert totals["received"] == sum(s["bytes_sent"] for s in summaries)
    assert totals["sent"] == sum(s["bytes_received"] for s in summaries)
    assert totals["key_frames"] == sum(s["frames_sent"] for s in summaries)
    assert len({s["sessions"][0] for s in summaries}) == edges  # one session each


def test_server_crash_mid_run_agent_labels_every_frame_and_resyncs(
    scene: Path, tmp_path: Path, processes: list[ManagedProcess]
) -> None:
    port = free_port()
    first = start_server(tmp_path, port, scene, "server-1")
    # paced so that the run outlasts a server restart (which takes several seconds here)
    run = start_edge(tmp_path, port, scene, "edge-crash", "--max-fps", "8")
    processes.extend([first, run.process])
    updates = "shadowtutor_edge_updates_applied_total"
    wait_until(lambda: run.value(updates) >= 2, 60, run.process)
    first.popen.kill()  # a crash: no close handshake
    first.wait(10)
    wait_until(lambda: run.value("shadowtutor_edge_connected") == 0, 10, run.process)
    frames_at_crash = run.value("shadowtutor_edge_frames_total")
    wait_until(lambda: run.value("shadowtutor_edge_frames_total") >= frames_at_crash + 12, 20, run.process)
    sent_before, received_before = (run.value("shadowtutor_edge_sent_bytes_total"),
                                    run.value("shadowtutor_edge_received_bytes_total"))
    assert run.value("shadowtutor_edge_connected") == 0  # labelled on while the server was gone
    processes.append(start_server(tmp_path, port, scene, "server-2"))
    wait_until(lambda: run.value("shadowtutor_edge_reconnects_total") == 1, 30, run.process)
    summary, metrics = run.finish(timeout=90)
    check_edge_run(summary, metrics, run.out, SCENE_FRAMES)
    assert summary["reconnects"] == 1 and len(summary["sessions"]) == 2
    after = [e for e in summary["versions_applied"] if e["session_id"] == summary["sessions"][1]]
    assert after[0]["origin"] == "welcome" and after[0]["full"]  # the new server's weights replaced the model
    assert len(after) >= 2  # and its updates were applied after it
    assert after[0]["frame_index"] > frames_at_crash
    totals = server_totals(port)  # the second server saw exactly what crossed after the restart
    assert totals["received"] == summary["bytes_sent"] - sent_before
    assert totals["sent"] == summary["bytes_received"] - received_before
