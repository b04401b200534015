"""Background canvases: a photographed backdrop above the horizon, a textured ground in perspective.

The canvas is larger than the frame when the camera moves; everything on it is background. The
surfaces come from one of two sets (:data:`BACKGROUND_SETS`): ``training``, from the photos that
pre-training also sees, or ``held-out``, from photos that only evaluation scenes use
(:mod:`shadowtutor_lab.scenes.photos`), each cut where the photo shows no object of an LVS class.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from shadowtutor.scene_store import DEFAULT_BACKGROUNDS
from shadowtutor_lab.scenes.painter import Colour
from shadowtutor_lab.scenes.photos import FULL_PHOTO, Region, random_crop


@dataclass(frozen=True)
class Surface:
    """A photo (part) used as a backdrop or ground; grey photos are dyed to ``tint`` (BGR mean).

    A backdrop with ``tile`` is a texture (a wall, a hedge), quilted from crops ``tile`` canvas
    heights tall so that its grain keeps a natural size; without, one crop fills the canvas.
    """

    photo: str
    region: Region = FULL_PHOTO
    tint: Colour | None = None
    tile: float | None = None


_GREEN, _DARK_GREEN, _SAND, _EARTH = (60, 120, 80), (40, 80, 50), (130, 175, 200), (70, 95, 120)
_ASPHALT, _CONCRETE, _PAVING, _RED_BRICK = (85, 85, 90), (150, 150, 150), (150, 165, 175), (60, 75, 150)

BACKDROPS: dict[str, tuple[Surface, ...]] = {
    "animals": (Surface("grass", tint=_DARK_GREEN, tile=0.5), Surface("moon", tint=_SAND),
                Surface("gravel", tint=_EARTH, tile=0.6)),
    "people": (Surface("brick", tint=_RED_BRICK, tile=0.35), Surface("grass", tint=_DARK_GREEN, tile=0.5),
               Surface("rocket", (0.0, 0.0, 1.0, 0.7))),
    "street": (Surface("brick", tint=_CONCRETE, tile=0.35), Surface("rocket", (0.0, 0.0, 1.0, 0.85)),
               Surface("gravel", tint=_CONCRETE, tile=0.6)),
}
GROUNDS: dict[str, tuple[Surface, ...]] = {
    "animals": (Surface("grass", tint=_GREEN), Surface("gravel", tint=_SAND), Surface("gravel", tint=_EARTH)),
    "people": (Surface("brick", tint=_PAVING), Surface("grass", tint=_GREEN), Surface("gravel", tint=_PAVING)),
    "street": (Surface("gravel", tint=_ASPHALT), Surface("brick", tint=_CONCRETE)),
}
CATEGORIES = tuple(BACKDROPS)

_LEAVES = Surface("squirrel", (0.0, 0.0, 0.4, 0.45))  # sunlit foliage above the squirrel
_HEDGE = Surface("building", (0.0, 0.72, 0.55, 0.97))  # trees and hedge below the façade
_LAWN = Surface("building", (0.0, 0.9, 1.0, 1.0))
_COBBLES_A = Surface("leuven-a", (0.1, 0.8, 0.9, 1.0))
_COBBLES_B = Surface("leuven-b", (0.35, 0.8, 1.0, 1.0))  # right of the parked bicycles
_STREET_A = Surface("leuven-a", (0.0, 0.0, 1.0, 0.8))
_FACADE = Surface("building", (0.0, 0.0, 1.0, 0.9))
HELD_OUT_BACKDROPS: dict[str, tuple[Surface, ...]] = {
    "animals": (_LEAVES, _HEDGE, Surface("aero3", (0.0, 0.0, 1.0, 0.45))),
    "people": (_STREET_A, _FACADE, _LEAVES),
    "street": (_STREET_A, Surface("leuven-b", (0.4, 0.0, 1.0, 0.75)), _FACADE),
}
HELD_OUT_GROUNDS: dict[str, tuple[Surface, ...]] = {
    "animals": (_LAWN, _COBBLES_A),
    "people": (_COBBLES_A, _COBBLES_B, _LAWN),
    "street": (_COBBLES_A, _COBBLES_B),
}
BACKGROUND_SETS: dict[str, tuple[dict[str, tuple[Surface, ...]], dict[str, tuple[Surface, ...]]]] = {
    DEFAULT_BACKGROUNDS: (BACKDROPS, GROUNDS),
    "held-out": (HELD_OUT_BACKDROPS, HELD_OUT_GROUNDS),
}


def _surface(rng: np.random.Generator, surface: Surface, size: tuple[int, int],
             coverage: tuple[float, float] = (0.4, 1.0)) -> np.ndarray:
    image = random_crop(rng, surface.photo, size, surface.region, coverage).astype(np.float32)
    if surface.tint is not None:
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)[:, :, None]
        image = grey * (np.asarray(surface.tint, np.float32) / max(1.0, float(grey.mean())))
    return image


def _quilt(rng: np.random.Generator, surface: Surface, size: tuple[int, int], tile: int) -> np.ndarray:
    """Cover ``size`` (w, h) with random crops of one scale, cross-faded where they overlap.

    Unlike plain tiling, no patch repeats exactly and no mirror symmetry shows.
    """
    w, h = size
    overlap = max(2, tile // 3)
    side = tile + overlap
    ramp = np.minimum(1.0, (np.arange(side, dtype=np.float32) + 1) / (overlap + 1))
    window = np.minimum(ramp, ramp[::-1])
    weight = (window[:, None] * window[None, :])[:, :, None]
    acc = np.zeros((h + 2 * side, w + 2 * side, 3), np.float32)
    norm = np.zeros((h + 2 * side, w + 2 * side, 1), np.float32)
    for y in range(0, h + overlap, tile):
        for x in range(0, w + overlap, tile):
            patch = _surface(rng, surface, (side, side), coverage=(0.45, 0.55))
            acc[y:y + side, x:x + side] += patch * weight
            norm[y:y + side, x:x + side] += weight
    return (acc / np.maximum(norm, 1e-6))[overlap:overlap + h, overlap:overlap + w]


def check_backgrounds(backgrounds: str) -> str:
    if backgrounds not in BACKGROUND_SETS:
        raise ValueError(f"unknown background set {backgrounds!r}; known: {', '.join(BACKGROUND_SETS)}")
    return backgrounds


def make_background(rng: np.random.Generator, category: str, size: tuple[int, int], horizon: float,
                    backgrounds: str = DEFAULT_BACKGROUNDS) -> np.ndarray:
    """A BGR uint8 canvas of ``size`` (w, h) with the horizon at row ``horizon``, its surfaces from
    the background set ``backgrounds``."""
    if category not in BACKDROPS:
        raise ValueError(f"unknown scene category {category!r}; known: {CATEGORIES}")
    w, h = size
    if not 0 < horizon < h:
        raise ValueError(f"horizon {horizon} must lie inside the canvas height {h}")
    backdrop_sets, ground_sets = BACKGROUND_SETS[check_backgrounds(backgrounds)]
    backdrops, grounds = backdrop_sets[category], ground_sets[category]
    surface = backdrops[int(rng.integers(len(backdrops)))]
    if surface.tile is None:
        backdrop = _surface(rng, surface, (w, h))
    else:
        backdrop = _quilt(rng, surface, (w, h), max(8, int(surface.tile * h)))
    ground_h = h - horizon
    # A flat texture seen in perspective: the far edge three times as wide as the near one.
    # Only rows from just above the horizon are warped (the vanishing line lies higher still).
    flat_w, flat_h = 3 * w, max(8, int(2 * ground_h))
    flat = _quilt(rng, grounds[int(rng.integers(len(grounds)))], (flat_w, flat_h), max(8, int(0.8 * ground_h)))
    top = max(0, int(horizon - 0.1 * ground_h))
    src = np.float32([[0, 0], [flat_w, 0], [2 * w, flat_h], [w, flat_h]])
    dst = np.float32([[0, horizon - top], [w, horizon - top], [w, h - top], [0, h - top]])
    ground = np.zeros_like(backdrop)
    ground[top:] = cv2.warpPerspective(flat, cv2.getPerspectiveTransform(src, dst), (w, h - top),
                                       flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    rows = np.arange(h, dtype=np.float32)[:, None, None]
    depth = np.maximum(0.0, rows - horizon) / ground_h
    haze_colour = backdrop[max(0, int(horizon) - 4): int(horizon) + 1].reshape(-1, 3).mean(axis=0)
    ground = ground + (haze_colour - ground) * (0.7 * np.exp(-depth / 0.15))
    alpha = np.clip((rows - (horizon - 0.01 * h)) / (0.03 * h), 0.0, 1.0)
    canvas = backdrop * (1 - alpha) + ground * alpha
    return np.clip(canvas + 0.5, 0, 255).astype(np.uint8)
