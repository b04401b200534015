"""The demo's summary: ShadowTutor against naive offloading on the same scene."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.algorithms.bounds import Latencies, throughput_lower, throughput_upper
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.scene_store import Scene
from shadowtutor.teachers.label_store import read_label
from shadowtutor_lab.demo.server_time import ServerTime
from shadowtutor_lab.evaluation.h264_baseline import H264Offloading
from shadowtutor_lab.evaluation.machine import machine_info


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
    handshake_bytes: int  # HELLO and WELCOME, both ways: for ShadowTutor the one-time model download
    handshake_bytes_received: int  # WELCOME alone
    waited_seconds: float  # time the edge waited for an update (the paper's wait at MIN_STRIDE)
    wall_seconds: float
    miou_percent: float  # mean over frames of the per-frame mIoU against the teacher
    edge_seconds_per_frame: float  # the edge's own time per frame, waiting excluded (the paper's t_si)
    teacher_seconds: float  # server time labelling this run's frames (queue plus inference)
    distill_seconds: float  # server time distilling for this run

    @property
    def server_ms_per_frame(self) -> float:
        """Server compute per edge frame (teacher plus distillation), in milliseconds."""
        return 1e3 * (self.teacher_seconds + self.distill_seconds) / self.frames if self.frames else 0.0

    @property
    def bytes_per_frame(self) -> float:
        return (self.bytes_sent + self.bytes_received) / self.frames if self.frames else 0.0

    @property
    def steady_up_per_frame(self) -> float:
        """Bytes up per frame after the handshake."""
        sent = self.bytes_sent - (self.handshake_bytes - self.handshake_bytes_received)
        return sent / self.frames if self.frames else 0.0

    @property
    def steady_down_per_frame(self) -> float:
        """Bytes down per frame after the handshake."""
        received = self.bytes_received - self.handshake_bytes_received
        return received / self.frames if self.frames else 0.0

    @property
    def steady_bytes_per_frame(self) -> float:
        """Bytes per frame after the handshake: what a long run costs per frame."""
        total = self.bytes_sent + self.bytes_received - self.handshake_bytes
        return total / self.frames if self.frames else 0.0


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


def run_report(run_dir: Path, scene: Scene, server: ServerTime) -> RunReport:
    """The agent's summary and label maps, with ``server``: the server's time spent on this run."""
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
        handshake_bytes=summary["first_handshake_bytes_sent"] + summary["first_handshake_bytes_received"],
        handshake_bytes_received=summary["first_handshake_bytes_received"],
        waited_seconds=summary["waited_seconds"],
        wall_seconds=summary["wall_seconds"],
        miou_percent=mean_miou_against_teacher(run_dir / "labels", scene),
        edge_seconds_per_frame=max(summary["loop_seconds"] - summary["waited_seconds"], 0.0)
        / max(summary["frames"], 1),
        teacher_seconds=server.teacher_seconds,
        distill_seconds=server.distill_seconds,
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def _kb(n: float) -> str:
    return f"{n / 1e3:.1f} kB"


def _comparison(shadow: float, naive: float) -> str:
    if not naive:
        return "the same bytes per frame as"
    ratio = shadow / naive
    if ratio <= 1:
        return f"{100 * (1 - ratio):.1f} % fewer bytes per frame than"
    return f"{ratio:.1f}x the bytes per frame of"


# Paper section 5.3: its GPU server's component times (seconds) and its parameters.
PAPER_T_SD, PAPER_T_TI, PAPER_T_NET, PAPER_S_NET_BYTES = 0.013, 0.044, 0.303, 3.032e6


@dataclass(frozen=True)
class Prediction:
    """Throughput this edge would get from the paper's GPU server (eqs. 14-15): predicted, not measured."""

    t_si: float
    shadowtutor_fps_min: float
    shadowtutor_fps_max: float
    naive_fps: float  # one frame in flight: 1 / (T_TI + T_NET)


def predict(edge_seconds_per_frame: float) -> Prediction:
    """The bounds for this edge's ``t_si`` with the paper's server times and the default parameters."""
    params = AlgorithmParams()
    lat = Latencies(t_si=max(edge_seconds_per_frame, 1e-6), t_sd=PAPER_T_SD, t_ti=PAPER_T_TI, t_net=PAPER_T_NET,
                    s_net_bytes=PAPER_S_NET_BYTES)
    return Prediction(lat.t_si, throughput_lower(lat, params.min_stride, params.max_updates),
                      throughput_upper(lat, params.min_stride, params.max_stride), 1.0 / (PAPER_T_TI + PAPER_T_NET))


def _ms(seconds: float, frames: int) -> str:
    return f"{1e3 * seconds / frames:.1f} ms" if frames else "-"


