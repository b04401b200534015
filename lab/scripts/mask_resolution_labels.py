"""A generated scene with its truth redrawn at Mask R-CNN's mask resolution
(docs/results/accuracy_diagnosis.md).

The paper's teacher paints each instance from a 28x28 mask predicted over the instance's box,
upsampled bilinearly and thresholded at 0.5; details thinner than a cell (a bicycle's spokes) vanish
and outlines are smoothed. This redraws each frame's truth the same way, per instance box of the
scene's ``instances.json`` (the pixels of the instance's class inside its box, averaged onto a
28x28 grid, upsampled, thresholded), painted in class-index order as the authors do: the best a
perfect Mask R-CNN could give. The video, metadata and instances are copied unchanged, so
``shadowtutor bench accuracy`` on the copy measures the paper's algorithm against such a teacher.

Usage: ``python lab/scripts/mask_resolution_labels.py SCENE_DIR OUT_DIR [--mask-size 28]``
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

from shadowtutor.classes import background_index
from shadowtutor.scene_store import INSTANCES_NAME, LABELS_DIR, META_NAME, VIDEO_NAME, Scene, label_path, read_instances


def redraw(labels: np.ndarray, instances: np.ndarray, background: int, mask_size: int) -> np.ndarray:
    """``labels`` with each instance (rows ``class, x0, y0, x1, y1``) at ``mask_size`` squared resolution."""
    out = np.full_like(labels, background)
    for c, x0, y0, x1, y1 in sorted(instances.tolist(), key=lambda row: row[0]):
        inside = (labels[y0:y1, x0:x1] == c).astype(np.float32)
        grid = cv2.resize(inside, (mask_size, mask_size), interpolation=cv2.INTER_AREA)
        pasted = cv2.resize(grid, (x1 - x0, y1 - y0), interpolation=cv2.INTER_LINEAR)
        out[y0:y1, x0:x1][pasted >= 0.5] = c
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scene", type=Path)
    parser.add_argument("out", type=Path, help="a new directory")
    parser.add_argument("--mask-size", type=int, default=28, help="mask cells per box side (Mask R-CNN: 28)")
    args = parser.parse_args(argv)
    scene = Scene.open(args.scene)
    if not scene.has_instances:
        parser.error(f"{args.scene} records no instances (made before instances.json existed)")
    args.out.mkdir(parents=True)
    (args.out / LABELS_DIR).mkdir()
    for name in (INSTANCES_NAME, META_NAME, VIDEO_NAME):
        shutil.copy(args.scene / name, args.out / name)
    background = background_index(scene.meta.class_names)
    instances = read_instances(args.scene / INSTANCES_NAME, scene.meta.frames)
    same = []
    for index in range(scene.meta.frames):
        truth = scene.label(index)
        drawn = redraw(truth, instances[index], background, args.mask_size)
        same.append(float(np.mean(drawn == truth)))
        if not cv2.imwrite(str(label_path(args.out, index)), drawn):
            raise RuntimeError(f"cannot write {label_path(args.out, index)}")
    print(f"{args.out}: {np.mean(same):.2%} of pixels keep their true label")
    return 0


if __name__ == "__main__":
    sys.exit(main())
