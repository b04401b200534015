"""Cutting a frame into a grid of regions, each with a context margin for the segmentation path."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# x0, y0, x1, y1 (exclusive)
Box = tuple[int, int, int, int]


class RegionConfigError(ValueError):
    """A region setting the labeller cannot use (0 regions, a negative margin, ...)."""


def grid_shape(regions: int) -> tuple[int, int]:
    """``(rows, cols)`` with ``rows * cols == regions``, as square as possible, ``rows <= cols``."""
    if not isinstance(regions, int) or regions < 1:
        raise RegionConfigError(
            f"regions must be a positive integer (4 is the paper's), got {regions!r}"
        )
    rows = max(r for r in range(1, int(regions**0.5) + 1) if regions % r == 0)
    return rows, regions // rows


@dataclass(kw_only=True, frozen=True)
class RegionGrid:
    """``regions`` boxes tiling a ``width`` x ``height`` frame row by row, and their margin
    boxes."""

    width: int
    height: int
    regions: int = 4
    margin: int = 32

    def __post_init__(self) -> None:
        rows, cols = grid_shape(self.regions)
        if self.margin < 0:
            raise RegionConfigError(f"region margin must be >= 0 pixels, got {self.margin}")
        if self.width < cols or self.height < rows:
            raise RegionConfigError(
                f"a {self.width}x{self.height} frame cannot hold {rows}x{cols} regions"
            )

    @property
    def shape(self) -> tuple[int, int]:
        return grid_shape(self.regions)

    @property
    def boxes(self) -> list[Box]:
        rows, cols = self.shape
        xs = [self.width * c // cols for c in range(cols + 1)]
        ys = [self.height * r // rows for r in range(rows + 1)]
        return [(xs[c], ys[r], xs[c + 1], ys[r + 1]) for r in range(rows) for c in range(cols)]

    def margin_box(self, index: int) -> Box:
        """Region ``index`` grown by ``margin`` on every side, clipped to the frame."""
        x0, y0, x1, y1 = self.boxes[index]
        m = self.margin
        return max(0, x0 - m), max(0, y0 - m), min(self.width, x1 + m), min(self.height, y1 + m)

    def context_box(self, indices: list[int]) -> Box:
        """The smallest box holding the margin boxes of ``indices``: what one student call
        segments."""
        if not indices:
            raise ValueError("no regions given")
        boxes = [self.margin_box(i) for i in indices]
        return (
            min(b[0] for b in boxes),
            min(b[1] for b in boxes),
            max(b[2] for b in boxes),
            max(b[3] for b in boxes),
        )

    def fits(self, frame: np.ndarray) -> bool:
        return frame.shape[0] == self.height and frame.shape[1] == self.width


def crop(image: np.ndarray, box: Box) -> np.ndarray:
    x0, y0, x1, y1 = box
    return image[y0:y1, x0:x1]


def inner(box: Box, outer: Box) -> Box:
    """``box`` in the coordinates of ``outer`` (which holds it)."""
    return box[0] - outer[0], box[1] - outer[1], box[2] - outer[0], box[3] - outer[1]
