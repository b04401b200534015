"""What a distiller that trains a chosen coordinate set trains, torch-free (settings import it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SparseOptions:
    """``fraction`` in (0, 1]: the share of trainable coordinates trained and sent; ``every`` >= 1:
    key frames trained on one set before it is chosen again. ValueError for values out of range. The
    defaults are the measured knee of bytes against accuracy (docs/design/sparse_updates.md)."""

    fraction: float = 0.2
    every: int = 8

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"the sparse fraction is in (0, 1], got {self.fraction}")
        if self.every < 1:
            raise ValueError(
                f"the sparse re-choice interval is at least 1 key frame, got {self.every}"
            )
