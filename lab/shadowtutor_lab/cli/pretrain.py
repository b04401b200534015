"""``shadowtutor pretrain``: pre-train the default student on generated scenes (seeds >= 1000)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    from shadowtutor_lab.evaluation.pretrain_config import DEFAULT_PRESETS, EVAL_SEED_LIMIT, PretrainConfig

    defaults = PretrainConfig()
    p = subparsers.add_parser(
        "pretrain", help="pre-train the student on generated scenes (not the evaluated ones)",
        description="Pre-train the student on generated scenes of seeds >= 1000 (seeds below are kept for "
                    "evaluation). The packaged student was made in three runs (docs/results/accuracy_diagnosis.md): "
                    "shadowtutor pretrain --out v1.pt --threads 1; "
                    "shadowtutor pretrain --init v1.pt --size 320x180 640x360 --epochs 2 --lr 0.0005 --out v2.pt "
                    "--threads 1; shadowtutor pretrain --init v2.pt --size 320x180 640x360 --scenes-per-preset 6 "
                    "--epochs 2 --lr 0.0003 --out shadowtutor/assets/student_pretrained.pt --threads 1",
    )
    p.add_argument("--out", type=Path, required=True, help="checkpoint to write")
    p.add_argument("--presets", "--scenes-presets", nargs="+", default=list(DEFAULT_PRESETS), metavar="PRESET",
                   help="scene presets to train on (default: all seven)")
    p.add_argument("--scenes-per-preset", type=positive_int, default=defaults.scenes_per_preset,
                   help=f"scenes (seeds) per preset (default {defaults.scenes_per_preset})")
    p.add_argument("--frames", type=positive_int, default=defaults.frames,
                   help=f"frames per scene (default {defaults.frames})")
    p.add_argument("--size", nargs="+", type=frame_size, default=list(defaults.sizes), metavar="WxH",
                   help="frame size WxH (default 320x180); several sizes train on every scene at each")
    p.add_argument("--epochs", type=positive_int, default=defaults.epochs, help=f"default {defaults.epochs}")
    p.add_argument("--seed", type=int, default=defaults.seed,
                   help=f"first scene seed and training seed (>= {EVAL_SEED_LIMIT}; lower seeds are "
                        "reserved for evaluation scenes)")
    p.add_argument("--lr", type=float, default=defaults.learning_rate,
                   help=f"Adam learning rate, cosine decay (default {defaults.learning_rate})")
    p.add_argument("--init", type=Path, help="start from this student checkpoint instead of random weights")
    p.add_argument("--work", type=Path, help="keep the generated scenes here (default: a temporary directory)")
    p.add_argument("--threads", type=positive_int,
                   help="torch threads (results are bit-identical for the same count and torch version)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from shadowtutor.models.checkpoint import save_student
    from shadowtutor_lab.evaluation.pretrain import pretrain
    from shadowtutor_lab.evaluation.pretrain_config import PretrainConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    config = PretrainConfig(
        presets=tuple(args.presets), scenes_per_preset=args.scenes_per_preset, frames=args.frames,
        sizes=tuple(args.size), epochs=args.epochs, seed=args.seed, learning_rate=args.lr, init=args.init,
    )
    with tempfile.TemporaryDirectory(prefix="shadowtutor-pretrain-") as tmp:
        result = pretrain(config, args.work or Path(tmp), progress=not args.no_progress)
    result.metadata["pretrain"]["command"] = invoked_command(args)
    save_student(args.out, result.model, result.class_names, result.metadata)
    info = result.metadata["pretrain"]
    print(f"wrote {args.out}: {info['samples']} frames x {config.epochs} epochs = {info['steps']} steps, "
          f"final loss {info['final_loss']:.4f}, {info['seconds']:.0f} s")
    return 0
