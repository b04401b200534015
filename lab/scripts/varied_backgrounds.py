"""Does pre-training on more varied backgrounds help the student in places it has never seen?
(docs/results/accuracy_diagnosis.md, "Held-out backgrounds".)

Runs ``shadowtutor pretrain`` with every shot's background drawn, half of the time, from any part of
any training photo that shows no figure or fur (so never a held-out photo), dyed a random colour 60 %
of the time and quilted at a random grain, instead of its category's own surfaces. The student it
writes is compared with the packaged one by ``shadowtutor bench accuracy`` on development scenes made
with ``scenes make --backgrounds held-out``.

Usage: ``python lab/scripts/varied_backgrounds.py PRETRAIN-ARGS...`` (the arguments of ``shadowtutor pretrain``)
"""

from __future__ import annotations

import sys

import cv2
import numpy as np

from shadowtutor_cli import main
from shadowtutor_lab.scenes import backgrounds, generator
from shadowtutor_lab.scenes.backgrounds import Surface

PLAIN_TRAINING_PHOTOS = ("brick", "coffee", "coins", "grass", "gravel", "moon", "rocket")  # no astronaut, no cat


def random_surface(rng: np.random.Generator, tiled: bool) -> Surface:
    tint = None
    if rng.random() < 0.6:
        hsv = np.uint8([[[rng.integers(0, 180), rng.integers(20, 200), rng.integers(60, 230)]]])
        tint = tuple(int(v) for v in cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0])
    x0, y0 = rng.uniform(0, 0.5), rng.uniform(0, 0.5)
    region = (x0, y0, min(1.0, x0 + rng.uniform(0.3, 1.0)), min(1.0, y0 + rng.uniform(0.3, 1.0)))
    photo = str(rng.choice(PLAIN_TRAINING_PHOTOS))
    tile = float(rng.uniform(0.2, 0.8)) if tiled or rng.random() < 0.5 else None
    return Surface(photo, region, tint, tile)


def varied_background(rng: np.random.Generator, category: str, size: tuple[int, int], horizon: float,
                      backgrounds_set: str = "training") -> np.ndarray:
    if backgrounds_set != "training":
        raise ValueError("varied pre-training backgrounds come from the training photos only")
    if rng.random() < 0.5:
        return backgrounds.make_background(rng, category, size, horizon)
    backdrop, ground = random_surface(rng, tiled=False), random_surface(rng, tiled=True)
    own = backgrounds.BACKDROPS[category], backgrounds.GROUNDS[category]
    backgrounds.BACKDROPS[category], backgrounds.GROUNDS[category] = (backdrop,), (ground,)
    try:
        return backgrounds.make_background(rng, category, size, horizon)
    finally:
        backgrounds.BACKDROPS[category], backgrounds.GROUNDS[category] = own


if __name__ == "__main__":
    generator.make_background = varied_background  # the renderer's reference: pre-training scenes only
    sys.exit(main(["pretrain", *sys.argv[1:]]))
