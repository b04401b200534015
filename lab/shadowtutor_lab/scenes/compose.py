"""Compositing sprite layers onto a frame and its label map.

The image gets bilinear, premultiplied-alpha blending (soft edges); the label gets the class
of every pixel whose warped coverage is at least one half, painted in z-order, so each label
pixel holds the top-most object's class and no mixed values ever appear. An optional instance
map gets each placement's instance number by the same rule (the visible part of each object).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class Placement:
    """One sprite layer at one frame: what to draw and the 2x3 sprite -> screen transform."""

    class_index: int
    texture: np.ndarray  # (h, w, 3) uint8, premultiplied (zero outside the mask)
    mask: np.ndarray  # (h, w) uint8, 0 or 255
    affine: np.ndarray  # (2, 3) float64
    instance: int = 0  # the object this layer belongs to (1, 2, ...; 0: none)


def sprite_affine(anchor: tuple[float, float], position: tuple[float, float], scale: float,
                  angle_deg: float, mirror: bool) -> np.ndarray:
    """3x3 transform putting a sprite's ``anchor`` at ``position``, scaled, mirrored and rotated.

    Positive angles turn counter-clockwise as seen on screen.
    """
    a = math.radians(angle_deg)
    c, s = math.cos(a), math.sin(a)
    sx = -scale if mirror else scale
    rotate_scale = np.array([[c * sx, s * scale], [-s * sx, c * scale]])
    out = np.eye(3)
    out[:2, :2] = rotate_scale
    out[:2, 2] = np.asarray(position) - rotate_scale @ np.asarray(anchor)
    return out


def footprint(placement: Placement, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The screen rectangle (x0, y0, x1, y1) a placement can touch, clipped to ``size``; None if off-screen."""
    h, w = placement.mask.shape
    corners = np.array([[-1, -1, 1], [w, -1, 1], [-1, h, 1], [w, h, 1]], np.float64)
    xy = corners @ placement.affine.T
    x0, y0 = np.floor(xy.min(axis=0)).astype(int)
    x1, y1 = np.ceil(xy.max(axis=0)).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, size[0]), min(y1, size[1])
    if x0 >= x1 or y0 >= y1:
        return None
    return (int(x0), int(y0), int(x1), int(y1))


def warp_layer(placement: Placement, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The placement's texture and coverage (both uint8) warped into the screen rectangle ``box``."""
    x0, y0, x1, y1 = box
    m = placement.affine.copy()
    m[:, 2] -= (x0, y0)
    dsize = (x1 - x0, y1 - y0)
    flags = dict(flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return (cv2.warpAffine(placement.texture, m, dsize, **flags),
            cv2.warpAffine(placement.mask, m, dsize, **flags))


def paste(image: np.ndarray, label: np.ndarray, placement: Placement, instances: np.ndarray | None = None) -> None:
    """Draw ``placement`` over ``image`` (float32 BGR, H x W x 3) and ``label`` (uint8 H x W), in place;
    ``instances`` (int32 H x W), if given, gets ``placement.instance`` where ``label`` gets its class."""
    box = footprint(placement, (image.shape[1], image.shape[0]))
    if box is None:
        return
    texture, coverage = warp_layer(placement, box)
    x0, y0, x1, y1 = box
    alpha = coverage.astype(np.float32)[:, :, None] * np.float32(1 / 255)
    roi = image[y0:y1, x0:x1]
    roi *= 1 - alpha
    roi += texture
    covered = coverage >= 128
    label[y0:y1, x0:x1][covered] = placement.class_index
    if instances is not None:
        instances[y0:y1, x0:x1][covered] = placement.instance
