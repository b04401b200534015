"""Per-scene plot: per-frame mIoU of Wild / P-1 / P-8 / F-1, and the stride with its key frames."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shadowtutor_lab.evaluation.figures import png_figure
from shadowtutor_lab.evaluation.harness import SETTINGS, WILD, SceneEvaluation

COLOURS = {WILD: "tab:gray", "p1": "tab:blue", "p8": "tab:green", "f1": "tab:red"}
TITLES = {WILD: "Wild", **{s.key: s.title for s in SETTINGS}}


def plot_scene(evaluation: SceneEvaluation, path: Path, cuts: Sequence[int] = (), dpi: int = 72) -> Path:
    """Write the plot of one scene as PNG (small: meant to be committed)."""
    subplots = dict(nrows=2, ncols=1, figsize=(9, 5), sharex=True, height_ratios=(3, 2))
    with png_figure(path, dpi, **subplots) as (_, (top, bottom)):
        frames = range(evaluation.frames)
        for key, trace in evaluation.traces.items():
            top.plot(frames, [100.0 * m for m in trace.miou], lw=0.8, color=COLOURS[key], label=TITLES[key])
        top.set_ylabel("mIoU (%)")
        top.set_ylim(0, 100)
        top.legend(loc="lower right", ncol=4, fontsize="small")
        top.set_title(f"{evaluation.name} ({evaluation.width}x{evaluation.height}, {evaluation.frames} frames)")
        for setting in SETTINGS:
            trace = evaluation.traces[setting.key]
            colour = COLOURS[setting.key]
            bottom.step(frames, trace.strides, where="post", lw=0.8, color=colour, label=setting.title)
            bottom.plot(trace.key_frames, [trace.strides[i] for i in trace.key_frames], "|",
                        color=colour, ms=6)
        bottom.set_ylabel("stride (frames)")
        bottom.set_xlabel("frame (| = key frame)")
        bottom.legend(loc="upper right", ncol=3, fontsize="small")
        for axis in (top, bottom):
            for cut in cuts:
                axis.axvline(cut, color="black", lw=0.6, ls="--")
    return path
