"""One scene's numbers for ``results.json``, from its :class:`SceneEvaluation`.

Definitions (they are also written into ``meta.json``):

* ``*_miou``: mean over *all* frames of the per-frame mIoU against the teacher, in percent;
* ``key_frame_ratio``: key frames / frames in percent, for P-1 (``_p8``, ``_full`` for P-8, F-1);
* ``mean_distill_steps_partial`` / ``_full``: optimisation steps per key frame (0 where the
  student already passed THRESHOLD) for P-1 / F-1;
* ``distill_step_ms_partial`` / ``_full``: mean wall time of one distillation step, over every
  step of P-1 / F-1 (P-8 shares P-1's server: the same key frames and the same training);
* ``bytes_per_key_frame`` / ``_full``: the key frame as raw BGR bytes up plus the update as
  float32 down (the paper's Table 4 accounting), partial / full.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shadowtutor_lab.evaluation.harness import WILD, SceneEvaluation, SettingTrace

DEFINITIONS = {
    "*_miou": "mean over all frames (key and non-key) of the per-frame mIoU against the teacher, percent",
    "key_frame_ratio": "key frames / frames, percent, P-1 (key_frame_ratio_p8: P-8, key_frame_ratio_full: F-1)",
    "mean_distill_steps_partial": "distillation steps per key frame, P-1 (0 when the student passed THRESHOLD)",
    "mean_distill_steps_full": "distillation steps per key frame, F-1",
    "distill_step_ms_partial": "mean wall time of one partial distillation step, over all steps of P-1 "
    "(P-8 shares P-1's server: same key frames, same training)",
    "distill_step_ms_full": "mean wall time of one full distillation step, over all steps of F-1",
    "bytes_per_key_frame": "key frame as raw BGR bytes up + partial update as float32 down (paper's Table 4)",
    "bytes_per_key_frame_full": "key frame as raw BGR bytes up + full update as float32 down",
}


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _step_ms(trace: SettingTrace) -> tuple[float | None, float | None]:
    """Mean and median ms of one distillation step of the setting."""
    seconds = [s for r in trace.records for s in r.step_seconds]
    if not seconds:
        return None, None
    return float(np.mean(seconds)) * 1000.0, float(np.median(seconds)) * 1000.0


def setting_summary(trace: SettingTrace, frames: int) -> dict[str, Any]:
    records = trace.records
    summary: dict[str, Any] = {"miou": 100.0 * float(np.mean(trace.miou))}
    if not records:
        return summary
    mean_ms, p50_ms = _step_ms(trace)
    summary.update(
        key_frames=len(trace.key_frames),
        key_frame_ratio=100.0 * len(trace.key_frames) / frames,
        mean_distill_steps=_mean([r.steps for r in records]),
        skipped_key_frames=sum(1 for r in records if r.steps == 0),
        mean_metric_before=100.0 * float(np.mean([r.initial_metric for r in records])),
        mean_metric_after=100.0 * float(np.mean([r.metric for r in records])),
        distill_step_ms=mean_ms,
        distill_step_ms_p50=p50_ms,
        mean_stride=float(np.mean(trace.strides)),
        bytes_up_per_key_frame=round(float(np.mean([r.bytes_up for r in records]))),
        bytes_down_per_key_frame=round(float(np.mean([r.bytes_down for r in records]))),
    )
    return summary


def scene_summary(evaluation: SceneEvaluation) -> dict[str, Any]:
    """The ``results.json`` entry of one scene (see the module docstring for the definitions)."""
    traces = evaluation.traces
    frames = evaluation.frames
    settings = {key: setting_summary(trace, frames) for key, trace in traces.items()}
    p1, p8, f1 = settings["p1"], settings["p8"], settings["f1"]
    partial_ms, partial_p50 = _step_ms(traces["p1"])
    full_ms, full_p50 = _step_ms(traces["f1"])

    def key_frame_bytes(summary: dict[str, Any]) -> int | None:
        if "bytes_up_per_key_frame" not in summary:
            return None
        return summary["bytes_up_per_key_frame"] + summary["bytes_down_per_key_frame"]

    return {
        "wild_miou": settings[WILD]["miou"],
        "p1_miou": p1["miou"],
        "p8_miou": p8["miou"],
        "f1_miou": f1["miou"],
        "key_frame_ratio": p1.get("key_frame_ratio", 0.0),
        "key_frame_ratio_p8": p8.get("key_frame_ratio", 0.0),
        "key_frame_ratio_full": f1.get("key_frame_ratio", 0.0),
        "mean_distill_steps_partial": p1.get("mean_distill_steps"),
        "mean_distill_steps_full": f1.get("mean_distill_steps"),
        "distill_step_ms_partial": partial_ms,
        "distill_step_ms_full": full_ms,
        "distill_step_ms_partial_p50": partial_p50,
        "distill_step_ms_full_p50": full_p50,
        "bytes_per_key_frame": key_frame_bytes(p1),
        "bytes_per_key_frame_full": key_frame_bytes(f1),
        "frames": frames,
        "width": evaluation.width,
        "height": evaluation.height,
        "seconds": evaluation.seconds,
        "settings": settings,
    }
