"""What a takeover from the journal costs in accuracy: one session trained on a scene's key frames
without interruption, against the same session taken over (restored from its newest snapshot and the
journal entries after it) every ``--takeover-every`` key frames, in one run.

Both copies see the same key frames (every ``--stride``-th frame, all of Algorithm 1's steps allowed)
and label every frame with the weights the edge holds after the latest key frame (the encoder's
mirror, bit-identical to the edge's); mIoU is against the scene's ground truth.

Usage: ``python lab/scripts/takeover_accuracy.py --scenes DIR... --out docs/results/checkpoints/takeover``
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from services.checkpoints.journal import entry, replay
from services.checkpoints.session import restore, snapshot
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import background_index
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.inference import ReferenceBackend
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.messages import Hello
from shadowtutor.scene_store import Scene


def _session(scene: Scene, params: AlgorithmParams) -> EdgeSession:
    names = list(scene.meta.class_names)
    first = next(iter(scene.frames()))
    hello = Hello(edge_id="cam", class_names=names, frame_width=first.shape[1], frame_height=first.shape[0])
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f16+zstd", delta_codec="q8delta+zstd"),
        params=params,
        traffic=Traffic(),
        distiller=_distiller(scene, params),
    )
    session.welcome()
    return session


def _distiller(scene: Scene, params: AlgorithmParams, size: tuple[int, int] | None = None) -> Distiller:
    torch.manual_seed(0)
    student = load_student(default_student_path()).model
    return Distiller(student, params, background_index(scene.meta.class_names), student_size=size)


def run(scene_dir: Path, stride: int, takeover_every: int | None, snapshot_every: int) -> dict[str, float]:
    """mIoU over the scene of the edge's labels, with a takeover every ``takeover_every`` key frames
    (None: none)."""
    scene = Scene.open(scene_dir)
    params = AlgorithmParams()
    session = _session(scene, params)
    edge = ReferenceBackend(session.distiller.student)
    taken, entries, takeovers, scores = snapshot(session), [], 0, []
    labels = list(scene.labels())
    for index, frame in enumerate(scene.frames()):
        if index % stride == 0:
            key = index // stride
            result = session.distiller.train(frame, labels[index])
            update = session.trained(index, result, 0.0, session.version, 0.0)
            if session.version % snapshot_every == 0:
                taken, entries = snapshot(session, update, index), []
            else:
                entries.append(entry(session, update, index))
            if takeover_every is not None and key % takeover_every == takeover_every - 1:
                restored = restore(
                    taken,
                    params,
                    lambda size: _distiller(scene, params, size),
                    edge_id="cam",
                    session_id=session.session_id,
                    max_size=(4096, 4096),
                )
                session = replay(restored, entries, edge_id="cam", session_id=session.session_id).session
                takeovers += 1
            edge.load_weights(session.encoder.held.state)
        scores.append(miou(edge.infer(frame), labels[index], len(scene.meta.class_names)))
    return {"miou": float(np.mean(scores)) * 100.0, "takeovers": takeovers, "frames": len(scores)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=Path, nargs="+", required=True)
    parser.add_argument("--stride", type=int, default=8)
    parser.add_argument("--takeover-every", type=int, default=5, help="key frames between takeovers")
    parser.add_argument("--snapshot-every", type=int, default=16)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json")
    args = parser.parse_args()
    rows = []
    for scene in args.scenes:
        plain = run(scene, args.stride, None, args.snapshot_every)
        moved = run(scene, args.stride, args.takeover_every, args.snapshot_every)
        rows.append(
            {
                "scene": scene.name,
                "uninterrupted": plain,
                "taken_over": moved,
                "difference_points": moved["miou"] - plain["miou"],
            }
        )
        print(json.dumps(rows[-1]))
    result = {
        "machine": args.machine,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python " + shlex.join(["lab/scripts/takeover_accuracy.py", *sys.argv[1:]]),
        "stride": args.stride,
        "takeover_every": args.takeover_every,
        "snapshot_every": args.snapshot_every,
        "scenes": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
