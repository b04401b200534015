"""End to end (issue 3): the real server (``shadowtutor serve``, uvicorn) and real edge agent processes
(``shadowtutor edge``) on loopback over a generated scene, with the scene's labels as the teacher.

Checked: key frames flowed, updates were applied in version order, every frame got a label
map, and the bytes in the agents' summaries, the agents' ``/metrics`` and the server's
``/metrics`` agree; with one, two and four edges at once; and across a server crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.e2e import (
    SCENE_FRAMES,
    check_edge_run,
    loopback,
    server_metric_samples,
    server_totals,
    start_edge,
    start_server,
    wait_until,
)
from tests.support.processes import ManagedProcess, free_port

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("edges, frames", [(1, 72), (4, 48)], ids=["one-edge", "four-edges"])
def test_edges_and_server_agree_on_every_frame_and_byte(
    scene: Path, tmp_path: Path, processes: list[ManagedProcess], edges: int, frames: int
) -> None:
    port = free_port()
    processes.append(start_server(tmp_path, port, scene))
    runs = [start_edge(tmp_path, loopback(port), scene, f"edge-{i}", "--max-frames", str(frames)) for i in range(edges)]
    processes.extend(run.process for run in runs)
    results = [run.finish(timeout=90) for run in runs]
    for run, (summary, metrics) in zip(runs, results, strict=True):
        check_edge_run(summary, metrics, run.out, frames)
        assert summary["reconnects"] == 0 and summary["stopped_by"] == "max_frames"
    summaries = [summary for summary, _ in results]
    expected = {"received": sum(s["bytes_sent"] for s in summaries),
                "sent": sum(s["bytes_received"] for s in summaries),
                "key_frames": sum(s["frames_sent"] for s in summaries)}
    assert server_totals(port, expected) == expected
    assert len({s["sessions"][0] for s in summaries}) == edges  # one session each


def test_server_crash_mid_run_agent_labels_every_frame_and_resyncs(
    scene: Path, tmp_path: Path, processes: list[ManagedProcess]
) -> None:
    port = free_port()
    first = start_server(tmp_path, port, scene, "server-1")
    # paced so that the run outlasts a server restart (which takes several seconds here)
    run = start_edge(tmp_path, loopback(port), scene, "edge-crash", "--max-fps", "8")
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
    # the second server saw exactly what crossed after the restart
    expected = {"received": summary["bytes_sent"] - sent_before, "sent": summary["bytes_received"] - received_before}
    totals = server_totals(port, expected)
    assert (totals["received"], totals["sent"]) == (expected["received"], expected["sent"])


def test_a_change_based_edge_labels_every_frame_and_installs_updates(
    scene: Path, tmp_path: Path, processes: list[ManagedProcess]
) -> None:
    port = free_port()
    processes.append(start_server(tmp_path, port, scene, "server", "--edge-report-interval", "1"))
    run = start_edge(tmp_path, loopback(port), scene, "edge-cb", "--max-frames", "60", "--max-fps", "20",
                     "--change-based")  # 3 s at least: reports go out every second
    processes.append(run.process)
    summary, metrics = run.finish(timeout=90)
    check_edge_run(summary, metrics, run.out, 60)
    frames = {line.split("mode=")[1].split('"')[1]: float(line.rsplit(" ", 1)[1])
              for line in metrics.splitlines() if line.startswith("shadowtutor_edge_change_based_frames_total{")}
    assert sum(frames.values()) == 60 and frames.get("full", 0) >= 1  # the first frame builds the caches
    assert "shadowtutor_edge_changed_fraction{" in metrics or set(frames) == {"full", "fallback"}
    # The server exports what the edge reported (its last report came before the run's last frames).
    reported = server_metric_samples(port, "shadowtutor_server_edge_change_based_frames_total", edge_id="edge-cb")
    assert set(reported) == {"change", "full", "fallback"} and 0 < sum(reported.values()) <= 60
    assert reported["full"] >= 1