def _kbps(bytes_per_frame: float, fps: float) -> str:
    return f"{8 * bytes_per_frame * fps / 1e3:.0f} kbps"


def times_fewer(shadow: float, baseline: float) -> str:
    """``baseline / shadow`` as "N.NNx fewer" (or "N.NNx more" when ShadowTutor sends more)."""
    if shadow <= 0 or baseline <= 0:
        return "-"
    return f"{baseline / shadow:.2f}x fewer" if baseline >= shadow else f"{shadow / baseline:.2f}x more"


def _h264_lines(shadow: RunReport, h264: H264Offloading, fps: float) -> list[str]:
    frames = max(h264.frames, 1)
    ratio = times_fewer(shadow.steady_bytes_per_frame, h264.bytes_per_frame)
    return [
        "## Against H.264 offloading",
        "",
        f"A camera that offloads streams H.264: every frame up as one libx264 stream (CRF {h264.crf}, "
        f"{h264.preset}, zerolatency, at the clip's real {h264.fps:g} FPS; the same frames, encoded here), "
        "the naive run's label maps down.",
        "",
        *([f"The teacher on the decoded frames agrees with its labels of the stored frames at "
           f"**{h264.teacher_miou:.1f} % mIoU** (what offloading at this quality costs in accuracy).", ""]
          if h264.teacher_miou is not None else
          ["The teacher's agreement on the decoded frames is not measured: the generated scene's teacher is "
           "its ground truth, which does not look at the pixels.", ""]),
        "| after the handshake | ShadowTutor | H.264 offloading |",
        "|---|---:|---:|",
        f"| bytes up per frame | {_kb(shadow.steady_up_per_frame)} | {_kb(h264.up_bytes / frames)} |",
        f"| bytes down per frame | {_kb(shadow.steady_down_per_frame)} | {_kb(h264.down_bytes / frames)} |",
        f"| bytes per frame | {_kb(shadow.steady_bytes_per_frame)} | {_kb(h264.bytes_per_frame)} |",
        f"| kbps per camera at the clip's {fps:g} FPS | {_kbps(shadow.steady_bytes_per_frame, fps)} | "
        f"{_kbps(h264.bytes_per_frame, fps)} |",
        f"| ShadowTutor against H.264 offloading | **{ratio} bytes** | |",
        "",
    ]


