"""Lab check of the Mask R-CNN teacher's label path on one device: speed per frame and label agreement.

Measured, each bracketed by ``torch.cuda.synchronize`` (on a GPU) after a warm-up call:

- per batch size: ms per frame of the teacher's whole label path (BGR frames in, label maps and
  boxes in host memory out), of torchvision's own forward (``model(images)``: its masks pasted into
  full float images, left on the device) and of the forward up to the paste (``detect``);
- the host path as it was (torchvision's forward, every mask copied to the host, painted with NumPy)
  at the largest batch: its ms per frame and the fraction of pixels on which the teacher's labels
  equal it (both in IEEE fp32);
- per precision (fp32, tf32, bf16; with ``--cudnn-benchmark`` also fp32 with cuDNN's autotuner on): ms per
  frame at the largest batch and the fraction of pixels labelled as in fp32; a precision is
  *recommended* only where that fraction is >= 0.995.

The model: torchvision's ``maskrcnn_resnet50_fpn`` with the state dict at ``--weights-path``; a file
that does not exist is created with random weights (enough for timing). Random weights give
detections whose number depends on ``--score-threshold``: the real model gives about 100 per 720p
street frame, and the teacher's cost grows with them, so pick the threshold that gives about that
many (reported as ``detections_per_frame``; 100 is the detector's cap per image). ``--classes coco``
(default) makes every COCO class a task class, so every detection is painted (the most work);
``lvs`` paints only the LVS classes. Frames: uniform noise, or the first of ``--video``. The
agreement between precisions means something only with the real weights on real frames: with
random weights few pixels are painted and the detections sit near ties, so the share of all pixels
is high and the share of painted pixels low whatever the precision.

Usage: ``python lab/scripts/teacher_gpu_check.py --weights-path W.pth --device cuda --out R.json``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.precision import AGREEMENT_NEEDED, PRECISIONS, check_precision, float32_precision
from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.class_maps import COCO_CATEGORY_NAMES, COCO_CLASSES, checked_class_lut
from shadowtutor.teachers.device import resolve_torch_device
from shadowtutor.teachers.instances import paint_instances
from shadowtutor.teachers.maskrcnn import MaskRCNNTeacher, detect
from shadowtutor_lab.cli.options import frame_size, script_command
from shadowtutor_lab.evaluation.torch_switches import cudnn_autotuner, synchronize

CLASS_LISTS = {"coco": (*COCO_CLASSES, "background"), "lvs": LVS_CLASSES}


def parse_batches(text: str) -> list[int]:
    try:
        batches = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError(f"expected positive batch sizes like 1,8, got {text!r}")
    return batches


def parse_precisions(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return [check_precision(p) for p in names] or [check_precision("")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def ensure_weights(path: Path) -> str:
    """``path`` as it is, or a random-weight state dict written there; says which."""
    if path.is_file():
        return "file"
    from torchvision.models.detection import maskrcnn_resnet50_fpn

    torch.manual_seed(0)
    model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return "random (created)"


def ms_per_frame(device: str, frames: int, call: Callable[[], Any]) -> float:
    synchronize(device)
    start = time.perf_counter()
    call()
    synchronize(device)
    return 1000 * (time.perf_counter() - start) / frames


def rgb(frames: list[np.ndarray], device: str) -> list[torch.Tensor]:
    return [torch.from_numpy(f).to(device).permute(2, 0, 1).flip(0).float().div_(255) for f in frames]


def host_path(teacher: MaskRCNNTeacher, frames: list[np.ndarray]) -> list[np.ndarray]:
    """The label path as it was: the full forward, every float mask to the host, painted with NumPy."""
    lut = checked_class_lut(COCO_CATEGORY_NAMES, teacher.class_names, "COCO")
    background = teacher.class_names.index("background")
    with torch.inference_mode(), float32_precision(teacher.device, "fp32"):
        outputs = teacher._model(rgb(frames, teacher.device))
        return [paint_instances((out["masks"][:, 0] > teacher.mask_threshold).cpu().numpy(),
                                out["scores"].cpu().numpy(), out["labels"].cpu().numpy(), lut, background,
                                len(teacher.class_names), teacher.score_threshold, order=teacher.paint_order)
                for out in outputs]


def profile_table(device: str, call: Callable[[], Any]) -> str:
    """torch.profiler's table of one ``call``: the operators with the most time on the device (on the CPU
    without a GPU)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        call()
        synchronize(device)
    key = "self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60)


