"""Surface detail for the sprites, cut from the photographs.

A detail map is a float32 (h, w, 3) array around 1.0 that multiplies a silhouette's colour map:
fur from the cat, wrinkled skin from the moon's surface, brushed metal from coins, a giraffe's
patches from gravel stones.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from shadowtutor_lab.scenes.photos import FULL_PHOTO, Region, random_crop

_CAT_FUR: Region = (0.3, 0.02, 0.72, 0.3)  # chelsea's forehead, between the ears
_SUIT: Region = (0.0, 0.45, 0.45, 1.0)  # the astronaut's suit, folds and seams
_WOOD: Region = (0.75, 0.0, 1.0, 1.0)  # the coffee table's grain
_NIGHT_SKY: Region = (0.15, 0.0, 0.4, 0.5)  # the rocket photo's sky: smooth, like lacquer


@dataclass(frozen=True)
class TextureRecipe:
    photos: tuple[tuple[str, Region], ...]  # (photo, part of it); one is chosen per object
    contrast: float  # 0 = flat colour, 1 = the photo's full relative variation
    colour: bool  # keep the photo's colour variation (fur) or only its luminance (paint, cloth)
    patches: bool = False  # threshold the photo into dark patches (a giraffe's coat)


RECIPES: dict[str, TextureRecipe] = {
    "person": TextureRecipe((("astronaut", _SUIT), ("coffee", _WOOD)), 0.45, colour=False),
    "bicycle": TextureRecipe((("coins", FULL_PHOTO),), 0.35, colour=False),
    "auto": TextureRecipe((("rocket", _NIGHT_SKY), ("coffee", _WOOD)), 0.3, colour=False),
    "bird": TextureRecipe((("chelsea", _CAT_FUR),), 0.6, colour=True),
    "dog": TextureRecipe((("chelsea", _CAT_FUR),), 0.7, colour=True),
    "horse": TextureRecipe((("chelsea", _CAT_FUR),), 0.4, colour=True),
    "elephant": TextureRecipe((("moon", FULL_PHOTO),), 0.7, colour=False),
    "giraffe": TextureRecipe((("gravel", FULL_PHOTO),), 0.3, colour=False, patches=True),
}


def detail_map(rng: np.random.Generator, class_name: str, size: tuple[int, int]) -> np.ndarray:
    """A (h, w, 3) float32 multiplier around 1 for a sprite of ``size`` (w, h)."""
    recipe = RECIPES[class_name]
    name, region = recipe.photos[int(rng.integers(len(recipe.photos)))]
    patch = random_crop(rng, name, size, region).astype(np.float32) + 1.0
    if not recipe.colour:
        patch = np.repeat(patch.mean(axis=2, keepdims=True), 3, axis=2)
    relative = patch / patch.reshape(-1, 3).mean(axis=0)
    detail = 1.0 + recipe.contrast * (relative - 1.0)
    if recipe.patches:
        grey = cv2.GaussianBlur(patch[:, :, 0], (0, 0), max(1.0, size[1] / 150))
        stones = grey > np.percentile(grey, 45)
        detail *= np.where(stones, 0.55, 1.2).astype(np.float32)[:, :, None]
    return np.clip(detail, 0.2, 2.5).astype(np.float32)