def render_markdown(scene_dir: Path, shadow: RunReport, naive: RunReport, h264: H264Offloading, fps: float,
                    command: str, machine: dict[str, Any], teacher: str) -> str:
    """The report; ``h264``: H.264 offloading of the same frames, ``fps``: the clip's frame rate."""
    rows: list[tuple[str, str, str]] = [
        ("frames labelled", f"{shadow.labelled_frames}/{shadow.frames}", f"{naive.labelled_frames}/{naive.frames}"),
        ("key-frame ratio (frames the server labels)", f"{100 * shadow.key_frame_ratio:.1f} %",
         f"{100 * naive.key_frame_ratio:.1f} %"),
        ("mIoU against the teacher", f"{shadow.miou_percent:.1f} %", f"{naive.miou_percent:.1f} %"),
        ("bytes up (edge -> server)", _mb(shadow.bytes_sent), _mb(naive.bytes_sent)),
        ("bytes down (server -> edge)", _mb(shadow.bytes_received), _mb(naive.bytes_received)),
        ("of which the handshake (ShadowTutor: the model)", _mb(shadow.handshake_bytes), _mb(naive.handshake_bytes)),
        ("bytes per frame, all", _kb(shadow.bytes_per_frame), _kb(naive.bytes_per_frame)),
        ("bytes per frame after the handshake", _kb(shadow.steady_bytes_per_frame), _kb(naive.steady_bytes_per_frame)),
        ("server compute per edge frame (teacher + distillation)", f"{shadow.server_ms_per_frame:.1f} ms",
         f"{naive.server_ms_per_frame:.1f} ms"),
        ("of which the teacher", _ms(shadow.teacher_seconds, shadow.frames), _ms(naive.teacher_seconds, naive.frames)),
        ("of which distillation (on this CPU)", _ms(shadow.distill_seconds, shadow.frames), "-"),
        ("weight updates applied", str(shadow.updates_applied), "-"),
        ("throughput here, server on this CPU (FPS)", f"{shadow.fps:.1f}", f"{naive.fps:.1f}"),
        ("time waiting for the server", f"{shadow.waited_seconds:.1f} s of {shadow.wall_seconds:.1f} s",
         f"{naive.waited_seconds:.1f} s of {naive.wall_seconds:.1f} s"),
    ]
    forecast = predict(shadow.edge_seconds_per_frame)
    params = AlgorithmParams()
    lines = [
        "# ShadowTutor demo",
        "",
        f"Scene: `{scene_dir.name}` ({shadow.frames} frames). Teacher: {teacher}. Made by `{command}` on "
        f"{machine['cpu_model']} ({machine['cpu_count']} cores), torch {machine['torch']}, no GPU used.",
        "",
        "## Measured on this machine",
        "",
        "Server and edge share this CPU. The mIoU compares each mode's labels with the teacher's own labels",
        "of the same frames; naive offloading shows the teacher's labels of each frame as the server decoded",
        "it (after the frame codec), so it scores near 100 % (exactly 100 % with a generated scene's truth).",
        "",
        "| | ShadowTutor | naive offloading (JPEG per frame) |",
        "|---|---:|---:|",
        *[f"| {name} | {a} | {b} |" for name, a, b in rows],
        "",
        *_h264_lines(shadow, h264, fps),
        f"ShadowTutor sent {_comparison(shadow.bytes_per_frame, naive.bytes_per_frame)} naive offloading "
        f"over the whole run, and {_comparison(shadow.steady_bytes_per_frame, naive.steady_bytes_per_frame)} "
        "it after the one-time model download.",
        "",
        "The edge waits for an update at most its wait timeout at MIN_STRIDE frames after a key frame;",
        "when the server answers later (distillation on this CPU), inference goes on with the weights it",
        "has and the next key frame waits for the answer, so the key-frame ratio here can be lower than",
        "Algorithm 2 alone would give (`shadowtutor bench accuracy` on the same scene shows that one).",
        "",
        "## Prediction, not measured: this edge with the paper's GPU server",
        "",
        f"The paper's throughput bounds (eqs. 14-15) with this edge's own time per frame t_si = "
        f"{1e3 * forecast.t_si:.1f} ms (measured above, waiting excluded) and the paper's section 5.3 server: "
        f"T_SD = {PAPER_T_SD} s per distillation step, T_TI = {PAPER_T_TI} s per key frame (Mask R-CNN on a "
        f"GPU), T_NET = {PAPER_T_NET} s per key frame and its update; MIN_STRIDE {params.min_stride}, "
        f"MAX_STRIDE {params.max_stride}, MAX_UPDATES {params.max_updates}.",
        "",
        "| PREDICTED throughput | FPS |",
        "|---|---:|",
        f"| ShadowTutor, lower bound (eq. 14, predicted) | {forecast.shadowtutor_fps_min:.2f} |",
        f"| ShadowTutor, upper bound (eq. 15, predicted) | {forecast.shadowtutor_fps_max:.2f} |",
        f"| naive offloading, one frame in flight: 1 / (T_TI + T_NET) (predicted) | {forecast.naive_fps:.2f} |",
        "",
        "The naive row assumes a frame and its labels cross the network in the paper's T_NET, as a key frame",
        "and its update do. Measured here, the server's distillation runs on this CPU, not a GPU, so the",
        "measured throughput above is bounded by it; the bytes, key frames and mIoU do not depend on it.",
        "",
    ]
    return "\n".join(lines)


def _as_json(report: RunReport) -> dict[str, Any]:
    return asdict(report) | {
        "bytes_per_frame": report.bytes_per_frame, "steady_bytes_per_frame": report.steady_bytes_per_frame,
        "steady_up_per_frame": report.steady_up_per_frame, "steady_down_per_frame": report.steady_down_per_frame,
        "server_ms_per_frame": report.server_ms_per_frame,
    }


def write_report(out_dir: Path, scene_dir: Path, shadow: RunReport, naive: RunReport, h264: H264Offloading,
                 fps: float, command: str, teacher: str) -> str:
    machine = machine_info()
    markdown = render_markdown(scene_dir, shadow, naive, h264, fps, command, machine, teacher)
    (out_dir / "report.md").write_text(markdown)
    data: dict[str, Any] = {
        "command": command,
        "machine": machine,
        "scene": str(scene_dir),
        "teacher": teacher,
        "prediction_paper_gpu_server": asdict(predict(shadow.edge_seconds_per_frame)),
        "shadowtutor": _as_json(shadow),
        "naive": _as_json(naive),
        "h264_offloading": asdict(h264) | {
            "bytes_per_frame": h264.bytes_per_frame,
            "shadowtutor_times_fewer_bytes": h264.bytes_per_frame / shadow.steady_bytes_per_frame
            if shadow.steady_bytes_per_frame > 0 else None,
        },
    }
    (out_dir / "report.json").write_text(json.dumps(data, indent=2))
    return markdown
