from __future__ import annotations

import pytest

from shadowtutor_lab.evaluation.harness import WILD, SceneEvaluation, SettingTrace
from shadowtutor_lab.evaluation.simulated_link import KeyFrameRecord


def _record(frame: int, steps: int, down: int) -> KeyFrameRecord:
    return KeyFrameRecord(frame, steps, metric=0.9, initial_metric=0.5, step_seconds=(0.01,) * steps,
                          bytes_up=300, bytes_down=down)


def _evaluation() -> SceneEvaluation:
    p1 = SettingTrace(miou=[0.5, 0.7, 0.9, 0.9], strides=[8, 8, 16, 16], key_frames=[0, 2],
                      records=[_record(0, 2, 40), _record(2, 0, 40)])
    p8 = SettingTrace(miou=[0.5, 0.5, 0.5, 0.9], strides=[8] * 4, key_frames=[0],
                      records=[_record(0, 4, 40)])
    f1 = SettingTrace(miou=[0.5, 0.6, 0.7, 0.8], strides=[8] * 4, key_frames=[0, 1, 2],
                      records=[_record(0, 3, 100), _record(1, 3, 100), _record(2, 0, 100)])
    wild = SettingTrace(miou=[0.5, 0.4, 0.3, 0.2])
    return SceneEvaluation("s", 10, 10, {WILD: wild, "p1": p1, "p8": p8, "f1": f1}, seconds=2.0)


def test_scene_summary_follows_the_definitions() -> None:
    from shadowtutor_lab.evaluation.summary import scene_summary

    s = scene_summary(_evaluation())
    assert s["wild_miou"] == pytest.approx(35.0)
    assert s["p1_miou"] == pytest.approx(75.0)
    assert s["p8_miou"] == pytest.approx(60.0)
    assert s["f1_miou"] == pytest.approx(65.0)
    assert s["key_frame_ratio"] == pytest.approx(50.0)
    assert s["key_frame_ratio_p8"] == pytest.approx(25.0)
    assert s["key_frame_ratio_full"] == pytest.approx(75.0)
    assert s["mean_distill_steps_partial"] == pytest.approx(1.0)  # (2 + 0) / 2 key frames
    assert s["mean_distill_steps_full"] == pytest.approx(2.0)
    assert s["distill_step_ms_partial"] == pytest.approx(10.0)
    assert s["distill_step_ms_full"] == pytest.approx(10.0)
    assert s["bytes_per_key_frame"] == 340 and s["bytes_per_key_frame_full"] == 400
    assert s["frames"] == 4 and s["settings"]["p1"]["skipped_key_frames"] == 1
    assert s["settings"]["p1"]["mean_metric_before"] == pytest.approx(50.0)


def test_a_setting_that_never_trained_has_no_step_time() -> None:
    from shadowtutor_lab.evaluation.summary import scene_summary

    evaluation = _evaluation()
    evaluation.traces["f1"].records[:] = [_record(0, 0, 100)]
    evaluation.traces["f1"].key_frames[:] = [0]
    s = scene_summary(evaluation)
    assert s["distill_step_ms_full"] is None and s["mean_distill_steps_full"] == 0.0


def test_bytes_per_key_frame_are_the_mean_over_the_key_frames() -> None:
    from shadowtutor_lab.evaluation.summary import setting_summary

    trace = SettingTrace(miou=[0.5] * 4, strides=[8] * 4, key_frames=[0, 1, 2],
                         records=[_record(0, 2, 100), _record(1, 2, 40), _record(2, 0, 10)])
    summary = setting_summary(trace, frames=4)
    assert (summary["bytes_up_per_key_frame"], summary["bytes_down_per_key_frame"]) == (300, 50)
