"""``shadowtutor bench load``: a short load against a real server process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from shadowtutor_lab.demo.processes import free_port, shadowtutor_command

EDGES, SECONDS, RATE = 4, 14, 1.0
# Bound on the server's memory growth from the first to the last quarter of the run (means of 1 s samples).
# Sessions allocate their student, optimiser and weight mirror when they open, before the first quarter,
# so what grows after that is allocator noise: measured +5 to +12 MiB here (glibc arenas of the
# distillation and to_thread pools, torch's CPU caches). About 90 key frames separate the two quarters'
# means, so 48 MiB catches any leak of ~0.5 MiB or more per key frame: a kept UPDATE blob (0.4 MB as f32)
# or frame buffer of a larger size, a copy of the student (1.9 MB), a session's state never freed.
MAX_GROWTH_MIB = 48


def bench_load(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHADOWTUTOR_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(shadowtutor_command("bench", "load", "--no-progress", *args), capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=tmp_path, check=False)


@pytest.mark.slow
def test_short_load_against_a_real_server_answers_everything_with_bounded_memory(tmp_path: Path) -> None:
    out = tmp_path / "report" / "load"
    result = bench_load(
        tmp_path, "--edges", str(EDGES), "--minutes", str(SECONDS / 60), "--rate", str(RATE), "--size", "160x90",
        "--scene-frames", "48", "--out", str(out), "--log-dir", str(tmp_path / "logs"),
        "--max-memory-growth", str(MAX_GROWTH_MIB), timeout=180,
    )
    logs = (tmp_path / "logs" / "server.log").read_text() if (tmp_path / "logs" / "server.log").exists() else ""
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nserver log:\n{logs[-3000:]}"
    report = json.loads(out.with_suffix(".json").read_text())
    totals = report["totals"]
    assert totals["errors"] == {} and totals["disconnects"] == 0 and report["problems"] == []
    assert totals["answered"] == totals["sent"] >= EDGES * SECONDS * RATE * 0.8  # closed loop: may lag a little
    assert totals["resyncs"] == totals["full_answers"] == totals["rejected_updates"] == 0
    assert [e["answered"] > 0 for e in report["edges"]] == [True] * EDGES
    t = report["turnaround"]
    assert 0 < t["p50_ms"] <= t["p95_ms"] <= t["p99_ms"] <= t["max_ms"]
    memory = report["memory"]
    assert memory["source"] == "rss_bytes" and memory["sessions_max"] == EDGES and memory["sessions_after"] == 0
    assert memory["growth"]["growth_bytes"] < MAX_GROWTH_MIB * 2**20
    assert all(s["metrics_rss_bytes"] for s in memory["samples"])  # the server's own metric was read too
    assert report["command"].startswith("shadowtutor bench load --no-progress --edges 4")
    assert report["server"]["settings"]["teacher"] == "labels"
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert "**Passed**" in out.with_suffix(".md").read_text()
    assert "turnaround ms: p50" in result.stdout


@pytest.mark.slow
def test_short_load_with_the_mask_rcnn_teacher_from_a_weights_file(tmp_path: Path) -> None:
    """The local server takes another teacher from --server-args, without the scene's --labels-dir: Mask R-CNN
    with random weights (any state dict of torchvision's architecture loads), its input resized to the frame's
    size so that a CPU labels a key frame in about a second; ~40 s on 2 cores."""
    torch = pytest.importorskip("torch")
    detection = pytest.importorskip("torchvision.models.detection")
    torch.manual_seed(0)
    weights = tmp_path / "maskrcnn-random.pt"
    torch.save(detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91).state_dict(),
               weights)
    out = tmp_path / "report" / "load"
    server_args = f"--teacher maskrcnn --weights-path {weights} " + """--teacher-options '{"min_size": 180}'"""
    result = bench_load(tmp_path, "--edges", "2", "--minutes", "0.1", "--rate", "1", "--size", "320x180",
                        "--scene-frames", "24", "--out", str(out), "--server-args", server_args, timeout=180)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["server"]["readyz"]["teacher"] == "maskrcnn"
    assert report["server"]["settings"]["labels_dir"] is None
    assert report["server"]["settings"]["weights_path"] == str(weights)
    totals = report["totals"]
    assert totals["errors"] == {} and report["problems"] == [] and totals["answered"] == totals["sent"] > 0


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    url = f"ws://127.0.0.1:{free_port()}"
    result = bench_load(tmp_path, "--server", url, "--scene-frames", "2", "--size", "32x18", timeout=60)
    assert result.returncode == 2
    assert f"{url.replace('ws', 'http')}/readyz" in result.stderr and "error" in result.stderr


@pytest.mark.parametrize("flag, value", [("--rate", "0"), ("--minutes", "-1"), ("--edges", "0"), ("--size", "9")])
def test_bad_arguments_are_refused(tmp_path: Path, flag: str, value: str) -> None:
    result = bench_load(tmp_path, flag, value, timeout=60)
    assert result.returncode == 2 and flag in result.stderr


def test_bad_server_arguments_are_a_clear_error(tmp_path: Path) -> None:
    result = bench_load(tmp_path, "--server-args=--teacher", "--scene-frames", "2", "--size", "32x18", timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "bad server arguments '--teacher': argument --teacher: expected one argument" in result.stderr
