"""Drawing silhouettes: filled shapes in sprite units into a binary mask and a colour map.

Sprite units: y runs from 0 (top) to 1 (bottom) of the sprite, x from 0 to ``aspect``. Shapes
are drawn without anti-aliasing (the mask becomes a label); smoothness on the image comes
later, from bilinear warping.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

Point = tuple[float, float]
Colour = tuple[float, float, float]  # BGR, 0..255

_SHIFT = 4  # fixed-point bits for sub-pixel shape coordinates
_ONE = 1 << _SHIFT


class Painter:
    """A ``height`` x ``round(aspect * height)`` canvas that shapes are painted on."""

    def __init__(self, height: int, aspect: float) -> None:
        if height < 4 or aspect <= 0:
            raise ValueError(f"a sprite needs height >= 4 px and aspect > 0, got {height}, {aspect}")
        self.height = height
        self.width = max(4, round(aspect * height))
        self.mask = np.zeros((self.height, self.width), np.uint8)
        self.colour = np.zeros((self.height, self.width, 3), np.float32)

    def _fixed(self, p: Point) -> tuple[int, int]:
        return (round(p[0] * self.height * _ONE), round(p[1] * self.height * _ONE))

    def _px(self, length: float) -> int:
        return max(1, round(length * self.height))

    def _both(self, draw, colour: Colour) -> None:  # noqa: ANN001 - a drawing callback
        draw(self.mask, 255)
        draw(self.colour, tuple(float(c) for c in colour))

    def polygon(self, points: Sequence[Point], colour: Colour) -> None:
        pts = np.array([self._fixed(p) for p in points], np.int32)
        self._both(lambda img, c: cv2.fillPoly(img, [pts], c, cv2.LINE_8, _SHIFT), colour)

    def ellipse(self, centre: Point, axes: tuple[float, float], angle_deg: float, colour: Colour) -> None:
        ax = (round(axes[0] * self.height * _ONE), round(axes[1] * self.height * _ONE))
        c = self._fixed(centre)
        self._both(lambda img, col: cv2.ellipse(img, c, ax, angle_deg, 0, 360, col, -1, cv2.LINE_8, _SHIFT),
                   colour)

    def circle(self, centre: Point, radius: float, colour: Colour) -> None:
        self.ellipse(centre, (radius, radius), 0.0, colour)

    def capsule(self, a: Point, b: Point, width: float, colour: Colour) -> None:
        """A thick segment from ``a`` to ``b`` with round ends (a limb, a tube)."""
        thickness = self._px(width)
        pa, pb = self._fixed(a), self._fixed(b)
        self._both(lambda img, c: cv2.line(img, pa, pb, c, thickness, cv2.LINE_8, _SHIFT), colour)
        self.circle(a, width / 2, colour)
        self.circle(b, width / 2, colour)

    def chain(self, points: Sequence[Point], width: float, colour: Colour) -> None:
        for a, b in zip(points[:-1], points[1:], strict=True):
            self.capsule(a, b, width, colour)

    def ring(self, centre: Point, radius: float, width: float, colour: Colour) -> None:
        c = self._fixed(centre)
        r = round(radius * self.height * _ONE)
        thickness = self._px(width)
        self._both(lambda img, col: cv2.circle(img, c, r, col, thickness, cv2.LINE_8, _SHIFT), colour)
