"""The evaluation report's plots, each as an inline ``<svg>`` element (matplotlib)."""

from __future__ import annotations

from typing import Any

from shadowtutor_lab.evaluation.figures import figure, svg_text

COLOURS = {"wild": "tab:gray", "shadowtutor": "tab:green", "naive": "tab:purple"}


def per_frame_plot(video: dict[str, Any]) -> str:
    """Per-frame mIoU against the teacher of Wild, ShadowTutor and naive offloading; the stride and key frames."""
    per_frame = video["per_frame"]
    frames = range(video["frames"])
    with figure(nrows=2, ncols=1, figsize=(9, 4.6), sharex=True, height_ratios=(3, 2)) as (fig, (top, bottom)):
        for key, title in (("naive", "naive offloading"), ("shadowtutor", "ShadowTutor (P-8)"), ("wild", "Wild")):
            top.plot(frames, per_frame[f"{key}_miou"], lw=0.9, color=COLOURS[key], label=title)
        top.set_ylabel("mIoU vs teacher (%)")
        top.set_ylim(0, 101)
        top.legend(loc="lower right", ncol=3, fontsize="small")
        strides, keys = per_frame["stride"], per_frame["key_frames"]
        bottom.step(frames, strides, where="post", lw=0.9, color=COLOURS["shadowtutor"], label="stride")
        bottom.plot(keys, [strides[i] for i in keys], "|", color="black", ms=8, label="key frame")
        bottom.set_ylabel("stride (frames)")
        bottom.set_xlabel("frame")
        bottom.legend(loc="best", ncol=2, fontsize="small")
        return svg_text(fig)


def sweep_plot(sweep: dict[str, Any]) -> str:
    """Key-frame ratio against P-8 for every grid point, the Pareto front, the target and the recommendation."""
    points, front = sweep["points"], sweep["pareto"]
    chosen = sweep["recommendation"]["point"]
    target = sweep["recommendation"]["target"]
    with figure(figsize=(7, 4.4)) as (fig, axis):
        strides = sorted({p["min_stride"] for p in points})
        markers = dict(zip(strides, "os^Dvp<>", strict=False))
        for stride in strides:
            group = [p for p in points if p["min_stride"] == stride]
            axis.scatter([p["key_frame_ratio"] for p in group], [p["p8_miou"] for p in group],
                         marker=markers.get(stride, "o"), s=36, color="tab:blue", alpha=0.75,
                         label=f"MIN_STRIDE {stride}")
        for p in points:
            axis.annotate(p["setting"], (p["key_frame_ratio"], p["p8_miou"]), textcoords="offset points",
                          xytext=(4, 4), fontsize=7)
        axis.plot([p["key_frame_ratio"] for p in front], [p["p8_miou"] for p in front], "-", color="tab:orange",
                  lw=1.2, label="Pareto front")
        axis.scatter([chosen["key_frame_ratio"]], [chosen["p8_miou"]], marker="*", s=260, color="tab:red",
                     zorder=5, label="recommended")
        if target["kind"] == "key_frames":
            axis.axvline(target["value"], color="tab:red", ls="--", lw=0.8, label="target")
        elif target["kind"] == "miou":
            axis.axhline(target["value"], color="tab:red", ls="--", lw=0.8, label="target")
        axis.set_xlabel("key frames (% of frames)")
        axis.set_ylabel("P-8 mIoU vs teacher (%)")
        axis.set_title("operating points (labels: THRESHOLD)", fontsize="medium")
        axis.legend(fontsize="small", loc="lower right")
        axis.grid(alpha=0.3)
        return svg_text(fig)


def traffic_plot(traffic: dict[str, Any]) -> str:
    """Bytes up and down per frame, ShadowTutor against naive offloading (log scale)."""
    names = ("shadowtutor", "naive", "naive_jpeg")
    titles = ("ShadowTutor", *(f"naive ({traffic['naive_codecs'][n]})" for n in names[1:]))
    with figure(figsize=(6, 2.8)) as (fig, axis):
        width = 0.38
        for offset, (direction, colour) in enumerate((("up", "tab:blue"), ("down", "tab:orange"))):
            values = [max(traffic[n][f"{direction}_bytes_per_frame"], 1e-3) for n in names]
            axis.barh([i + offset * width for i in range(len(names))], values, height=width, color=colour,
                      label=f"{direction} (bytes/frame)")
        axis.set_yticks([i + width / 2 for i in range(len(names))], titles)
        axis.set_xscale("log")
        axis.set_xlabel(f"bytes per frame ({traffic['codecs']})")
        axis.legend(fontsize="small", loc="lower right")
        return svg_text(fig)
