"""``shadowtutor regions``: the region flow path's decision network (DVSNet)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    from shadowtutor_lab.regions.configs import TARGETS, DecisionTrainingConfig

    defaults = DecisionTrainingConfig()
    p = subparsers.add_parser("regions", help="the region flow path: train its decision network")
    commands = p.add_subparsers(dest="regions_command", required=True, metavar="COMMAND")
    t = commands.add_parser(
        "train-decision", help="train the decision network on generated scenes (seeds >= 3000)",
        description="The packaged network was made with: shadowtutor regions train-decision "
                    "--out shadowtutor/assets/decision_network.pt --report docs/results/regions/decision_network",
    )
    t.add_argument("--out", type=Path, required=True, help="decision network file to write")
    t.add_argument("--report", type=Path, help="write the training report here as .json and .md")
    t.add_argument("--presets", nargs="+", default=list(defaults.presets), metavar="PRESET")
    t.add_argument("--seeds", nargs="+", type=int, default=list(defaults.seeds), help="scene seeds (>= 3000)")
    t.add_argument("--frames", type=positive_int, default=defaults.frames, help="frames per scene")
    t.add_argument("--size", type=frame_size, default=defaults.size, help="frame size WxH (default 640x360)")
    t.add_argument("--epochs", type=positive_int, default=defaults.epochs)
    t.add_argument("--target", choices=TARGETS, default=defaults.target,
                   help="confidence score to regress: agreement with the student (DVSNet's) or accuracy "
                        "against the truth relative to the student's (default %(default)s)")
    t.add_argument("--spliced", action="store_true",
                   help="also train on a clip spliced from the presets' scenes (a hard cut every 12-40 frames)")
    t.add_argument("--student", type=Path, help="student checkpoint (default: the packaged pre-trained one)")
    t.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    import json

    import cv2
    import torch

    from shadowtutor.acceleration.regions.decision import save_decision_network
    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.models.inference import build_inference_backend
    from shadowtutor.models.pretrained import default_student_path
    from shadowtutor.scene_store import Scene
    from shadowtutor_lab.evaluation.machine import machine_info
    from shadowtutor_lab.regions.training import (
        DecisionTrainingConfig,
        render_training_report,
        train_decision_network,
    )
    from shadowtutor_lab.scenes.cache import cached_scene

    torch.set_num_threads(1)  # bit-identical results for one torch version
    cv2.setNumThreads(1)
    config = DecisionTrainingConfig(presets=tuple(args.presets), seeds=tuple(args.seeds), frames=args.frames,
                                    size=args.size, epochs=args.epochs, target=args.target, spliced=args.spliced)
    student_path = args.student or default_student_path()
    backend = build_inference_backend("torch", load_student(student_path).model)

    def scene(preset: str, seed: int) -> tuple[list, list]:
        opened = Scene.open(cached_scene(preset, config.frames, seed, config.size, progress=False))
        return list(opened.frames()), list(opened.labels())

    net, report = train_decision_network(scene, backend.infer, config)
    report.update(command=invoked_command(args), machine=machine_info(),
                  student=str(args.student) if args.student else f"the packaged student ({student_path.name})")
    meta = {key: report[key] for key in ("command", "samples", "final_fit", "validation", "student")}
    save_decision_network(net, args.out, meta)
    print(f"wrote {args.out}: {report['samples']} samples, MAE {report['final_fit']['mae']:.4f}")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.report.with_suffix(".md").write_text(render_training_report(report))
        print(f"wrote {args.report.with_suffix('.md')}")
    return 0