def agreement(labels: list[np.ndarray], reference: list[np.ndarray], background: int | None = None) -> float:
    """The fraction of pixels labelled alike; with ``background``, of the pixels that either map paints
    (1.0 where neither paints any)."""
    pairs = list(zip(labels, reference, strict=True))
    if background is None:
        return sum(int((a == b).sum()) for a, b in pairs) / sum(r.size for r in reference)
    painted = [(a != background) | (b != background) for a, b in pairs]
    total = sum(int(p.sum()) for p in painted)
    return sum(int(((a == b) & p).sum()) for (a, b), p in zip(pairs, painted, strict=True)) / total if total else 1.0


def read_frames(video: Path | None, count: int, width: int, height: int) -> list[np.ndarray]:
    """``count`` BGR frames of ``width`` x ``height``: the first of ``video`` (resized, repeated if it is
    shorter), else uniform noise."""
    if video is None:
        rng = np.random.default_rng(0)
        return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]
    import cv2

    capture, frames = cv2.VideoCapture(str(video)), []
    while len(frames) < count:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA))
    capture.release()
    if not frames:
        raise TeacherError(f"no frames could be read from {video}")
    return [frames[i % len(frames)] for i in range(count)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    resolve_torch_device(args.device)  # a bad device is refused before any weights are written
    weights = ensure_weights(args.weights_path)
    teacher = MaskRCNNTeacher(class_names=CLASS_LISTS[args.classes], weights_path=args.weights_path,
                              device=args.device, score_threshold=args.score_threshold, min_size=args.min_size,
                              max_size=args.max_size)
    device = teacher.device
    width, height = args.size
    largest = max(args.batches)
    count = max(args.frames, largest)
    frames = read_frames(args.video, count, width, height)

    def chunks(batch: int) -> list[list[np.ndarray]]:
        return [frames[i:i + batch] for i in range(0, count - batch + 1, batch)]

    def teach_all(batch: int) -> list:
        return [t for chunk in chunks(batch) for t in teacher.teach_batch(chunk)]

    def forward_all(batch: int, up_to_paste: bool) -> None:
        with torch.inference_mode(), float32_precision(device, "fp32"):
            for chunk in chunks(batch):
                images = rgb(chunk, device)
                detect(teacher._model, images) if up_to_paste else teacher._model(images)

    rows = []
    for batch in args.batches:
        timed = len(chunks(batch)) * batch
        teach_all(batch)  # warm-up
        forward_all(batch, False)
        rows.append({
            "batch": batch,
            "teacher_ms": ms_per_frame(device, timed, lambda b=batch: teach_all(b)),
            "forward_ms": ms_per_frame(device, timed, lambda b=batch: forward_all(b, False)),
            "detect_ms": ms_per_frame(device, timed, lambda b=batch: forward_all(b, True)),
        })
    taught = teach_all(largest)
    used = [f for chunk in chunks(largest) for f in chunk]
    reference: dict[str, Any] = {"batch": largest}
    host_labels: list[np.ndarray] = []
    reference["ms"] = ms_per_frame(device, len(used), lambda: host_labels.extend(
        label for chunk in chunks(largest) for label in host_path(teacher, chunk)))
    reference["agreement"] = agreement([t.labels for t in taught], host_labels)

    if args.profile:
        print(profile_table(device, lambda: teacher.teach_batch(chunks(largest)[0])))
    precisions, fp32_labels = [], [t.labels for t in taught]
    autotuned = [("fp32", True)] if args.cudnn_benchmark else []
    for precision, autotune in [(p, False) for p in args.precisions] + autotuned:
        teacher.precision = precision
        result: list = []
        with cudnn_autotuner(autotune):
            teach_all(largest)  # warm-up (the autotuner times every new shape once)
            ms = ms_per_frame(device, len(used), lambda into=result: into.extend(teach_all(largest)))
        share = agreement([t.labels for t in result], fp32_labels)
        painted = agreement([t.labels for t in result], fp32_labels, teacher._background)
        precisions.append({"precision": f"{precision}+cudnn.benchmark" if autotune else precision, "ms": ms,
                           "agreement_with_fp32": share, "painted_agreement_with_fp32": painted,
                           "recommended": share >= AGREEMENT_NEEDED})
    return {
        "command": script_command(__file__, args.argv),
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "torch": str(torch.__version__),
        "size": f"{width}x{height}",
        "weights": weights,
        "frames_from": str(args.video) if args.video else "noise",
        "classes": args.classes,
        "score_threshold": args.score_threshold,
        "min_size": args.min_size,
        "max_size": args.max_size,
        "frames": count,
        "detections_per_frame": float(np.mean([len(t.boxes) for t in taught])),
        "painted_fraction": float(np.mean([(t.labels != teacher._background).mean() for t in taught])),
        "batches": rows,
        "host_path": reference,
        "precisions": precisions,
        "agreement_needed": AGREEMENT_NEEDED,
    }


def render(results: dict[str, Any]) -> str:
    lines = [f"{results['device_name']} ({results['device']}), torch {results['torch']}, {results['size']} "
             f"(detector input: min {results['min_size']}, max {results['max_size']}), score threshold "
             f"{results['score_threshold']}: {results['detections_per_frame']:.1f} detections per frame, "
             f"{100 * results['painted_fraction']:.1f} % of pixels painted",
             "batch | teacher ms/frame | model(images) ms/frame | forward to the paste ms/frame"]
    lines += [f"{r['batch']:5d} | {r['teacher_ms']:16.2f} | {r['forward_ms']:22.2f} | {r['detect_ms']:.2f}"
              for r in results["batches"]]
    host = results["host_path"]
    lines.append(f"host path as it was (batch {host['batch']}): {host['ms']:.2f} ms/frame; "
                 f"labels equal on {100 * host['agreement']:.4f} % of pixels")
    lines.append("precision | teacher ms/frame | pixels as fp32 | painted pixels as fp32 | recommended")
    lines += [f"{p['precision']:>9} | {p['ms']:16.2f} | {100 * p['agreement_with_fp32']:12.4f} % | "
              f"{100 * p['painted_agreement_with_fp32']:20.4f} % | {'yes' if p['recommended'] else 'no'}"
              for p in results["precisions"]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights-path", type=Path, required=True,
                        help="Mask R-CNN state dict (created with random weights if absent)")
    parser.add_argument("--size", type=frame_size, default=(1280, 720), help="frame WIDTHxHEIGHT (default 1280x720)")
    parser.add_argument("--batches", type=parse_batches, default=[1, 8], help="batch sizes (default 1,8)")
    parser.add_argument("--frames", type=int, default=16, help="frames timed per measurement (default 16)")
    parser.add_argument("--video", type=Path, help="take the frames from this video (default: uniform noise)")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda[:N]")
    parser.add_argument("--score-threshold", type=float, default=0.5,
                        help="instance score threshold (default 0.5; see the module doc for random weights)")
    parser.add_argument("--min-size", type=int, default=800,
                        help="the detector's input resize: shorter side (default 800, the teacher's)")
    parser.add_argument("--max-size", type=int, default=1333,
                        help="the detector's input resize: longest side at most (default 1333)")
    parser.add_argument("--classes", choices=sorted(CLASS_LISTS), default="coco",
                        help="task classes: coco (every detection painted, default) or lvs")
    parser.add_argument("--precisions", type=parse_precisions, default=list(PRECISIONS),
                        help="precisions compared (default fp32,tf32,bf16)")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="add a row: fp32 with cuDNN's autotuner on (torch.backends.cudnn.benchmark)")
    parser.add_argument("--profile", action="store_true",
                        help="also print torch.profiler's table of one teacher call at the largest batch")
    parser.add_argument("--out", type=Path, help="results JSON")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.frames < 1:
        parser.error("--frames must be at least 1")
    try:
        results = run(args)
    except TeacherError as exc:
        print(f"teacher_gpu_check: {exc}", file=sys.stderr)
        return 2
    print(render(results))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
