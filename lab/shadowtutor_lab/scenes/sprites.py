"""Sprites: each object's animation cycle, rendered once per shot and warped every frame.

A sprite holds ``PHASES`` frames of its gait cycle. Each frame has one layer per class it
shows (a bicycle carries its rider: a ``bicycle`` layer under a ``person`` layer); a layer is a
binary mask and a texture premultiplied by it (zero outside the mask), so bilinear warping
gives correct anti-aliased edges on the image while the mask stays the label.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from shadowtutor_lab.scenes import silhouettes as sil
from shadowtutor_lab.scenes.painter import Painter
from shadowtutor_lab.scenes.textures import detail_map

PHASES = 8  # frames of a gait cycle

Draw = Callable[[Painter, float, sil.Look], None]


@dataclass(frozen=True)
class ClassSpec:
    """How a class looks and moves."""

    aspect: float  # sprite width / height
    layers: tuple[tuple[str, Draw], ...]  # (class name, drawing), bottom layer first
    palette: Callable[[np.random.Generator], sil.Look]
    height: float  # height on screen as a fraction of the frame height, at the nearest depth
    speed: float  # natural speed in own heights per second
    stride: float  # gait cycles per own height travelled (for flyers: flaps per second)
    tilt: float  # amplitude of the rotation wobble, degrees
    flies: bool = False


SPECS: dict[str, ClassSpec] = {
    "person": ClassSpec(0.6, (("person", sil.draw_person),), sil.person_palette, 0.42, 0.8, 0.75, 4.0),
    "bicycle": ClassSpec(1.3, (("bicycle", sil.draw_bicycle), ("person", sil.draw_rider)),
                         sil.person_palette, 0.44, 2.2, 0.5, 6.0),
    "auto": ClassSpec(2.3, (("auto", sil.draw_auto),), sil.auto_palette, 0.3, 3.5, 0.8, 2.0),
    "bird": ClassSpec(1.45, (("bird", sil.draw_bird),), sil.bird_palette, 0.1, 3.0, 3.5, 15.0, flies=True),
    "dog": ClassSpec(1.5, (("dog", sil.draw_dog),), sil.dog_palette, 0.2, 2.0, 0.9, 5.0),
    "horse": ClassSpec(1.35, (("horse", sil.draw_horse),), sil.horse_palette, 0.42, 1.2, 0.6, 4.0),
    "elephant": ClassSpec(1.35, (("elephant", sil.draw_elephant),), sil.elephant_palette, 0.52, 0.5, 0.9,
                          2.0),
    "giraffe": ClassSpec(1.0, (("giraffe", sil.draw_giraffe),), sil.giraffe_palette, 0.7, 0.45, 0.9, 2.0),
}


@dataclass(frozen=True)
class SpriteLayer:
    class_name: str
    textures: np.ndarray  # (PHASES, h, w, 3) uint8, zero outside the mask
    masks: np.ndarray  # (PHASES, h, w) uint8, 0 or 255


@dataclass(frozen=True)
class Sprite:
    layers: tuple[SpriteLayer, ...]

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        return (self.layers[0].masks.shape[2], self.layers[0].masks.shape[1])

    @property
    def anchor(self) -> tuple[float, float]:
        """The ground contact point (bottom centre), in sprite pixels."""
        w, h = self.size
        return (w / 2.0, float(h))


def _shading(mask: np.ndarray) -> np.ndarray:
    """Darker rims and a top light give the flat silhouette some volume."""
    h = mask.shape[0]
    inside = cv2.distanceTransform((mask > 0).astype(np.uint8), cv2.DIST_L2, 3)
    rim = 0.7 + 0.3 * np.minimum(1.0, inside / max(1.0, 0.04 * h))
    top = np.linspace(1.08, 0.88, h, dtype=np.float32)[:, None]
    return (rim * top)[:, :, None]


def make_sprite(rng: np.random.Generator, class_name: str, height: int) -> Sprite:
    """Render the gait cycle of one individual of ``class_name``, ``height`` pixels tall."""
    try:
        spec = SPECS[class_name]
    except KeyError:
        raise ValueError(f"no sprite for class {class_name!r}; known: {sorted(SPECS)}") from None
    look = spec.palette(rng)
    layers = []
    for layer_class, draw in spec.layers:
        painters = [Painter(height, spec.aspect) for _ in range(PHASES)]
        detail = detail_map(rng, layer_class, (painters[0].width, painters[0].height))
        for k, painter in enumerate(painters):
            draw(painter, k / PHASES, look)
        masks = np.stack([p.mask for p in painters])
        textures = np.stack([
            np.where(p.mask[:, :, None] > 0, np.clip(p.colour * detail * _shading(p.mask), 0, 255), 0)
            for p in painters
        ]).astype(np.uint8)
        layers.append(SpriteLayer(layer_class, textures, masks))
    return Sprite(tuple(layers))
