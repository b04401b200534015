"""The demo's report: figures read from the agents' summaries and label maps, compared fairly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shadowtutor.scene_store import Scene
from shadowtutor.teachers.label_store import write_label
from shadowtutor_lab.demo.report import (
    RunReport,
    predict,
    render_markdown,
    run_report,
    times_fewer,
    write_report,
)
from shadowtutor_lab.demo.server_time import ServerTime
from shadowtutor_lab.evaluation.h264_baseline import H264Offloading
from shadowtutor_lab.scenes.generator import make_scene

FRAMES = 6


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    out = tmp_path_factory.mktemp("scene") / "fixed-street"
    return Scene.open(make_scene("fixed-street", FRAMES, 1, out, size=(64, 36), progress=False))


def write_run(
    run_dir: Path, scene: Scene, *, mode: str, correct: bool, handshake: int, sent: int, received: int
) -> Path:
    """An agent's output as the agent writes it: summary.json and one label map per frame."""
    labels = run_dir / "labels"
    labels.mkdir(parents=True)
    for index in range(FRAMES):
        truth = scene.label(index)
        write_label(labels, index, truth if correct else np.zeros_like(truth))
    summary = {
        "mode": mode, "frames": FRAMES, "labelled_frames": FRAMES, "fps": 12.5, "key_frame_ratio": 0.5,
        "bytes_sent": sent, "bytes_received": received, "updates_applied": 2, "first_handshake_bytes_sent": 100,
        "first_handshake_bytes_received": handshake - 100, "waited_seconds": 0.25, "wall_seconds": 0.5,
        "loop_seconds": 0.45,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_run_report_scores_the_label_maps_against_the_teacher(tmp_path: Path, scene: Scene) -> None:
    right = run_report(write_run(tmp_path / "a", scene, mode="naive", correct=True, handshake=300, sent=600,
                                 received=600), scene, ServerTime(0.6, FRAMES, 0.0, 0))
    wrong = run_report(write_run(tmp_path / "b", scene, mode="distill", correct=False, handshake=300, sent=600,
                                 received=600), scene, ServerTime(0.1, 1, 0.5, 1))
    assert right.miou_percent == pytest.approx(100.0)
    assert wrong.miou_percent < 100.0
    assert right.bytes_per_frame == pytest.approx(1200 / FRAMES)
    assert right.steady_bytes_per_frame == pytest.approx(900 / FRAMES)
    assert right.server_ms_per_frame == pytest.approx(100.0) and wrong.server_ms_per_frame == pytest.approx(100.0)
    assert right.edge_seconds_per_frame == pytest.approx(0.2 / FRAMES)  # loop 0.45 s less 0.25 s waiting


def test_a_missing_label_map_is_an_error_naming_the_frame(tmp_path: Path, scene: Scene) -> None:
    run_dir = write_run(tmp_path / "a", scene, mode="distill", correct=True, handshake=300, sent=1, received=1)
    (run_dir / "labels" / "000003.png").unlink()
    with pytest.raises(FileNotFoundError, match="frame 3"):
        run_report(run_dir, scene, ServerTime())


H264 = H264Offloading(frames=10, up_bytes=40_000, down_bytes=20_000, fps=10.0)


def report(mode: str, sent: int, received: int, handshake: int) -> RunReport:
    """A run whose handshake ``handshake`` bytes were all received (the WELCOME)."""
    return RunReport(mode=mode, frames=10, labelled_frames=10, fps=5.0, key_frame_ratio=0.1, bytes_sent=sent,
                     bytes_received=received, updates_applied=1, handshake_bytes=handshake,
                     handshake_bytes_received=handshake, waited_seconds=1.0,
                     wall_seconds=2.0, miou_percent=50.0, edge_seconds_per_frame=0.143, teacher_seconds=0.5,
                     distill_seconds=1.5)


def test_the_summary_states_the_saving_over_the_run_and_after_the_handshake(tmp_path: Path) -> None:
    shadow = report("distill", sent=10_000, received=1_010_000, handshake=1_000_000)  # 102 kB/frame, 2 after
    naive = report("naive", sent=500_000, received=20_000, handshake=0)  # 52 kB per frame
    machine = {"cpu_model": "Some CPU", "cpu_count": 2, "torch": "2.x"}
    command = "shadowtutor demo --frames 10"
    markdown = render_markdown(tmp_path / "scene", shadow, naive, H264, 10.0, command, machine, "`T`")
    assert "Teacher: `T`. Made by `shadowtutor demo --frames 10` on Some CPU (2 cores)" in markdown
    assert "2.0x the bytes per frame of naive offloading over the whole run" in markdown
    assert "96.2 % fewer bytes per frame than it after the one-time model download" in markdown
    assert "| of which the handshake (ShadowTutor: the model) | 1.00 MB | 0.00 MB |" in markdown
    assert "| server compute per edge frame (teacher + distillation) | 200.0 ms | 200.0 ms |" in markdown


def test_the_paper_gpu_server_figures_are_a_labelled_prediction(tmp_path: Path) -> None:
    """With the paper's own t_si (0.143 s) the bounds are the paper's: 5.02 .. 6.99 FPS (section 5.3)."""
    forecast = predict(0.143)
    assert forecast.shadowtutor_fps_min == pytest.approx(5.016, abs=1e-3)
    assert forecast.shadowtutor_fps_max == pytest.approx(6.993, abs=1e-3)
    assert forecast.naive_fps == pytest.approx(1 / 0.347)
    shadow, naive = report("distill", 1, 1, 0), report("naive", 1, 1, 0)
    machine = {"cpu_model": "Some CPU", "cpu_count": 2, "torch": "2.x"}
    markdown = render_markdown(tmp_path / "scene", shadow, naive, H264, 10.0, "shadowtutor demo", machine, "`T`")
    measured, predicted = markdown.split("## Prediction, not measured")
    assert "predicted" not in measured.lower() and "5.02" not in measured
    assert "| ShadowTutor, lower bound (eq. 14, predicted) | 5.02 |" in predicted
    assert "| ShadowTutor, upper bound (eq. 15, predicted) | 6.99 |" in predicted


def test_write_report_writes_markdown_and_json(tmp_path: Path) -> None:
    shadow, naive = report("distill", 1000, 2000, 500), report("naive", 9000, 1000, 100)
    markdown = write_report(tmp_path, tmp_path / "scene", shadow, naive, H264, 10.0, "shadowtutor demo", "`T`")
    assert (tmp_path / "report.md").read_text() == markdown
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["command"] == "shadowtutor demo" and data["machine"]["cpu_count"] >= 1
    assert data["shadowtutor"]["steady_bytes_per_frame"] == pytest.approx(250.0)
    assert data["naive"]["bytes_per_frame"] == pytest.approx(1000.0)
    assert data["teacher"] == "`T`" and data["prediction_paper_gpu_server"]["t_si"] == pytest.approx(0.143)


def test_the_report_states_the_ratio_against_h264_offloading(tmp_path: Path) -> None:
    """H.264 offloading: 6 kB per frame; ShadowTutor after the handshake: 2 kB per frame, 3x fewer."""
    shadow = report("distill", sent=10_000, received=1_010_000, handshake=1_000_000)
    naive = report("naive", sent=500_000, received=20_000, handshake=0)
    machine = {"cpu_model": "Some CPU", "cpu_count": 2, "torch": "2.x"}
    markdown = render_markdown(tmp_path / "scene", shadow, naive, H264, 10.0, "shadowtutor demo", machine, "`T`")
    assert "| bytes up per frame | 1.0 kB | 4.0 kB |" in markdown
    assert "| bytes down per frame | 1.0 kB | 2.0 kB |" in markdown
    assert "| kbps per camera at the clip's 10 FPS | 160 kbps | 480 kbps |" in markdown
    assert "| ShadowTutor against H.264 offloading | **3.00x fewer bytes** | |" in markdown


def test_more_bytes_than_h264_is_said_as_such() -> None:
    assert times_fewer(5496.0, 9601.0) == "1.75x fewer"
    assert times_fewer(9601.0, 5496.0) == "1.75x more"
    assert times_fewer(0.0, 5496.0) == "-"
