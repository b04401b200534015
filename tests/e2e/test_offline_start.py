"""End to end (issue 11, point 5): an edge agent started while its server is absent labels every frame with
its own student from the first frame, then joins when a server comes up on that port and runs ShadowTutor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edge_agent.state import state_path
from tests.support.e2e import SCENE_FRAMES, check_edge_run, loopback, start_edge, start_server, wait_until
from tests.support.processes import ManagedProcess, free_port

pytestmark = pytest.mark.slow

EDGE_ID = "early-edge"


def test_an_edge_started_before_its_server_labels_every_frame_then_joins(
    scene: Path, tmp_path: Path, processes: list[ManagedProcess]
) -> None:
    port, state_dir = free_port(), tmp_path / "state"
    edge = start_edge(tmp_path, loopback(port), scene, EDGE_ID, "--max-fps", "12", "--state-dir", str(state_dir),
                      "--startup-timeout", "5")
    processes.append(edge.process)
    labels = edge.out / "labels"
    wait_until(lambda: labels.is_dir() and len(list(labels.glob("*.png"))) >= 12, 30, edge.process)
    assert edge.value("shadowtutor_edge_connected") == 0
    assert edge.value("shadowtutor_edge_key_frames_dropped_total") >= 1  # chosen offline: dropped, not queued

    processes.append(start_server(tmp_path, port, scene))  # now the server comes up on that port
    summary, metrics = edge.finish(timeout=60)

    assert summary["initial_student"]["origin"] == "packaged"  # no state file yet
    check_edge_run(summary, metrics, edge.out, SCENE_FRAMES)  # every frame labelled; updates applied in order
    assert len(summary["sessions"]) == 1 and summary["reconnects"] == 0
    assert summary["versions_applied"][0]["frame_index"] >= 12  # the WELCOME came after the offline frames
    assert summary["key_frames_dropped"] >= 1 and summary["frames_sent"] >= 2
    assert summary["waited_seconds"] < 10  # offline, nothing waited at MIN_STRIDE
    state = torch.load(state_path(state_dir, EDGE_ID), weights_only=True)  # the weights it held last
    assert state["session_id"] == summary["sessions"][0]
    assert state["version"] == summary["versions_applied"][-1]["version"] >= 1
