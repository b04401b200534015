"""What a session with a sparse delta codec trains and sends, torch-free (settings import it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

SparseChoice = Literal["gradient", "residual"]
SPARSE_CHOICES: tuple[str, ...] = get_args(SparseChoice)


@dataclass(frozen=True)
class SparseOptions:
    """``fraction`` in (0, 1]: the share of trainable coordinates sent in one update;
    ``every`` >= 1: with ``choice`` "gradient", key frames trained on one set before it is chosen
    again.

    ``choice`` says which coordinates an update carries:

    - "gradient": the server trains only a set chosen by the accumulated gradient's magnitude
      and sends it (AMS's rule, :mod:`shadowtutor.algorithms.coordinates`);
    - "residual": the server trains every trainable coordinate and each update carries the
      ``fraction`` whose value differs most from what the edge holds; the rest waits for a later
      update (error feedback), so nothing the training did is lost.

    ValueError for values out of range. The defaults (every coordinate that differs, by its
    residual; "gradient" is measured at a fraction of 0.2): docs/design/sparse_updates.md."""

    fraction: float = 1.0
    every: int = 8
    choice: SparseChoice = "residual"

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"the sparse fraction is in (0, 1], got {self.fraction}")
        if self.every < 1:
            raise ValueError(
                f"the sparse re-choice interval is at least 1 key frame, got {self.every}"
            )
        if self.choice not in SPARSE_CHOICES:
            raise ValueError(
                f"the sparse choice is one of {', '.join(SPARSE_CHOICES)}, got {self.choice!r}"
            )

    @property
    def trains_a_set(self) -> bool:
        """True where the distiller trains only the chosen set (:meth:`Distiller.train_sparse`)."""
        return self.choice == "gradient"
