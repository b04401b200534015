"""``shadowtutor bench regions``: the region flow path against the student alone (DVSNet, Table III style)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import emit_results, frame_size, invoked_command, positive_int

MOVING = ("moving-street", "moving-people", "moving-animals")
PATROL = ("patrol-street",)
EGOCENTRIC = ("egocentric-people",)


def _decision(text: str) -> tuple[float, int]:
    value, _, age = text.partition(":")
    try:
        return float(value), int(age or 15)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected VALUE:MAX_KEY_AGE such as 0.93:4, got {text!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    from shadowtutor_lab.regions.configs import RegionBenchConfig

    defaults = RegionBenchConfig()
    p = subparsers.add_parser("regions", help="region flow path vs the student alone: mIoU and FPS (DVSNet)")
    p.add_argument("--seeds", nargs="+", type=int, default=[11],
                   help="scene seeds (default 11; the decision network trains on seeds >= 3000)")
    p.add_argument("--frames", type=positive_int, default=150, help="frames per generated scene")
    p.add_argument("--size", type=frame_size, default=(640, 360), help="frame size WxH (default 640x360)")
    p.add_argument("--decisions", nargs="+", type=_decision, default=list(defaults.decisions),
                   metavar="THR:AGE", help="decision-network settings, DVSNet's rule: threshold and max key age")
    p.add_argument("--budgets", nargs="+", type=_decision, default=list(defaults.budgets), metavar="BUDGET:AGE",
                   help="decision-network settings, the budget rule: budget and max key age")
    p.add_argument("--intervals", nargs="+", type=positive_int, default=list(defaults.intervals),
                   help="fixed key intervals of the baseline")
    p.add_argument("--real", nargs="*", type=Path, default=[], help="real videos: speed and agreement only")
    p.add_argument("--real-frames", type=positive_int, default=150, help="frames read from each real video")
    p.add_argument("--backend", default="torch", help="student backend (reference, torch, onnx)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch and OpenCV threads (default 1)")
    p.add_argument("--decision-network", type=Path, help="default: the packaged one")
    p.add_argument("--cluster-workers", nargs="*", type=positive_int, default=[],
                   help="also run the edge cluster with these numbers of worker nodes (Ray nodes on this machine)")
    p.add_argument("--cluster-frames", type=positive_int, default=60, help="frames per moving scene for the cluster")
    p.add_argument("--out", type=Path, help="write JSON here and Markdown beside it (.md)")
    p.add_argument("--note", action="append", default=[], help="a note for the Markdown (repeatable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:

    import cv2
    import torch

    from shadowtutor.acceleration.regions.decision import default_decision_network_path, load_decision_network
    from shadowtutor.models.inference import build_inference_backend
    from shadowtutor.models.pretrained import default_student_path, load_default_student
    from shadowtutor.scene_store import Scene
    from shadowtutor_lab.evaluation.machine import machine_info
    from shadowtutor_lab.regions import bench
    from shadowtutor_lab.scenes.cache import cached_scene

    torch.set_num_threads(args.threads)
    cv2.setNumThreads(args.threads)
    config = bench.RegionBenchConfig(decisions=tuple(args.decisions), budgets=tuple(args.budgets),
                                     intervals=tuple(args.intervals))
    network_path = args.decision_network or default_decision_network_path()
    network, meta = load_decision_network(network_path)
    student = load_default_student()
    backend = build_inference_backend(args.backend, student.model)
    classes = student.model.num_classes

    def scene(preset: str, seed: int) -> Scene:
        return Scene.open(cached_scene(preset, args.frames, seed, args.size, progress=False))

    groups = {}
    for group, presets in (("Moving camera (generated)", MOVING),
                           ("Patrol camera: travels and dwells (generated)", PATROL),
                           ("Egocentric camera (generated)", EGOCENTRIC)):
        clips = []
        for preset in presets:
            for seed in args.seeds:
                s = scene(preset, seed)
                clips.append(bench.run_clip(s.frames(), s.labels(), backend.infer, network, classes, config))
                print(f"{preset} seed {seed} done", flush=True)
        groups[group] = {"about": f"Scenes {', '.join(presets)}, seeds {args.seeds}, {args.frames} frames each at "
                                  f"{args.size[0]}x{args.size[1]}; mIoU against the scenes' exact truth.",
                         "summary": bench.summarise(clips)}
    spliced_clips = []  # where adapting to content should pay: a hard cut every 12-40 frames
    for seed in args.seeds:
        scenes = [scene(preset, seed) for preset in (*MOVING, *EGOCENTRIC)]
        spliced_clips.append(bench.run_clip(bench.spliced([s.frames() for s in scenes], args.frames, seed),
                                            bench.spliced([s.labels() for s in scenes], args.frames, seed),
                                            backend.infer, network, classes, config))
        print(f"spliced seed {seed} done", flush=True)
    groups["Spliced scenes, hard cuts (generated)"] = {
        "about": f"Shots of 12-40 frames taken in turn from {', '.join((*MOVING, *EGOCENTRIC))} (frame t of the clip "
                 f"is frame t of its shot's scene), {args.frames} frames per seed {args.seeds}: every shot starts "
                 "with a hard cut (new background, objects and camera); mIoU against the truth.",
        "summary": bench.summarise(spliced_clips)}
    for video in args.real:
        frames = _read_video(video, args.real_frames, args.size)
        clip = bench.run_clip(frames, None, backend.infer, network, classes, config)
        groups[f"Real video: {video.name}"] = {
            "about": f"{video.name}: the first {len(frames)} frames resized to {args.size[0]}x{args.size[1]}; no "
                     "truth: agreement with the student on the whole frame stands in for accuracy.",
            "summary": bench.summarise([clip])}
        print(f"{video.name} done", flush=True)
    cluster = None
    if args.cluster_workers:
        from shadowtutor.acceleration.labellers.cluster import CLUSTER_MARGIN
        from shadowtutor.acceleration.regions.labeller import FlowPathConfig

        clips = [(list(s.frames())[:args.cluster_frames], list(s.labels())[:args.cluster_frames])
                 for s in (scene(p, args.seeds[0]) for p in MOVING)]
        flow_config = FlowPathConfig(regions=config.regions)
        cluster = {
            "about": f"Scenes {', '.join(MOVING)}, seed {args.seeds[0]}, the first {args.cluster_frames} frames. "
                     f"`1+N` = this process as the master and N Ray worker nodes of one CPU each, all on this "
                     f"{machine_info()['cpu_count']}-CPU machine (CPU-bound: more workers than cores share them). "
                     f"Each worker picks each region's path by {flow_config.rule} and segments a region with "
                     f"{CLUSTER_MARGIN} pixels of context. "
                     "The student alone ran first on the same frames; the runs are sequential, not interleaved.",
            "rows": bench.cluster_rows(clips, backend.infer, student.model.state_dict(), student.class_names,
                                       flow_config, CLUSTER_MARGIN, args.cluster_workers, classes),
        }
        print("cluster done", flush=True)
    study = scene(MOVING[0], args.seeds[0])
    study_frames = list(study.frames())[:16]
    study_truth = [study.label(i, args.size) for i in range(16)]
    results = {
        "command": invoked_command(args), "machine": machine_info(), "config": vars(config) | {},
        "student": f"the packaged pre-trained student ({default_student_path().name})", "backend": args.backend,
        "decision_network": f"{network_path.name}, {meta.get('command', 'made elsewhere')}",
        "groups": groups,
        "cluster": cluster,
        "context_about": f"{MOVING[0]} seed {args.seeds[0]}, frames 0..15: each of 4 regions segmented alone "
                         "(with a margin of context) and reassembled, against the whole frame segmented at once.",
        "context_study": bench.context_study(study_frames, study_truth, backend.infer, classes),
        "flow_about": f"{MOVING[0]} seed {args.seeds[0]}, frames 0..15, 4 regions, each warped from its key by a "
                      "flow estimated over the whole frame (the labeller's default) or over the region alone; "
                      "the last columns warp the key's true labels (the flow's own error, no student).",
        "flow_study": bench.flow_study(study_frames, study_truth, backend.infer),
        "notes": list(args.note),
    }
    markdown = bench.render_markdown(results)
    emit_results(results, markdown, args.out)
    return 0


def _read_video(path: Path, count: int, size: tuple[int, int]) -> list:
    import cv2

    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        raise FileNotFoundError(f"cannot open video {path}")
    frames = []
    try:
        while len(frames) < count:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(cv2.resize(frame, size, interpolation=cv2.INTER_AREA))
    finally:
        capture.release()
    if not frames:
        raise ValueError(f"video {path} has no frames")
    return frames
