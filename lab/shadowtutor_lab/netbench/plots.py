"""The report's figures: FPS against bandwidth with ShadowTutor's bound band (like the paper's Figure 4),
and bytes per frame against bandwidth; one panel per scene, small PNGs meant to be committed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shadowtutor_lab.evaluation.figures import png_figure
from shadowtutor_lab.netbench.analysis import RunMetrics
from shadowtutor_lab.netbench.results import Results
from shadowtutor_lab.netbench.variants import SHADOWTUTOR, TITLES

COLOURS = {SHADOWTUTOR: "tab:green", "naive-h264": "tab:purple", "naive-jpeg": "tab:blue", "naive-raw": "tab:red"}
Metrics = dict[tuple[str, float, str], RunMetrics]


def _panels(
    results: Results,
    metrics: Metrics,
    path: Path,
    ylabel: str,
    value: Callable[[RunMetrics], float],
    log_y: bool = False,
    band: Callable[[RunMetrics], tuple[float, float] | None] | None = None,
    dpi: int = 72,
) -> Path:
    scenes = list(results.scenes)
    subplots = dict(ncols=len(scenes), figsize=(4.2 * len(scenes), 3.9), squeeze=False, sharey=True,
                    layout="constrained")
    with png_figure(path, dpi, **subplots) as (fig, axes):
        for axis, scene in zip(axes[0], scenes, strict=True):
            for variant in results.variants():
                runs = sorted((m for (s, _, v), m in metrics.items() if s == scene and v == variant),
                              key=lambda m: m.record.bandwidth_mbps)
                if not runs:
                    continue
                xs = [m.record.bandwidth_mbps for m in runs]
                colour = COLOURS.get(variant)
                axis.plot(xs, [value(m) for m in runs], "o-", ms=3, lw=1.2, color=colour,
                          label=TITLES.get(variant, variant))
                spans = [(m.record.bandwidth_mbps, band(m)) for m in runs] if band else []
                spans = [(x, b) for x, b in spans if b is not None]
                if spans:
                    axis.fill_between([x for x, _ in spans], [b[0] for _, b in spans], [b[1] for _, b in spans],
                                      color="0.6", alpha=0.35, lw=0, label="ShadowTutor bounds (eqs. 14, 15)")
            axis.set_title(scene, fontsize="medium")
            axis.set_xlabel("bandwidth (Mbps, each direction)")
            if log_y:
                axis.set_yscale("log")
            axis.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside upper center", ncol=4, fontsize="small")
    return path


def plot_fps(results: Results, metrics: Metrics, path: Path) -> Path:
    """FPS against bandwidth per variant, ShadowTutor's analytic bounds shaded."""

    def band(m: RunMetrics) -> tuple[float, float] | None:
        return None if m.bounds is None else (m.bounds.throughput_fps_min, m.bounds.throughput_fps_max)

    return _panels(results, metrics, path, "frames per second", lambda m: m.fps, log_y=True, band=band)


def plot_bytes_per_frame(results: Results, metrics: Metrics, path: Path) -> Path:
    """Payload bytes per frame against bandwidth per variant (log scale)."""
    return _panels(results, metrics, path, "bytes per frame (both directions)", lambda m: m.bytes_per_frame,
                   log_y=True)
