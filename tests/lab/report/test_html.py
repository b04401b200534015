"""The report page from a hand-made results object (no harness run): sections, escaping, missed targets."""

from __future__ import annotations

import numpy as np

from shadowtutor.classes import LVS_CLASSES
from shadowtutor_lab.evaluation.evaluate import StripFrame
from shadowtutor_lab.report.html import render_report


def _point(setting: str, min_stride: int, key_frames: float, miou: float) -> dict:
    auto = setting == "auto"
    return {"threshold": 0.8 if auto else float(setting), "min_stride": min_stride, "key_frame_ratio": key_frames,
            "p8_miou": miou, "uplink_bps": 1e5, "mean_stride": 12.0, "mean_steps": 3.0,
            "policy": "auto" if auto else "fixed", "setting": setting}


def _traffic(up: float, down: float) -> dict:
    return {"up_bytes_per_frame": up, "down_bytes_per_frame": down, "up_bytes_per_hour": up * 36000,
            "down_bytes_per_hour": down * 36000, "up_bps": up * 80, "down_bps": down * 80}


def results(name: str, met: bool, servers: list) -> dict:
    points = [_point("0.8", 8, 12.5, 66.0), _point("auto", 8, 4.0, 64.5)]
    return {
        "meta": {"command": "shadowtutor evaluate x", "teacher": "mediapipe", "backend": "onnx",
                 "student": {"path": "student.pt"}, "params": {"threshold": 0.8}, "notes": ["a <note>"],
                 "machine": {"cpu_model": "cpu", "cpu_count": 2, "torch": "2"}, "wall_seconds": 1.0},
        "videos": {name: {
            "frames": 4, "size": [32, 24], "fps": 10.0, "scene": "/cache/x", "labels_from_cache": True,
            "summary": {"wild_miou": 10.0, "shadowtutor_miou": 65.0, "naive_miou": 92.0, "key_frame_ratio": 25.0,
                        "mean_stride": 8.0},
            "per_frame": {"wild_miou": [10.0] * 4, "shadowtutor_miou": [60.0, 65, 66, 70],
                          "naive_miou": [90.0] * 4, "stride": [8] * 4, "key_frames": [0]},
            "traffic": {"codecs": "h264 / f32", "shadowtutor": _traffic(900, 5000), "naive": _traffic(3000, 800),
                        "naive_jpeg": _traffic(9000, 800), "naive_codecs": {"naive": "h264", "naive_jpeg": "jpeg@80"},
                        "x_fewer_than_h264": {"up": 3000 / 900, "down": 800 / 5000, "both": 3800 / 5900}},
            "sweep": {"points": points, "pareto": points,
                      "recommendation": {"point": points[1], "met": met, "target_text": "at most 5 % key frames",
                                         "target": {"kind": "key_frames", "value": 5.0}}},
            "capacity": {"camera": {"fps": 10.0, "key_frame_ratio": 0.04, "key_frames_per_second": 0.4,
                                    "uplink_bytes_per_second": 9000.0},
                         "servers": servers, "link_bps": 8e7, "cameras_per_link": 1111},
        }},
    }


SERVER = {"device": "NVIDIA H200", "teacher": "maskrcnn", "size": "1280x720", "size_exact": False,
          "key_frame_ms": 20.5, "key_frames_per_second": 48.8, "cameras": 121, "measured": "2026-11-26",
          "bounds": {"t_si": 0.01, "t_ti": 0.014, "t_sd": 0.0018, "t_net": 0.03, "traffic_mbps_max": 9.0,
                     "throughput_fps_measured_min": 50.0, "throughput_fps_measured_max": 80.0,
                     "throughput_fps_min": 40.0, "throughput_fps_max": 95.0}}


def test_the_page_has_every_section_and_the_auto_recommendation() -> None:
    frame = np.full((24, 32, 3), 128, np.uint8)
    labels = {key: np.full((24, 32), LVS_CLASSES.index("person"), np.uint8) for key in ("teacher", "p8", "wild")}
    page = render_report(results("cam.mp4", True, [SERVER]), {"cam.mp4": [StripFrame(2, "evenly spaced", labels,
                                                                                      frame)]}, LVS_CLASSES)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "<code>--threshold auto --min-stride 8</code>" in page and "target met" in page
    for plot in ("per-frame-plot", "sweep-plot", "traffic-plot"):
        assert f"<figure class='plot {plot}'><svg" in page
    assert page.count("src='data:image/png;base64,") == 1
    assert "<b>121</b>" in page and "nearest measured" in page and "eq. 13" in page
    assert "a &lt;note&gt;" in page
    assert "against H.264 offloading, times fewer bytes: up 3.33x, down 0.16x, both 0.64x" in page
    assert "naive offloading (h264)" in page and "naive offloading (jpeg@80)" in page


def test_a_missed_target_and_no_profile_say_so_and_names_are_escaped() -> None:
    page = render_report(results("<cam>.mp4", False, []), {}, LVS_CLASSES)
    assert "class='recommendation missed'" in page and "no point meets the target" in page
    assert "No server profile" in page and "--server-profile FILE" in page
    assert "<cam>" not in page and "&lt;cam&gt;.mp4" in page
