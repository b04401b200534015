"""Frames of scenes side by side, one row per scene, for showing what a scene change does
(docs/results/accuracy_diagnosis.md: a preset's hard cuts against one continuous shot).

Usage: ``python lab/scripts/scene_strip.py --scenes DIR... --frames I... --out FILE.png [--width 240]``
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import cv2
import numpy as np

from shadowtutor.scene_store import Scene


def row(scene: Scene, indices: list[int], width: int) -> np.ndarray:
    """The frames ``indices`` of ``scene`` scaled to ``width``, each captioned with its index, in one row."""
    wanted = set(indices)
    decoded = itertools.islice(scene.frames(), max(wanted) + 1)  # no decoding past the last frame shown
    kept = {i: frame for i, frame in enumerate(decoded) if i in wanted}
    missing = wanted - kept.keys()
    if missing:
        raise SystemExit(f"{scene.directory} has {scene.meta.frames} frames; no frame {sorted(missing)}")
    height = round(width * scene.meta.height / scene.meta.width)
    tiles = []
    for i in indices:
        tile = cv2.resize(kept[i], (width, height), interpolation=cv2.INTER_AREA)
        cut = " (cut)" if i in scene.meta.cuts else ""
        cv2.putText(tile, f"{i}{cut}", (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
        tiles.append(np.pad(tile, ((2, 2), (2, 2), (0, 0))))
    return np.hstack(tiles)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=Path, nargs="+", required=True)
    parser.add_argument("--frames", type=int, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=240, help="width of each frame in the strip")
    args = parser.parse_args(argv)
    strip = np.vstack([row(Scene.open(path), args.frames, args.width) for path in args.scenes])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(args.out), strip):
        raise SystemExit(f"cannot write {args.out}")
    print(f"wrote {args.out}: {strip.shape[1]}x{strip.shape[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
