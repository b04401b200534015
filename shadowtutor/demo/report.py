"""The demo's summary: ShadowTutor against naive offloading on the same scene."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.algorithms.metrics import miou
from shadowtutor.scenes.io import Scene
from shadowtutor.teachers.label_store import read_label


@dataclass(frozen=True)
class RunReport:
    mode: str
    frames: int
    labelled_frames: int
    fps: float
    key_frame_ratio: float
    bytes_sent: int
    bytes_received: int
    updates_applied: int
    miou_percent: float  # mean over frames of the per-frame mIoU against the teacher

    @property
    def bytes_per_frame(self) -> float:
        return (self.bytes_sent + self.bytes_received) / self.frames if self.frames else 0.0


def mean_miou_against_teacher(
    labels_dir: Path, scene: Scene, frames: int | None = None, size: tuple[int, int] | None = None
) -> float:
    """Mean per-frame mIoU (percent) of the label maps an agent wrote against the scene's teacher labels.

    ``frames``: only the first ones (a run with ``--max-frames``); ``size``: the agent's ``--resize``.
    """
    num_classes = len(scene.meta.class_names)
    scores = []
    for index in range(len(scene) if frames is None else min(frames, len(scene))):
        path = labels_dir / f"{index:06d}.png"
        if not path.is_file():
            raise FileNotFoundError(f"the agent wrote no label map for frame {index} ({path})")
        scores.append(miou(read_label(path), scene.label(index, size), num_classes))
    return 100.0 * float(np.mean(scores))


def run_report(run_dir: Path, scene: Scene) -> RunReport:
    summary = json.loads((run_dir / "summary.json").read_text())
    return RunReport(
        mode=summary["mode"],
        frames=summary["frames"],
        labelled_frames=summary["labelled_frames"],
        fps=summary["fps"],
        key_frame_ratio=summary["key_frame_ratio"],
        bytes_sent=summary["bytes_sent"],
        bytes_received=summary["bytes_received"],
        updates_applied=summary["updates_applied"],
        miou_percent=mean_miou_against_teacher(run_dir / "labels", scene),
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def render_markdown(scene_dir: Path, shadow: RunReport, naive: RunReport) -> str:
    rows: list[tuple[str, str, str]] = [
        ("frames labelled", f"{shadow.labelled_frames}/{shadow.frames}", f"{naive.labelled_frames}/{naive.frames}"),
        ("throughput (FPS)", f"{shadow.fps:.1f}", f"{naive.fps:.1f}"),
        ("key-frame ratio", f"{100 * shadow.key_frame_ratio:.1f} %", f"{100 * naive.key_frame_ratio:.1f} %"),
        ("bytes up (edge -> server)", _mb(shadow.bytes_sent), _mb(naive.bytes_sent)),
        ("bytes down (server -> edge)", _mb(shadow.bytes_received), _mb(naive.bytes_received)),
        ("bytes per frame", f"{shadow.bytes_per_frame / 1e3:.1f} kB", f"{naive.bytes_per_frame / 1e3:.1f} kB"),
        ("weight updates applied", str(shadow.updates_applied), "-"),
        ("mIoU against the teacher", f"{shadow.miou_percent:.1f} %", f"{naive.miou_percent:.1f} %"),
    ]
    saving = 1.0 - shadow.bytes_per_frame / naive.bytes_per_frame if naive.bytes_per_frame else 0.0
    lines = [
        "# ShadowTutor demo",
        "",
        f"Scene: `{scene_dir}`",
        "",
        "| | ShadowTutor | naive offloading |",
        "|---|---:|---:|",
        *[f"| {name} | {a} | {b} |" for name, a, b in rows],
        "",
        f"ShadowTutor sent {100 * saving:.1f} % fewer bytes per frame than naive offloading.",
        "",
    ]
    return "\n".join(lines)


def write_report(out_dir: Path, scene_dir: Path, shadow: RunReport, naive: RunReport) -> str:
    markdown = render_markdown(scene_dir, shadow, naive)
    (out_dir / "report.md").write_text(markdown)
    data: dict[str, Any] = {
        "scene": str(scene_dir),
        "shadowtutor": asdict(shadow) | {"bytes_per_frame": shadow.bytes_per_frame},
        "naive": asdict(naive) | {"bytes_per_frame": naive.bytes_per_frame},
    }
    (out_dir / "report.json").write_text(json.dumps(data, indent=2))
    return markdown
